"""Function calls inside a compiled function (PartitionedCall/StatefulPartitionedCall)
are inlined, and grouped Conv2D with one group per channel compiles as a depthwise
convolution: both stopped ConvNeXtTiny (a Keras layer's inner tf.function, and
Keras 3's grouped convolution, which it runs through XLA)."""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

rng = np.random.default_rng(3)
X = tf.constant(rng.standard_normal((4, 5)).astype(np.float32))
W = tf.constant(rng.standard_normal((5, 3)).astype(np.float32))


@tf.function
def dense_relu(x, w):
    return tf.nn.relu(tf.matmul(x, w))


@tf.function
def twice_nested(x, w):
    return dense_relu(x, w) * 2.0 + dense_relu(x * -1.0, w)


def calls(x, w):
    return twice_nested(x, w) - 1.0, tf.reduce_sum(dense_relu(x, w))


def calls_in_a_loop(x, w):
    def body(i, acc):
        return i + 1, acc + dense_relu(x * tf.cast(i, tf.float32), w)
    return tf.while_loop(lambda i, acc: i < 3, body, (0, tf.zeros([4, 3])))[1]


@pytest.mark.parametrize("fn", [calls, calls_in_a_loop])
def test_calls_are_inlined_and_match_tf(fn):
    f = tfjit.function(fn, jit_compile=True)
    got, want = f(X, W), tf.function(fn)(X, W)
    for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
        assert_matches(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    assert "PartitionedCall" in str(tf.function(fn).get_concrete_function(X, W).graph.as_graph_def())
    assert f.compiled(X, W).num_kernels >= 1


def test_a_call_that_assigns_a_variable_assigns_the_callers():
    v, u = tf.Variable(tf.ones([3])), tf.Variable(tf.ones([3]))

    def make(var):
        @tf.function
        def bump(x):
            var.assign_add(tf.reduce_sum(x, 0)[:3])
            return var.read_value() * 2.0

        return lambda x: bump(x) + 1.0

    got = tfjit.function(make(v), jit_compile=True)(X)
    want = tf.function(make(u))(X)
    assert_matches(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    assert_matches(v.numpy(), u.numpy(), rtol=1e-6, atol=1e-6)


def test_a_call_of_an_uncompilable_function_names_the_op_inside():
    @tf.function
    def inner(x):
        return tf.unique(tf.reshape(x, [-1]))[0]

    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Unique"):
        tfjit.function(lambda x: inner(x) * 2.0, jit_compile=True)(X)


# -- grouped convolution: one group per input channel -------------------------------------

@pytest.mark.parametrize("mult, strides, padding", [(1, 1, "SAME"), (2, 2, "VALID"), (3, 1, "VALID")])
def test_grouped_conv2d_with_a_group_per_channel_matches_xla(mult, strides, padding):
    # TF's CPU kernel refuses grouped Conv2D (Keras 3 runs it through XLA): XLA is the oracle
    x = tf.constant(rng.standard_normal((2, 9, 9, 4)).astype(np.float32))
    w = tf.constant(rng.standard_normal((3, 3, 1, 4 * mult)).astype(np.float32))

    def conv(x, w):
        return tf.raw_ops.Conv2D(input=x, filter=w, strides=[1, strides, strides, 1], padding=padding)

    got = tfjit.function(conv, jit_compile=True)(x, w)
    want = tf.function(conv, jit_compile=True)(x, w)
    assert_matches(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_keras_grouped_conv_layer_trains_like_tensorflow():
    def build():
        keras.utils.set_random_seed(4)
        return keras.Sequential([keras.Input((8, 8, 6)), keras.layers.Conv2D(6, 3, groups=6),
                                 keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2)])
    x = rng.standard_normal((16, 8, 8, 6)).astype(np.float32)
    y = rng.integers(0, 2, 16).astype(np.int32)
    losses = {}
    for jit in (False, True):
        model = build()
        model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=jit,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        losses[jit] = model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False).history["loss"]
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-4)
    steps = tfjit.keras.step_functions(model)
    assert steps["train"].experimental_get_compile_count() >= 1
