"""ResizeNearestNeighbor, ResizeBilinear and their gradients, and Rint (tfjit/lower/
image.py, elementwise.py) against TF's CPU kernels, over up- and down-sampling,
align_corners and half_pixel_centers, forward and (tape) gradients."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

R = tf.raw_ops
SIZES = [((5, 7), (10, 14)), ((6, 9), (4, 5)), ((4, 4), (7, 3)), ((1, 3), (3, 1)), ((3, 5), (3, 5))]
MODES = [(False, False), (True, False), (False, True)]      # (align_corners, half_pixel_centers)


def _step(op, out_size, align, half):
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = getattr(R, op)(images=x, size=out_size, align_corners=align, half_pixel_centers=half)
            loss = tf.reduce_sum(y * tf.cos(tf.cast(y, tf.float32) * 0.37))
        return y, tape.gradient(loss, x)
    return step


@pytest.mark.parametrize("op", ["ResizeNearestNeighbor", "ResizeBilinear"])
@pytest.mark.parametrize("mode", MODES, ids=["legacy", "align", "half"])
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"{s[0][0]}x{s[0][1]}-{s[1][0]}x{s[1][1]}")
def test_resize_and_its_gradient_match_tf(op, mode, sizes, rng):
    (h, w), out = sizes
    x = tf.constant(rng.standard_normal((2, h, w, 3)), tf.float32)
    step = _step(op, list(out), *mode)
    got, want = tfjit.function(step)(x), tf.function(step)(x)
    exact = op == "ResizeNearestNeighbor"
    assert_matches(got[0].numpy(), want[0].numpy(), **({} if exact else dict(rtol=1e-6, atol=1e-6)))
    assert_matches(got[1].numpy(), want[1].numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [tf.int32, tf.uint8, tf.float16, tf.float64])
def test_resize_of_other_types(dtype, rng):
    x = tf.cast(tf.constant(rng.integers(0, 200, (1, 5, 6, 2))), dtype)
    for op in ("ResizeNearestNeighbor", "ResizeBilinear"):
        def fn(x, op=op):
            return getattr(R, op)(images=x, size=[8, 4], half_pixel_centers=True)
        got, want = tfjit.function(fn)(x), tf.function(fn)(x)
        assert got.dtype == want.dtype
        assert_matches(got.numpy(), want.numpy(), rtol=1e-3 if dtype == tf.float16 else 1e-6)


def test_keras_upsampling_and_resize_layers_compile(rng):
    import keras
    x = tf.constant(rng.standard_normal((2, 6, 5, 3)), tf.float32)
    for layer in (keras.layers.UpSampling2D(2), keras.layers.UpSampling2D(2, interpolation="bilinear"),
                  keras.layers.Resizing(9, 4)):
        assert_matches(tfjit.function(layer)(x).numpy(), layer(x).numpy(), rtol=1e-5, atol=1e-5)


def test_rint_rounds_half_to_even():
    x = tf.constant([0.5, 1.5, 2.5, -0.5, -1.5, -0.0, 2.4999998, np.nan, np.inf, 1e30], tf.float32)
    assert_matches(tfjit.function(tf.math.rint)(x).numpy(), tf.math.rint(x).numpy())


def test_align_corners_with_half_pixel_centers_is_tfs_error():
    x = tf.ones([1, 3, 3, 1])
    fn = lambda x: R.ResizeBilinear(images=x, size=[5, 5], align_corners=True, half_pixel_centers=True)  # noqa: E731
    with pytest.raises(tf.errors.InvalidArgumentError, match="align_corners must be False"):
        tfjit.function(fn)(x)


@pytest.mark.parametrize("op", ["ResizeNearestNeighbor", "ResizeBilinear"])
@pytest.mark.parametrize("sizes,scatter", [
    (((6, 5), (12, 10)), False),      # 2x: 2 (nearest) or 4 (bilinear) terms per source row
    (((1, 7), (3, 13)), False),       # one source row, a prime width
    (((5, 6), (15, 24)), False),      # 3x and 4x
    (((2, 3), (80, 6)), True)])       # 40-80 terms per source row: the scatter
def test_resize_gradients_sum_constant_gathers(op, sizes, scatter, rng):
    """A resize's gradient sums each source row's contributions as constant gathers
    (lower/image.py ``_sum_into``) in one loop kernel; past 32 terms per source row, as
    one IR scatter.  Values against TF's kernels."""
    (h, w), out = sizes
    x = tf.constant(rng.standard_normal((2, h, w, 17)), tf.float32)
    step = _step(op, list(out), False, True)
    f = tfjit.function(step, jit_compile=True)
    got, want = f(x), tf.function(step)(x)
    assert_matches(got[1].numpy(), want[1].numpy(), rtol=1e-5, atol=1e-5)
    kinds = {fu.kind for fu in f.compiled(x).fusions}
    assert ("scatter" in kinds) == scatter, kinds
