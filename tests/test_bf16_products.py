"""bfloat16 matrix products and 2-D convolutions as bf16 library calls (passes/dots.py
Bf16Products, runtime/tf_bf16.cc), against TF's executor.

The rewrite is made where the code's target runs oneDNN on a CPU that multiplies bf16
(``pipeline.Options.bf16_calls``), for calls of at least BF16_CALL_FLOPS; there the call
is TF's oneDNN bf16 kernel (a child process with TF_ENABLE_ONEDNN_OPTS=1, checked
against that TF's graph mode, and with bf16 calls exactly where this CPU has bf16
arithmetic).  This process runs TF without oneDNN (conftest), so the tests that force
the option (``bf16_calls``) run the call's other path: the operands widened, the f32
call, one rounding (what IR text or the host runner meets): the arithmetic of the
converts around an f32 call, checked against that computation up to the f32 kernels'
last bits moving one rounding, and closer to the exact result than TF's own Eigen bf16
kernels.  Also: what is not rewritten (small calls, an f32 result read as f32, f16,
vector products, depthwise convolutions, the option off), Keras's mixed_bfloat16 layers
and their gradients, the host runner against the interpreter, the pass on IR text, and
both sides of the kernel choice.
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
from tfjit.passes.dots import Bf16Products
from tfjit.runtime import host

BF16_TOL = 2e-2     # TF's Eigen bf16 kernel sums in another order: 1 bf16 ulp apart


@pytest.fixture
def bf16_calls(monkeypatch):
    """Compiles as for a target that makes bf16 calls (this process's TF runs no oneDNN:
    the calls widen their operands)."""
    from tfjit import pipeline
    monkeypatch.setattr(pipeline.Options, "from_flags", staticmethod(
        lambda target=None: pipeline.Options(verify=True, bf16_calls=True)))


def _bf16(rng, shape):
    return tf.cast(tf.constant(rng.standard_normal(shape).astype(np.float32)), tf.bfloat16)


def _optimized(f, *args) -> str:
    return f.experimental_get_compiler_ir(*args)(stage="optimized_ir")


def _one_rounding_apart(got, want, what=""):
    """Equal up to one bf16 rounding: the f32 sums come from TF's kernels (whichever a
    measured call picked), the host library's Eigen or numpy, whose last f32 bits may
    differ by CPU and summation order, and a rounding to bf16 can fall either side."""
    g, w = np.asarray(got).astype(np.float32), np.asarray(want).astype(np.float32)
    assert np.array_equal(np.isnan(g), np.isnan(w)), what
    finite = np.isfinite(w)
    assert np.array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)]), what   # infs
    # (a result near zero after cancelling sums: the f32 sums' own last bits, of the
    # largest results' magnitude, decide it)
    floor = 2.0 ** -16 * float(np.max(np.abs(w[finite]))) if finite.any() else 0.0
    with np.errstate(invalid="ignore"):
        ok = ~finite | (g == w) | (np.abs(g - w) <= np.abs(w) * 2.0 ** -7 + floor)
    assert ok.all(), f"{what}: {np.argwhere(~ok)[:3].tolist()}: {g[~ok][:3]} vs {w[~ok][:3]}"


def _f32_rounded(fn, *args):
    """``fn`` on the operands widened to f32, rounded to bf16 once: the rewrite's arithmetic."""
    return tf.cast(fn(*[tf.cast(a, tf.float32) for a in args]), tf.bfloat16).numpy()


# (a shape, b shape, transpose_a, transpose_b): edge sizes (a prime contraction, 2 rows,
# one batch side broadcast)
# (each at least BF16_CALL_FLOPS)
PRODUCTS = [
    ((256, 256), (256, 64), False, False),
    ((257, 128), (131, 257), True, True),
    ((4, 128, 97), (4, 97, 96), False, False),
    ((4, 128, 97), (1, 96, 97), False, True),
    ((1, 97, 128), (6, 128, 97), True, True),
]


