"""Loop kernels that read an operand transposed, iterated in tiles (codegen/tiles.py).

A kernel whose result is a transpose moving its operand's last dim walks blocks of
16 results along that dim in tiles of 16 along its own last dim, instead of one
result row at a time; a whole tile of an operand held in registers as stored (f32,
f64, int8: not bf16) is loaded as 16 vectors and transposed in registers, the rest
gathered.  Only the order changes, so every case is compared with TF's executor
exactly, and the kernel's note says which kernels were tiled and staged.  Edge sizes:
one row or column, primes, dims that are not a multiple of the tile, fewer blocks
than cores, a ragged last block.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

TILED = "reads an operand transposed"


def _tiled(jit, *xs) -> list:
    return [n for f in jit.compiled(*xs).fusions for n in f.notes if TILED in n]


# (id, operand shape, perm, whether the kernel is tiled: True, False, or GATHERED_UNTILED:
# rows that re-read a few dozen operand lines stay untiled where tiles would gather)
GATHERED_UNTILED = "untiled unless staged"
CASES = [
    ("square-pow2", (256, 256), (1, 0), True),
    ("primes", (257, 131), (1, 0), True),
    ("one-row", (1, 300), (1, 0), False),          # the result [300, 1]: rows of one
    ("one-column", (300, 1), (1, 0), False),       # operand rows of 4 bytes: no lines to share
    ("operand-rows-of-8", (500, 8), (1, 0), True),      # f32/bf16/int8 rows under a line: untiled
    ("ragged-last-block", (200, 33), (1, 0), True),     # 33 = 2 blocks of 16 and one of 1
    ("one-block", (300, 16), (1, 0), True),             # q extent exactly one block
    ("fewer-blocks-than-cores", (200, 17), (1, 0), True),
    # 4-D layout changes: H and W collapse into one dim first (passes/collapse.py), so the
    # flag is for the 3-D transpose: [2, 63, 40] -> [2, 40, 63], and so on
    ("nhwc-to-nchw", (2, 7, 9, 40), (0, 3, 1, 2), GATHERED_UNTILED),
    ("nchw-to-nhwc-short-rows", (2, 3, 10, 24), (0, 2, 3, 1), True),   # 3 channels a row
    ("nchw-to-nhwc-rows-in-l1", (2, 64, 5, 24), (0, 2, 3, 1), GATHERED_UNTILED),
    ("3d-swap-last-two", (3, 300, 37), (0, 2, 1), True),
    ("rows-in-l1", (3, 67, 37), (0, 2, 1), GATHERED_UNTILED),
    ("3d-reverse", (19, 5, 21), (2, 1, 0), True),
    ("keeps-last-dim", (4, 30, 6, 20), (0, 2, 1, 3), False),   # reads whole operand rows
]


def _collapsed(shape: tuple, perm: tuple) -> tuple:
    """The transpose the kernel runs: operand dims that the permutation keeps side by
    side in order are one dim (passes/collapse.py)."""
    runs = []
    for p in perm:
        if runs and runs[-1][-1] + 1 == p:
            runs[-1].append(p)
        else:
            runs.append([p])
    order = sorted(range(len(runs)), key=lambda k: runs[k][0])     # the runs in operand order
    cshape = tuple(int(np.prod([shape[d] for d in runs[k]])) for k in order)
    return cshape, tuple(order.index(k) for k in range(len(runs)))


@pytest.mark.parametrize("shape,perm,tiled", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "int8"])
def test_transposes_match_tensorflow(shape, perm, tiled, dtype):
    rng = np.random.default_rng(sum(shape))
    x = tf.cast(tf.constant(rng.standard_normal(shape) * 50), dtype)
    fn = lambda x: tf.transpose(x, perm)   # noqa: E731
    jit = tfjit.function(fn, jit_compile=True)
    assert_matches(jit(x).numpy(), fn(x).numpy(), rtol=0, atol=0)
    staged = dtype != "bfloat16"
    shape, perm = _collapsed(shape, perm)
    qualifies = tiled and shape[perm[-1]] != 1 and shape[-1] * x.dtype.size >= 64
    expected = qualifies and (staged or tiled is not GATHERED_UNTILED)
    notes = _tiled(jit, x)
    assert bool(notes) == expected, notes
    assert all(("in registers" in n) == staged for n in notes), notes


def test_elementwise_of_a_transpose_and_a_row_major_operand_is_tiled_and_exact():
    """The transposed read beside reads at the kernel's own index, NaN, inf and -0.0
    in the operand, and two outputs of the one kernel."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((200, 70)).astype(np.float32)
    a[3, 5], a[7, 44], a[44, 69], a[0, 0] = np.nan, np.inf, -np.inf, -0.0
    x, y = tf.constant(a), tf.constant(rng.standard_normal((70, 200)).astype(np.float32))

    def fn(x, y):
        t = tf.transpose(x)
        return t * y + 1.0, tf.exp(t) - y
    jit = tfjit.function(fn, jit_compile=True)
    for got, want in zip(jit(x, y), fn(x, y)):
        assert_matches(got.numpy(), want.numpy())
    assert _tiled(jit, x, y)


def test_a_transpose_inside_a_larger_graph_matches_tensorflow():
    """q @ k^T-style head transposes feeding a product and a softmax."""
    rng = np.random.default_rng(4)
    x = tf.constant(rng.standard_normal((2, 33, 4, 24)).astype(np.float32))

    def fn(x):
        h = tf.transpose(x, [0, 2, 3, 1])                 # [2, 4, 24, 33]
        return tf.nn.softmax(h * 0.5, axis=-1), tf.reduce_sum(h, axis=2)
    jit = tfjit.function(fn, jit_compile=True)
    for got, want in zip(jit(x), fn(x)):
        assert_matches(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_two_staged_transposes_an_operand_at_its_own_index_and_a_computed_one():
    """z + x^T * y^T stages both transposes; e + e^T for e = exp(x), whose transpose is
    of a value computed in the kernel (and read untransposed too, so the transpose is
    not moved below the exp), is gathered."""
    rng = np.random.default_rng(6)
    x, y = (tf.constant(rng.standard_normal((96, 200)).astype(np.float32)) for _ in range(2))
    z = tf.constant(rng.standard_normal((200, 96)).astype(np.float32))
    square = tf.constant(rng.standard_normal((160, 160)).astype(np.float32))

    def staged(x, y, z):
        return z + tf.transpose(x) * tf.transpose(y)

    def computed(x):
        e = tf.exp(x)
        return e + tf.transpose(e)
    for fn, args, in_registers in ((staged, (x, y, z), True), (computed, (square,), False)):
        jit = tfjit.function(fn, jit_compile=True)
        assert_matches(jit(*args).numpy(), fn(*args).numpy())
        (note,) = _tiled(jit, *args)
        assert ("in registers" in note) == in_registers, note


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("shape,axis", [((4, 40, 7, 9), 1), ((3, 37, 50), 1), ((20, 33), 0)])
def test_softmax_over_a_middle_axis_matches_tensorflow(shape, axis, dtype):
    """TF transposes the axis last and back: the transpose back reads an expression
    transposed (a tiled kernel, gathering)."""
    rng = np.random.default_rng(sum(shape) + axis)
    x = tf.cast(tf.constant(rng.standard_normal(shape) * 3), dtype)
    fn = lambda x: tf.nn.softmax(x, axis=axis)   # noqa: E731
    jit = tfjit.function(fn, jit_compile=True)
    assert_matches(jit(x).numpy(), fn(x).numpy())
