"""Reductions of every layout: tfjit against TF graph mode and TF's XLA, in one process.

    python tools/reduce_sweep.py                 # every row, 10 timed rounds each
    python tools/reduce_sweep.py --runs 20 --only tall-8192x2048
    python tools/reduce_sweep.py --ops argmax --forms bare expr --axes 0 last

Rows are the product of
* shapes: tall (65536x64, 8192x2048), square (4096x4096), wide (64x65536), 3-D
  (64x512x256, reduced over its middle axis);
* axes: 0 / middle / last / all (the 2-D shapes take 0, last and all), keepdims on
  for the "expr" and "two-pass" forms;
* ops: sum, mean, max, argmax;
* forms: bare; behind a fused elementwise producer (``op(exp(x) * 0.5 + x)``); and
  two-pass (a statistic, then an expression of it: ``mean((x - mean(x))**2)``);
* f32, and bf16 for the bare sum.

Each row prints the medians (variants timed round-robin, as tools/bench.py does),
tfjit's read throughput against the machine's measured read bandwidth (bytes: the
input read once per pass the form needs) and the ratio to XLA.  The machine may be
shared and noisy: medians, nothing asserted.  Not every row is at its limit yet;
the table in docs/performance.md says which.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tensorflow as tf  # noqa: E402

from tools.bench import peer_medians, print_slowest, read_bandwidth_gbs  # noqa: E402

SHAPES = {"tall-65536x64": (65536, 64), "tall-8192x2048": (8192, 2048), "square-4096": (4096, 4096),
          "wide-64x65536": (64, 65536), "3d-64x512x256": (64, 512, 256)}
OPS = {"sum": tf.reduce_sum, "mean": tf.reduce_mean, "max": tf.reduce_max,
       "argmax": lambda x, axis, keepdims=False: tf.argmax(x, axis=axis)}


def axes_of(shape) -> dict:
    if len(shape) == 3:
        return {"middle": 1}
    return {"0": 0, "last": 1, "all": None}


def form(op: str, name: str, axis):
    reduce = OPS[op]

    def bare(x):
        return reduce(x, axis=axis)

    def expr(x):
        return reduce(tf.exp(x) * 0.5 + x, axis=axis)

    def two_pass(x):
        centred = x - tf.reduce_mean(x, axis=axis, keepdims=True)
        return reduce(centred * centred, axis=axis)
    return {"bare": (bare, 1), "expr": (expr, 1), "two-pass": (two_pass, 2)}[name]


def rows(only=None, ops=None, forms=None, axes=None):
    for sname, shape in SHAPES.items():
        if only and sname not in only:
            continue
        for aname, axis in axes_of(shape).items():
            if axes and aname not in axes:
                continue
            for op in OPS:
                if (op == "argmax" and axis is None) or (ops and op not in ops):
                    continue          # tf.argmax takes one axis
                for fname in ("bare", "expr", "two-pass"):
                    if not forms or fname in forms:
                        yield sname, shape, aname, axis, op, fname, tf.float32
            if (not ops or "sum" in ops) and (not forms or "bare" in forms):
                yield sname, shape, aname, axis, "sum", "bare", tf.bfloat16


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--only", nargs="*", help="shape names: " + ", ".join(SHAPES))
    ap.add_argument("--ops", nargs="*", help="ops: " + ", ".join(OPS))
    ap.add_argument("--forms", nargs="*", help="forms: bare, expr, two-pass")
    ap.add_argument("--axes", nargs="*", help="axes: 0, last, all, middle")
    args = ap.parse_args(argv)
    bw = read_bandwidth_gbs()
    print(f"machine: {os.cpu_count()} cores, measured read bandwidth {bw:.1f} GB/s; "
          f"TF {tf.__version__}; medians of {args.runs} rounds")
    print("| shape | axis | op | form | dtype | TF graph ms | TF XLA ms | tfjit ms | vs XLA "
          "| tfjit GB/s | % of bandwidth |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    worst = []
    for sname, shape, aname, axis, op, fname, dtype in rows(args.only, args.ops, args.forms, args.axes):
        x = tf.cast(tf.constant(rng.standard_normal(shape).astype(np.float32)), dtype)
        fn, passes = form(op, fname, axis)
        try:
            med = peer_medians(fn, [x], args.runs)
        except (tf.errors.OpError, ValueError) as e:
            print(f"| {sname} | {aname} | {op} | {fname} | {dtype.name} | failed: "
                  f"{str(e).splitlines()[0][:80]} |||||")
            continue
        gbs = x.shape.num_elements() * dtype.size * passes / (med["tfjit"] / 1e3) / 1e9
        ratio = med["xla"] / med["tfjit"]
        worst.append((ratio, sname, aname, op, fname, dtype.name))
        print(f"| {sname} | {aname} | {op} | {fname} | {dtype.name} | {med['graph']:.2f} | "
              f"{med['xla']:.2f} | {med['tfjit']:.2f} | {ratio:.2f}x | {gbs:.1f} | "
              f"{100 * gbs / bw:.0f}% |", flush=True)
    print_slowest(worst, "XLA")
    return 0


if __name__ == "__main__":
    sys.exit(main())