@pytest.mark.parametrize("case", range(len(PRODUCTS)))
def test_products_are_bf16_calls_one_rounding_of_the_f32_sum(case, rng, bf16_calls):
    sa, sb, ta, tb = PRODUCTS[case]
    a, b = _bf16(rng, sa), _bf16(rng, sb)

    def fn(a, b):
        return tf.matmul(a, b, transpose_a=ta, transpose_b=tb)
    f = tfjit.function(fn, jit_compile=True)
    assert "bf16[" in _optimized(f, a, b).split(" dot(")[0].splitlines()[-1]
    exact = _f32_rounded(fn, a, b)
    for _ in range(3):          # the f32 call is measured over its first calls
        got = f(a, b).numpy()
        _one_rounding_apart(got, exact)
    want = tf.function(fn)(a, b).numpy().astype(np.float32)
    assert_matches(got.astype(np.float32), want, rtol=BF16_TOL,
                   atol=BF16_TOL * float(np.max(np.abs(want))))


# x, filter, strides, padding, dilations (each at least BF16_CALL_FLOPS): edge sizes (1
# row, prime channel counts, 1x1, padding wider than oneDNN takes via EXPLICIT)
CONVOLUTIONS = [
    ((2, 16, 16, 32), (3, 3, 32, 32), 1, "SAME", 1),
    ((4, 33, 33, 29), (3, 3, 29, 31), 2, "VALID", 1),
    ((1, 1, 257, 64), (1, 3, 64, 128), 1, "SAME", 1),
    ((2, 16, 16, 64), (1, 1, 64, 128), 1, "VALID", 1),
    ((2, 20, 20, 32), (3, 3, 32, 32), 1, "SAME", 2),
    ((2, 16, 16, 32), (2, 2, 32, 64), 1, [[0, 0], [3, 1], [0, 2], [0, 0]], 1),
]


@pytest.mark.parametrize("case", range(len(CONVOLUTIONS)))
def test_convolutions_and_gradients_are_bf16_calls_one_rounding_of_the_f32_sum(case, rng,
                                                                                bf16_calls):
    xs, ws, stride, padding, dilation = CONVOLUTIONS[case]
    x, w = _bf16(rng, xs), _bf16(rng, ws)

    def conv(x, w):
        return tf.nn.conv2d(x, w, stride, padding, dilations=dilation)
    y = conv(x, w)
    g = _bf16(rng, y.shape)
    fns = {"Conv2D": (conv, (x, w))}
    if dilation == 1:
        fns["Conv2DBackpropInput"] = (lambda w, g: tf.raw_ops.Conv2DBackpropInput(
            input_sizes=list(xs), filter=w, out_backprop=g, strides=[1, stride, stride, 1],
            padding="EXPLICIT" if isinstance(padding, list) else padding,
            explicit_paddings=sum(padding, []) if isinstance(padding, list) else []), (w, g))
        fns["Conv2DBackpropFilter"] = (lambda x, g: tf.raw_ops.Conv2DBackpropFilter(
            input=x, filter_sizes=list(ws), out_backprop=g, strides=[1, stride, stride, 1],
            padding="EXPLICIT" if isinstance(padding, list) else padding,
            explicit_paddings=sum(padding, []) if isinstance(padding, list) else []), (x, g))
    for what, (fn, args) in fns.items():
        f = tfjit.function(fn, jit_compile=True)
        text = _optimized(f, *args)
        assert any("= bf16[" in line and " convolution" in line for line in text.splitlines()), \
            (what, text)
        exact = _f32_rounded(fn, *args)
        for _ in range(3):
            got = f(*args).numpy()
            _one_rounding_apart(got, exact, what)
        # TF's default bf16 gradient kernels are less exact than one rounding of the f32
        # sum (a [2,9,11,5] input gradient: 0.15 from the f64 result at most, against 0.06)
        tol = BF16_TOL if what == "Conv2D" else 5e-2
        want = tf.function(fn)(*args).numpy().astype(np.float32)
        assert_matches(got.astype(np.float32), want, rtol=tol,
                       atol=tol * float(np.max(np.abs(want))), what=what)


# (x, filter, strides, padding): 3-D convolutions (TF's own 3-D kernels,
# lower/conv3d.py) with edge sizes: one output plane, a stride past the window, prime
# channels (each at least BF16_CALL_FLOPS; the 1x1x1 one a product, lower/conv3d.py)
CONVOLUTIONS_3D = [
    ((2, 8, 10, 10, 16), (3, 3, 3, 16, 32), (1, 1, 1), "SAME"),
    ((16, 4, 17, 13, 23), (3, 2, 3, 23, 29), (2, 3, 2), "VALID"),
    ((2, 8, 12, 12, 32), (1, 1, 1, 32, 64), (1, 1, 1), "VALID"),
]


