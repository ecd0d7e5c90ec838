"""LRN and LRNGrad (tfjit/lower/lrn.py) against TF's CPU kernels: the depth window
narrower and wider than the depth, beta's special cases (1, 0.5) and a general one,
one pixel, prime sizes, a band-matmul window, halves."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

R = tf.raw_ops
CASES = [  # (shape, depth_radius, bias, alpha, beta)
    ((1, 1, 1, 1), 5, 1.0, 1.0, 0.5),
    ((2, 3, 5, 7), 2, 1.0, 0.3, 0.75),
    ((1, 2, 3, 11), 1, 2.0, 1e-4, 1.0),
    ((1, 1, 2, 6), 0, 0.5, 0.2, 0.5),
    ((3, 1, 1, 5), 9, 1.5, 0.1, 0.3),
    ((1, 2, 2, 40), 20, 1.0, 0.01, 0.75),      # 41-channel window: band matmul
]


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-r{c[1]}-b{c[4]}")
def test_lrn_and_its_gradient_match_tf(case, dtype, rng):
    shape, radius, bias, alpha, beta = case
    x = tf.constant(rng.standard_normal(shape), dtype)
    g = tf.constant(rng.standard_normal(shape), dtype)
    kw = dict(depth_radius=radius, bias=bias, alpha=alpha, beta=beta)

    def fn(x, g):
        y = R.LRN(input=x, **kw)
        return y, R.LRNGrad(input_grads=g, input_image=x, output_image=y, **kw)
    got, want = tfjit.function(fn)(x, g), tf.function(fn)(x, g)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == tf.float32 else dict(rtol=5e-3, atol=2e-3)
    assert_matches(got[0].numpy(), want[0].numpy(), what="LRN", **tol)
    assert_matches(got[1].numpy(), want[1].numpy(), what="LRNGrad", **tol)


@pytest.mark.parametrize("case", CASES[1:3] + CASES[-1:], ids=lambda c: f"{c[0]}-r{c[1]}-b{c[4]}")
def test_bfloat16_is_tfs_float_result_rounded(case, rng):
    """TF's CPU kernels have no bfloat16 LRN: the oracle is its float32 result on the
    same (bfloat16) values, rounded."""
    shape, radius, bias, alpha, beta = case
    x = tf.constant(rng.standard_normal(shape), tf.bfloat16)
    g = tf.constant(rng.standard_normal(shape), tf.bfloat16)
    kw = dict(depth_radius=radius, bias=bias, alpha=alpha, beta=beta)
    got = tfjit.function(lambda x: R.LRN(input=x, **kw))(x)
    want = tf.cast(R.LRN(input=tf.cast(x, tf.float32), **kw), tf.bfloat16)
    assert_matches(got.numpy(), want.numpy(), what="LRN")
    f32 = [tf.cast(v, tf.float32) for v in (g, x, got)]
    got_grad = tfjit.function(lambda g, x, y: R.LRNGrad(input_grads=g, input_image=x, output_image=y, **kw))(
        g, x, got)
    want_grad = tf.cast(R.LRNGrad(input_grads=f32[0], input_image=f32[1], output_image=f32[2], **kw), tf.bfloat16)
    assert_matches(got_grad.numpy(), want_grad.numpy(), what="LRNGrad")


@pytest.mark.parametrize("shape, radius", [((0, 2, 2, 40), 20), ((1, 2, 2, 0), 5)], ids=["batch0", "depth0"])
def test_empty_inputs(shape, radius):
    x = tf.zeros(shape)
    fn = lambda x: R.LRN(input=x, depth_radius=radius)  # noqa: E731
    assert_matches(tfjit.function(fn)(x).numpy(), fn(x).numpy())


def test_a_wide_window_over_a_huge_depth_is_refused_with_its_reason():
    x = tf.ones([1, 1, 1, 4097])
    with pytest.raises(tf.errors.InvalidArgumentError, match="LRN: a 41-channel window over depth 4097"):
        tfjit.function(lambda x: R.LRN(input=x, depth_radius=20))(x)
