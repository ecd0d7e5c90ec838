"""Benchmarks: tfjit against TF graph mode and TF's XLA, in one process.

    python tools/bench.py            # all workloads, 30 timed runs each
    python tools/bench.py --runs 10 --only seed softmax

For each workload: median wall time of TF graph mode (``tf.function``), TF XLA
(``tf.function(jit_compile=True)``), tfjit (``tfjit.function``), and both
auto-clustering modes on the unmodified ``tf.function`` (TF's XLA with
``set_jit("autoclustering")`` and ``--tf_xla_cpu_global_jit``; tfjit's auto
mode, as ``TFJIT_FLAGS=--tfjit_auto_jit=2 --tfjit_cpu_global_jit``), speed-up
ratios, and tfjit's achieved memory throughput against the machine's measured
read bandwidth (a STREAM-like test: every core summing its share of a large
array).  The machine may be shared and noisy: medians of many runs, nothing
asserted.  Prints a markdown table (the README's table comes from here).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# XLA's auto-clustering covers CPU only with this flag; it changes nothing else here.
os.environ.setdefault("TF_XLA_FLAGS", "--tf_xla_cpu_global_jit")
import tensorflow as tf  # noqa: E402

import tfjit  # noqa: E402


def median_ms(fn, runs: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        _block(fn())
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        _block(fn())
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e3)


def _block(result):
    """Waits for the result.  TF runs eager ops and function calls synchronously on
    the CPU, so small results are fetched and large ones only held: ``.numpy()``
    of a large tensor copies it into fresh memory, and that page-faulting copy
    would dominate (and equalise) every measurement."""
    for t in tf.nest.flatten(result):
        if hasattr(t, "numpy") and t.shape.num_elements() <= 1024:
            t.numpy()


def read_bandwidth_gbs(runs: int = 15) -> float:
    """Bytes per second the machine reads with its simplest read kernel: the sum of a
    256 MiB float32 array, vectorised and sharded over every core (a STREAM-like read
    test; numpy's own reductions are compute-bound here).  Note that this machine's
    large L3 cache may hold a workload's inputs between calls, so a workload can
    exceed this DRAM figure."""
    data = tf.constant(np.ones(1 << 26, np.float32))
    read = tfjit.function(lambda x: tf.reduce_sum(x), jit_compile=True)
    return data.shape.num_elements() * 4 / (median_ms(lambda: read(data), runs) / 1e3) / 1e9


def auto_clustered(fn, inputs, mode: str):
    """``tf.function(fn)`` instantiated (at its first call) under an auto-clustering mode:
    "xla" (TF's) or "tfjit"; the mode is switched off again afterwards, and the
    function keeps the graph it was instantiated with."""
    from tfjit.api import autojit
    f = tf.function(fn)
    before = autojit.stats["graphs_clustered"]
    if mode == "xla":
        tfjit.config.set_flags(tfjit_auto_jit=-1)    # tfjit would follow XLA's jit level too
        tf.config.optimizer.set_jit("autoclustering")
    else:
        tfjit.config.set_jit("autoclustering")
    try:
        _block(f(*inputs))
    finally:
        tf.config.optimizer.set_jit(False)
        tfjit.config.set_flags(tfjit_auto_jit=0, tfjit_cpu_global_jit=False)
    if mode == "tfjit" and autojit.stats["graphs_clustered"] == before:
        print(f"note: tfjit auto mode found no cluster in {fn.__name__}", file=sys.stderr)
    return f


# -- workloads: (name, function, input shapes, bytes moved per call) --------------------

def seed(x, y, z):
    return tf.reduce_sum(x + y * z)


def chain10(x, y):
    a = x * y + 1.0
    b = tf.maximum(a, 0.5) - x
    c = b * b + y
    d = tf.abs(c) * 0.25 - a
    return tf.minimum(d, 3.0) + b


def softmax(x):
    return tf.nn.softmax(x)


def layernorm(x):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-5)


def gelu(x):
    return 0.5 * x * (1.0 + tf.math.erf(x * np.float32(1 / np.sqrt(2.0))))


def small(x, y):
    return tf.nn.relu(x * y + 1.0)


WORKLOADS = [
    ("seed", "reduce_sum(x + y*z), 4096x4096", seed, [(4096, 4096)] * 3, 3),
    ("chain10", "10-op elementwise chain, 4096x4096", chain10, [(4096, 4096)] * 2, 3),
    ("softmax", "softmax, 8192x1024", softmax, [(8192, 1024)], 2),
    ("layernorm", "layernorm, 8192x1024", layernorm, [(8192, 1024)], 2),
    ("gelu", "GELU (erf), 4096x4096", gelu, [(4096, 4096)], 2),
    ("latency", "per-call latency, 16x16", small, [(16, 16)] * 2, 3),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--only", nargs="*", help="workload names to run")
    args = ap.parse_args(argv)
    bw = read_bandwidth_gbs()
    print(f"machine: {os.cpu_count()} cores, measured read bandwidth {bw:.1f} GB/s; "
          f"TF {tf.__version__}; medians of {args.runs} runs\n")
    print("| workload | TF graph ms | TF XLA ms | tfjit ms | vs TF graph | vs XLA | tfjit GB/s "
          "| % of bandwidth | XLA auto ms | tfjit auto ms | auto vs tfjit | auto vs XLA auto |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for name, title, fn, shapes, tensors_moved in WORKLOADS:
        if args.only and name not in args.only:
            continue
        inputs = [tf.constant(rng.standard_normal(s, dtype=np.float32)) for s in shapes]
        runs = args.runs * (20 if name == "latency" else 1)
        graph = tf.function(fn)
        xla = tf.function(fn, jit_compile=True)
        jit = tfjit.function(fn, jit_compile=True)
        t_graph = median_ms(lambda: graph(*inputs), runs)
        t_xla = median_ms(lambda: xla(*inputs), runs)
        t_jit = median_ms(lambda: jit(*inputs), runs)
        xla_auto = auto_clustered(fn, inputs, "xla")
        jit_auto = auto_clustered(fn, inputs, "tfjit")
        t_xla_auto = median_ms(lambda: xla_auto(*inputs), runs)
        t_auto = median_ms(lambda: jit_auto(*inputs), runs)
        nbytes = tensors_moved * int(np.prod(shapes[0])) * 4
        gbs = nbytes / (t_jit / 1e3) / 1e9
        print(f"| {title} | {t_graph:.3f} | {t_xla:.3f} | {t_jit:.3f} | {t_graph / t_jit:.2f}x | "
              f"{t_xla / t_jit:.2f}x | {gbs:.1f} | {100 * gbs / bw:.0f}% | {t_xla_auto:.3f} | "
              f"{t_auto:.3f} | {t_jit / t_auto:.2f}x | {t_xla_auto / t_auto:.2f}x |", flush=True)
    # compile time of the seed example in a warm process: a fresh function and a shape
    # not seen before, so nothing comes from the compile cache
    x = [tf.constant(rng.standard_normal((4095, 4096), dtype=np.float32)) for _ in range(3)]
    fresh = tfjit.function(lambda a, b, c: tf.reduce_sum(a + b * c), jit_compile=True)
    t = time.perf_counter()
    fresh(*x)
    print(f"\nseed example: first call (trace + compile + run) {1e3 * (time.perf_counter() - t):.0f} ms; "
          f"compile alone {1e3 * fresh.compiled(*x).seconds:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
