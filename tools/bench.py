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

The variants of a workload are timed round-robin (one call of each per round;
20 calls in a row for the per-call latency row, which reports their mean), so a
change in the machine's load shifts every column alike.  An auto mode is
switched on around each call of its function only, outside the timed region:
TensorFlow keys a function's instantiation by the session config in effect at
the call (``global_jit_level`` among it), so a function called after its mode
was switched off would be instantiated again, unclustered, and the column
would time TF graph mode instead.  ``--spread`` adds each column's
25th-75th percentile range.
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
from tfjit.codegen import tiering  # noqa: E402


# Untimed calls before timing: tfjit measures which of TF's kernels a library call runs
# over its first calls (up to 12: an untimed and three timed runs of each of three
# kernels, runtime/kernel_choice.cc), so until then a call may run a slower one.
WARMUP = 12


def median_ms(fn, runs: int, warmup: int = WARMUP) -> float:
    return float(np.median(time_ms({"fn": Variant(fn)}, runs, warmup)["fn"]))


class Variant:
    """A callable to time, with ``enter``/``exit`` run around each timing, untimed.
    ``once()`` times ``repeat`` calls in a row and returns seconds per call."""

    def __init__(self, fn, enter=None, exit=None, repeat: int = 1):
        self.fn, self.enter, self.exit, self.repeat = fn, enter, exit, repeat

    def once(self) -> float:
        if self.enter:
            self.enter()
        try:
            t = time.perf_counter()
            for _ in range(self.repeat):
                _block(self.fn())
            return (time.perf_counter() - t) / self.repeat
        finally:
            if self.exit:
                self.exit()


def time_ms(variants: dict, runs: int, warmup: int = WARMUP) -> dict:
    """{name: array of ms}: ``warmup`` untimed rounds, then ``runs`` rounds of one call
    of every variant in turn.  Timing starts once tfjit's optimised builds are in
    (codegen/tiering.py): until then a big module runs its quick first tier, and a
    model's train step could still be in it after the warm-up."""
    for _ in range(warmup):
        for v in variants.values():
            v.once()
    tiering.wait_all()
    times = {k: [] for k in variants}
    for _ in range(runs):
        for k, v in variants.items():
            times[k].append(v.once() * 1e3)
    return {k: np.array(t) for k, t in times.items()}


def peer_medians(fn, xs, runs: int) -> dict:
    """{"graph", "xla", "tfjit": median ms} of ``fn(*xs)`` as a tf.function, with TF's
    XLA and with tfjit, the three timed round-robin (the sweeps' rows).  A variant that
    refuses the function (TF's XLA has no ResizeNearestNeighborGrad on the CPU) is NaN,
    and the others are timed without it."""
    variants = {"graph": tf.function(fn), "xla": tf.function(fn, jit_compile=True),
                "tfjit": tfjit.function(fn, jit_compile=True)}
    refused = set()
    for k, f in variants.items():
        try:
            f(*xs)
        except tf.errors.OpError as e:
            print(f"  ({k} refuses it: {type(e).__name__}: {str(e).splitlines()[0][:160]})")
            refused.add(k)
    ms = time_ms({k: Variant(lambda f=f: f(*xs)) for k, f in variants.items() if k not in refused},
                 runs)
    return {k: float(np.median(ms[k])) if k in ms else float("nan") for k in variants}


def print_slowest(worst: list, against: str) -> None:
    """The eight rows of ``worst`` ((ratio, *names)) with the lowest ratio."""
    worst.sort()
    print(f"\nslowest against {against}:",
          ", ".join(f"{r:.2f}x {' '.join(names)}" for r, *names in worst[:8]))


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


def _mode_on(mode: str) -> None:
    if mode == "xla":
        tfjit.config.set_flags(tfjit_auto_jit=-1)    # tfjit would follow XLA's jit level too
        _set_tf_jit("autoclustering")
    else:
        tfjit.config.set_jit("autoclustering")


def _mode_off(mode: str = "both") -> None:
    if mode != "tfjit":
        _set_tf_jit(False)
    tfjit.config.set_flags(tfjit_auto_jit=0, tfjit_cpu_global_jit=False)


