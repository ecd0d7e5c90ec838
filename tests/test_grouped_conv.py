"""Grouped 2-D convolutions (Keras's ``Conv2D(groups=G)``: input depth G times the
filter's) and their gradients, compiled by tfjit against TF's executor, whose CPU
kernels run them: Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter (lower/conv.py
``_per_group``: one library call per group), and grouped Conv3D with its gradients.

Geometries: 2 and 4 groups, SAME/VALID, strides, dilation (forward), 1x1, one output
channel per group, a prime number of channels per group, a batch of 1; f32, f64 and
bf16; a Keras model's train steps.  TF's reference gradient kernels (the tests run TF
with oneDNN off) refuse grouped shapes, so the gradients' oracle is TF's executor on
the same convolution with a block-diagonal filter.  Dilated grouped gradients are
refused with the op named.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from test_ops import NP_DTYPES, Case, check, params

R = tf.raw_ops
TOL = {"f32": (1e-4, 1e-4), "f64": (1e-10, 1e-10), "bf16": (5e-2, 5e-2)}

# name -> (x shape, filter (kh, kw, Cg, O), strides, padding, dilations)
CONV = {
    "2 groups 3x3 SAME": ((2, 7, 6, 8), (3, 3, 4, 6), (1, 1), "SAME", (1, 1)),
    "4 groups VALID strided": ((3, 9, 8, 12), (3, 2, 3, 8), (2, 3), "VALID", (1, 1)),
    "4 groups 1x1": ((2, 5, 5, 8), (1, 1, 2, 4), (1, 1), "VALID", (1, 1)),
    "prime depth per group": ((1, 6, 7, 14), (2, 3, 7, 10), (1, 2), "SAME", (1, 1)),
    "one output per group": ((2, 5, 5, 6), (3, 3, 2, 3), (2, 2), "SAME", (1, 1)),
    "dilated forward": ((2, 9, 9, 8), (3, 3, 4, 4), (1, 1), "SAME", (2, 2)),
}


def _floats(d, shape):
    return lambda rng: rng.uniform(-1, 1, shape).astype(NP_DTYPES[d])


def _conv(strides, padding, dil):
    return lambda x, w: R.Conv2D(input=x, filter=w, strides=[1, *strides, 1], padding=padding,
                                 dilations=[1, *dil, 1])


def _conv_grads(strides, padding, dil):
    def fn(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = _conv(strides, padding, dil)(x, w)
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, [x, w])
    return fn


def _block_diagonal(w, groups):
    """The grouped filter [kh, kw, Cg, O] as an ungrouped one [kh, kw, G * Cg, O] with
    zeros off the groups' blocks."""
    kh, kw, cg, o = w.shape
    og = o // groups
    blocks = [tf.pad(w[..., k * og:(k + 1) * og], [[0, 0], [0, 0], [k * cg, (groups - 1 - k) * cg],
                                                   [0, 0]]) for k in range(groups)]
    return tf.concat(blocks, 3)


def _oracle_grads(strides, padding, dil):
    """TF's executor on the same convolution written ungrouped (a block-diagonal filter):
    TF's reference gradient kernels (oneDNN off, as the tests run TF) refuse grouped
    shapes, and the gradient of the block-diagonal filter's blocks is the grouped one."""
    def fn(x, w):
        groups = x.shape[3] // w.shape[2]
        full = _block_diagonal(w, groups)
        dx, dfull = _conv_grads(strides, padding, dil)(x, full)
        kh, kw, cg, o = w.shape
        og = o // groups
        dw = tf.concat([dfull[:, :, k * cg:(k + 1) * cg, k * og:(k + 1) * og]
                        for k in range(groups)], 3)
        return [dx, dw]
    return tf.function(fn)


