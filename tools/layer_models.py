"""One Keras layer kind per small model: the layers users build from that the model zoo
does not exercise on its own (sequences, 1-D and 3-D convolutions, transposed
convolutions, recurrent cells, masked attention, embeddings, resizing, normalisations,
chained pools, grouped convolutions, pyramid pooling, 3-D transposed convolutions, a pair
of attentions).

``tools/zoo_bench.py --layers`` times each under graph, XLA and tfjit like the zoo's
models; ``tests/test_layer_models.py`` checks tfjit's predictions and one train step
against TF's executor.  Each model ends in ``CLASSES`` logits, so the loss is sparse
categorical cross-entropy from logits.  Sizes are chosen so that a step is a few
milliseconds at ``--batch 32`` on 2 cores: large enough that the kernels, not the call,
are timed.
"""
from __future__ import annotations

import numpy as np

CLASSES = 10


def _layers():
    import keras
    return keras, keras.layers


def conv1d():
    keras, L = _layers()
    return keras.Sequential([
        keras.Input((128, 32)), L.Conv1D(64, 5, padding="same", activation="relu"),
        L.Conv1D(64, 3, strides=2, activation="relu"), L.GlobalAveragePooling1D(),
        L.Dense(CLASSES)])


def conv1d_causal():
    keras, L = _layers()
    return keras.Sequential([
        keras.Input((128, 32)),
        L.Conv1D(48, 3, padding="causal", dilation_rate=2, activation="gelu"),
        L.Conv1D(48, 3, padding="causal", dilation_rate=4, activation="gelu"),
        L.GlobalMaxPooling1D(), L.Dense(CLASSES)])


def conv3d():
    keras, L = _layers()
    return keras.Sequential([
        keras.Input((16, 16, 16, 4)), L.Conv3D(16, 3, padding="same", activation="relu"),
        L.MaxPooling3D(), L.Conv3D(16, 3, activation="relu"), L.GlobalAveragePooling3D(),
        L.Dense(CLASSES)])


def conv2d_transpose():
    keras, L = _layers()
    return keras.Sequential([
        keras.Input((16, 16, 16)),
        L.Conv2DTranspose(32, 3, strides=2, padding="same", activation="relu"),
        L.Conv2DTranspose(16, 4, strides=2, padding="same", activation="relu"),
        L.Conv2D(8, 3, strides=2), L.Flatten(), L.Dense(CLASSES)])


def upsampling():
    keras, L = _layers()
    return keras.Sequential([
        keras.Input((24, 24, 16)), L.UpSampling2D(interpolation="bilinear"),
        L.Conv2D(16, 3, padding="same", activation="relu"), L.UpSampling2D(),
        L.AveragePooling2D(4), L.Flatten(), L.Dense(CLASSES)])


def separable():
    keras, L = _layers()
    return keras.Sequential([
        keras.Input((48, 48, 16)),
        L.SeparableConv2D(32, 3, padding="same", activation="relu"),
        L.DepthwiseConv2D(5, strides=2, padding="same"), L.BatchNormalization(),
        L.ReLU(6.0), L.Conv2D(32, 1),
        L.GlobalAveragePooling2D(), L.Dense(CLASSES)])


def gru():
    keras, L = _layers()
    return keras.Sequential([keras.Input((32, 24)), L.GRU(64), L.Dense(CLASSES)])


def bilstm():
    keras, L = _layers()
    return keras.Sequential([
        keras.Input((24, 16)), L.Bidirectional(L.LSTM(32, return_sequences=True)),
        L.Bidirectional(L.LSTM(16)), L.Dense(CLASSES)])


def simple_rnn():
    keras, L = _layers()
    return keras.Sequential([keras.Input((48, 16)), L.SimpleRNN(64), L.Dense(CLASSES)])


def causal_attention():
    keras, L = _layers()
    x = keras.Input((64, 64))
    h = L.MultiHeadAttention(num_heads=4, key_dim=16)(x, x, use_causal_mask=True)
    h = L.LayerNormalization()(x + h)
    h = L.Dense(64, activation="relu")(h)
    return keras.Model(x, L.Dense(CLASSES)(L.GlobalAveragePooling1D()(h)))


def embedding_bag():
    keras, L = _layers()
    tokens = keras.Input((64,), dtype="int32")
    h = L.Embedding(5000, 64)(tokens)
    h = L.Concatenate()([L.GlobalAveragePooling1D()(h), L.GlobalMaxPooling1D()(h)])
    return keras.Model(tokens, L.Dense(CLASSES)(L.Dense(64, activation="relu")(h)))


def group_norm():
    keras, L = _layers()
    return keras.Sequential([
        keras.Input((32, 32, 32)), L.Conv2D(32, 3, padding="same"),
        L.GroupNormalization(groups=8), L.Activation("swish"),
        L.Conv2D(32, 3, strides=2), L.LayerNormalization(), L.GlobalAveragePooling2D(),
        L.Dense(CLASSES)])


def einsum_dense():
    keras, L = _layers()
    x = keras.Input((32, 128))
    h = L.EinsumDense("abc,cde->abde", output_shape=(None, 4, 32), bias_axes="de")(x)
    h = L.Reshape((32, 128))(h)
    h = L.Dense(128, activation="tanh")(L.Dropout(0.1)(h))
    return keras.Model(x, L.Dense(CLASSES)(L.Flatten()(h)))