@pytest.mark.parametrize("case", range(len(CONVOLUTIONS_3D)))
def test_3d_convolutions_and_gradients_are_bf16_calls(case, rng, bf16_calls):
    xs, ws, strides, padding = CONVOLUTIONS_3D[case]
    x, w = _bf16(rng, xs), _bf16(rng, ws)
    s5 = [1, *strides, 1]

    def conv(x, w):
        return tf.nn.conv3d(x, w, s5, padding)
    g = _bf16(rng, conv(x, w).shape)
    fns = {"Conv3D": (conv, (x, w)),
           "Conv3DBackpropInputV2": (lambda w, g: tf.raw_ops.Conv3DBackpropInputV2(
               input_sizes=list(xs), filter=w, out_backprop=g, strides=s5, padding=padding), (w, g)),
           "Conv3DBackpropFilterV2": (lambda x, g: tf.raw_ops.Conv3DBackpropFilterV2(
               input=x, filter_sizes=list(ws), out_backprop=g, strides=s5, padding=padding), (x, g))}
    for what, (fn, args) in fns.items():
        f = tfjit.function(fn, jit_compile=True)
        text = _optimized(f, *args)
        calls = [line for line in text.splitlines() if re.search(r" convolution-3d[-a-z]*\(", line)]
        # (a small input gradient runs as 2-D taps, lower/conv3d.py: a 2-D bf16 call then)
        assert any("= bf16[" in line and " convolution" in line for line in text.splitlines()), \
            (what, text)
        assert all("= bf16[" in c for c in calls), (what, calls)
        exact = _f32_rounded(fn, *args)
        for _ in range(3):
            got = f(*args).numpy()
            _one_rounding_apart(got, exact, what)
        want = tf.function(fn)(*args).numpy().astype(np.float32)
        assert_matches(got.astype(np.float32), want, rtol=5e-2,
                       atol=5e-2 * float(np.max(np.abs(want))), what=what)
        # the host runner (no launch: linalg.cc's f32 call on widened operands) and the
        # interpreter agree with it
        compiled = f.compiled(*args)
        values = [a.numpy() for a in args]
        (host_got,) = host.run_compiled(compiled, values)
        (interp_got,) = interp.evaluate(parse_module(compiled.module_after), values)
        _one_rounding_apart(host_got, exact, what)
        _one_rounding_apart(interp_got, exact, what)


# (x, filter, stride, padding, activation, reader): the folded call's result read by a
# depthwise convolution's taps (SAME: its padded copy), by another bf16 convolution, or
# as the output; a prime channel count; a stride past the window
BIAS_FOLDS = [
    ((8, 24, 24, 32), (1, 1, 32, 32), 1, "VALID", "relu", "depthwise"),
    ((4, 33, 35, 29), (3, 3, 29, 31), 2, "SAME", "relu6", "conv"),
    ((3, 16, 16, 64), (3, 3, 64, 64), 1, "SAME", "none", "conv"),
    ((8, 64, 64, 16), (2, 2, 16, 64), 3, "VALID", "relu", "output"),
    ((8, 24, 24, 32), (1, 1, 32, 32), 1, "VALID", "min6", "depthwise"),
]                   # (each convolution at least BF16_CALL_FLOPS)


def _activation(kind, y):
    """("min6": Relu6 as two bf16 ops, each rounded: a ReLU, then a min with 6)"""
    return {"none": y, "relu": tf.nn.relu(y), "relu6": tf.nn.relu6(y),
            "min6": tf.minimum(tf.nn.relu(y), tf.cast(6, y.dtype))}[kind]


