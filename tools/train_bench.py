"""Training and model benchmarks: tfjit against TF graph mode and TF's XLA.

    python tools/train_bench.py                      # every workload, timings in one process
    python tools/train_bench.py --only mlp --runs 30
    python tools/train_bench.py --memory             # also peak RSS, one process per mode
    python tools/train_bench.py --compile-profile    # where tfjit's first call goes, per phase

Workloads (issue 4's targets):

* ``mlp``       train step of a 784-1024-1024-10 ReLU MLP, batch 512, Adam,
                sparse softmax cross-entropy (forward, tape gradients, update);
* ``softmax``   train step of softmax regression (784 -> 10, batch 100, SGD);
* ``cnn``       train step of a small Keras CNN (Conv2D, BatchNormalization,
                MaxPooling2D, Dropout, GlobalAveragePooling2D, Dense) on
                28x28x1 images, batch 128, Adam;
* ``mobilenet`` MobileNetV2 (weights=None) inference, batch 8 at 224x224.

Each step runs as ``tf.function`` (TF graph), ``tf.function(jit_compile=True)``
(TF's XLA) and ``tfjit.function(jit_compile=True)``, on its own copy of the
variables, after warm-up; the figure is the median of ``--runs`` steps timed
round-robin (one step of each mode in turn), so a noisy neighbour slows every
mode alike.  ``--memory`` reruns each (workload, mode) in a fresh process and
reports its peak resident set size (VmHWM), and for tfjit also that of its LLVM
compile server (a process of its own; see codegen/jit_server.py).  Nothing is
asserted.

``--compile-profile`` times the first call of each workload, and of a
``train_on_batch`` of each Keras model of tests/test_keras_models.py
(``keras_*``), in fresh processes that are warm (the compile server up, the op
library loaded, one small function compiled by tfjit and one by XLA before) and
without the persistent cache; tfjit's first call is broken down by phase
(``pipeline.profiling``), with XLA's first call beside it.  Medians over
``--processes`` processes per mode.  See tools/compile_profile.py.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tensorflow as tf  # noqa: E402

import tfjit  # noqa: E402

MODES = ("graph", "xla", "tfjit")


def _wrap(fn, mode: str):
    if mode == "graph":
        return tf.function(fn)
    if mode == "xla":
        return tf.function(fn, jit_compile=True)
    return tfjit.function(fn, jit_compile=True)


def _xent(labels, logits):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))


# -- workloads: make(rng) -> (step function, its arguments); a fresh model each call ----

def mlp(rng):
    import keras
    init = keras.initializers.GlorotUniform(seed=1)
    sizes = [784, 1024, 1024, 10]
    ws = []
    for a, b in zip(sizes, sizes[1:]):
        ws += [tf.Variable(init((a, b))), tf.Variable(tf.zeros([b]))]
    opt = keras.optimizers.Adam(1e-3)
    opt.build(ws)

    def step(x, y):
        with tf.GradientTape() as tape:
            h = x
            for k in range(0, len(ws) - 2, 2):
                h = tf.nn.relu(tf.matmul(h, ws[k]) + ws[k + 1])
            loss = _xent(y, tf.matmul(h, ws[-2]) + ws[-1])
        opt.apply_gradients(zip(tape.gradient(loss, ws), ws))
        return loss
    x = tf.constant(rng.standard_normal((512, 784), dtype=np.float32))
    y = tf.constant(rng.integers(0, 10, 512), tf.int32)
    return step, (x, y)


def softmax(rng):
    w = tf.Variable(tf.zeros([784, 10]))
    b = tf.Variable(tf.zeros([10]))

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = _xent(y, tf.matmul(x, w) + b)
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.5 * gw)
        b.assign_sub(0.5 * gb)
        return loss
    x = tf.constant(rng.random((100, 784), dtype=np.float32))
    y = tf.constant(rng.integers(0, 10, 100), tf.int32)
    return step, (x, y)


def cnn(rng):
    import keras
    keras.utils.set_random_seed(1)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        L.Conv2D(32, 3, activation="relu"), L.BatchNormalization(), L.MaxPooling2D(),
        L.Conv2D(64, 3, activation="relu"), L.BatchNormalization(), L.MaxPooling2D(),
        L.Dropout(0.25), L.GlobalAveragePooling2D(), L.Dense(10)])
    opt = keras.optimizers.Adam(1e-3)
    opt.build(model.trainable_variables)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = _xent(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        return loss
    x = tf.constant(rng.random((128, 28, 28, 1), dtype=np.float32))
    y = tf.constant(rng.integers(0, 10, 128), tf.int32)
    return step, (x, y)


def mobilenet(rng):
    import keras
    model = keras.applications.MobileNetV2(weights=None)
    x = tf.constant(rng.random((8, 224, 224, 3), dtype=np.float32))
    return (lambda x: model(x, training=False)), (x,)


WORKLOADS = {
    "mlp": ("MLP train step (784-1024-1024-10, batch 512, Adam)", mlp),
    "softmax": ("softmax regression train step (784 -> 10, batch 100, SGD)", softmax),
    "cnn": ("Keras CNN train step (28x28x1, batch 128, Adam)", cnn),
    "mobilenet": ("MobileNetV2 inference (batch 8, 224x224)", mobilenet),
}


def _block(result):
    for t in tf.nest.flatten(result):
        if hasattr(t, "numpy") and t.shape.num_elements() <= 1024:
            t.numpy()


def time_modes(name: str, runs: int, modes=MODES) -> dict:
    """Median ms per mode, timed round-robin after warm-up; a failing mode reports why."""
    rng = np.random.default_rng(0)
    steps, out = {}, {}
    for mode in modes:
        fn, args = WORKLOADS[name][1](rng)
        f = _wrap(fn, mode)
        try:
            t = time.perf_counter()
            _block(f(*args))
            out[mode + " first"] = (time.perf_counter() - t) * 1e3
            for _ in range(2):
                _block(f(*args))
            steps[mode] = (f, args)
        except Exception as e:          # a benchmark reports, it does not stop
            out[mode] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    times = {mode: [] for mode in steps}
    for _ in range(runs):
        for mode, (f, args) in steps.items():
            t = time.perf_counter()
            _block(f(*args))
            times[mode].append(time.perf_counter() - t)
    for mode, ts in times.items():
        out[mode] = float(np.median(ts) * 1e3)
    return out


def vm_hwm_mb() -> float:
    """This process's peak RSS (VmHWM).  Not ``ru_maxrss``: Linux carries that across
    exec, so a child forked from this (large) benchmark process would report at least
    the parent's size -- every mode then read the same 1472 MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise OSError("no VmHWM in /proc/self/status")


