"""FusedBatchNorm V1/V2/V3 and FusedBatchNormGrad V1/V2/V3 against TF's executor.

Table: op version × x dtype (f32; f16/bf16 with f32 statistics for V2/V3) ×
data_format (NHWC, NCHW, NDHWC, NCDHW) × is_training × exponential_avg_factor
× shapes (odd sizes, one element per channel, empty batch).  Every output with
a defined value is compared; in inference TF leaves reserve_space_1/2
uninitialised (its values change from run to run), so those are not.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from test_ops import NP_DTYPES, Case, check, params

R = tf.raw_ops

# tolerance: TF's rsqrt and sums in another order (and f16/bf16 rounding of y)
TOL = {"f32": (1e-4, 1e-5), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2)}
SHAPES = {      # per format: (name, x shape); the channel count is 3 or 5
    "NHWC": [("2x3x4x5", (2, 3, 4, 5)), ("1 per channel", (1, 1, 1, 5)), ("empty", (0, 2, 2, 3))],
    "NCHW": [("2x3x4x5", (2, 3, 4, 5)), ("1x5x1x1", (1, 5, 1, 1))],
    "NDHWC": [("2x2x3x2x3", (2, 2, 3, 2, 3))],
    "NCDHW": [("2x3x2x2x3", (2, 3, 2, 2, 3))],
}
CHANNEL = {"NHWC": -1, "NDHWC": -1, "NCHW": 1, "NCDHW": 1}


def _stats(rng, c):
    scale, offset, mean = (rng.normal(size=c).astype(np.float32) for _ in range(3))
    return scale, offset, mean, (rng.random(c) + 0.5).astype(np.float32)


def _x(d, shape, special):
    """Moderate values; ``special`` (NHWC): a NaN in channel 0, channel 1 constant (variance 0)."""
    def make(rng):
        x = (rng.normal(size=shape) * 2 + 1).astype(np.float32)
        if special and x.size:
            x.reshape(-1)[0] = np.nan
            x[..., 1] = 1.0
        return x.astype(NP_DTYPES[d])
    return make


def forward(op, fmt, training, factor, stats, empty=False):
    scale, offset, mean, var = (tf.constant(s) for s in stats)

    def fn(x):
        kw = dict(x=x, scale=scale, offset=offset, mean=mean, variance=var, epsilon=1e-3,
                  data_format=fmt, is_training=training)
        if op == "FusedBatchNormV3":
            kw["exponential_avg_factor"] = factor
        out = list(getattr(R, op)(**kw))
        names = ["y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2", "reserve_space_3"]
        keep = 6 if training and not empty else 3      # else the reserve spaces are uninitialised
        return {n: o for n, o in list(zip(names, out))[:keep]}
    return fn


def backward(op, fmt, training, stats):
    scale, _, mean, var = (tf.constant(s) for s in stats)

    def fn(dy, x):
        kw = dict(y_backprop=dy, x=x, scale=scale, reserve_space_1=mean, reserve_space_2=var, epsilon=1e-3,
                  data_format=fmt, is_training=training)
        if op == "FusedBatchNormGradV3":
            kw["reserve_space_3"] = tf.zeros([])
        names = ["x_backprop", "scale_backprop", "offset_backprop", "reserve_space_4", "reserve_space_5"]
        return dict(zip(names, getattr(R, op)(**kw)))
    return fn


def bn_cases() -> list:
    cases = []
    versions = [("FusedBatchNorm", "FusedBatchNormGrad", ("f32",)),
                ("FusedBatchNormV2", "FusedBatchNormGradV2", ("f32", "f16", "bf16")),
                ("FusedBatchNormV3", "FusedBatchNormGradV3", ("f32", "f16", "bf16"))]
    for fwd, bwd, dtypes in versions:
        for fmt, shapes in SHAPES.items():
            if fwd != "FusedBatchNormV3" and len(shapes[0][1]) == 5:
                continue          # 5-D formats are V3's only
            for d in dtypes:
                for name, shape in shapes:
                    c = shape[CHANNEL[fmt]]
                    stats = _stats(np.random.default_rng(len(name) + c), c)
                    for training in (True, False):
                        mode = "train" if training else "infer"
                        factors = (1.0, 0.3) if fwd == "FusedBatchNormV3" and training else (1.0,)
                        for factor in factors:
                            tag = f"{fmt}-{name}-{mode}" + (f"-factor{factor}" if factor != 1.0 else "")
                            fn = forward(fwd, fmt, training, factor, stats, empty=not np.prod(shape))
                            cases.append(Case(fwd, d, tag, fn,
                                              lambda rng, d=d, s=shape: [_x(d, s, False)(rng)], tol=TOL[d]))
                        if not training and CHANNEL[fmt] != -1:
                            continue      # TF's CPU kernel: inference gradients only for NHWC (see below)
                        cases.append(Case(bwd, d, f"{fmt}-{name}-{mode}", backward(bwd, fmt, training, stats),
                                          lambda rng, d=d, s=shape: [_x(d, s, False)(rng), _x(d, s, False)(rng)],
                                          tol=TOL[d]))
                    if fmt == "NHWC" and name == "2x3x4x5":
                        cases.append(Case(fwd, d, "specials-train", forward(fwd, fmt, True, 1.0, stats),
                                          lambda rng, d=d, s=shape: [_x(d, s, True)(rng)], tol=TOL[d]))
    return cases


@pytest.mark.parametrize("case", params(bn_cases()))
def test_fused_batch_norm(case):
    check(case)


def test_inference_gradient_needs_nhwc():
    """TF's CPU FusedBatchNormGrad with is_training=False supports NHWC only; tfjit
    refuses the same graphs with TF's message."""
    fn = backward("FusedBatchNormGradV3", "NCHW", False, _stats(np.random.default_rng(0), 3))
    x = tf.ones([2, 3, 2, 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="only support NHWC"):
        tf.function(fn)(x, x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="only support NHWC"):
        tfjit.function(fn, jit_compile=True)(x, x)


def test_running_statistics_ignored_in_training():
    """In training with factor 1 the mean/variance inputs are not read: TF accepts
    empty ones (as Keras 2 passed them), and so does tfjit."""
    def fn(x):
        return R.FusedBatchNormV3(x=x, scale=tf.ones([3]), offset=tf.zeros([3]), mean=tf.zeros([0]),
                                  variance=tf.zeros([0]), is_training=True)[:3]
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 2, 2, 3)).astype(np.float32))
    for g, w in zip(tfjit.function(fn, jit_compile=True)(x), tf.function(fn)(x)):
        assert_matches(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_fused_batch_norm_gradient_tape(training, fmt):
    """tf.nn.fused_batch_norm under GradientTape: FusedBatchNormV3 + FusedBatchNormGradV3."""
    rng = np.random.default_rng(7)
    c = 4
    shape = (2, 3, 5, c) if fmt == "NHWC" else (2, c, 3, 5)
    x = tf.constant(rng.normal(size=shape).astype(np.float32))
    scale = tf.constant(rng.normal(size=c).astype(np.float32))
    offset = tf.constant(rng.normal(size=c).astype(np.float32))
    mean, var = tf.constant(rng.normal(size=c).astype(np.float32)), tf.constant(rng.random(c).astype(np.float32))

    def step(x, scale, offset):
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            y, bm, bv = tf.compat.v1.nn.fused_batch_norm(
                x, scale, offset, mean=None if training else mean, variance=None if training else var,
                data_format=fmt, is_training=training)
            loss = tf.reduce_sum(y * y * tf.range(1.0, 1.0 + y.shape[-1]))
        return [y, bm, bv, *tape.gradient(loss, [x, scale, offset])]
    got = tfjit.function(step, jit_compile=True)(x, scale, offset)
    want = tf.function(step)(x, scale, offset)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_matches(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-4, what=f"output {k}")