@pytest.mark.parametrize("case", range(len(BIAS_FOLDS)))
def test_a_bf16_convolutions_bias_and_activation_fold_into_its_call(case, rng, bf16_calls):
    """Keras's bf16 Conv2D(activation=...): the bias and activation join the bf16 call
    (passes/epilogue.py), summed, added and clamped in f32 and rounded once; NaN, inf
    and -0 biases keep TF's positions (this process's TF runs no oneDNN: its Relu keeps
    a NaN, and so does the call's kernel here)."""
    xs, ws, stride, padding, kind, reader = BIAS_FOLDS[case]
    x, w = _bf16(rng, xs), _bf16(rng, ws)
    bias = rng.standard_normal(ws[-1]).astype(np.float32)
    bias[:3] = [np.nan, -np.inf, -0.0]
    b = tf.cast(tf.constant(bias), tf.bfloat16)
    dw = _bf16(rng, (5, 5, ws[-1], 1))
    w2 = _bf16(rng, (3, 3, ws[-1], 32))

    def layer(x, w, b):
        return _activation(kind, tf.nn.bias_add(tf.nn.conv2d(x, w, stride, padding), b))

    def fn(x, w, b, dw, w2):
        y = layer(x, w, b)
        if reader == "depthwise":
            return tf.nn.depthwise_conv2d(y, dw, [1, 2, 2, 1], "SAME")
        if reader == "conv":
            return tf.nn.conv2d(y, w2, 1, "SAME")
        return y
    args = (x, w, b, dw, w2)
    f = tfjit.function(fn, jit_compile=True)
    text = _optimized(f, *args)
    folded = [line for line in text.splitlines() if " convolution-bias(" in line]
    fused = "relu6" if kind == "min6" else kind
    assert len(folded) == 1 and "= bf16[" in folded[0] and f"activation={fused}" in folded[0], text
    # the layer alone: one rounding of activation(f32 sum + bias)
    g = tfjit.function(layer, jit_compile=True)
    assert " convolution-bias(" in _optimized(g, x, w, b)
    exact = _f32_rounded(layer, x, w, b)
    for _ in range(3):
        _one_rounding_apart(g(x, w, b).numpy(), exact, "layer")
    got = f(*args).numpy().astype(np.float32)
    want = tf.function(fn)(*args).numpy().astype(np.float32)
    finite = np.isfinite(want)
    scale = float(np.max(np.abs(want[finite]))) if finite.any() else 1.0
    assert_matches(got, want, rtol=5e-2, atol=5e-2 * scale, what=reader)


def test_what_the_bf16_bias_fold_leaves(rng, bf16_calls):
    """An f32 bias (the sum not Keras's bf16 one), a pre-activation value read twice (the
    bias folds, the ReLU stays), a bias read by one elementwise op (fusion computes it
    there): the IR says so, and the results are TF's."""
    x, w = _bf16(rng, (2, 16, 16, 32)), _bf16(rng, (3, 3, 32, 32))
    b = _bf16(rng, (32,))
    bias32 = tf.constant(rng.standard_normal(32).astype(np.float32))

    def conv(x, w):
        return tf.nn.conv2d(x, w, 1, "SAME")
    cases = {
        "f32 bias": (lambda x, w, b: tf.nn.conv2d(
            tf.cast(tf.cast(conv(x, w), tf.float32) + bias32, tf.bfloat16), w, 1, "SAME"), None),
        "pre-activation read twice": (lambda x, w, b: [
            tf.nn.conv2d(tf.nn.relu(conv(x, w) + b), w, 1, "SAME"), conv(x, w) + b], "none"),
        "one elementwise reader": (lambda x, w, b: tf.exp(tf.nn.relu(conv(x, w) + b)), None),
    }
    for what, (fn, fold) in cases.items():
        f = tfjit.function(fn, jit_compile=True)
        text = _optimized(f, x, w, b)
        folded = [line for line in text.splitlines() if " convolution-bias(" in line]
        assert (not folded) if fold is None else (
            len(folded) == 1 and f"activation={fold}" in folded[0]), (what, text)
        for got, want in zip(tf.nest.flatten(f(x, w, b)), tf.nest.flatten(tf.function(fn)(x, w, b))):
            g, t = got.numpy().astype(np.float32), want.numpy().astype(np.float32)
            assert_matches(g, t, rtol=5e-2, atol=5e-2 * float(np.max(np.abs(t))), what=what)