def cases() -> list:
    out = []
    for name, (shape, w_shape, s, pad, dil) in CONV.items():
        for d in ("f32", "f64", "bf16") if name == "2 groups 3x3 SAME" else ("f32",):
            make = (lambda rng, d=d, shape=shape, w_shape=w_shape:
                    [_floats(d, shape)(rng), _floats(d, w_shape)(rng)])
            rtol, atol = TOL[d]
            out.append(Case("Conv2D-grouped", d, name, _conv(s, pad, dil), make, tol=(rtol, atol)))
            if dil == (1, 1):
                out.append(Case("Conv2D-grouped-grads", d, name, _conv_grads(s, pad, dil), make,
                                tol=(10 * rtol, 10 * atol), oracle=_oracle_grads(s, pad, dil)))
    return out


# Conv3D: name -> (x shape, filter (kd, kh, kw, Cg, O), strides, padding); Keras runs
# Conv3D(groups=G) through TF's XLA, TF's CPU kernels refuse it
CONV3D = {
    "2 groups 3x3x3 SAME": ((2, 4, 5, 6, 6), (3, 3, 3, 3, 4), (1, 1, 1), "SAME"),
    "4 groups VALID strided": ((1, 5, 6, 5, 8), (2, 3, 1, 2, 8), (2, 1, 2), "VALID"),
}


def _conv3d(strides, padding, grads):
    def conv(x, w):
        return R.Conv3D(input=x, filter=w, strides=[1, *strides, 1], padding=padding)

    def fn(x, w):
        if not grads:
            return conv(x, w)
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            loss = tf.reduce_sum(conv(x, w) ** 2)
        return tape.gradient(loss, [x, w])

    def oracle(x, w):
        groups = x.shape[-1] // w.shape[-2]
        kd, kh, kw, cg, o = w.shape
        full = tf.reshape(_block_diagonal(tf.reshape(w, (kd * kh, kw, cg, o)), groups),
                          (kd, kh, kw, groups * cg, o))
        if not grads:
            return conv(x, full)
        dx, dfull = fn(x, full)
        og = o // groups
        return [dx, tf.concat([dfull[..., k * cg:(k + 1) * cg, k * og:(k + 1) * og]
                               for k in range(groups)], 4)]
    return fn, tf.function(oracle)


def cases3d() -> list:
    out = []
    for name, (shape, w_shape, s, pad) in CONV3D.items():
        make = (lambda rng, shape=shape, w_shape=w_shape:
                [_floats("f32", shape)(rng), _floats("f32", w_shape)(rng)])
        for grads in (False, True):
            fn, oracle = _conv3d(s, pad, grads)
            out.append(Case("Conv3D-grouped" + "-grads" * grads, "f32", name, fn, make,
                            tol=(1e-3, 1e-3) if grads else (1e-4, 1e-4), oracle=oracle))
    return out


@pytest.mark.parametrize("case", params(cases3d()))
def test_grouped_conv3d(case):
    check(case)


@pytest.mark.parametrize("case", params(cases()))
def test_grouped_conv2d(case):
    check(case)


def test_grouped_gradient_ops_called_directly():
    """The two gradient ops as user code writes them (tf.nn.conv2d_transpose is the
    input gradient), each group's slice of the filter's outputs."""
    x_shape, w_shape, g_shape = (2, 8, 8, 6), (3, 3, 2, 9), (2, 4, 4, 9)
    rng = np.random.default_rng(3)
    x, w, g = (tf.constant(rng.uniform(-1, 1, s).astype(np.float32))
               for s in (x_shape, w_shape, g_shape))
    kw = dict(strides=[1, 2, 2, 1], padding="SAME")
    fns = {
        "input": lambda w, g: R.Conv2DBackpropInput(input_sizes=list(x_shape), filter=w,
                                                    out_backprop=g, **kw),
        "filter": lambda x, g: R.Conv2DBackpropFilter(input=x, filter_sizes=list(w_shape),
                                                      out_backprop=g, **kw),
    }
    # TF's reference kernels refuse grouped gradients (oneDNN off): the oracle is the
    # ungrouped op with the block-diagonal filter
    full = _block_diagonal(w, 3)
    want_dx = R.Conv2DBackpropInput(input_sizes=list(x_shape), filter=full, out_backprop=g, **kw)
    want_dfull = R.Conv2DBackpropFilter(input=x, filter_sizes=[3, 3, 6, 9], out_backprop=g, **kw)
    want_dw = tf.concat([want_dfull[:, :, 2 * k:2 * k + 2, 3 * k:3 * k + 3] for k in range(3)], 3)
    for what, fn, args, want in (("input", fns["input"], (w, g), want_dx),
                                 ("filter", fns["filter"], (x, g), want_dw)):
        got = tfjit.function(fn, jit_compile=True)(*args).numpy()
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4, err_msg=what)


