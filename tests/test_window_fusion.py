"""Windows of windows (passes/windows.py): a producer that is a window itself and whose
consumer would evaluate it several times per element gets a kernel of its own; a
one-step producer (a ReLU before a pool) and a window read once per element (a 2x2
stride-2 pool of a pool) stay fused.  Results against TF's executor."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

import tfjit
from oracle import assert_matches


def _roots(f, *args) -> list:
    return [r.name.split(".")[0] for fu in f.compiled(*args).fusions for r in fu.roots]


def _notes(f, *args) -> str:
    return "\n".join(n for fu in f.compiled(*args).fusions for n in fu.notes)


def _check(fn, *args):
    f = tfjit.function(fn, jit_compile=True)
    assert_matches(f(*args).numpy(), tf.function(fn)(*args).numpy(), rtol=1e-5, atol=1e-6)
    return f


def test_pools_of_pools_that_reread_get_kernels_of_their_own(rng):
    x = tf.constant(rng.standard_normal((3, 8, 8, 8, 5)).astype(np.float32))

    def fn(x):
        y = tf.nn.avg_pool3d(x, 2, 2, "VALID")
        y = tf.nn.max_pool3d(y, 2, 1, "SAME")              # reads each average 8 times
        y = tf.reshape(y, (3, 64, 5))
        return tf.nn.avg_pool1d(tf.nn.max_pool1d(y, 4, 4, "VALID"), 2, 2, "SAME")

    f = _check(fn, x)
    notes = _notes(f, x)
    assert "gets a kernel of its own: fused, each of its elements would be computed 8 times, " \
           "each a window of 8 reads" in notes, notes
    assert len(f.compiled(x).fusions) == 2


def test_a_pool_upsampled_by_a_bilinear_resize(rng):
    """A pyramid pooling branch (PSPNet): each pooled value feeds 4 taps of every
    upsampled pixel; fused, its 10x10 window was read per tap per pixel."""
    x = tf.constant(rng.standard_normal((2, 20, 20, 3)).astype(np.float32))
    f = _check(lambda x: tf.image.resize(tf.nn.avg_pool2d(x, 10, 10, "VALID"), (20, 20)), x)
    assert "gets a kernel of its own" in _notes(f, x)


def test_windows_read_once_and_one_step_producers_stay_fused(rng):
    x = tf.constant(rng.standard_normal((2, 16, 16, 4)).astype(np.float32))
    once = _check(lambda x: tf.nn.max_pool2d(tf.nn.avg_pool2d(x, 2, 2, "VALID"), 2, 2, "VALID"), x)
    relu = _check(lambda x: tf.nn.max_pool2d(tf.nn.relu(x) * 2.0, 3, 1, "SAME"), x)
    for f in (once, relu):
        assert "gets a kernel of its own" not in _notes(f, x)
        assert len(f.compiled(x).fusions) == 1


def test_an_edge_sized_window_chain(rng):
    """One row, one column, a prime channel count: the split kernels' edges."""
    for shape in ((1, 1, 7, 13), (1, 7, 1, 13), (2, 5, 5, 1)):
        x = tf.constant(rng.standard_normal(shape).astype(np.float32))
        _check(lambda x: tf.nn.avg_pool2d(tf.nn.avg_pool2d(x, 2, 1, "SAME"), 3, 1, "SAME"), x)


def _max_pool_grad(x, g):
    y = tf.nn.max_pool2d(x, 3, 2, "SAME")
    return tf.raw_ops.MaxPoolGrad(orig_input=x, orig_output=y, grad=g, ksize=[1, 3, 3, 1],
                                  strides=[1, 2, 2, 1], padding="SAME")


def test_a_max_pool_gradient_computes_its_argmax_once(rng):
    """The window offsets a 3x3 stride-2 MaxPoolGrad routes to (each a 9-tap argmax) are
    read by the gradient's scatter at 9 shifts over its 4 phases, which it
    interleaves by concatenation: a concatenation reads each phase over a quarter of
    its points, so the phases stay in the scatter's kernel and the offsets get one of
    their own (counted whole, each phase looked recomputed 4 times, and the offsets
    were computed inside a phase's kernel: 3 kernels; before the count, the offsets
    were a reduction over a unit dim, scalar code: 11.6 ms on [16, 56, 56, 64],
    TF 3.0, now 0.8)."""
    x = tf.constant(rng.standard_normal((2, 12, 12, 16)).astype(np.float32))
    g = tf.constant(rng.standard_normal((2, 6, 6, 16)).astype(np.float32))
    f = tfjit.function(_max_pool_grad, jit_compile=True)
    assert_matches(f(x, g).numpy(), tf.function(_max_pool_grad)(x, g).numpy())
    fusions = f.compiled(x, g).fusions
    assert [fu.kind for fu in fusions] == ["loop", "loop"], [fu.notes for fu in fusions]
    assert "each of its elements would be computed 9 times, each a window of 9 reads" \
        in _notes(f, x, g)


def test_max_pool_gradients_of_edge_sizes_match_tensorflow(rng):
    """Ties (a constant image: the first offset wins), one row, one column, a prime
    channel count, an odd size whose last window is cut by the padding."""
    for shape in ((2, 6, 6, 3), (1, 1, 9, 5), (1, 9, 1, 7), (3, 7, 11, 13)):
        x = rng.standard_normal(shape).astype(np.float32)
        if shape == (2, 6, 6, 3):
            x = np.ones(shape, np.float32)
        x = tf.constant(x)
        out = tf.nn.max_pool2d(x, 3, 2, "SAME").shape
        g = tf.constant(rng.standard_normal(out).astype(np.float32))
        got = tfjit.function(_max_pool_grad, jit_compile=True)(x, g)
        assert_matches(got.numpy(), tf.function(_max_pool_grad)(x, g).numpy())