def test_what_is_not_rewritten(rng, bf16_calls):
    a, b = _bf16(rng, (256, 256)), _bf16(rng, (256, 64))
    cases = {
        # the f32 product read as f32 (no rounding to bf16 after it)
        "f32 result": lambda a, b: tf.matmul(tf.cast(a, tf.float32), tf.cast(b, tf.float32)),
        # one side f32
        "mixed operands": lambda a, b: tf.cast(tf.matmul(tf.cast(a, tf.float32), tf.ones((256, 64))),
                                               tf.bfloat16),
        # f16 stays an f32 call between converts
        "f16": lambda a, b: tf.matmul(tf.cast(a, tf.float16), tf.cast(b, tf.float16)),
        # a vector product is a reduction (DotsAsReductions), in f32
        "vector": lambda a, b: tf.matmul(a, b[:, :1]),
        # under BF16_CALL_FLOPS: converts fused with their producers and readers
        "small": lambda a, b: tf.matmul(a[:64], b),
        # a depthwise convolution is a loop kernel (no library call), in f32
        "depthwise": lambda a, b: tf.nn.depthwise_conv2d(
            tf.reshape(a, (4, 32, 32, 16)), tf.reshape(b[:9, :16], (3, 3, 16, 1)), [1, 1, 1, 1],
            "SAME"),
    }
    for what, fn in cases.items():
        f = tfjit.function(fn, jit_compile=True)
        text = _optimized(f, a, b)
        assert not re.search(r"= bf16\[.* (dot|convolution[-a-z]*)\(", text), (what, text)
        got, want = f(a, b).numpy(), tf.function(fn)(a, b).numpy().astype(np.float32)
        assert_matches(got.astype(np.float32), want, rtol=BF16_TOL,
                       atol=BF16_TOL * float(np.max(np.abs(want))), what=what)


def test_the_option_follows_the_target(rng):
    """Without the bf16_calls fixture (this process: TF runs no oneDNN) nothing is
    rewritten; the option is on only for a target with oneDNN and bf16 arithmetic."""
    from tfjit import pipeline
    from tfjit.codegen.target import Target
    a, b = _bf16(rng, (256, 256)), _bf16(rng, (256, 64))
    def fn(a, b):
        with tf.name_scope("option_off"):    # (a graph no other test compiled)
            return tf.matmul(a, b)
    f = tfjit.function(fn, jit_compile=True)
    assert not re.search(r"= bf16\[.* dot\(", _optimized(f, a, b))
    for onednn in (False, True):
        for native in (False, True):
            target = Target("cpu-jit", "", "", runtime_calls=True, onednn=onednn, native_bf16=native)
            assert pipeline.Options.from_flags(target).bf16_calls == (onednn and native)
    assert not pipeline.Options.from_flags().bf16_calls


def _attention(keras):
    inputs = keras.Input((64, 128))
    h = keras.layers.MultiHeadAttention(4, 32)(inputs, inputs)
    h = keras.layers.Dense(256, activation="relu")(h)
    return keras.Model(inputs, keras.layers.Dense(4, dtype="float32")(h)), (4, 64, 128)


def _cnn(keras):
    inputs = keras.Input((24, 24, 16))
    h = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    a = keras.layers.Conv2D(32, 1)(h)            # siblings reading one input
    b = keras.layers.Conv2D(32, 3, padding="same")(h)
    h = keras.layers.Conv2D(32, 3, strides=2)(keras.layers.Concatenate()([a, b]))
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(4, dtype="float32")(h)), (4, 24, 24, 16)


# model -> its bf16 library calls: those of the bf16 layers and their gradients of at
# least BF16_CALL_FLOPS (the attention's projections and Dense, not its per-head
# products; the convolutions but the 1x1 one and its gradients)
KERAS = {"attention": (_attention, 12), "cnn": (_cnn, 8)}


