"""3-D convolutions as TF's own 3-D kernels (``convolution-3d`` and its gradients, a
library call each: runtime/tf_conv3d.cc), against TF's executor.

lower/conv3d.py ``_native`` picks them over the 2-D call on the depth taps by class:
the forward convolution and the filter gradient always, the input gradient from
NATIVE_INPUT_GRADIENT_DEPTH input channels up, except where P is x itself (one depth
tap, stride 1, no depth padding) or the convolution is dilated.  Each case checks
both sides of that rule (which call the optimised IR holds) and the values: edge sizes
(one output plane, strides larger than the window, a prime channel count, one output
channel, batch 1), f64 and bf16.  Then: the bias and activation folded into
``convolution-3d-bias`` (oneDNN's _FusedConv3D where TF runs oneDNN, checked in a child
process with TF_ENABLE_ONEDNN_OPTS=1; elsewhere the runtime's own loop after the call,
NaN kept as TF's Relu), the host runner (linalg.cc: the depth taps and one 2-D
convolution, no TF) against the interpreter, the IR text and the builder's refusals.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit import dtypes as dt
from tfjit.ir import interp
from tfjit.ir.module import IRError, Module
from tfjit.ir.ops import Op
from tfjit.ir.parse import parse_module
from tfjit.ir.text import module_str
from tfjit.lower.conv3d import NATIVE_INPUT_GRADIENT_DEPTH
from tfjit.runtime import host

R = tf.raw_ops

# name -> (x shape, filter (kd, kh, kw), strides, padding, out channels)
SHAPES = {
    "3x3x3 SAME, 16 channels": ((2, 5, 6, 7, 16), (3, 3, 3), (1, 1, 1), "SAME", 5),
    "prime channels, VALID strided": ((1, 6, 7, 5, 17), (2, 3, 2), (2, 1, 2), "VALID", 3),
    "one output plane": ((1, 3, 4, 4, 16), (3, 3, 3), (1, 1, 1), "VALID", 4),
    "strides past the window": ((2, 7, 7, 7, 16), (2, 2, 2), (3, 3, 3), "SAME", 2),
    "one channel in, one out": ((2, 4, 5, 6, 1), (3, 3, 3), (1, 1, 1), "SAME", 1),
    "4 channels (input gradient on the taps)": ((2, 5, 5, 5, 4), (3, 1, 3), (1, 2, 1), "SAME", 6),
    "1-deep filter (x in place)": ((2, 3, 5, 5, 16), (1, 3, 3), (1, 1, 1), "SAME", 3),
    "1-deep filter, depth stride 2": ((2, 6, 4, 4, 16), (1, 2, 2), (2, 1, 1), "VALID", 3),
}
TOL = {tf.float32: 2e-4, tf.float64: 1e-10, tf.bfloat16: 5e-2}


def _args(rng, xs, k, o, dtype=tf.float32):
    x = tf.constant(rng.uniform(-1, 1, xs).astype(np.float32))
    w = tf.constant(rng.uniform(-1, 1, (*k, xs[-1], o)).astype(np.float32))
    return tf.cast(x, dtype), tf.cast(w, dtype)


def _optimized(f, *args) -> str:
    return f.experimental_get_compiler_ir(*args)(stage="optimized_ir")


def _calls(text: str) -> list:
    """The library convolutions of an optimised module, in order."""
    return re.findall(r" (convolution[-a-z0-9]*)\(", text)


def _expected(xs, k, strides, op: str) -> bool:
    """Does the rule send ``op`` of this geometry to TF's 3-D kernel?"""
    in_place = k[0] == 1 and strides[0] == 1
    if in_place:
        return False
    return op != "input" or xs[-1] >= NATIVE_INPUT_GRADIENT_DEPTH


def _check(fn, args, tol):
    f = tfjit.function(fn, jit_compile=True)
    want = tf.function(fn)(*args)
    for _ in range(8):      # a measured call runs each candidate kernel (default, oneDNN's,
        # the default in parts) in turn over its first calls: every one is checked
        got = f(*args)
        for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
            assert_matches(g.numpy(), w.numpy(), rtol=tol, atol=tol)
    return _optimized(f, *args)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_call_and_its_choice_against_tf(name, rng):
    xs, k, strides, padding, o = SHAPES[name]
    x, w = _args(rng, xs, k, o)
    st = [1, *strides, 1]
    y = R.Conv3D(input=x, filter=w, strides=st, padding=padding)
    g = tf.constant(rng.uniform(-1, 1, y.shape).astype(np.float32))
    forward = _check(lambda x, w: R.Conv3D(input=x, filter=w, strides=st, padding=padding),
                     (x, w), TOL[tf.float32])
    assert ("convolution-3d" in _calls(forward)) == _expected(xs, k, strides, "forward"), forward
    of_input = _check(lambda w, g: R.Conv3DBackpropInputV2(
        input_sizes=list(xs), filter=w, out_backprop=g, strides=st, padding=padding), (w, g),
        TOL[tf.float32])
    assert ("convolution-3d-backprop-input" in _calls(of_input)) == \
        _expected(xs, k, strides, "input"), of_input
    of_filter = _check(lambda x, g: R.Conv3DBackpropFilterV2(
        input=x, filter_sizes=list(w.shape), out_backprop=g, strides=st, padding=padding), (x, g),
        TOL[tf.float32])
    assert ("convolution-3d-backprop-filter" in _calls(of_filter)) == \
        _expected(xs, k, strides, "filter"), of_filter


