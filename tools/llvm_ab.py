"""Two LLVM pipelines A/B in one process: compile time and kernel speed, interleaved.

    python tools/llvm_ab.py                        # every row, O3 against the default
    python tools/llvm_ab.py --a o3 --b o3-nounroll --runs 21 --sets bench train
    python tools/llvm_ab.py --sets reduce --reduce-only wide-64x65536 --match "last sum"

Each row is compiled once per pipeline, LLVM in this process
(``--tfjit_compile_in_process``), under each pipeline of ``llvm_target.PIPELINES`` (its
optimisation pipeline, the code generator's opt level for MCJIT's target machine and
its LLVM options), and the executables are timed round-robin (one call of each per
round) by the process's CPU time, on one intra-op thread (``--threads``): on a machine
shared with other work, wall time mostly measures waiting for a core.  Each row prints
both medians, B's speed against A's (median, and fastest run against fastest run: above
1 means B's code is faster) and each side's LLVM CPU time (``llvm_cpu.compile_ir``'s
thread: optimisation, code generation, loading; with ``--compile-rounds``, the median
of that many more compiles of the row's IR, alternating pipelines).  Several ``--b``
pipelines are each compared with A, all timed in the same rounds.  Rows:
``tools/bench.py``'s workloads, ``tools/reduce_sweep.py``'s rows (``--reduce-only``
narrows them by shape name, ``--match`` by any part of the row's name) and five of
``tools/train_bench.py``'s train steps.  Nothing asserted: read a row that looks slower
again with more ``--runs``.
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


def under(pipeline: str, fn, *args, texts: list | None = None):
    """``fn(*args)`` (its first call: the compile) with LLVM's pipeline set to
    ``pipeline``; CPU seconds LLVM took (optimisation, code generation, loading: this
    thread's CPU time, so other work on the machine does not count).  ``texts``, when
    given, receives the LLVM IR text of each module compiled."""
    saved_optimise, saved_compile = llvm_cpu.optimise, llvm_cpu.compile_ir
    saved_machine = llvm_cpu.new_target_machine
    level = llvm_target.codegen_level(pipeline)
    spent = [0.0]

    def compile_ir(*a, **k):
        if texts is not None:
            texts.append(a[0])
        t = time.thread_time()
        try:
            return saved_compile(*a, **k)
        finally:
            spent[0] += time.thread_time() - t
    llvm_cpu.optimise = lambda mod, tm, _pipeline="default": llvm_target.optimise(mod, tm,
                                                                                 pipeline)
    llvm_cpu.compile_ir = compile_ir
    llvm_cpu.new_target_machine = \
        lambda **k: llvm_target.new_target_machine(**({"opt": level} | k))
    try:
        SERVICE.forget_compiled()   # or B would get A's code from the in-memory cache
        bench._block(fn(*args))
        return spent[0]
    finally:
        llvm_cpu.optimise, llvm_cpu.compile_ir = saved_optimise, saved_compile
        llvm_cpu.new_target_machine = saved_machine


def compile_ms(texts: list, pipelines: list, rounds: int) -> dict:
    """{pipeline: median CPU ms} to compile ``texts`` (LLVM IR) as the compile server does
    (parse, verify, optimise, emit an object for a shared library), one compile per
    pipeline per round, alternating: the first compile of a row (``under``) pays one-off
    costs and, on a shared machine, its CPU time moves with the load by +-30%."""
    llvm = llvm_target.binding()
    machines = {p: llvm_target.new_target_machine(opt=llvm_target.codegen_level(p),
                                                  reloc="pic", codemodel="default", jit=False)
                for p in pipelines}
    times = {p: [] for p in pipelines}
    for _ in range(rounds):
        for p in pipelines:
            t = time.thread_time()
            with llvm_target.LOCK:
                for text in texts:
                    mod = llvm.parse_assembly(text)
                    mod.verify()
                    llvm_target.optimise(mod, machines[p], p)
                    machines[p].emit_object(mod)
            times[p].append(1e3 * (time.thread_time() - t))
    return {p: float(np.median(t)) for p, t in times.items()}


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
    ap.add_argument("--b", nargs="+", default=["default"], choices=sorted(llvm_target.PIPELINES),
                    help="one or more pipelines, each against A in the same rounds")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--sets", nargs="*", default=["bench", "reduce", "train"])
    ap.add_argument("--reduce-only", nargs="*", help="reduce_sweep shape names")
    ap.add_argument("--threads", type=int, default=1,
                    help="TF's intra-op threads (1: the code's own speed, less scheduling noise)")
    ap.add_argument("--match", nargs="*", help="only rows whose name has one of these")
    ap.add_argument("--compile-rounds", type=int, default=0,
                    help="LLVM ms as the median of this many more compiles of each row's IR "
                         "per pipeline, alternating (compile_ms), not the first compile's")
    args = ap.parse_args(argv)
    tfjit.config.set_flags(tfjit_compile_in_process=True)
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    print(f"A = {args.a}, B = {', '.join(args.b)}; medians of {args.runs} interleaved rounds, "
          f"{args.threads or 'all'} intra-op thread(s); load {os.getloadavg()[0]:.1f}")
    print("| row | B | A CPU ms | B CPU ms | B speed / A | same, fastest runs | A LLVM ms "
          "| B LLVM ms |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = {b: [] for b in args.b}
    compile_a, compile_b = 0.0, dict.fromkeys(args.b, 0.0)
    for name, make in rows(args.sets, args.reduce_only):
        if args.match and not any(m in name for m in args.match):
            continue
        built = {"a": make()} | {b: make() for b in args.b}
        texts: list = []
        spent = {k: under(args.a if k == "a" else k, f, *x, texts=texts if k == "a" else None)
                 for k, (f, x) in built.items()}
        if args.compile_rounds:
            again = compile_ms(texts, [args.a] + args.b, args.compile_rounds)
            spent = {k: again[args.a if k == "a" else k] / 1e3 for k in spent}
        ms = cpu_ms({k: (lambda f=f, x=x: f(*x)) for k, (f, x) in built.items()}, args.runs)
        a = float(np.median(ms["a"]))
        compile_a += spent["a"]
        for k in args.b:
            b = float(np.median(ms[k]))
            fastest = float(np.min(ms["a"]) / np.min(ms[k]))
            ratios[k].append((a / b, fastest, name))
            compile_b[k] += spent[k]
            print(f"| {name} | {k} | {a:.3f} | {b:.3f} | {a / b:.3f} | {fastest:.3f} "
                  f"| {1e3 * spent['a']:.0f} | {1e3 * spent[k]:.0f} |", flush=True)
    print(f"\nLLVM CPU: A ({args.a}) {compile_a:.2f} s")
    for k in args.b:
        worst = sorted(ratios[k])[:6]
        print(f"  B {k}: {compile_b[k]:.2f} s ({compile_b[k] / max(compile_a, 1e-9):.3f} of A); "
              "slowest rows (median, fastest): "
              + ", ".join(f"{r:.3f} {f:.3f} {n}" for r, f, n in worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