@pytest.mark.parametrize("name", sorted(KERAS))
def test_keras_mixed_bfloat16_layers_and_gradients(name, rng, monkeypatch, bf16_calls):
    import keras
    from tfjit import pipeline
    build, n_bf16 = KERAS[name]
    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        keras.utils.set_random_seed(2)
        model, shape = build(keras)
    finally:
        keras.mixed_precision.set_global_policy(policy)
    x = tf.constant(rng.uniform(-1, 1, shape).astype(np.float32))

    def step(scope):
        def fn(x):
            with tf.name_scope(scope), tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x, training=True) ** 2)
            return [loss] + tape.gradient(loss, model.trainable_variables)
        return fn
    f = tfjit.function(step("rewritten"), jit_compile=True)
    text = _optimized(f, x)
    calls = [line for line in text.splitlines() if re.search(r" (dot|convolution[-a-z]*)\(", line)]
    assert sum("= bf16[" in c for c in calls) == n_bf16, text
    got = f(x)
    # without oneDNN the rewrite is the same arithmetic as the converts around an f32
    # call: the step compiled without the pass, up to the f32 kernels' last bits (the
    # measured calls' choices) and the bf16 roundings they move, carried through the step
    monkeypatch.setattr(pipeline.Options, "from_flags", staticmethod(
        lambda target=None: pipeline.Options(verify=True, bf16_calls=False)))
    before = tfjit.function(step("converts"), jit_compile=True)
    assert not any(re.search(r"= bf16\[.* (dot|convolution[-a-z]*)\(", line)
                   for line in _optimized(before, x).splitlines())
    for g, b in zip(got, before(x)):
        scale = float(np.max(np.abs(b.numpy()))) or 1.0
        assert_matches(g.numpy(), b.numpy(), rtol=2e-2, atol=2e-2 * scale)
    # and the loss is TF's within bf16 rounding (the gradients' small entries are sums
    # of cancelling bf16 terms: TF's Eigen kernels round them elsewhere)
    assert_matches(got[0].numpy(), step("tf")(x)[0].numpy(), rtol=5e-2, atol=0)


def test_the_host_runner_against_the_interpreter(rng, bf16_calls):
    # no launch: the operands widened, linalg.cc's f32 call, one rounding
    x, w = _bf16(rng, (2, 31, 30, 32)), _bf16(rng, (3, 3, 32, 32))
    g = _bf16(rng, (2, 16, 15, 32))
    cases = {
        "dot": (lambda a, b: tf.nn.relu(tf.matmul(a, b)), (_bf16(rng, (2, 128, 130)), _bf16(rng, (2, 130, 130)))),
        "conv": (lambda x, w: tf.nn.conv2d(x, w, 2, "SAME"), (x, w)),
        "input gradient": (lambda w, g: tf.raw_ops.Conv2DBackpropInput(
            input_sizes=[2, 31, 30, 32], filter=w, out_backprop=g, strides=[1, 2, 2, 1], padding="SAME"),
            (w, g)),
        "filter gradient": (lambda x, g: tf.raw_ops.Conv2DBackpropFilter(
            input=x, filter_sizes=[3, 3, 32, 32], out_backprop=g, strides=[1, 2, 2, 1], padding="SAME"),
            (x, g)),
        "conv, bias and ReLU6": (lambda x, w, b: tf.nn.relu6(tf.nn.conv2d(x, w, 2, "SAME") + b),
                                 (x, w, _bf16(rng, (32,)))),
    }
    for what, (fn, args) in cases.items():
        compiled = tfjit.function(fn, jit_compile=True).compiled(*args)
        assert re.search(r"= bf16\[.* (dot|convolution[-a-z]*)\(", compiled.module_after), what
        values = [a.numpy() for a in args]
        (got,) = host.run_compiled(compiled, values)
        (want,) = interp.evaluate(parse_module(compiled.module_after), values)
        _one_rounding_apart(got, want, what)
        _one_rounding_apart(got, _f32_rounded(fn, *args), what)