@pytest.mark.parametrize("dtype", [tf.float64, tf.bfloat16])
def test_other_dtypes_and_a_training_step(dtype, rng):
    x, w = _args(rng, (2, 5, 6, 6, 16), (3, 3, 3), 4, dtype)
    if dtype == tf.bfloat16:     # positive values: no cancellation for TF's bf16 sums to magnify
        x, w = tf.abs(x), tf.abs(w) * 0.1

    def step(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = R.Conv3D(input=x, filter=w, strides=[1, 1, 2, 1, 1], padding="SAME")
            loss = tf.reduce_sum(y * y)
        return [y] + tape.gradient(loss, [x, w])
    text = _check(step, (x, w), 10 * TOL[dtype] if dtype == tf.bfloat16 else TOL[dtype])
    assert sorted(set(_calls(text))) == ["convolution-3d", "convolution-3d-backprop-filter",
                                         "convolution-3d-backprop-input"], text


def _folds(text: str) -> list:
    return re.findall(r"convolution-3d-bias\(.*activation=(\w+)", text)


ACTIVATIONS = {"none": lambda v: v, "relu": tf.nn.relu, "relu6": tf.nn.relu6}


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_bias_and_activation_fold_and_keep_special_values(activation, rng):
    # TF runs no oneDNN in this process (conftest): the call is Conv3D, then the runtime's
    # loop, which keeps a NaN before the ReLU as TF's Relu does, on every call (a
    # measured call tries each candidate kernel in turn over its first calls)
    x = rng.uniform(-1, 1, (2, 5, 6, 7, 3)).astype(np.float32)
    x[0, 1, 2, 3, 1], x[1, 3, 3, 3, 0], x[1, 0, 0, 0, 2] = np.nan, np.inf, -np.inf
    w = rng.uniform(-1, 1, (3, 3, 3, 3, 5)).astype(np.float32)
    b = np.array([0.0, -0.0, np.nan, -np.inf, 1e30], np.float32)
    args = (tf.constant(x), tf.constant(w), tf.constant(b))
    act = ACTIVATIONS[activation]

    def fn(x, w, b):     # an output, and read by a convolution: it is materialized
        y = act(tf.nn.bias_add(tf.nn.conv3d(x, w, [1] * 5, "SAME"), b))
        return y, tf.nn.conv3d(y, tf.ones((1, 1, 1, 5, 2)), [1] * 5, "VALID")
    f, want = tfjit.function(fn, jit_compile=True), tf.function(fn)(*args)
    assert _folds(_optimized(f, *args)) == [activation]
    for _ in range(8):
        for g, v in zip(f(*args), want):
            assert_matches(g.numpy(), v.numpy(), rtol=1e-4, atol=1e-4, what=activation)


def test_keras_conv3d_layers_fold_and_train_as_tf(rng):
    import keras
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((6, 8, 8, 4)),
                              keras.layers.Conv3D(16, 3, padding="same", activation="relu"),
                              keras.layers.MaxPooling3D(),
                              keras.layers.Conv3D(8, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling3D(), keras.layers.Dense(3)])
    x = tf.constant(rng.uniform(-1, 1, (4, 6, 8, 8, 4)).astype(np.float32))
    text = _check(lambda x: model(x), (x,), 1e-4)
    # the first ReLU is read by the pool's taps (folded), the second by one reduction
    # (computed in its kernel)
    assert _calls(text) == ["convolution-3d-bias", "convolution-3d"] and _folds(text) == ["relu"], text

    def grads(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x, training=True) ** 2)
        return tape.gradient(loss, model.trainable_variables)
    text = _check(grads, (x,), 1e-3)
    assert "convolution-3d-backprop-filter" in _calls(text), text


