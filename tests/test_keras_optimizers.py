"""Keras training configurations beyond plain Adam under ``jit_compile=True``: the
optimizer options that update inside a tf.cond (EMA, gradient accumulation, the
dynamic loss scale of mixed_float16: lower/control_flow.py returns what a branch
assigns), gradient clipping, weight decay, learning-rate schedules, metrics, and the
mixed-precision policies.  Three train steps each, losses and every variable of the
model and optimizer against the same model run by TF's executor."""
from __future__ import annotations

import keras
import numpy as np
import pytest

import tfjit

O = keras.optimizers

CONFIGS = {
    "adam-ema": lambda: dict(optimizer=O.Adam(1e-3, use_ema=True, ema_overwrite_frequency=2)),
    "adam-gradient-accumulation": lambda: dict(optimizer=O.Adam(1e-3, gradient_accumulation_steps=2)),
    "mixed_float16": lambda: dict(optimizer=O.Adam(1e-3), policy="mixed_float16"),
    "mixed_bfloat16": lambda: dict(optimizer=O.Adam(1e-3), policy="mixed_bfloat16"),
    "adamw-clipnorm-accuracy": lambda: dict(optimizer=O.AdamW(1e-3, weight_decay=0.01, clipnorm=1.0),
                                            metrics=["accuracy"]),
    "sgd-nesterov-global-clipnorm": lambda: dict(optimizer=O.SGD(0.01, momentum=0.9, nesterov=True,
                                                                 global_clipnorm=0.5)),
    "rmsprop-cosine-schedule": lambda: dict(optimizer=O.RMSprop(O.schedules.CosineDecay(1e-3, 100))),
}
# (rtol, atol): the half policies compute in float16/bfloat16, where TF's CPU kernels
# round per op and tfjit's compute some ops in float32 (lower/halfmath.py)
TOL = {"mixed_float16": (2e-2, 2e-3), "mixed_bfloat16": (5e-2, 5e-3)}


def _model():
    L = keras.layers
    return keras.Sequential([
        keras.Input((12, 12, 3)), L.Conv2D(8, 3, activation="relu"), L.BatchNormalization(),
        L.MaxPooling2D(), L.Flatten(), L.Dense(16, activation="relu"), L.Dense(5)])


def _train(name: str, jit: bool, x, y):
    cfg = CONFIGS[name]()
    keras.mixed_precision.set_global_policy(cfg.pop("policy", "float32"))
    try:
        keras.utils.set_random_seed(2)
        model = _model()
        model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=jit, **cfg)
        logs = [model.train_on_batch(x, y, return_dict=True) for _ in range(3)]
        # the optimizer's state too, but under a half policy: its moments accumulate the
        # half-precision gradients' rounding differences (one bfloat16 moment of 8 was
        # 0.028 here, 0.012 in TF) where the weights, moved by lr-sized steps, agree
        extra = [] if name in TOL else model.optimizer.variables
        state = [v.numpy().astype(np.float64) for v in model.weights + extra]
        return model, logs, state
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_optimizer_configuration_trains_like_tensorflow(name):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 12, 12, 3)).astype(np.float32)
    y = rng.integers(0, 5, 16).astype(np.int32)
    model, got_logs, got = _train(name, True, x, y)
    _, want_logs, want = _train(name, False, x, y)
    assert sorted(tfjit.keras.step_functions(model)) == ["train"]
    rtol, atol = TOL.get(name, (1e-4, 1e-5))
    for g, w in zip(got_logs, want_logs):
        assert sorted(g) == sorted(w)
        for k in w:
            np.testing.assert_allclose(g[k], w[k], rtol=rtol, atol=atol, err_msg=k)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"variable {k}")