def _set_tf_jit(level) -> None:
    """``tf.config.optimizer.set_jit``, paying here (untimed) for the function-call
    options it drops, which TF would otherwise rebuild in the next timed call."""
    from tensorflow.python.eager import context
    tf.config.optimizer.set_jit(level)
    context.context().function_call_options   # noqa: B018 - rebuilt on access


def auto_clustered(fn, inputs, mode: str, repeat: int = 1) -> Variant:
    """``tf.function(fn)`` instantiated (at its first call) under an auto-clustering mode,
    "xla" (TF's) or "tfjit", as a Variant that switches the mode on around its calls:
    the rest of the process runs with both modes off."""
    from tfjit.api import autojit
    f = tf.function(fn)
    before = autojit.stats["graphs_clustered"]
    variant = Variant(lambda: f(*inputs), lambda: _mode_on(mode), lambda: _mode_off(mode),
                      repeat)
    variant.once()
    if mode == "tfjit" and autojit.stats["graphs_clustered"] == before:
        print(f"note: tfjit auto mode found no cluster in {fn.__name__}", file=sys.stderr)
    return variant


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


def gelu_exact(x):
    """Keras's and tf.nn.gelu's default, exact GELU: TF computes 0.5 x erfc(-x / sqrt 2)."""
    return tf.nn.gelu(x, approximate=False)


def mish(x):
    """keras.activations.mish: TF graph mode runs oneDNN's fused Mish for it."""
    return x * tf.tanh(tf.nn.softplus(x))


def cast_i32(x):
    return tf.cast(x * 10.0, tf.int32)


def small(x, y):
    return tf.nn.relu(x * y + 1.0)


WORKLOADS = [
    ("seed", "reduce_sum(x + y*z), 4096x4096", seed, [(4096, 4096)] * 3, 3),
    ("chain10", "10-op elementwise chain, 4096x4096", chain10, [(4096, 4096)] * 2, 3),
    ("softmax", "softmax, 8192x1024", softmax, [(8192, 1024)], 2),
    ("layernorm", "layernorm, 8192x1024", layernorm, [(8192, 1024)], 2),
    ("gelu", "GELU (erf), 4096x4096", gelu, [(4096, 4096)], 2),
    ("gelu_exact", "tf.nn.gelu (exact: erfc), 4096x4096", gelu_exact, [(4096, 4096)], 2),
    ("mish", "Mish, 4096x4096", mish, [(4096, 4096)], 2),
    ("cast_i32", "cast float32 -> int32, 4096x4096", cast_i32, [(4096, 4096)], 2),
    ("latency", "per-call latency, 16x16", small, [(16, 16)] * 2, 3),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--only", nargs="*", help="workload names to run")
    ap.add_argument("--spread", action="store_true",
                    help="show each column's 25th-75th percentile range")
    args = ap.parse_args(argv)
    _mode_off()    # an explicit session config from the start: see the module docstring
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
        rep = 20 if name == "latency" else 1     # calls per timing: per-call latency, warm
        graph, xla = tf.function(fn), tf.function(fn, jit_compile=True)
        jit = tfjit.function(fn, jit_compile=True)
        variants = {"graph": Variant(lambda: graph(*inputs), repeat=rep),
                    "xla": Variant(lambda: xla(*inputs), repeat=rep),
                    "jit": Variant(lambda: jit(*inputs), repeat=rep),
                    "xla_auto": auto_clustered(fn, inputs, "xla", rep),
                    "auto": auto_clustered(fn, inputs, "tfjit", rep)}
        times = time_ms(variants, args.runs)
        t = {k: float(np.median(v)) for k, v in times.items()}

        def cell(k):
            if not args.spread:
                return f"{t[k]:.3f}"
            lo, hi = np.percentile(times[k], [25, 75])
            return f"{t[k]:.3f} ({lo:.3f}-{hi:.3f})"
        nbytes = tensors_moved * int(np.prod(shapes[0])) * 4
        gbs = nbytes / (t["jit"] / 1e3) / 1e9
        print(f"| {title} | {cell('graph')} | {cell('xla')} | {cell('jit')} | "
              f"{t['graph'] / t['jit']:.2f}x | {t['xla'] / t['jit']:.2f}x | {gbs:.1f} | "
              f"{100 * gbs / bw:.0f}% | {cell('xla_auto')} | {cell('auto')} | "
              f"{t['jit'] / t['auto']:.2f}x | {t['xla_auto'] / t['auto']:.2f}x |", flush=True)
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
