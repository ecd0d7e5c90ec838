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


# ranges without 0, which TF's Nudge moves to one (fake_quant_ops_test's "nudging" cases)
ARGS_RANGES = RANGES + [(0.5, 2.0), (-2.0, -0.5), (3.0, 3.5)]


@pytest.mark.parametrize("lo, hi", ARGS_RANGES)
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


# -- min and max fed at run time: TF's Nudge in IR ---------------------------------------

ODD_RANGES = [(0.0, 0.0), (-0.0, 0.0), (0.5, 2.0), (-2.0, -0.5), (1.0, -1.0), (1.0, 1.0),
              (-np.inf, 1.0), (-1.0, np.inf), (np.nan, 1.0)]
BITS = [(8, False), (8, True), (2, False), (4, True), (16, False)]


def _grad_in(n, integral):
    """Integers (so TF's and tfjit's sums are exact, whatever their order; negative ones
    times 0.0 make -0.0) or random floats."""
    if integral:
        return tf.constant((np.arange(n) % 7 - 3).astype(np.float32))
    return tf.constant(np.random.default_rng(n).normal(size=n).astype(np.float32))


@pytest.fixture(scope="module")
def vars_fns():
    """One compile per (num_bits, narrow_range), shared by every range."""
    cache = {}

    def get(num_bits, narrow):
        if (num_bits, narrow) not in cache:
            def fn(x, lo, hi, dy):
                q = tf.quantization.fake_quant_with_min_max_vars(x, lo, hi, num_bits, narrow)
                grads = tf.raw_ops.FakeQuantWithMinMaxVarsGradient(
                    gradients=dy, inputs=x, min=lo, max=hi, num_bits=num_bits, narrow_range=narrow)
                return (q, q * 2.0 + 1.0) + tuple(grads)
            cache[num_bits, narrow] = tfjit.function(fn, jit_compile=True), tf.function(fn)
        return cache[num_bits, narrow]
    return get


@pytest.mark.parametrize("num_bits, narrow", BITS)
def test_fake_quant_vars_with_a_run_time_range_is_tfs_bit_for_bit(vars_fns, num_bits, narrow):
    jit, ref = vars_fns(num_bits, narrow)
    names = ("outputs", "fused neighbour", "backprop wrt input", "wrt min", "wrt max")
    for lo, hi in RANGES + ODD_RANGES:
        x = _inputs(lo, hi) if np.isfinite(hi - lo) and hi > lo else _inputs(-1.0, 1.0)
        args = (x, tf.constant(lo, tf.float32), tf.constant(hi, tf.float32),
                _grad_in(x.shape[0], integral=True))
        for got, want, name in zip(jit(*args), ref(*args), names):
            assert_matches(got.numpy(), want.numpy(), rtol=0, atol=0, what=f"[{lo}, {hi}] {name}")
    assert jit.experimental_get_compile_count() == 1        # the range is not in the key


def test_fake_quant_vars_gradient_sums_float_gradients_like_tf(vars_fns):
    """Float gradients: the sums wrt min and max differ from TF's only in summation order."""
    jit, ref = vars_fns(8, False)
    for lo, hi in RANGES:
        x = _inputs(lo, hi)
        args = (x, tf.constant(lo), tf.constant(hi), _grad_in(x.shape[0], integral=False))
        got, want = jit(*args), ref(*args)
        assert_matches(got[2].numpy(), want[2].numpy(), rtol=0, atol=0)
        for i in (3, 4):
            assert_matches(got[i].numpy(), want[i].numpy(), rtol=1e-5, atol=1e-5)


def _channel_inputs(ranges):
    """[n, d]: column j holds _inputs of channel j's range (a finite stand-in where it is odd)."""
    cols = [_inputs(lo, hi).numpy() if np.isfinite(hi - lo) and hi > lo else _inputs(-1.0, 1.0).numpy()
            for lo, hi in ranges]
    return np.stack(cols, axis=1)


CHANNEL_RANGES = RANGES + ODD_RANGES


@pytest.mark.parametrize("num_bits, narrow", BITS)
@pytest.mark.parametrize("shape", ["nd", "bhwd", "d"])
def test_fake_quant_per_channel_is_tfs_bit_for_bit(num_bits, narrow, shape):
    cols = _channel_inputs(CHANNEL_RANGES)                      # [599, d]
    d = cols.shape[1]
    x = {"nd": cols, "bhwd": cols[:595].reshape(5, 7, 17, d), "d": cols[401]}[shape]
    lo = tf.constant([r[0] for r in CHANNEL_RANGES], tf.float32)
    hi = tf.constant([r[1] for r in CHANNEL_RANGES], tf.float32)
    dy = tf.reshape(_grad_in(x.size, integral=True), x.shape)

    def fn(x, lo, hi, dy):
        q = tf.quantization.fake_quant_with_min_max_vars_per_channel(x, lo, hi, num_bits, narrow)
        grads = tf.raw_ops.FakeQuantWithMinMaxVarsPerChannelGradient(
            gradients=dy, inputs=x, min=lo, max=hi, num_bits=num_bits, narrow_range=narrow)
        return (q,) + tuple(grads)
    args = (tf.constant(x), lo, hi, dy)
    for got, want, name in zip(tfjit.function(fn, jit_compile=True)(*args), fn(*args),
                               ("outputs", "backprop wrt input", "wrt min", "wrt max")):
        assert_matches(got.numpy(), want.numpy(), rtol=0, atol=0, what=name)


def test_a_qat_training_step_with_variable_ranges_is_tfs():
    """Fake-quantised activations (a scalar range) and weights (a range per output
    channel), min and max trained as variables, under GradientTape, compiled whole."""
    rng = np.random.default_rng(7)
    x = tf.constant(rng.normal(size=(32, 6)).astype(np.float32) * 3)
    y = tf.constant(rng.normal(size=(32, 4)).astype(np.float32))
    w0 = rng.normal(size=(6, 4)).astype(np.float32)

    def make():
        vs = dict(w=tf.Variable(w0), a_min=tf.Variable(-2.0), a_max=tf.Variable(1.5),
                  w_min=tf.Variable([-1.0, -0.5, -2.0, -0.1]), w_max=tf.Variable([1.0, 0.5, 0.2, 2.0]))

        def step(x, y):
            with tf.GradientTape() as tape:
                a = tf.quantization.fake_quant_with_min_max_vars(x, vs["a_min"], vs["a_max"])
                w = tf.quantization.fake_quant_with_min_max_vars_per_channel(vs["w"], vs["w_min"],
                                                                            vs["w_max"])
                loss = tf.reduce_mean(tf.square(tf.matmul(a, w) - y))
            grads = tape.gradient(loss, list(vs.values()))
            for v, g in zip(vs.values(), grads):
                v.assign_sub(0.05 * g)
            return loss, grads
        return vs, step
    (vs_jit, step_jit), (vs_ref, step_ref) = make(), make()
    jit, ref = tfjit.function(step_jit, jit_compile=True), tf.function(step_ref)
    for _ in range(3):
        (l_got, g_got), (l_want, g_want) = jit(x, y), ref(x, y)
        assert_matches(l_got.numpy(), l_want.numpy(), rtol=1e-5)
        for name, a, b in zip(vs_ref, g_got, g_want):
            assert np.any(b.numpy() != 0), name          # every range is trained
            assert_matches(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5, what=f"grad {name}")
    for name in vs_ref:
        assert_matches(vs_jit[name].numpy(), vs_ref[name].numpy(), rtol=1e-4, atol=1e-5, what=name)