def test_one_call_per_group():
    """Four groups, four convolution calls (the lowering, not a block-diagonal filter)."""
    x = tf.constant(np.ones((1, 6, 6, 8), np.float32))
    w = tf.constant(np.ones((3, 3, 2, 8), np.float32))
    f = tfjit.function(lambda x, w: tf.nn.conv2d(x, w, 1, "SAME"), jit_compile=True)
    text = f.experimental_get_compiler_ir(x, w)(stage="optimized_ir")
    assert text.count(" convolution(") == 4, text


def _keras_models(groups):
    """A Keras model with ``Conv2D(groups=...)`` and its oracle: the same model with an
    ungrouped Conv2D whose kernel is the block-diagonal one, kept block-diagonal by a
    constraint (Keras applies it after each update: the zero blocks stay zero, the
    diagonal blocks take the grouped kernel's updates)."""
    import keras

    def make(conv):
        return keras.Sequential([keras.Input((8, 8, 8)), conv, keras.layers.GlobalAveragePooling2D(),
                                 keras.layers.Dense(5)])

    keras.utils.set_random_seed(1)
    grouped = make(keras.layers.Conv2D(12, 3, groups=groups, activation="relu"))
    kernel, bias = grouped.layers[0].get_weights()
    full = _block_diagonal(tf.constant(kernel), groups).numpy()
    mask = _block_diagonal(tf.ones_like(kernel), groups).numpy()

    class BlockDiagonal(keras.constraints.Constraint):
        def __call__(self, w):
            return w * tf.constant(mask, w.dtype)

    oracle = make(keras.layers.Conv2D(12, 3, activation="relu", kernel_constraint=BlockDiagonal()))
    oracle.layers[0].set_weights([full, bias])
    oracle.layers[-1].set_weights(grouped.layers[-1].get_weights())
    for model, jit in ((grouped, True), (oracle, False)):
        model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=jit,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return grouped, oracle


def test_keras_grouped_conv_trains_like_its_ungrouped_twin():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (4, 8, 8, 8)).astype(np.float32)
    y = rng.integers(0, 5, 4).astype(np.int32)
    grouped, oracle = _keras_models(groups=4)
    np.testing.assert_allclose(grouped.predict_on_batch(x), oracle.predict_on_batch(x),
                               rtol=1e-5, atol=1e-6)
    for _ in range(2):
        np.testing.assert_allclose(grouped.train_on_batch(x, y), oracle.train_on_batch(x, y),
                                   rtol=1e-5, atol=1e-6)
    assert sorted(tfjit.keras.step_functions(grouped)) == ["predict", "train"]
    kernel = _block_diagonal(tf.constant(grouped.layers[0].get_weights()[0]), 4).numpy()
    np.testing.assert_allclose(kernel, oracle.layers[0].get_weights()[0], rtol=1e-5, atol=1e-6)
    for g, w in zip(grouped.weights[1:], oracle.weights[1:]):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)


def test_dilated_grouped_gradient_is_refused():
    w = tf.constant(np.ones((3, 3, 2, 4), np.float32))
    g = tf.constant(np.ones((1, 7, 7, 4), np.float32))
    f = tfjit.function(lambda w, g: R.Conv2DBackpropInput(
        input_sizes=[1, 7, 7, 4], filter=w, out_backprop=g, strides=[1, 1, 1, 1], padding="SAME",
        dilations=[1, 2, 2, 1]), jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Conv2DBackpropInput.*dilated grouped gradients"):
        f(w, g)
