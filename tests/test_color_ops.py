"""RGBToHSV, HSVToRGB, AdjustSaturation, AdjustHue and AdjustContrastv2 (tfjit/lower/
color.py) against TF's CPU kernels: random pixels, one pixel, prime sizes, grey and
black pixels (zero range), pure primaries and hue-sector boundaries."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

R = tf.raw_ops
SHAPES = [(1, 1, 3), (2, 5, 7, 3), (3, 3), (13, 3)]


def _pixels(rng, shape, dtype):
    """Random colours, with special pixels first: grey, black, white, primaries,
    two equal maxima, a negative channel."""
    x = rng.uniform(0, 1, shape).reshape(-1, 3)
    special = np.array([[0.5, 0.5, 0.5], [0, 0, 0], [1, 1, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1],
                        [0.7, 0.7, 0.2], [0.2, 0.7, 0.7], [0.7, 0.2, 0.7], [-0.1, 0.3, 0.2],
                        [1, 0.5, 0], [0.25, 1, 0.75], [0.0, -0.0, 0.0]])
    k = min(len(x), len(special))
    x[:k] = special[:k]
    return tf.constant(x.reshape(shape), dtype)


def _same(fn, *args, **tol):
    got, want = tfjit.function(fn)(*args), tf.function(fn)(*args)
    assert_matches(got.numpy(), want.numpy(), **tol)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16, tf.bfloat16])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rgb_hsv_round_trip_matches_tf(shape, dtype, rng):
    x = _pixels(rng, shape, dtype)
    _same(lambda x: R.RGBToHSV(images=x), x, rtol=0, atol=0)
    h = tf.constant(np.concatenate([rng.uniform(0, 1, shape[:-1] + (1,)), rng.uniform(0, 1, shape[:-1] + (2,))],
                                   -1), dtype)
    edges = tf.constant(np.array([[0, 1, 1], [1 / 6, 1, 1], [0.5, 0.3, 0.9], [1, 1, 1], [0.999, 0, 1],
                                  [1.3, 0.5, 0.5], [-0.2, 0.5, 0.5]]), dtype)
    _same(lambda x: R.HSVToRGB(images=x), h, rtol=0, atol=0)
    _same(lambda x: R.HSVToRGB(images=x), edges, rtol=0, atol=0)


@pytest.mark.parametrize("scale", [0.0, 0.4, 1.0, 2.5, -1.0, np.inf, np.nan])
@pytest.mark.parametrize("shape", [(1, 1, 3), (3, 7, 11, 3)], ids=str)
def test_adjust_saturation_matches_tf(shape, scale, rng):
    x = _pixels(rng, shape, tf.float32)
    _same(lambda x, s: R.AdjustSaturation(images=x, scale=s), x, tf.constant(scale, tf.float32), rtol=0, atol=0)


@pytest.mark.parametrize("delta", [0.0, 0.2, -0.7, 1.0, -1.0, 0.5, 1e-9, -1e-9, 2.3, -3.7, 10.25, -1000.1])
@pytest.mark.parametrize("shape", [(1, 1, 3), (3, 7, 11, 3)], ids=str)
def test_adjust_hue_matches_tf(shape, delta, rng):
    x = _pixels(rng, shape, tf.float32)
    _same(lambda x, d: R.AdjustHue(images=x, delta=d), x, tf.constant(delta, tf.float32), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [tf.float16, tf.float32])
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 5, 7, 3), (1, 13, 2, 1, 4)], ids=str)
def test_adjust_contrast_matches_tf(shape, dtype, rng):
    x = tf.constant(rng.standard_normal(shape) * 3, dtype)
    for factor in (0.0, 1.7, -0.5):
        fn = lambda x, f: R.AdjustContrastv2(images=x, contrast_factor=f)  # noqa: E731
        if dtype == tf.float16:       # TF's CPU kernel is float only: its result in float, rounded
            got = tfjit.function(fn)(x, tf.constant(factor))
            assert_matches(got.numpy(), tf.cast(fn(tf.cast(x, tf.float32), tf.constant(factor)), dtype).numpy())
        else:
            _same(fn, x, tf.constant(factor))



@pytest.mark.parametrize("fn, shape", [
    (lambda x: R.RGBToHSV(images=x), [0, 3]),
    (lambda x: R.HSVToRGB(images=x), [2, 0, 3]),
    (lambda x: R.AdjustHue(images=x, delta=0.3), [2, 0, 3]),
    (lambda x: R.AdjustSaturation(images=x, scale=0.3), [0, 2, 3]),
    (lambda x: R.AdjustContrastv2(images=x, contrast_factor=0.3), [1, 0, 2, 3]),
    (lambda x: R.AdjustContrastv2(images=x, contrast_factor=0.3), [2, 3, 2, 0]),
], ids=["rgb2hsv", "hsv2rgb", "hue", "saturation", "contrast-h0", "contrast-c0"])
def test_empty_images(fn, shape):
    _same(fn, tf.zeros(shape))


@pytest.mark.parametrize("op, arg, value", [("AdjustHue", "delta", 0.3), ("AdjustSaturation", "scale", 1.7)])
def test_half_adjust_is_tfs_float_result_rounded(op, arg, value, rng):
    """TF's CPU kernels are float only (XLA compiles halves, in float): the oracle is the
    float kernel on the same values, rounded."""
    x = _pixels(rng, (2, 5, 7, 3), tf.float16)
    fn = lambda x, v: getattr(R, op)(images=x, **{arg: v})  # noqa: E731
    v = tf.constant(value, tf.float32)
    want = tf.cast(fn(tf.cast(x, tf.float32), v), tf.float16)
    assert_matches(tfjit.function(fn)(x, v).numpy(), want.numpy(), rtol=0, atol=0)
