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
