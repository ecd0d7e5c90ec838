"""Where tfjit's first call goes: ``python tools/train_bench.py --compile-profile``.

For each workload (train_bench's, and a ``train_on_batch`` of each Keras model of
tests/test_keras_models.py as ``keras_<name>``) and each mode (tfjit, TF's XLA),
``--processes`` fresh processes each time one first call.  Every process is warm
first: TensorFlow imported, tfjit's op library loaded and its compile server up,
one small function compiled by tfjit and one by XLA; the persistent cache is off.
The tfjit process records its phases with ``pipeline.profiling()``:

    trace          tf.function tracing of the step (api/function.py)
    mark           GraphDef, marking, cluster extraction
    lower          graph -> tfjit IR
    IR text        the module's text before and after the passes (introspection)
    passes         every step of pipeline.PIPELINE (cse, ..., fusion, buffer assignment)
    emit           tfjit IR -> LLVM IR (llvmlite)
    LLVM text      the LLVM module printed for the compile server
    LLVM           the compile server: parse, O3, code generation (a round trip)
    load           link the object (ld) and dlopen it
    first run      the first execution of the launch op (each measured dot or
                   convolution runs once: kernel_choice.cc's MeasuredFamily times
                   its two kernels over the first calls)
    other          the rest of the first call (Keras's own tracing of its outer
                   step; the launch op's first run for Keras steps, which compile
                   lazily inside it)

Medians per phase over the processes (the machine is shared: noisy); the
"steady" columns are medians of 5 later steps in the same process, run once tfjit's
optimised code has replaced its quick first tier (codegen/tiering.py) and its kernel
choices are made; "optimised after" is how long after the first call that took, the
process idle meanwhile.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERAS_MODELS = ("mlp", "cnn", "transformer", "lstm")     # tests/test_keras_models.py
COLUMNS = [   # (header, phases summed into it)
    ("trace", ["trace"]),
    ("mark", ["graph, marking, clustering"]),
    ("lower", ["lower"]),
    ("IR text", ["IR text"]),
    ("passes", None),      # the child's pipeline.PIPELINE step names, and "verify and dumps"
    ("emit", ["emit LLVM IR"]),
    ("LLVM text", ["LLVM IR text"]),
    ("LLVM", ["LLVM (compile server)", "LLVM (in process)", "disk cache"]),
    ("load", ["link and load"]),
    ("executable", ["executable"]),
    ("first run", ["first run"]),
]


def workloads() -> list:
    from tools import train_bench
    return list(train_bench.WORKLOADS) + ["keras_" + m for m in KERAS_MODELS]


def _warm_up() -> None:
    """A warm process: tfjit's op library and compile server, and XLA, have compiled once."""
    import tensorflow as tf
    import tfjit
    x = tf.ones([4, 4])
    tfjit.function(lambda a: tf.nn.relu(a * 2.0 + 1.0), jit_compile=True)(x)
    tf.function(lambda a: tf.nn.relu(a * 2.0 + 1.0), jit_compile=True)(x)


def _keras_step(name: str, mode: str):
    """(train_on_batch closure) for a Keras model of tests/test_keras_models.py."""
    import tfjit
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import test_keras_models as tkm
    if mode == "xla":
        tfjit.keras.disable()          # Keras's own jit_compile=True: TF's XLA
    model = tkm.compiled_model(name, True)
    x, y = tkm.INPUTS[name][:16], tkm.LABELS[:16]
    return lambda: model.train_on_batch(x, y)


def child(name: str, mode: str) -> dict:
    """One first call (and 5 steady steps) of ``name`` in ``mode``, in this process."""
    import numpy as np
    from tfjit import pipeline, settings
    from tools import train_bench
    settings.set_flags(tfjit_persistent_cache_directory="")
    _warm_up()
    if name.startswith("keras_"):
        step = _keras_step(name[len("keras_"):], mode)
    else:
        fn, args = train_bench.WORKLOADS[name][1](np.random.default_rng(0))
        f = train_bench._wrap(fn, mode)
        step = lambda: train_bench._block(f(*args))     # noqa: E731
    phases, compiles = {}, 0
    start = time.perf_counter()
    if mode == "tfjit":
        with pipeline.profiling() as p:
            step()
        phases, compiles = p.seconds, p.compiles
    else:
        step()
    first = time.perf_counter() - start
    optimised_after = 0.0
    if mode == "tfjit":
        from tfjit.codegen import tiering
        t = time.perf_counter()
        tiering.wait_all()
        optimised_after = time.perf_counter() - t
    from tools.bench import WARMUP
    for _ in range(WARMUP - 1):     # past tfjit's kernel-choice measuring
        step()
    steady = []
    for _ in range(5):
        t = time.perf_counter()
        step()
        steady.append(time.perf_counter() - t)
    return {"first": first, "steady": float(np.median(steady)), "phases": phases,
            "compiles": compiles, "optimised_after": optimised_after,
            "passes": [s.name for s in pipeline.PIPELINE] + ["verify and dumps"]}


def run_child(name: str, mode: str) -> dict | str:
    code = ("import json, sys; from tools import compile_profile as c; "
            f"print('RESULT ' + json.dumps(c.child({name!r}, {mode!r})))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, TFJIT_CACHE_DIR=""))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1][:160]
        return f"failed (exit {proc.returncode}): {tail}"
    return json.loads(lines[-1][len("RESULT "):])


def _median(values) -> float:
    return statistics.median(values) if values else 0.0


def main(only=None, processes: int = 3) -> int:
    names = only or workloads()
    print(f"first call, ms: medians of {processes} fresh warm processes per mode, no "
          "persistent cache (shared machine: noisy)\n")
    head = ["workload"] + [h for h, _ in COLUMNS] + ["other", "tfjit first", "XLA first",
                                                    "tfjit/XLA", "steady tfjit / XLA",
                                                    "optimised after"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in names:
        runs = {"tfjit": [], "xla": []}
        failed = {}
        for _ in range(processes):
            for mode in runs:       # alternating, so a noisy spell hits both modes
                r = run_child(name, mode)
                if isinstance(r, str):
                    failed[mode] = r
                else:
                    runs[mode].append(r)
        if failed and not all(runs.values()):
            print(f"| {name} | " + "; ".join(f"{m}: {r}" for m, r in failed.items()) + " |",
                  flush=True)
            continue
        cells = []
        for _, phases in COLUMNS:
            cells.append(_median([1e3 * sum(r["phases"].get(p, 0.0) for p in phases or r["passes"])
                                  for r in runs["tfjit"]]))
        first = _median([1e3 * r["first"] for r in runs["tfjit"]])
        other = _median([1e3 * (r["first"] - sum(r["phases"].values())) for r in runs["tfjit"]])
        xla = _median([1e3 * r["first"] for r in runs["xla"]])
        steady = "%.1f / %.1f" % (_median([1e3 * r["steady"] for r in runs["tfjit"]]),
                                  _median([1e3 * r["steady"] for r in runs["xla"]]))
        optimised = _median([1e3 * r.get("optimised_after", 0.0) for r in runs["tfjit"]])
        row = [name] + [f"{c:.0f}" for c in cells] + [f"{other:.0f}", f"{first:.0f}",
                                                      f"{xla:.0f}", f"{first / xla:.2f}x", steady,
                                                      f"{optimised:.0f}"]
        print("| " + " | ".join(row) + " |", flush=True)
    return 0
