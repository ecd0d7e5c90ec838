"""A convolution's bias and activation in its library call (passes/epilogue.py,
``convolution-bias``: TF's _FusedConv2D under the launch op).

Each case against TF's executor: which convolutions fold (BiasAdd, Keras 3's add of a
[1, 1, 1, O] bias, through the reshapes of 1-D and 3-D convolutions; none, Relu and
Relu6; a result read by another convolution, by two ops, or an output) and which do
not (a convolution read twice, a bias that is not per channel, f64 and bf16, a
result that one reduction reads, other activations after a folded bias); special values; the host
runner's path without TF (the plain convolution, then the bias and activation in
C++) against the interpreter; the IR text and the builder's refusals.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit import dtypes as dt
from tfjit.ir import interp
from tfjit.ir.module import IRError, Module
from tfjit.ir.parse import parse_module
from tfjit.ir.text import module_str
from tfjit.runtime import host


def _optimized(f, *args) -> str:
    return f.experimental_get_compiler_ir(*args)(stage="optimized_ir")


def _folds(text: str) -> list:
    """The activations of the module's fused convolutions (2-D, and TF's 3-D kernel's:
    tests/test_conv3d_native.py), in order."""
    return re.findall(r"convolution(?:-3d)?-bias\(.*activation=(\w+)", text)


def _check(fn, args, folds, tol=1e-4):
    f = tfjit.function(fn, jit_compile=True)
    text = _optimized(f, *args)
    assert _folds(text) == folds, text
    got, want = f(*args), tf.function(fn)(*args)
    for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
        assert_matches(g.numpy(), w.numpy(), rtol=tol, atol=tol)
    return text


def _conv(strides=1, padding="SAME", dilations=1):
    return lambda x, w: tf.nn.conv2d(x, w, strides, padding, dilations=dilations)


ACTIVATIONS = {"none": lambda v: v, "relu": tf.nn.relu, "relu6": tf.nn.relu6}
SHAPES = [  # x, filter, conv: edge sizes (1 row, 1 column, a prime channel count, 1x1)
    ((2, 9, 11, 5), (3, 3, 5, 7), _conv()),
    ((3, 8, 8, 4), (3, 3, 4, 13), _conv(2, "VALID")),
    ((1, 1, 17, 3), (1, 3, 3, 5), _conv(1, "SAME")),
    ((2, 13, 1, 6), (3, 1, 6, 4), _conv(1, "VALID")),
    ((2, 6, 6, 8), (1, 1, 8, 16), _conv(1, "VALID")),        # pointwise: the product path
    ((1, 12, 12, 3), (3, 3, 3, 8), _conv(1, "SAME", 2)),     # dilated
]


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("case", range(len(SHAPES)))
def test_bias_add_and_activation_fold_into_the_call(case, activation, rng):
    xs, ws, conv = SHAPES[case]
    x = tf.constant(rng.uniform(-2, 2, xs).astype(np.float32))
    w = tf.constant(rng.uniform(-1, 1, ws).astype(np.float32))
    b = tf.constant(rng.uniform(-3, 3, ws[3]).astype(np.float32))
    act = ACTIVATIONS[activation]
    _check(lambda x, w, b: act(tf.nn.bias_add(conv(x, w), b)), (x, w, b), [activation])


def test_keras_layers_fold_through_their_reshapes(rng):
    import keras
    layers = [keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
              keras.layers.Conv1D(6, 5, activation="relu"),
              keras.layers.Conv3D(4, 3, padding="same", activation="relu"),
              keras.layers.Conv2D(5, 1)]
    inputs = [(2, 10, 10, 3), (3, 20, 7), (2, 6, 6, 6, 2), (2, 5, 5, 8)]
    for layer, shape in zip(layers, inputs):
        x = tf.constant(rng.uniform(-1, 1, shape).astype(np.float32))
        layer.build(shape)
        layer.bias.assign(rng.uniform(-0.5, 0.5, layer.bias.shape).astype(np.float32))
        text = _check(lambda x: layer(x), (x,), ["none" if layer.activation.__name__ == "linear"
                                                 else "relu"])
        assert " add(" not in text and " maximum(" not in text, text


def test_a_training_step_folds_and_matches_tf(rng):
    x = tf.constant(rng.uniform(-1, 1, (4, 8, 8, 3)).astype(np.float32))
    w = tf.Variable(rng.uniform(-1, 1, (3, 3, 3, 6)).astype(np.float32))
    b = tf.Variable(rng.uniform(-1, 1, 6).astype(np.float32))

    def step(x):
        with tf.GradientTape() as tape:
            y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b))
            loss = tf.reduce_sum(y * y)
        return [loss] + tape.gradient(loss, [w, b])
    _check(step, (x,), ["relu"], tol=1e-3)


def test_what_does_not_fold(rng):
    x = tf.constant(rng.uniform(-1, 1, (2, 8, 8, 4)).astype(np.float32))
    w = tf.constant(rng.uniform(-1, 1, (3, 3, 4, 6)).astype(np.float32))
    b = tf.constant(rng.uniform(-1, 1, 6).astype(np.float32))
    conv = _conv()
    # the convolution read twice: its output must exist on its own
    _check(lambda x, w, b: (tf.nn.relu(conv(x, w) + b), conv(x, w)), (x, w, b), [])
    # a bias per image, not per channel
    per_image = tf.constant(rng.uniform(-1, 1, (2, 1, 1, 1)).astype(np.float32))
    _check(lambda x, w, b: tf.nn.relu(conv(x, w) + b), (x, w, per_image), [])
    # the sum read by something else besides the ReLU: the bias folds, the ReLU stays
    _check(lambda x, w, b: (tf.nn.relu(conv(x, w) + b), tf.reduce_sum(conv(x, w) + b)),
           (x, w, b), ["none"])
    # max(0, v) is not Relu's max(v, 0) for v = -0 (the IR's max keeps its first operand
    # on ties): no ReLU to fold, and the sum's one reader is that max
    _check(lambda x, w, b: (lambda r: (r, r * 2.0))(tf.maximum(0.0, conv(x, w) + b)),
           (x, w, b), [])
    # ELU is no fused_ops of TF's kernel: a folded bias, then a loop kernel
    _check(lambda x, w, b: tf.nn.elu(tf.nn.bias_add(conv(x, w), b)), (x, w, b), ["none"])
    # Relu6's clamp only as max then min at 0 and 6 (the ReLU's output read twice)
    _check(lambda x, w, b: (lambda r: (tf.minimum(r, 5.0), r))(tf.nn.relu(conv(x, w) + b)),
           (x, w, b), ["relu"])
    # read by one reduction: fusion computes the bias and ReLU in that kernel
    _check(lambda x, w, b: tf.reduce_mean(tf.nn.relu(conv(x, w) + b), [1, 2]), (x, w, b), [])
    # a pool reads it through one slice per tap, several readers: it folds
    _check(lambda x, w, b: tf.nn.max_pool2d(tf.nn.relu(conv(x, w) + b), 2, 2, "VALID"),
           (x, w, b), ["relu"])
    # a depthwise convolution reads its padded copy through one slice per tap: it folds
    dw = tf.constant(rng.uniform(-1, 1, (5, 5, 6, 1)).astype(np.float32))
    _check(lambda x, w, b, dw: tf.nn.depthwise_conv2d(tf.nn.relu(conv(x, w) + b), dw,
                                                      (1, 2, 2, 1), "SAME"),
           (x, w, b, dw), ["relu"])
    # ... but read by the next convolution, which takes a dense buffer, it folds
    w2 = tf.constant(rng.uniform(-1, 1, (3, 3, 6, 2)).astype(np.float32))
    _check(lambda x, w, b, w2: conv(tf.nn.relu(conv(x, w) + b), w2), (x, w, b, w2), ["relu"])
    for dtype, tol in ((tf.float64, 1e-10), (tf.bfloat16, 5e-2)):
        args = [tf.cast(v, dtype) for v in (x, w, b)]
        _check(lambda x, w, b: tf.nn.relu(tf.nn.bias_add(conv(x, w), b)), args, [], tol=tol)


def test_special_values_keep_their_positions(rng):
    # every call, not only the first: a measured call tries each candidate kernel in
    # turn over its first calls, and oneDNN's ReLU would turn the NaN channel into 0
    x = rng.uniform(-1, 1, (2, 6, 7, 3)).astype(np.float32)
    x[0, 2, 3, 1], x[1, 4, 4, 0], x[1, 0, 0, 2] = np.nan, np.inf, -np.inf
    w = rng.uniform(-1, 1, (3, 3, 3, 5)).astype(np.float32)
    b = np.array([0.0, -0.0, np.nan, -np.inf, 1e30], np.float32)
    args = (tf.constant(x), tf.constant(w), tf.constant(b))
    for act in ("relu", "relu6", "none"):
        fn = (lambda a: lambda x, w, b: ACTIVATIONS[a](tf.nn.bias_add(_conv()(x, w), b)))(act)
        _check(fn, args, [act])
        f, want = tfjit.function(fn, jit_compile=True), tf.function(fn)(*args).numpy()
        for _ in range(12):
            assert_matches(f(*args).numpy(), want, rtol=1e-4, atol=1e-4, what=act)


def test_the_host_runner_adds_the_bias_as_the_interpreter(rng):
    # no launch: the host library's convolution, then TfjitBiasActivation in C++
    x = rng.uniform(-2, 2, (2, 7, 9, 4)).astype(np.float32)
    w = rng.uniform(-1, 1, (3, 3, 4, 6)).astype(np.float32)
    b = rng.uniform(-2, 2, 6).astype(np.float32)
    b[1] = np.nan
    for act in ("none", "relu", "relu6"):
        fn = (lambda a: lambda x, w, b: ACTIVATIONS[a](tf.nn.bias_add(_conv()(x, w), b)))(act)
        compiled = tfjit.function(fn, jit_compile=True).compiled(x, w, b)
        (got,) = host.run_compiled(compiled, [x, w, b])
        assert _folds(compiled.module_after) == [act]
        (want,) = interp.evaluate(parse_module(compiled.module_after), [x, w, b])
        assert_matches(got, want, rtol=1e-5, atol=1e-5, what=act)
        assert_matches(got, tf.function(fn)(x, w, b).numpy(), rtol=1e-4, atol=1e-4, what=act)


def test_the_ir_text_round_trips_and_the_builder_refuses_bad_operands():
    m = Module("cb")
    x, w = m.parameter(dt.F32, (1, 5, 5, 2)), m.parameter(dt.F32, (3, 3, 2, 4))
    b = m.parameter(dt.F32, (4,))
    m.outputs = [m.convolution_bias(x, w, b, (1, 1), (1, 1), (1, 1, 1, 1), "relu6")]
    text = module_str(m)
    assert "convolution-bias(" in text and "activation=relu6" in text
    assert module_str(parse_module(text)) == text
    with pytest.raises(IRError, match="convolution-bias"):
        m.convolution_bias(x, w, m.parameter(dt.F32, (3,)), (1, 1), (1, 1), (0, 0, 0, 0))
    with pytest.raises(IRError, match="activation 'gelu'"):
        m.convolution_bias(x, w, b, (1, 1), (1, 1), (0, 0, 0, 0), "gelu")
    with pytest.raises(IRError, match="convolution-bias"):
        m.convolution_bias(x, w, m.parameter(dt.F64, (4,)), (1, 1), (1, 1), (0, 0, 0, 0))
