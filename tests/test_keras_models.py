"""Whole Keras models trained with model.compile(jit_compile=True) under tfjit (issue 4).

Each model is built twice from the same seed and trained, evaluated and run for
predictions once with tfjit and once with ``jit_compile=False`` (TensorFlow's
executor); losses, metrics, weights and predictions must agree within 1e-3
relative.  Batches of 16 from 64 examples: every step's shapes are static, so each
Keras step is one compiled cluster.  Dropout draws TF's own Philox mask, so the
CNN's training-mode losses match too.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import keras

import tfjit
from oracle import assert_matches
from test_keras import assert_same_training, assert_steps_compiled, run

L = keras.layers
N, CLASSES = 64, 3


def mlp():
    return keras.Sequential([keras.Input((20,)), L.Dense(32, activation="relu"),
                             L.Dense(32, activation="relu"), L.Dense(CLASSES)])


def cnn():
    return keras.Sequential([
        # no bias before BatchNormalization: its gradient is rounding noise, which Adam
        # turns into steps of the learning rate's size
        keras.Input((12, 12, 1)), L.Conv2D(8, 3, padding="same", use_bias=False),
        L.BatchNormalization(),
        L.Activation("relu"), L.MaxPooling2D(), L.Dropout(0.25), L.Conv2D(16, 3),
        L.GlobalAveragePooling2D(), L.Dense(CLASSES)])


def transformer():
    tokens = keras.Input((10,), dtype="int32")
    h = L.Embedding(50, 16)(tokens)
    h = L.LayerNormalization()(h + L.MultiHeadAttention(num_heads=2, key_dim=8)(h, h))
    ffn = L.Dense(16)(L.Dense(32, activation="gelu")(h))
    h = L.LayerNormalization()(h + ffn)
    return keras.Model(tokens, L.Dense(CLASSES)(L.GlobalAveragePooling1D()(h)))


def lstm():
    return keras.Sequential([keras.Input((7, 3)), L.LSTM(16), L.Dense(CLASSES)])


_rng = np.random.default_rng(0)
INPUTS = {
    "mlp": _rng.standard_normal((N, 20)).astype(np.float32),
    "cnn": _rng.standard_normal((N, 12, 12, 1)).astype(np.float32),
    "transformer": _rng.integers(0, 50, (N, 10)).astype(np.int32),
    "lstm": _rng.standard_normal((N, 7, 3)).astype(np.float32),
}
LABELS = _rng.integers(0, CLASSES, N).astype(np.int32)
MODELS = {"mlp": mlp, "cnn": cnn, "transformer": transformer, "lstm": lstm}


def compiled_model(name, jit_compile):
    keras.utils.set_random_seed(0)
    model = MODELS[name]()
    model.compile(optimizer="adam", metrics=["accuracy"], jit_compile=jit_compile,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_trains_evaluates_and_predicts_like_tensorflow(name):
    x, y = INPUTS[name], LABELS
    jit = compiled_model(name, True)
    got = run(jit, x, y, batch_size=16, epochs=3)
    want = run(compiled_model(name, False), x, y, batch_size=16, epochs=3)
    assert_same_training(got, want)
    assert want["fit"]["loss"][-1] < want["fit"]["loss"][0]      # it does learn
    for kind, step in assert_steps_compiled(jit).items():        # one cluster per step
        assert step.experimental_get_compile_count() == 1, kind


# -- the seed's train_mnist: forward, tape and apply_gradients in one compiled step -----

IMAGE_SIZE, NUM_CLASSES, BATCH = 28 * 28, 10, 100


def mnist_step(jit: bool):
    """The XLA tutorial's step (tensorflow.org/xla/tutorials/jit_compile), verbatim but
    for the decorator; a fresh layer and optimizer from the same seed."""
    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(NUM_CLASSES)
    optimizer = keras.optimizers.Adam()

    def cast(images, labels):
        images = tf.cast(tf.reshape(images, [-1, IMAGE_SIZE]), tf.float32)
        labels = tf.cast(labels, tf.int64)
        return images, labels

    def train_mnist(images, labels):
        images, labels = cast(images, labels)
        with tf.GradientTape() as tape:
            predicted_labels = layer(images)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                logits=predicted_labels, labels=labels))
        layer_variables = layer.trainable_variables
        grads = tape.gradient(loss, layer_variables)
        optimizer.apply_gradients(zip(grads, layer_variables))
        return loss

    step = (tfjit.function(train_mnist, jit_compile=True) if jit
            else tf.function(train_mnist))
    return step, layer


def test_seed_train_mnist_step_equals_tf_function():
    rng = np.random.default_rng(7)      # MNIST-shaped batches: uint8 pixels and labels
    batches = [(rng.integers(0, 256, (BATCH, 28, 28), dtype=np.uint8),
                rng.integers(0, NUM_CLASSES, BATCH, dtype=np.uint8)) for _ in range(5)]
    (jit, jit_layer), (ref, ref_layer) = mnist_step(True), mnist_step(False)
    for k, (images, labels) in enumerate(batches):
        assert_matches(jit(images, labels).numpy(), ref(images, labels).numpy(), rtol=1e-3,
                       atol=1e-5, what=f"loss of step {k}")
    for got, want in zip(jit_layer.weights, ref_layer.weights):
        assert_matches(got.numpy(), want.numpy(), rtol=1e-3, atol=1e-5, what=got.name)
    assert jit.experimental_get_compile_count() == 1
    compiled = jit.compiled(*batches[0])            # the whole step: matmul, xent, Adam
    assert "dot(" in compiled.module_after and compiled.num_kernels >= 2
