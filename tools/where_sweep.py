"""`tf.where(x > 0.5)` (one-operand Where, the core of tf.boolean_mask) across sizes and
densities: tfjit against TF graph mode and TF's XLA, in one process.

    python tools/where_sweep.py               # 4096 .. 1M elements, 1% and 50% non-zero
    python tools/where_sweep.py --runs 40 --sizes 65536 131072

tfjit compiles Where into its bound (one row per input element) with a serial scan
and scatter (lower/where.py); past ``lower.where.MAX_ELEMENTS`` it refuses it, because
TF's kernel is faster there.  This sweep is how that bound was set: the rows past it
show what TF and XLA take, and tfjit's column says "refused".  Medians of ``--runs``
calls per variant, the variants timed round-robin (one call of each per round), so a
change in the machine's load shifts every column alike.  Nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tensorflow as tf  # noqa: E402

import tfjit  # noqa: E402
from tfjit.lower.where import MAX_ELEMENTS  # noqa: E402


def _where(x):
    return tf.where(x > 0.5)


def _variants() -> dict:
    """name -> a function of x (each traced and compiled on its first call)."""
    return {"TF graph": tf.function(_where), "TF XLA": tf.function(_where, jit_compile=True),
            "tfjit": tfjit.function(_where, jit_compile=True)}


def _row(variants: dict, x: tf.Tensor, runs: int) -> dict:
    """Median ms per variant; None where tfjit refuses the size."""
    live = {}
    for name, fn in variants.items():
        if name == "tfjit" and x.shape.num_elements() > MAX_ELEMENTS:
            continue
        fn(x).numpy()                                  # compile and warm up
        live[name] = []
    for _ in range(runs):
        for name in live:
            t = time.perf_counter()
            variants[name](x).numpy()
            live[name].append(time.perf_counter() - t)
    return {name: (float(np.median(live[name]) * 1e3) if name in live else None)
            for name in variants}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=25)
    ap.add_argument("--sizes", type=int, nargs="+",
                    default=[4096, 16384, 65536, 131072, 262144, 1048576])
    ap.add_argument("--densities", type=float, nargs="+", default=[0.01, 0.5])
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    variants = _variants()
    print(f"machine: {os.cpu_count()} cores; TF {tf.__version__}; medians of {args.runs} calls, "
          f"round-robin; tfjit's bound: {MAX_ELEMENTS} elements\n")
    print("| elements | non-zero | TF graph ms | TF XLA ms | tfjit ms | tfjit vs TF graph | tfjit vs XLA |")
    print("|---|---|---|---|---|---|---|")
    for n in args.sizes:
        for density in args.densities:
            x = tf.constant((rng.random(n) < density).astype(np.float32))
            ms = _row(variants, x, args.runs)
            mine = ms["tfjit"]
            cells = [f"{ms['TF graph']:.3f}", f"{ms['TF XLA']:.3f}",
                     "refused" if mine is None else f"{mine:.3f}",
                     "-" if mine is None else f"{ms['TF graph'] / mine:.2f}x",
                     "-" if mine is None else f"{ms['TF XLA'] / mine:.2f}x"]
            print(f"| {n} | {density:.0%} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