def test_the_pass_on_ir_text_and_the_builder():
    text = textwrap.dedent("""\
        module m {
          %p0 = bf16[256,256] parameter(0)
          %p1 = bf16[256,64] parameter(1)
          %c0 = f32[256,256] convert(%p0)
          %c1 = f32[256,64] convert(%p1)
          %d = f32[256,64] dot(%c0, %c1), transpose_lhs=0, transpose_rhs=0
          %r = bf16[256,64] convert(%d)
          ROOT (%r)
        }
        """)
    m = parse_module(text)
    rng = np.random.default_rng(0)
    import ml_dtypes
    values = [rng.standard_normal(s).astype(ml_dtypes.bfloat16) for s in ((256, 256), (256, 64))]
    (before,) = interp.evaluate(m, values)
    assert Bf16Products().run(m)
    out = module_str(m)
    assert "bf16[256,64] dot(%p0, %p1)" in out, out
    (after,) = interp.evaluate(parse_module(out), values)
    assert np.array_equal(np.asarray(before).view(np.uint16), np.asarray(after).view(np.uint16))
    # the dot read by something else besides the convert: left alone; a smaller one too
    assert not Bf16Products().run(parse_module(text.replace("ROOT (%r)", "ROOT (%r, %d)")))
    small = text.replace("[256,256]", "[64,256]").replace("f32[256,64] dot", "f32[64,64] dot") \
        .replace("bf16[256,64] convert", "bf16[64,64] convert")
    assert "f32[64,64] dot" in small and not Bf16Products().run(parse_module(small))
    b = Module("b")
    with pytest.raises(IRError, match="f32/f64/bf16"):
        b.dot(b.parameter(dt.F16, (2, 2)), b.parameter(dt.F16, (2, 2)))


ONEDNN_CHILD = textwrap.dedent("""
    import re
    import numpy as np
    import tensorflow as tf
    import tfjit
    rng = np.random.default_rng(4)
    a = tf.cast(tf.constant(rng.standard_normal((4, 128, 128)).astype(np.float32)), tf.bfloat16)
    b = tf.cast(tf.constant(rng.standard_normal((4, 128, 128)).astype(np.float32)), tf.bfloat16)
    x = tf.cast(tf.constant(rng.standard_normal((4, 24, 24, 16)).astype(np.float32)), tf.bfloat16)
    w = tf.cast(tf.constant(rng.standard_normal((3, 3, 16, 16)).astype(np.float32)), tf.bfloat16)
    bias = tf.cast(tf.constant(rng.standard_normal(16).astype(np.float32)), tf.bfloat16)
    fns = [(lambda a, b: tf.matmul(a, b) * tf.cast(2.0, tf.bfloat16), (a, b)),
           (lambda x, w: tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME")), (x, w)),
           (lambda x, w, b: tf.nn.conv2d(tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME") + b), w, 1,
                                         "SAME"), (x, w, bias)),
           (lambda x, w: tf.nn.conv3d(x, w, [1, 1, 1, 1, 1], "SAME"),
            (tf.reshape(x, (4, 4, 6, 24, 16)), tf.reshape(w, (3, 3, 1, 16, 16))))]
    for fn, args in fns:
        f = tfjit.function(fn, jit_compile=True)
        want = tf.function(fn)(*args).numpy().astype(np.float32)
        for _ in range(3):
            got = f(*args).numpy().astype(np.float32)
            np.testing.assert_allclose(got, want, rtol=2e-2, atol=5e-2)
        text = f.experimental_get_compiler_ir(*args)(stage="optimized_ir")
        print("bf16 calls:", any(re.search(r" (dot|convolution[-a-z0-9]*)\\(", l)
                                 for l in text.splitlines() if "= bf16[" in l))
        print([n for fu in f.compiled(*args).fusions for n in fu.notes if "runs TF's" in n])
""")


def test_with_onednn_the_calls_are_onednns_bf16_kernels_where_the_cpu_multiplies_bf16(tmp_path):
    """A child process where TF runs oneDNN: on a CPU with bf16 arithmetic (this one's
    compile-server features) the calls are oneDNN's bf16 kernels, elsewhere f32 calls
    between converts; either way they match that TF's graph mode."""
    from tfjit import pipeline
    native = pipeline.jit_target().native_bf16
    script = tmp_path / "child.py"
    script.write_text(ONEDNN_CHILD)
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    calls = [line for line in proc.stdout.splitlines() if line.startswith("bf16 calls:")]
    assert calls == [f"bf16 calls: {native}"] * 4, proc.stdout
    if native:
        for op in ("BatchMatMulV2", "Conv2D", "_FusedConv2D", "Conv3D"):
            assert f"runs TF's oneDNN {op} kernel: TF runs oneDNN's kernels" in proc.stdout, proc.stdout


