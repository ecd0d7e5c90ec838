"""What the persistent compile cache saves when a process starts again.

    python tools/cache_bench.py                 # bench.py's workloads, 3 rounds
    python tools/cache_bench.py --rounds 5 --only seed softmax

Each round starts three fresh processes that compile the same workloads:
``off`` (no persistent cache), ``cold`` (an empty cache directory: compile and
write) and ``warm`` (the directory ``cold`` filled: load the machine code).
Per workload it reports the compile time (``Compiled.seconds``: lowering,
passes, LLVM IR emission, then either LLVM O3 + codegen or loading the cached
object) and the first call (trace + compile + run), medians over the rounds,
plus each process's wall time from start to exit (TensorFlow's import included).
The machine may be shared and noisy; nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("off", "cold", "warm")


def child(only) -> None:
    """One process: compile every workload once, print what it measured as JSON."""
    sys.path.insert(0, REPO)
    import tensorflow as tf

    import tfjit
    from tfjit.runtime import diskcache
    from tools.bench import WORKLOADS

    out = {}
    for name, _title, fn, shapes, _moved in WORKLOADS:
        if only and name not in only:
            continue
        inputs = [tf.ones(s, tf.float32) for s in shapes]
        f = tfjit.function(fn, jit_compile=True)
        t = time.perf_counter()
        tf.nest.map_structure(lambda r: r.shape, f(*inputs))
        first = time.perf_counter() - t
        code = f.compiled(*inputs)
        out[name] = dict(compile=code.seconds, first_call=first, from_cache=code.code.from_cache)
    cache = diskcache.active()
    out["_stats"] = vars(cache.stats) if cache else None
    print(json.dumps(out))


def run_child(mode: str, directory: str, only) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    env.pop("TFJIT_FLAGS", None)
    env.pop("TFJIT_CACHE_DIR", None)
    if mode != "off":
        env["TFJIT_CACHE_DIR"] = directory
    cmd = [sys.executable, os.path.abspath(__file__), "--child"] + (["--only", *only] if only else [])
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    if p.returncode:
        raise SystemExit(f"{mode} process failed:\n{p.stderr[-3000:]}")
    result = json.loads(p.stdout.strip().splitlines()[-1])
    result["_wall"] = wall
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="workload names (tools/bench.py)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.only)
        return 0
    runs = {m: [] for m in MODES}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            directory = os.path.join(tmp, "cache")
            for mode in MODES:
                runs[mode].append(run_child(mode, directory, args.only))
    for r in runs["warm"]:
        missed = [k for k, v in r.items() if not k.startswith("_") and not v["from_cache"]]
        if missed:
            raise SystemExit(f"warm process recompiled {missed}: the cache did not work")
    names = [k for k in runs["off"][0] if not k.startswith("_")]

    def med(mode, name, what):
        return 1e3 * float(np.median([r[name][what] for r in runs[mode]]))

    print(f"medians of {args.rounds} rounds; ms\n")
    print("| workload | compile, no cache | compile, cold cache | compile, warm cache | saved "
          "| first call, no cache | first call, warm cache |")
    print("|---|---|---|---|---|---|---|")
    totals = dict(off=0.0, cold=0.0, warm=0.0)
    for n in names:
        c = {m: med(m, n, "compile") for m in MODES}
        for m in MODES:
            totals[m] += c[m]
        print(f"| {n} | {c['off']:.1f} | {c['cold']:.1f} | {c['warm']:.1f} "
              f"| {100 * (1 - c['warm'] / c['off']):.0f}% | {med('off', n, 'first_call'):.1f} "
              f"| {med('warm', n, 'first_call'):.1f} |")
    print(f"| **all** | {totals['off']:.1f} | {totals['cold']:.1f} | {totals['warm']:.1f} "
          f"| {100 * (1 - totals['warm'] / totals['off']):.0f}% | | |")
    wall = {m: float(np.median([r["_wall"] for r in runs[m]])) for m in MODES}
    print(f"\nprocess wall time (start to exit, TF import included): off {wall['off']:.2f} s, "
          f"cold {wall['cold']:.2f} s, warm {wall['warm']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
