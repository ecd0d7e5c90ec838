"""Keras 3 layers and their gradients under tfjit.function(jit_compile=True).

Each layer runs through ``stateless_call`` (its variables enter as tensors:
must-compile functions take no captured variables), inside a GradientTape;
the function returns the layer's output, its updated non-trainable state
(BatchNormalization's moving statistics) and the gradients with respect to
the input and every trainable weight.  TF's executor runs the same function
as the oracle.  No Dense/Conv layers: these are the NN ops of issue 4.
"""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

ACTIVATIONS = ["relu", "gelu", "elu", "selu", "softplus", "sigmoid", "tanh", "swish", "leaky_relu", "relu6",
               "softmax", "log_softmax", "hard_sigmoid", "mish", "silu"]

LAYERS = {
    **{f"Activation({a})": (lambda a=a: keras.layers.Activation(a), (4, 6), {}) for a in ACTIVATIONS},
    "gelu(approximate)": (lambda: keras.layers.Activation(lambda x: keras.activations.gelu(x, approximate=True)),
                          (4, 6), {}),
    "LayerNormalization": (lambda: keras.layers.LayerNormalization(), (4, 6), {}),
    "LayerNormalization(axis=[1,2])": (lambda: keras.layers.LayerNormalization(axis=[1, 2]), (2, 3, 5), {}),
    "BatchNormalization(training)": (lambda: keras.layers.BatchNormalization(), (2, 5, 4, 3), {"training": True}),
    "BatchNormalization(inference)": (lambda: keras.layers.BatchNormalization(), (2, 5, 4, 3),
                                      {"training": False}),
    "BatchNormalization(axis=1, training)": (lambda: keras.layers.BatchNormalization(axis=1), (2, 3, 4, 5),
                                             {"training": True}),
    "MaxPooling2D(2)": (lambda: keras.layers.MaxPooling2D(2), (2, 8, 7, 3), {}),
    "MaxPooling2D(3, 2, same)": (lambda: keras.layers.MaxPooling2D(3, 2, padding="same"), (2, 8, 7, 3), {}),
    "AveragePooling2D(2)": (lambda: keras.layers.AveragePooling2D(2), (2, 8, 7, 3), {}),
    "AveragePooling2D(3, 1, same)": (lambda: keras.layers.AveragePooling2D(3, 1, padding="same"), (2, 8, 7, 3),
                                     {}),
    "GlobalAveragePooling2D": (lambda: keras.layers.GlobalAveragePooling2D(), (2, 5, 4, 3), {}),
    "GlobalMaxPooling2D": (lambda: keras.layers.GlobalMaxPooling2D(), (2, 5, 4, 3), {}),
    "Dropout(inference)": (lambda: keras.layers.Dropout(0.5), (4, 6), {"training": False}),
    "ZeroPadding2D": (lambda: keras.layers.ZeroPadding2D(((1, 2), (0, 1))), (2, 3, 4, 2), {}),
    "Cropping2D": (lambda: keras.layers.Cropping2D(((1, 0), (1, 2))), (2, 5, 6, 2), {}),
    "Flatten": (lambda: keras.layers.Flatten(), (2, 3, 4), {}),
    "UpSampling2D": (lambda: keras.layers.UpSampling2D(2), (2, 3, 4, 2), {}),
}


def layer_step(layer, kwargs):
    def step(x, trainable, non_trainable):
        with tf.GradientTape() as tape:
            tape.watch([x, *trainable])
            y, state = layer.stateless_call(list(trainable), list(non_trainable), x, **kwargs)
            weights = tf.reshape(tf.range(1.0, 1.0 + tf.cast(tf.size(y), tf.float32)), tf.shape(y))
            loss = tf.reduce_sum(y * y * 0.5 + y * tf.sin(weights))
        return {"y": y, "state": list(state), "grads": tape.gradient(loss, [x, *trainable])}
    return step


def _compare(got, want, name, rtol=1e-5, atol=1e-5):
    got, want = tf.nest.flatten(got), tf.nest.flatten(want)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_matches(g.numpy(), w.numpy(), rtol=rtol, atol=atol, what=f"{name}: flat output {k}")


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_and_gradients(name):
    make, shape, kwargs = LAYERS[name]
    layer = make()
    layer.build(shape)
    rng = np.random.default_rng(len(name))
    x = tf.constant((rng.normal(size=shape) * 2).astype(np.float32))
    trainable = [tf.constant(rng.normal(size=v.shape).astype(np.float32)) for v in layer.trainable_variables]
    non_trainable = [tf.constant(np.abs(rng.normal(size=v.shape)).astype(np.float32))
                     for v in layer.non_trainable_variables]
    step = layer_step(layer, kwargs)
    got = tfjit.function(step, jit_compile=True)(x, trainable, non_trainable)
    want = tf.function(step)(x, trainable, non_trainable)
    _compare(got, want, name)


def test_training_step_without_dense_or_conv():
    """A small model's forward, loss and gradients in one compiled function:
    LayerNorm -> gelu -> MaxPool -> BatchNorm(training) -> GAP -> logits via
    a fixed projection (elementwise), sparse cross-entropy from logits."""
    norm = keras.layers.LayerNormalization(axis=-1)
    pool = keras.layers.MaxPooling2D(2)
    bn = keras.layers.BatchNormalization()
    gap = keras.layers.GlobalAveragePooling2D()
    shape = (4, 8, 8, 5)
    norm.build(shape)
    bn.build((4, 4, 4, 5))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=shape).astype(np.float32))
    labels = tf.constant([0, 4, 2, 1])
    params = [tf.constant(rng.normal(size=v.shape).astype(np.float32))
              for v in norm.trainable_variables + bn.trainable_variables]
    stats = [tf.constant(np.ones(v.shape, np.float32)) for v in bn.non_trainable_variables]

    def step(x, labels, params, stats):
        with tf.GradientTape() as tape:
            tape.watch(params)
            h, _ = norm.stateless_call(params[:2], [], x)
            h = pool(keras.activations.gelu(h))
            h, new_stats = bn.stateless_call(params[2:], stats, h, training=True)
            logits = gap(h) * tf.constant([1.0, -2.0, 0.5, 3.0, -1.0])
            loss = loss_fn(labels, logits)
        return loss, new_stats, tape.gradient(loss, params)
    got = tfjit.function(step, jit_compile=True)(x, labels, params, stats)
    want = tf.function(step)(x, labels, params, stats)
    _compare(got, want, "training step", rtol=1e-4, atol=1e-5)