def test_the_host_runner_against_the_interpreter_and_tf(rng):
    # no launch: linalg.cc's depth taps and one 2-D convolution, the bias loop after
    x, w = _args(rng, (2, 5, 6, 4, 16), (3, 2, 3), 5)
    b = tf.constant(rng.uniform(-1, 1, 5).astype(np.float32))
    g = tf.constant(rng.uniform(-1, 1, (2, 3, 6, 2, 5)).astype(np.float32))
    st = [1, 2, 1, 2, 1]
    fns = {
        "forward + bias + relu": (lambda x, w, b: tf.nn.max_pool3d(tf.nn.relu(tf.nn.bias_add(
            R.Conv3D(input=x, filter=w, strides=st, padding="SAME"), b)), [1, 1, 2, 1, 1], 1,
            "VALID"), (x, w, b)),
        "input gradient": (lambda w, g: R.Conv3DBackpropInputV2(
            input_sizes=[2, 5, 6, 4, 16], filter=w, out_backprop=g, strides=st, padding="SAME"), (w, g)),
        "filter gradient": (lambda x, g: R.Conv3DBackpropFilterV2(
            input=x, filter_sizes=list(w.shape), out_backprop=g, strides=st, padding="SAME"), (x, g)),
    }
    for what, (fn, args) in fns.items():
        compiled = tfjit.function(fn, jit_compile=True).compiled(*args)
        assert re.search(r" convolution-3d[-a-z]*\(", compiled.module_after), what
        values = [a.numpy() for a in args]
        (got,) = host.run_compiled(compiled, values)
        (want,) = interp.evaluate(parse_module(compiled.module_after), values)
        assert_matches(got, want, rtol=1e-4, atol=1e-4, what=what)
        assert_matches(got, tf.function(fn)(*args).numpy(), rtol=1e-4, atol=1e-4, what=what)


def test_the_ir_text_round_trips_and_the_builder_refuses_bad_operands():
    m = Module("c3")
    x, w = m.parameter(dt.F32, (1, 4, 5, 5, 2)), m.parameter(dt.F32, (2, 3, 3, 2, 4))
    b, g = m.parameter(dt.F32, (4,)), m.parameter(dt.F32, (1, 2, 5, 5, 4))
    y = m.convolution_3d(Op.CONV3D, x, w, (2, 1, 1), (0, 0, 1, 1, 1, 1))
    assert y.shape == (1, 2, 5, 5, 4)
    m.outputs = [y, m.convolution_3d_bias(x, w, b, (2, 1, 1), (0, 0, 1, 1, 1, 1), "relu6"),
                 m.convolution_3d(Op.CONV3D_BACKPROP_INPUT, w, g, (2, 1, 1), (0, 0, 1, 1, 1, 1),
                                  x.shape),
                 m.convolution_3d(Op.CONV3D_BACKPROP_FILTER, x, g, (2, 1, 1), (0, 0, 1, 1, 1, 1),
                                  w.shape)]
    text = module_str(m)
    assert "convolution-3d-bias(" in text and "activation=relu6" in text
    assert module_str(parse_module(text)) == text
    with pytest.raises(IRError, match="convolution-3d"):     # the gradient's shape is not y's
        m.convolution_3d(Op.CONV3D_BACKPROP_INPUT, w, x, (1, 1, 1), (0,) * 6, x.shape)
    with pytest.raises(IRError, match="convolution-3d"):     # depths differ
        m.convolution_3d(Op.CONV3D, m.parameter(dt.F32, (1, 4, 5, 5, 3)), w, (1, 1, 1), (0,) * 6)
    with pytest.raises(IRError, match="convolution-3d"):     # window larger than the input
        m.convolution_3d(Op.CONV3D, x, m.parameter(dt.F32, (5, 1, 1, 2, 1)), (1, 1, 1), (0,) * 6)
    with pytest.raises(IRError, match="convolution-3d"):     # 2-D strides
        m.convolution_3d(Op.CONV3D, x, w, (1, 1), (0,) * 6)
    with pytest.raises(IRError, match="convolution-3d-bias"):
        m.convolution_3d_bias(x, w, m.parameter(dt.F32, (3,)), (1, 1, 1), (0,) * 6)
    with pytest.raises(IRError, match="convolution-3d-bias"):
        m.convolution_3d_bias(x, w, b, (1, 1, 1), (0,) * 6, "gelu")


ONEDNN_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    import tfjit
    rng = np.random.default_rng(5)
    x = tf.constant(rng.uniform(-1, 1, (2, 6, 6, 6, 4)).astype(np.float32))
    w = tf.constant(rng.uniform(-1, 1, (3, 3, 3, 4, 16)).astype(np.float32))
    b = tf.constant(rng.uniform(-1, 1, 16).astype(np.float32))
    fn = lambda x, w, b: tf.nn.max_pool3d(tf.nn.relu(tf.nn.bias_add(
        tf.nn.conv3d(x, w, [1] * 5, "SAME"), b)), 2, 2, "VALID")
    f = tfjit.function(fn, jit_compile=True)
    want = tf.function(fn)(x, w, b).numpy()
    for _ in range(4):
        np.testing.assert_allclose(f(x, w, b).numpy(), want, rtol=1e-4, atol=1e-4)
    notes = [n for fu in f.compiled(x, w, b).fusions for n in fu.notes]
    print([n for n in notes if "_FusedConv3D" in n])
""")


def test_with_onednn_the_fused_kernel_is_onednns(tmp_path):
    """Where TF runs oneDNN (a child process with TF_ENABLE_ONEDNN_OPTS=1), the fold runs
    TF's _FusedConv3D (oneDNN's own: TF has no other), against that TF's graph mode."""
    script = tmp_path / "child.py"
    script.write_text(ONEDNN_CHILD)
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "runs TF's oneDNN _FusedConv3D kernel" in proc.stdout, proc.stdout
