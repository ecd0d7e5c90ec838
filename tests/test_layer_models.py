"""One Keras layer kind per model (tools/layer_models.py: 1-D and 3-D convolutions,
transposed convolutions, bilinear upsampling, separable and depthwise convolutions,
GRU, bidirectional LSTM, SimpleRNN, causal multi-head attention, embeddings with
pooling, group and layer normalisation, EinsumDense with dropout, padding and
cropping, resizing, chained pools, grouped convolutions -- which Keras's TF backend
runs through TF's XLA even in the oracle's model --, pyramid pooling, 3-D transposed
convolutions, Attention beside AdditiveAttention) under ``model.compile(jit_compile=True)``: tfjit's predictions
and two SGD train steps (losses, then every weight) against the same model run by
TF's executor (``jit_compile=False``), and each step compiled by tfjit (must-compile:
a layer tfjit cannot compile fails here)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import keras

import tfjit
from oracle import assert_matches

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools import layer_models  # noqa: E402

RTOL, ATOL = 1e-3, 1e-5
BATCH = 8


def _compiled(name, jit_compile):
    model, x, y = layer_models.build(name, BATCH)
    model.compile(optimizer=keras.optimizers.SGD(0.01), jit_compile=jit_compile,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, x, y


def _steps(model, x, y):
    out = {"predict": np.asarray(model.predict_on_batch(x))}
    out["loss"] = [float(model.train_on_batch(x, y)) for _ in range(2)]
    out["weights"] = [w.numpy() for w in model.weights]
    return out


@pytest.mark.parametrize("name", layer_models.NAMES)
def test_layer_model_predicts_and_trains_like_tensorflow(name):
    jit, x, y = _compiled(name, True)
    got = _steps(jit, x, y)
    want = _steps(_compiled(name, False)[0], x, y)
    steps = tfjit.keras.step_functions(jit)
    assert sorted(steps) == ["predict", "train"], steps
    for kind, step in steps.items():
        assert all(e.latest() is not None for e in step._entries.values()), kind
    assert_matches(got["predict"], want["predict"], rtol=RTOL, atol=ATOL, what="predict")
    assert_matches(np.float32(got["loss"]), np.float32(want["loss"]), rtol=RTOL, atol=ATOL,
                   what="losses of two train steps")
    assert len(got["weights"]) == len(want["weights"])
    for k, (g, w) in enumerate(zip(got["weights"], want["weights"])):
        assert_matches(g, w, rtol=RTOL, atol=ATOL, what=f"weight {k} after two steps")