@pytest.mark.parametrize("onednn", [False, True])
@pytest.mark.parametrize("native", [False, True])
def test_the_kernel_choice_for_bf16_calls(onednn, native):
    """Both sides of the run-time decision, whatever this CPU is (codegen/library.py)."""
    from tfjit.codegen import library
    m = Module("k")
    x, w = m.parameter(dt.BF16, (8, 32, 32, 16)), m.parameter(dt.BF16, (3, 3, 16, 32))
    calls = [m.dot(m.parameter(dt.BF16, (256, 256)), m.parameter(dt.BF16, (256, 256))),
             m.convolution(x, w, (1, 1), (1, 1), (1, 1, 1, 1))]      # 37.7M multiply-adds
    wide = m.convolution(x, w, (1, 1), (1, 1), (3, 3, 0, 0))     # padding past the window
    # under ONEDNN_BF16_FLOPS: a batched [16,10,32]x[16,32,16] product, a small convolution
    small = [m.dot(m.parameter(dt.BF16, (16, 10, 32)), m.parameter(dt.BF16, (16, 32, 16))),
             m.convolution(m.parameter(dt.BF16, (4, 8, 8, 16)), m.parameter(dt.BF16, (3, 3, 16, 16)),
                           (1, 1), (1, 1), (1, 1, 1, 1))]
    # a folded bias and ReLU (passes/epilogue.py): oneDNN's NaN-to-0 ReLU only where TF's
    # graph mode runs oneDNN
    calls.append(m.convolution_bias(x, w, m.parameter(dt.BF16, (32,)), (1, 1), (1, 1), (1, 1, 1, 1),
                                    "relu"))
    # a 3-D convolution and its input gradient (SAME padding: TF's 3-D ops take no other)
    x3, w3 = m.parameter(dt.BF16, (4, 8, 16, 16, 16)), m.parameter(dt.BF16, (3, 3, 3, 16, 16))
    calls.append(m.convolution_3d(Op.CONV3D, x3, w3, (1, 1, 1), (1, 1, 1, 1, 1, 1)))
    calls.append(m.convolution_3d(Op.CONV3D_BACKPROP_INPUT, w3, m.parameter(dt.BF16, calls[-1].shape),
                                  (1, 1, 1), (1, 1, 1, 1, 1, 1), shape=x3.shape))
    for call in calls + [wide] + small:
        family, why = library.tf_kernel(call, onednn, native)
        if onednn and native and call in calls:
            assert family == library.ONEDNN, why
        elif call.op is Op.CONV_BIAS and not onednn:
            assert family == library.MEASURED_WITHOUT_ONEDNN and why.startswith("in f32"), why
        else:
            assert family == library.MEASURED and why.startswith("in f32"), why


def test_a_rounding_read_at_many_taps_is_computed_once(rng):
    """Keras's Rescaling then a bilinear Resizing, and a depthwise convolution after a
    bf16 scale and shift (a batch norm's), under mixed_bfloat16: each rounding read at
    many taps gets a kernel of its own (passes/windows.py duplicated_rounding); the
    results are TF's (the resize bit for bit: its arithmetic is TF's kernel's)."""
    x = tf.constant(rng.uniform(0, 255, (3, 17, 23, 3)).astype(np.float32))
    y = _bf16(rng, (2, 13, 11, 7))
    scale, shift, w = _bf16(rng, (7,)), _bf16(rng, (7,)), _bf16(rng, (3, 3, 7, 1))

    def resize(x):
        return tf.image.resize(tf.cast(x, tf.bfloat16) * tf.cast(1 / 255, tf.bfloat16), (29, 37))

    def depthwise(y, scale, shift, w):
        return tf.nn.depthwise_conv2d(tf.nn.relu6(y * scale + shift), w, [1, 1, 1, 1], "SAME")
    for fn, args in ((resize, (x,)), (depthwise, (y, scale, shift, w))):
        f = tfjit.function(fn, jit_compile=True)
        notes = [n for k in f.compiled(*args).fusions for n in k.notes]
        assert any("a rounding to bf16 that, fused, would be computed" in n for n in notes), notes
        got, want = f(*args).numpy(), tf.function(fn)(*args).numpy()
        if fn is resize:
            np.testing.assert_array_equal(got, want)
        else:
            assert_matches(got.astype(np.float32), want.astype(np.float32), rtol=2e-2,
                           atol=2e-2 * float(np.max(np.abs(want.astype(np.float32)))))
