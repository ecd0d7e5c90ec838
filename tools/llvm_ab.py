"""Two LLVM pipelines A/B in one process: compile time and kernel speed, interleaved.

    python tools/llvm_ab.py                        # every row, O3 against the default
    python tools/llvm_ab.py --a o3 --b o3-nounroll --runs 21 --sets bench train
    python tools/llvm_ab.py --sets reduce --reduce-only wide-64x65536 --match "last sum"

Each row is compiled twice, LLVM in this process (``--tfjit_compile_in_process``),
once under each pipeline of ``llvm_target.PIPELINES``, and the two executables are
timed round-robin (one call of each per round) by the process's CPU time, on one
intra-op thread (``--threads``): on a machine shared with other work, wall time mostly
measures waiting for a core.  Each row prints both medians, B's speed against A's
(median, and fastest run against fastest run: above 1 means B's code is faster) and
each side's LLVM time (``llvm_cpu.compile_ir``: optimisation, code generation,
loading).  Rows: ``tools/bench.py``'s workloads, ``tools/reduce_sweep.py``'s rows
(``--reduce-only`` narrows them by shape name, ``--match`` by any part of the row's
name) and five of ``tools/train_bench.py``'s train steps.  Nothing asserted: read a
row that looks slower again with more ``--runs``.
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
from tfjit.api.service import SERVICE  # noqa: E402
from tfjit.codegen import llvm_cpu, llvm_target  # noqa: E402
from tools import bench, reduce_sweep, train_bench  # noqa: E402


def under(pipeline: str, fn, *args):
    """``fn(*args)`` (its first call: the compile) with LLVM's pipeline set to
    ``pipeline``; seconds LLVM took (optimisation and code generation, in this process)."""
    saved_optimise, saved_compile = llvm_cpu.optimise, llvm_cpu.compile_ir
    spent = [0.0]

    def compile_ir(*a, **k):
        t = time.perf_counter()
        try:
            return saved_compile(*a, **k)
        finally:
            spent[0] += time.perf_counter() - t
    llvm_cpu.optimise = lambda mod, tm: llvm_target.optimise(mod, tm, pipeline)
    llvm_cpu.compile_ir = compile_ir
    try:
        SERVICE.forget_compiled()   # or B would get A's code from the in-memory cache
        bench._block(fn(*args))
        return spent[0]
    finally:
        llvm_cpu.optimise, llvm_cpu.compile_ir = saved_optimise, saved_compile


def cpu_ms(variants: dict, runs: int, warmup: int = 3) -> dict:
    """{name: array of CPU ms per call} (the process's CPU time, every thread's: on a
    shared machine, time spent waiting for a core is not the code's), one call of each
    variant per round, after ``warmup`` untimed rounds."""
    for _ in range(warmup):
        for fn in variants.values():
            bench._block(fn())
    times = {k: [] for k in variants}
    for _ in range(runs):
        for k, fn in variants.items():
            t = time.process_time()
            bench._block(fn())
            times[k].append(1e3 * (time.process_time() - t))
    return {k: np.array(t) for k, t in times.items()}


def rows(sets, reduce_only):
    """(name, make) pairs; ``make()`` -> (function, arguments), a fresh copy per call."""
    rng = np.random.default_rng(0)
    if "bench" in sets:
        for name, _, fn, shapes, _ in bench.WORKLOADS:
            args = [tf.constant(rng.standard_normal(s, dtype=np.float32)) for s in shapes]
            yield name, (lambda fn=fn, args=args: (tfjit.function(fn, jit_compile=True), args))
    if "reduce" in sets:
        for sname, shape, aname, axis, op, fname, dtype in reduce_sweep.rows(reduce_only):
            x = tf.cast(tf.constant(rng.standard_normal(shape).astype(np.float32)), dtype)
            fn, _ = reduce_sweep.form(op, fname, axis)
            yield (f"{sname} {aname} {op} {fname} {dtype.name}",
                   lambda fn=fn, x=x: (tfjit.function(fn, jit_compile=True), [x]))
    if "train" in sets:
        for name in ("mlp", "softmax", "cnn", "attn_train", "swiglu_train"):
            def make(name=name):
                fn, args = train_bench.WORKLOADS[name][1](np.random.default_rng(0))
                return tfjit.function(fn, jit_compile=True), list(args)
            yield "train " + name, make


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", default="o3", choices=sorted(llvm_target.PIPELINES))
    ap.add_argument("--b", default="default", choices=sorted(llvm_target.PIPELINES))
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--sets", nargs="*", default=["bench", "reduce", "train"])
    ap.add_argument("--reduce-only", nargs="*", help="reduce_sweep shape names")
    ap.add_argument("--threads", type=int, default=1,
                    help="TF's intra-op threads (1: the code's own speed, less scheduling noise)")
    ap.add_argument("--match", nargs="*", help="only rows whose name has one of these")
    args = ap.parse_args(argv)
    tfjit.config.set_flags(tfjit_compile_in_process=True)
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    print(f"A = {args.a}, B = {args.b}; medians of {args.runs} interleaved rounds, "
          f"{args.threads or 'all'} intra-op thread(s); load {os.getloadavg()[0]:.1f}")
    print("| row | A CPU ms | B CPU ms | B speed / A | same, fastest runs | A LLVM ms "
          "| B LLVM ms |")
    print("|---|---|---|---|---|---|---|")
    ratios, compile_a, compile_b = [], 0.0, 0.0
    for name, make in rows(args.sets, args.reduce_only):
        if args.match and not any(m in name for m in args.match):
            continue
        (fa, xa), (fb, xb) = make(), make()
        ca = under(args.a, fa, *xa)
        cb = under(args.b, fb, *xb)
        ms = cpu_ms({"a": lambda: fa(*xa), "b": lambda: fb(*xb)}, args.runs)
        a, b = float(np.median(ms["a"])), float(np.median(ms["b"]))
        fastest = float(np.min(ms["a"]) / np.min(ms["b"]))
        ratios.append((a / b, name))
        compile_a, compile_b = compile_a + ca, compile_b + cb
        print(f"| {name} | {a:.3f} | {b:.3f} | {a / b:.3f} | {fastest:.3f} | {1e3 * ca:.0f} "
              f"| {1e3 * cb:.0f} |", flush=True)
    ratios.sort()
    print(f"\nLLVM: A {compile_a:.1f} s, B {compile_b:.1f} s; slowest B rows: "
          + ", ".join(f"{r:.3f} {n}" for r, n in ratios[:6]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
