"""Loop rows split at the seams of a concatenation along the last dim
(codegen/segments.py): one element loop per operand, reading only that operand.

Each case is compared with TF's executor exactly (a concatenation moves values; the
elementwise ops around it compute as before), and the kernel's note says when rows
were split.  Edge sizes: operands of one column, an empty operand, primes, many
operands, a single row, int and bool dtypes; a concatenation read behind a reverse
(not at the loop's own index) keeps its selects and must still be right.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

SPLIT = "run one element loop per operand"


def _split(jit, *xs) -> bool:
    return any(SPLIT in n for f in jit.compiled(*xs).fusions for n in f.notes)


# (id, operand shapes, dtype)
CASES = [
    ("two-2d", [(64, 30), (64, 50)], "float32"),
    ("four-inception", [(2, 5, 5, 19)] * 4, "float32"),
    ("one-column-each", [(33, 1)] * 5, "float32"),
    ("empty-operand", [(7, 13), (7, 0), (7, 3)], "float32"),
    ("primes", [(3, 7, 11), (3, 7, 13), (3, 7, 17)], "float64"),
    ("one-row", [(1, 40), (1, 24)], "float32"),
    ("int32", [(16, 9), (16, 23)], "int32"),
    ("int8", [(5, 70), (5, 3)], "int8"),
    ("bfloat16", [(8, 33), (8, 31)], "bfloat16"),
]


@pytest.mark.parametrize("shapes,dtype", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_concat_along_the_last_dim_matches_tensorflow(shapes, dtype):
    rng = np.random.default_rng(sum(map(sum, shapes)))
    xs = [tf.cast(tf.constant(rng.standard_normal(s) * 20), dtype) for s in shapes]

    def fn(*xs):
        return tf.concat(xs, -1) * tf.cast(3, dtype)
    jit = tfjit.function(fn, jit_compile=True)
    assert_matches(jit(*xs).numpy(), fn(*xs).numpy(), rtol=0, atol=0)
    assert _split(jit, *xs)


def test_bools_and_a_second_output_of_the_same_kernel():
    rng = np.random.default_rng(1)
    a, b = (tf.constant(rng.standard_normal(s).astype(np.float32)) for s in ((9, 17), (9, 6)))

    def fn(a, b):
        c = tf.concat([a, b], 1)
        return tf.concat([a > 0, b < 0], 1), tf.exp(c) + c
    jit = tfjit.function(fn, jit_compile=True)
    for got, want in zip(jit(a, b), fn(a, b)):
        assert_matches(got.numpy(), want.numpy())
    assert _split(jit, a, b)


def test_a_concat_read_behind_a_reverse_keeps_its_selects_and_is_right():
    rng = np.random.default_rng(2)
    a, b = (tf.constant(rng.standard_normal(s).astype(np.float32)) for s in ((4, 10), (4, 7)))

    def fn(a, b):
        c = tf.concat([a, b], 1)
        return tf.reverse(c, [1]) + c          # c at j and at 16 - j in one kernel
    jit = tfjit.function(fn, jit_compile=True)
    assert_matches(jit(a, b).numpy(), fn(a, b).numpy())


def test_a_concat_along_another_dim_is_not_split():
    x = tf.ones([6, 8])
    jit = tfjit.function(lambda x, y: tf.concat([x, y], 0) + 1.0, jit_compile=True)
    assert_matches(jit(x, x).numpy(), (tf.concat([x, x], 0) + 1.0).numpy())
    assert not _split(jit, x, x)