def compile_server_hwm_mb() -> float | None:
    """Peak RSS of tfjit's compile server (codegen/jit_server.py), if one runs."""
    from tfjit import pipeline
    from tfjit.codegen import llvm_cpu
    client = (llvm_cpu.server(pipeline.jit_compiler())
              if "tfjit.codegen.llvm_cpu" in sys.modules else None)
    if client is None or client.pid is None:
        return None
    with open(f"/proc/{client.pid}/status") as f:
        return next(int(ln.split()[1]) / 1024 for ln in f if ln.startswith("VmHWM:"))


def peak_rss_mb(name: str, mode: str, runs: int) -> tuple:
    """(peak RSS of a fresh process that builds the workload and runs it ``runs`` times,
    peak RSS of its compile server or None)."""
    code = (f"import sys; sys.argv=['x']; import tools.train_bench as b; "
            f"r = b.time_modes({name!r}, {runs}, ({mode!r},)); "
            f"import json; print(json.dumps([r.get({mode!r}), b.vm_hwm_mb(), "
            f"b.compile_server_hwm_mb()]))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        return f"failed (exit {proc.returncode})", None
    result, rss, server = json.loads(proc.stdout.strip().splitlines()[-1])
    return (rss if not isinstance(result, str) else result), server


def _fmt(v) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def _ratio(a, b) -> str:
    return f"{a / b:.2f}x" if isinstance(a, float) and isinstance(b, float) else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    from tools.compile_profile import KERAS_MODELS
    ap.add_argument("--only", nargs="*", help="workloads to run",
                    choices=sorted(WORKLOADS) + ["keras_" + m for m in KERAS_MODELS])
    ap.add_argument("--memory", action="store_true", help="also peak RSS per mode (slow)")
    ap.add_argument("--compile-profile", action="store_true",
                    help="where tfjit's first call goes, per phase, beside XLA's first call")
    ap.add_argument("--processes", type=int, default=3,
                    help="--compile-profile: fresh processes per workload and mode")
    args = ap.parse_args(argv)
    if args.compile_profile:
        from tools import compile_profile
        return compile_profile.main(args.only, args.processes)
    print(f"machine: {os.cpu_count()} cores; TF {tf.__version__}; medians of {args.runs} "
          "steps, timed round-robin\n")
    print("| workload | TF graph ms | TF XLA ms | tfjit ms | vs TF graph | vs XLA "
          "| first call ms (graph / XLA / tfjit) |")
    print("|---|---|---|---|---|---|---|")
    names = [n for n in args.only or WORKLOADS if n in WORKLOADS]   # keras_*: profile only
    for name in names:
        r = time_modes(name, args.runs)
        first = " / ".join(f"{r.get(m + ' first', float('nan')):.0f}" for m in MODES)
        print(f"| {WORKLOADS[name][0]} | {_fmt(r['graph'])} | {_fmt(r['xla'])} | "
              f"{_fmt(r['tfjit'])} | {_ratio(r['graph'], r['tfjit'])} | "
              f"{_ratio(r['xla'], r['tfjit'])} | {first} |", flush=True)
    if args.memory:
        print("\n| workload | peak RSS MB: TF graph | TF XLA | tfjit | tfjit's compile server |"
              "\n|---|---|---|---|---|")
        for name in names:
            rss = [peak_rss_mb(name, m, 5) for m in MODES]
            print(f"| {WORKLOADS[name][0]} | " + " | ".join(_fmt(v) for v, _ in rss)
                  + f" | {_fmt(rss[-1][1]) if rss[-1][1] is not None else '-'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
