"""Fake quantisation (lower/quantize.py) against TF's kernels, bit for bit: every
num_bits/narrow_range corner, ranges whose zero point needs nudging, values on the
rounding boundaries and outside the range, NaN and infinities; and the gradient."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

RANGES = [(-6.0, 6.0), (0.0, 1.0), (-1.0, 0.0), (-0.1, 25.5), (-3.7, 0.3), (-127.0, 128.0),
          (-1e-3, 2e-3)]


def _inputs(lo, hi, n=400):
    rng = np.random.default_rng(int((hi - lo) * 1000) % 2**31)
    x = rng.uniform(lo - (hi - lo) * 0.2, hi + (hi - lo) * 0.2, n)
    steps = np.linspace(lo, hi, 64)          # near the quantisation steps and their midpoints
    x = np.concatenate([x, steps, np.nextafter(steps, np.inf), np.nextafter(steps, -np.inf),
                        [np.nan, np.inf, -np.inf, 0.0, -0.0, lo, hi]])
    return tf.constant(x.astype(np.float32))


@pytest.mark.parametrize("lo, hi", RANGES)
@pytest.mark.parametrize("num_bits, narrow", [(8, False), (8, True), (2, False), (4, True), (16, False)])
def test_fake_quant_args_is_tfs_bit_for_bit(lo, hi, num_bits, narrow):
    x = _inputs(lo, hi)

    def fn(x):
        q = tf.quantization.fake_quant_with_min_max_args(x, lo, hi, num_bits, narrow)
        return q, q * 2.0 + 1.0                # and fused with a neighbour

    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.quantization.fake_quant_with_min_max_args(x, lo, hi, num_bits, narrow)
    grad = tape.gradient(y, x, output_gradients=tf.range(x.shape[0], dtype=tf.float32))

    def g(x, dy):
        return tf.raw_ops.FakeQuantWithMinMaxArgsGradient(gradients=dy, inputs=x, min=lo, max=hi,
                                                          num_bits=num_bits, narrow_range=narrow)
    for got, want in zip(tfjit.function(fn, jit_compile=True)(x), fn(x)):
        assert_matches(got.numpy(), want.numpy(), rtol=0, atol=0)
    dy = tf.range(x.shape[0], dtype=tf.float32)
    assert_matches(tfjit.function(g, jit_compile=True)(x, dy).numpy(), grad.numpy(), rtol=0, atol=0)


@pytest.mark.parametrize("lo, hi", RANGES + [(0.0, 0.0)])
def test_fake_quant_vars_with_constant_range_is_tfs(lo, hi):
    x = _inputs(lo, hi) if hi > lo else _inputs(-1.0, 1.0)

    def fn(x):
        return tf.quantization.fake_quant_with_min_max_vars(x, tf.constant(lo), tf.constant(hi))
    assert_matches(tfjit.function(fn, jit_compile=True)(x).numpy(), fn(x).numpy(), rtol=0, atol=0)
    f = tfjit.function(fn, jit_compile=True)
    assert len(f.compiled(x).fusions) == 1
