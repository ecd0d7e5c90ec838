"""The model zoo: Keras models under plain Keras (graph), TF's XLA and tfjit, one process.

    python tools/zoo_bench.py                       # --quick: the default subset
    python tools/zoo_bench.py --all                 # every keras.applications model
    python tools/zoo_bench.py --models InceptionV3 Xception --runs 20 --batch 4
    python tools/zoo_bench.py --models DenseNet121 --kinds predict   # no train step
    python tools/zoo_bench.py --layers --batch 32   # one model per Keras layer kind
    python tools/zoo_bench.py --models ResNet50 --policy mixed_bfloat16   # Keras's mixed precision

Models: every ``keras.applications`` model, built with ``weights=None`` and
``classes=10`` at ``--size`` x ``--size`` inputs (96 by default, above every
model's minimum: InceptionV3 and InceptionResNetV2 75, Xception 71), and the Keras
models of tests/test_keras_models.py (``keras_mlp``, ``keras_cnn``, ...) on their
own inputs.  Batch ``--batch`` (4) for both.  ``--policy`` builds them under a Keras
dtype policy (``mixed_bfloat16``: bf16 layers, f32 variables; the applications' last
layer then gives bf16 probabilities, compared as they are).

For each model, three copies from the same seed (so the same weights) are compiled
with Adam and sparse categorical cross-entropy: ``jit_compile=False`` (graph),
``jit_compile=True`` with tfjit's Keras hook off while Keras makes its steps (TF's
XLA), and ``jit_compile=True`` with the hook on (tfjit; a must-compile step, so a
model tfjit cannot compile fails loudly).  The first ``predict_on_batch`` and
``train_on_batch`` of each copy is its first call (trace and compile); the
predictions of that first call are compared with graph's (largest absolute
difference, a sanity check, not the test: tests/test_keras_models.py is).  Then
``predict_on_batch`` and ``train_on_batch`` are timed round-robin over the three
copies (tools/bench.py's ``time_ms``: one call of each in turn, after warm-up), so
a noisy neighbour slows every mode alike; figures are medians.  Ratios are speeds:
``tfjit/graph`` = graph ms / tfjit ms, > 1 when tfjit is faster.  The load average
is printed with each row: the machine may be shared.  Nothing is asserted.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import tensorflow as tf  # noqa: E402

import tfjit  # noqa: E402
from tools.bench import WARMUP, Variant, _block, time_ms  # noqa: E402
from tools.layer_models import NAMES as LAYER_NAMES  # noqa: E402

MODES = ("graph", "xla", "tfjit")
KINDS = ("predict", "train")
CLASSES = 10
KERAS_TEST_MODELS = ("mlp", "cnn", "transformer", "lstm")     # tests/test_keras_models.py
# fits a few minutes on 2 cores: the small test models and a few applications, among
# them the ones issue 14 names as losing (InceptionV3, Xception, DenseNet121,
# EfficientNetV2B0)
QUICK = tuple("keras_" + m for m in KERAS_TEST_MODELS) + (
    "MobileNetV3Small", "EfficientNetV2B0", "DenseNet121", "InceptionV3", "Xception")


def application_names() -> list:
    import keras
    return sorted(n for n in dir(keras.applications) if n[:1].isupper())


def all_names() -> list:
    return ["keras_" + m for m in KERAS_TEST_MODELS] + application_names() + list(LAYER_NAMES)


def _test_models():
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import test_keras_models
    return test_keras_models


def build(name: str, size: int, batch: int, seed: int = 0):
    """(model, x, y): a fresh model from ``seed``, uncompiled, and one batch."""
    import keras
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    if name in LAYER_NAMES:
        from tools import layer_models
        return layer_models.build(name, batch, seed)
    if name.startswith("keras_"):
        tkm = _test_models()
        short = name[len("keras_"):]
        x = np.resize(tkm.INPUTS[short], (batch,) + tkm.INPUTS[short].shape[1:])
        y = np.resize(tkm.LABELS, (batch,))
        return tkm.MODELS[short](), x, y
    model = getattr(keras.applications, name)(weights=None, classes=CLASSES,
                                              input_shape=(size, size, 3))
    x = rng.random((batch, size, size, 3), dtype=np.float32)
    y = rng.integers(0, CLASSES, batch).astype(np.int32)
    return model, x, y


def _loss(name: str):
    import keras
    # the applications (capitalised names) end in a softmax; the test and layer models
    # in logits
    return keras.losses.SparseCategoricalCrossentropy(from_logits=not name[:1].isupper())


def make_copies(name: str, size: int, batch: int, kinds=KINDS) -> tuple:
    """({mode: model}, x, y, {mode + " predict first" / " train first": ms, "max |diff|"})
    for the step ``kinds`` ("predict", "train")."""
    import keras
    models, first, preds = {}, {}, {}
    x = y = None
    for mode in MODES:
        model, x, y = build(name, size, batch)
        model.compile(optimizer=keras.optimizers.Adam(1e-4), loss=_loss(name),
                      jit_compile=mode != "graph")
        # Keras makes its steps at their first call: with the hook off for XLA's copy,
        # Keras's own tf.function(jit_compile=True) makes them, and keeps them after
        if mode == "xla":
            tfjit.keras.disable()
        try:
            if "predict" in kinds:
                t = time.perf_counter()
                preds[mode] = np.asarray(model.predict_on_batch(x))
                first[mode + " predict first"] = (time.perf_counter() - t) * 1e3
            if "train" in kinds:
                t = time.perf_counter()
                _block(model.train_on_batch(x, y))
                first[mode + " train first"] = (time.perf_counter() - t) * 1e3
        finally:
            if mode == "xla":
                tfjit.keras.enable()
        if mode == "tfjit" and not tfjit.keras.step_functions(model):
            raise RuntimeError(f"{name}: tfjit's hook made no step (is it enabled?)")
        models[mode] = model
    for mode in ("xla", "tfjit") if preds else ():
        first[mode + " max |diff|"] = float(np.max(np.abs(preds[mode].astype(np.float32)
                                                           - preds["graph"].astype(np.float32))))
    return models, x, y, first


def time_model(name: str, size: int, batch: int, runs: int, warmup: int = WARMUP,
               kinds=KINDS) -> dict:
    """Medians (ms) of predict_on_batch and train_on_batch per mode, first calls, diffs."""
    models, x, y, out = make_copies(name, size, batch, kinds)
    xt, yt = tf.constant(x), tf.constant(y)
    for kind in kinds:
        variants = {}
        for mode, model in models.items():
            call = ((lambda m=model: m.predict_on_batch(xt)) if kind == "predict"
                    else (lambda m=model: m.train_on_batch(xt, yt)))
            variants[mode] = Variant(call)
        for mode, ts in time_ms(variants, runs, warmup).items():
            out[f"{mode} {kind}"] = float(np.median(ts))
    out["load"] = os.getloadavg()[0]
    return out


def _ratio(a, b) -> float:
    return a / b if isinstance(a, float) and isinstance(b, float) and b > 0 else float("nan")


def _geomean(values) -> float:
    values = [v for v in values if v == v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--models", nargs="+", help="model names (keras_mlp, InceptionV3, ...)")
    group.add_argument("--all", action="store_true", help="every model")
    group.add_argument("--layers", action="store_true",
                       help="the one-layer-kind models of tools/layer_models.py")
    ap.add_argument("--runs", type=int, default=15, help="timed rounds per step kind")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--size", type=int, default=96, help="applications' image side")
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS),
                    help="which steps to time")
    ap.add_argument("--policy", default="float32",
                    help="Keras dtype policy the models are built under (mixed_bfloat16, ...)")
    args = ap.parse_args(argv)
    import keras
    keras.mixed_precision.set_global_policy(args.policy)
    names = (all_names() if args.all else list(LAYER_NAMES) if args.layers
             else args.models or list(QUICK))
    unknown = sorted(set(names) - set(all_names()))
    if unknown:
        ap.error(f"unknown models {unknown}; known: {all_names()}")
    from tools.compile_profile import _warm_up
    _warm_up()      # the compile server up, XLA loaded: the first model's first call is not
    print(f"machine: {os.cpu_count()} cores; TF {tf.__version__}; policy {args.policy}; batch {args.batch}, "
          f"applications at {args.size}x{args.size}; medians of {args.runs} calls, round-robin; "
          "ratios are speeds (peer ms / tfjit ms)\n")
    print("| model | predict ms graph / XLA / tfjit | tfjit/graph | tfjit/XLA "
          "| train ms graph / XLA / tfjit | tfjit/graph | tfjit/XLA "
          f"| first {'+'.join(args.kinds)} ms graph / XLA / tfjit | max abs diff of predictions XLA / tfjit "
          "| load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios = {k: [] for k in ("predict graph", "predict xla", "train graph", "train xla")}
    for name in names:
        try:
            r = time_model(name, args.size, args.batch, args.runs, kinds=args.kinds)
        except Exception as e:          # a benchmark reports, it does not stop
            print(f"| {name} | failed: {type(e).__name__}: {str(e).splitlines()[0][:200]} |",
                  flush=True)
            continue
        cells = []
        for kind in KINDS:
            if kind not in args.kinds:
                cells += ["-", "-", "-"]
                continue
            g, x, j = (r[f"{m} {kind}"] for m in MODES)
            rg, rx = _ratio(g, j), _ratio(x, j)
            ratios[kind + " graph"].append(rg)
            ratios[kind + " xla"].append(rx)
            cells += [f"{g:.2f} / {x:.2f} / {j:.2f}", f"{rg:.2f}x", f"{rx:.2f}x"]
        first = " / ".join(f"{sum(r[f'{m} {k} first'] for k in args.kinds):.0f}" for m in MODES)
        diff = (f"{r['xla max |diff|']:.1e} / {r['tfjit max |diff|']:.1e}"
                if "predict" in args.kinds else "-")
        print(f"| {name} | " + " | ".join(cells) + f" | {first} | {diff} | {r['load']:.2f} |",
              flush=True)
    print("\ngeomean speed of tfjit: "
          + ", ".join(f"{k.replace('xla', 'XLA')} {_geomean(v):.2f}x" for k, v in ratios.items()
                      if v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