def padding_cropping():
    keras, L = _layers()
    return keras.Sequential([
        keras.Input((40, 40, 8)), L.ZeroPadding2D(((1, 2), (3, 0))),
        L.Conv2D(16, 3, activation="elu"), L.Cropping2D(((2, 1), (0, 3))),
        L.MaxPooling2D(3, strides=2), L.Conv2D(16, 3, activation="selu"),
        L.Flatten(), L.Dense(CLASSES)])


def resizing():
    keras, L = _layers()
    return keras.Sequential([
        keras.Input((40, 40, 3)), L.Rescaling(1 / 255.0), L.Resizing(64, 64),
        L.Conv2D(16, 3, strides=2, activation="relu"), L.GlobalAveragePooling2D(),
        L.Dense(CLASSES)])


def pools():
    """Pools of pools (3-D into 1-D): a window read several times per element by the
    next (passes/windows.py)."""
    keras, L = _layers()
    return keras.Sequential([
        keras.Input((16, 16, 16, 8)), L.AveragePooling3D(2), L.MaxPooling3D(2, strides=1, padding="same"),
        L.Reshape((8 * 8 * 8, 8)), L.MaxPooling1D(4), L.AveragePooling1D(2, padding="same"),
        L.Flatten(), L.Dense(CLASSES)])


def grouped_conv():
    """Conv2D(groups=G): Keras runs it through TF's XLA even without jit_compile."""
    keras, L = _layers()
    return keras.Sequential([
        keras.Input((32, 32, 16)), L.Conv2D(32, 3, groups=4, activation="relu"),
        L.Conv2D(32, 3, groups=8, padding="same", activation="relu"), L.GlobalAveragePooling2D(),
        L.Dense(CLASSES)])


def pyramid_pool():
    """A PSPNet-style pyramid: average pools of several window sizes, each upsampled
    back by a bilinear resize, beside the input (passes/windows.py)."""
    keras, L = _layers()
    x = keras.Input((24, 24, 16))
    branches = [x] + [L.UpSampling2D(k, interpolation="bilinear")(L.AveragePooling2D(k)(x))
                      for k in (4, 6, 12)]
    h = L.Conv2D(16, 1, activation="relu")(L.Concatenate()(branches))
    return keras.Model(x, L.Dense(CLASSES)(L.GlobalAveragePooling2D()(h)))


def transposed_3d():
    """Conv3DTranspose (its depth taps: lower/conv3d.py) and Conv1DTranspose."""
    keras, L = _layers()
    return keras.Sequential([
        keras.Input((8, 8, 8, 8)), L.Conv3DTranspose(8, 3, strides=2, padding="same", activation="relu"),
        L.Reshape((16 * 16, 16 * 8)), L.Conv1DTranspose(16, 3, strides=2, activation="relu"),
        L.GlobalAveragePooling1D(), L.Dense(CLASSES)])


def attention_pair():
    """Keras's Attention beside AdditiveAttention on one query (passes/concurrency.py)."""
    keras, L = _layers()
    q = keras.Input((32, 32))
    h = L.Concatenate()([L.Attention(use_scale=True)([q, q]), L.AdditiveAttention()([q, q])])
    return keras.Model(q, L.Dense(CLASSES)(L.GlobalAveragePooling1D()(h)))


MODELS = {
    "conv1d": (conv1d, (128, 32)),
    "conv1d_causal": (conv1d_causal, (128, 32)),
    "conv3d": (conv3d, (16, 16, 16, 4)),
    "conv2d_transpose": (conv2d_transpose, (16, 16, 16)),
    "upsampling": (upsampling, (24, 24, 16)),
    "separable": (separable, (48, 48, 16)),
    "gru": (gru, (32, 24)),
    "bilstm": (bilstm, (24, 16)),
    "simple_rnn": (simple_rnn, (48, 16)),
    "causal_attention": (causal_attention, (64, 64)),
    "embedding_bag": (embedding_bag, "tokens"),
    "group_norm": (group_norm, (32, 32, 32)),
    "einsum_dense": (einsum_dense, (32, 128)),
    "padding_cropping": (padding_cropping, (40, 40, 8)),
    "resizing": (resizing, (40, 40, 3)),
    "pools": (pools, (16, 16, 16, 8)),
    "grouped_conv": (grouped_conv, (32, 32, 16)),
    "pyramid_pool": (pyramid_pool, (24, 24, 16)),
    "transposed_3d": (transposed_3d, (8, 8, 8, 8)),
    "attention_pair": (attention_pair, (32, 32)),
}
NAMES = tuple("layer_" + n for n in MODELS)


def build(name: str, batch: int, seed: int = 0):
    """(model, x, y) for ``layer_<kind>``: a fresh model from ``seed`` and one batch."""
    import keras
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    make, shape = MODELS[name[len("layer_"):]]
    if shape == "tokens":
        x = rng.integers(0, 5000, (batch, 64)).astype(np.int32)
    else:
        x = rng.standard_normal((batch,) + shape).astype(np.float32)
        if name == "layer_resizing":
            x = np.abs(x) * 100.0           # pixel-like values for Rescaling(1/255)
    y = rng.integers(0, CLASSES, batch).astype(np.int32)
    return make(), x, y
