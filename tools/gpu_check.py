"""The GPU check: tfjit's PTX run on an NVIDIA GPU against the IR interpreter, and timed.

Two halves, because the GPU machine has no TensorFlow (and may have another LLVM):

    # here (TensorFlow, llvmlite with NVPTX): the op table's and the random graphs'
    # modules, as the tests compile them, and the timed workloads, each compiled to
    # PTX here and packed with its IR into one file to carry
    TFJIT_COLLECT_MODULES=gpu_modules python -m pytest -q tests/test_ops.py \\
        tests/test_ops_math.py tests/test_diag_ops.py tests/test_random_graphs.py
    python tools/gpu_row_modules.py gpu_modules     # long rows, which GPU threads share
    python tools/gpu_check.py prepare gpu_modules --carry gpu_carry

    # on the GPU machine (cuda-python, CuPy; JAX and torch for the peers; no LLVM needed)
    PYTHONPATH=. python tools/gpu_check.py run gpu_carry --out $OUT

``run`` loads every module's PTX through runtime/cuda.py, runs it on random inputs
and compares with the interpreter (the bounds of tfjit-run-module).  Then it times,
in the same process: the device-to-device copy bandwidth (CuPy), the seed
reduce_sum(x + y*z) on 2^28 elements, softmax and layernorm on 8192x8192, a
10-op elementwise chain, and sums of 8192x8192 over each axis and of [2^21, 64] over
its rows, each against JAX ``jit`` and ``torch.compile`` on the same
arrays, with each tfjit step timed alone too.  A time is the median of 11 rounds of
10 calls enqueued back to back (so the host's launch cost overlaps the device's
work, as in a real program).  It writes gpu_check.json after each phase and prints
a summary; ``--compare-seconds`` caps the comparison so the whole run stays
within a few minutes.
"""
from __future__ import annotations

import argparse
import json
import lzma
import os
import pickle
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SEED_N = 1 << 14          # [2^14, 2^14]: 2^28 elements
ROWS = 8192
ARCH = "sm_90"            # the H200 the check was written for; --arch for another
PACK = "programs.pkl.xz"
TIMED = ("seed", "softmax", "layernorm", "chain10", "rowsum", "colsum", "rowsum64")
NARROW = (1 << 21, 64)    # rows of 64: a reduction whose rows are shorter than a block


def _workloads():
    """(name, fn, specs) of the timed workloads, built with TensorFlow (prepare only)."""
    import tensorflow as tf

    def seed(x, y, z):
        return tf.reduce_sum(x + y * z)

    def softmax(x):
        return tf.nn.softmax(x)

    def layernorm(x):
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + 1e-5)

    def chain(x, y):
        z = x * y + 1.0
        z = tf.maximum(z, 0.0) * 0.5 - y
        z = tf.abs(z) + x * x
        z = tf.minimum(z, 3.0) / (y * y + 1.0)
        return z * 2.0 - x

    big = tf.TensorSpec([SEED_N, SEED_N])
    rows = tf.TensorSpec([ROWS, ROWS])
    return [("seed", seed, [big] * 3), ("softmax", softmax, [rows]),
            ("layernorm", layernorm, [rows]), ("chain10", chain, [big, big]),
            ("rowsum", lambda x: tf.reduce_sum(x, axis=-1), [rows]),
            ("colsum", lambda x: tf.reduce_sum(x, axis=0), [rows]),
            ("rowsum64", lambda x: tf.reduce_sum(x, axis=-1), [tf.TensorSpec(NARROW)])]


def _checks():
    """(name, fn, specs) of the modules the error checks run (prepare only)."""
    import tensorflow as tf
    return [("gather", lambda x, i: tf.gather(x, i) * 2.0,
             [tf.TensorSpec([1000]), tf.TensorSpec([8], tf.int32)])]


def _compile(item):
    """(name, IR text, cuda.Program or None, why refused) for one module."""
    name, text, arch = item
    from tfjit import pipeline
    from tfjit.codegen.target import NotForTarget
    from tfjit.ir.text import parse_module
    try:
        return name, text, pipeline.compile_ptx(parse_module(text), name, arch).program(), ""
    except NotForTarget as e:
        return name, text, None, str(e)


def prepare(directory: str, carry: str, arch: str, processes: int) -> None:
    """Compiles the collected modules and the timed workloads to PTX for ``arch`` and
    packs them, with their IR, into ``carry``/programs.pkl.xz."""
    import multiprocessing
    import tfjit
    items = [(n[:-4], open(os.path.join(directory, n)).read(), arch)
             for n in sorted(os.listdir(directory)) if n.endswith(".txt")]
    timed = [(prefix + name, tfjit.function(fn, jit_compile=True)
              .experimental_get_compiler_ir(*specs)(), arch)
             for prefix, table in (("timed_", _workloads()), ("check_", _checks()))
             for name, fn, specs in table]
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        done = pool.map(_compile, items + timed, chunksize=8)
    os.makedirs(carry, exist_ok=True)
    with lzma.open(os.path.join(carry, PACK), "wb", preset=6) as f:
        pickle.dump({"arch": arch, "modules": done}, f)
    refused = sum(p is None for _, _, p, _ in done)
    print(f"{len(done)} modules ({len(timed)} timed) compiled for {arch} in "
          f"{time.perf_counter() - start:.0f} s, {refused} refused; "
          f"{os.path.getsize(os.path.join(carry, PACK)) >> 20} MiB in {carry}/{PACK}")


def _environment() -> dict:
    env = {"python": platform.python_version()}
    for module in ("numpy", "cupy", "jax", "torch", "llvmlite"):
        try:
            env[module] = __import__(module).__version__
        except Exception as e:      # noqa: BLE001 - reported, not needed
            env[module] = f"absent ({type(e).__name__})"
    try:
        from cuda import bindings
        env["cuda-bindings"] = bindings.__version__
        import cupy as cp
        props = cp.cuda.runtime.getDeviceProperties(0)
        env["device"] = props["name"].decode()
        env["sms"] = props["multiProcessorCount"]
        env["driver"] = cp.cuda.runtime.driverGetVersion()
    except Exception as e:          # noqa: BLE001
        env["device_error"] = f"{type(e).__name__}: {e}"
    return env


def compare_modules(modules: list, seconds: float) -> dict:
    """Every module run on the GPU against the interpreter, until ``seconds`` pass."""
    import numpy as np
    from tfjit.api.run_module import DEFAULT_BOUNDS, compare, random_input
    from tfjit.ir import interp
    from tfjit.ir.text import parse_module
    from tfjit.runtime import cuda
    result = {"modules": len(modules), "ran": 0, "refused": 0, "matched": 0, "mismatches": [],
              "errors": [], "refusals": {}, "unchecked": 0}
    rng = np.random.default_rng(0)
    deadline = time.perf_counter() + seconds
    for k, (name, text, program, why) in enumerate(modules):
        if time.perf_counter() > deadline:
            result["unchecked"] = len(modules) - k
            break
        if k % 200 == 0:
            print(f"  {k}/{len(modules)} modules", flush=True)
        if program is None:
            result["refused"] += 1
            reason = why.split(": ", 2)[-1][:90]
            result["refusals"][reason] = result["refusals"].get(reason, 0) + 1
            continue
        try:
            ref = parse_module(text)
            inputs = [random_input(rng, p.dtype, p.shape, False) for p in ref.params]
            try:
                want = interp.evaluate(ref, inputs)
            except (ValueError, ArithmeticError):
                want = None
            try:
                got = cuda.run(program, inputs)
            except cuda.KernelError as e:
                got = e
        except Exception as e:      # noqa: BLE001 - a check reports every failure and goes on
            result["errors"].append(f"{name}: {type(e).__name__}: {str(e)[:300]}")
            continue
        result["ran"] += 1
        if want is None or isinstance(got, Exception):
            if (want is None) != isinstance(got, Exception):
                result["mismatches"].append(f"{name}: reference {'error' if want is None else 'ok'}"
                                            f", gpu {got if isinstance(got, Exception) else 'ok'}")
            else:
                result["matched"] += 1
            continue
        bad = []
        for n, (g, w, o) in enumerate(zip(got, want, ref.outputs)):
            ab, rel = DEFAULT_BOUNDS.get(o.dtype.name, (0.0, 0.0))
            ok, worst = compare(g, w, ab, rel)
            if not ok:
                bad.append(f"{name} output {n} ({o.dtype.name}{list(o.shape)}): {worst}")
        result["mismatches"] += bad
        result["matched"] += not bad
    return result


def check_errors(checks: dict, modules: list, out: str) -> dict:
    """What a user meets on the GPU when something is wrong, and the CLI: a typed
    out-of-memory error, a kernel's error text (and a good run after it), a refused
    unaligned DLPack view, and ``tfjit-run-module --platform=cuda`` on a few modules."""
    import dataclasses
    import subprocess
    import cupy as cp
    import numpy as np
    from tfjit.runtime import cuda
    result = {}
    gather = checks["gather"]
    x, idx = np.arange(1000, dtype=np.float32), np.array([3, 999, 0, 5, 7, 1, 2, 4], np.int32)

    def attempt(what, fn, expect):
        try:
            fn()
            result[what] = "no error raised"
        except expect as e:
            result[what] = f"ok: {type(e).__name__}: {str(e)[:160]}"
        except Exception as e:      # noqa: BLE001 - reported
            result[what] = f"wrong error: {type(e).__name__}: {str(e)[:160]}"
    attempt("out_of_memory", lambda: cuda.run(dataclasses.replace(gather, arena_bytes=1 << 50),
                                              [x, idx]), cuda.GpuOutOfMemory)
    bad = idx.copy()
    bad[1] = 1000
    attempt("kernel_error", lambda: cuda.run(gather, [x, bad]), cuda.KernelError)
    got = cuda.run(gather, [x, idx])[0]
    result["good_run_after_errors"] = bool(np.array_equal(got, x[idx] * 2.0))
    view = cp.arange(1001, dtype=cp.float32)[1:]
    attempt("unaligned_view", lambda: cuda.run_dlpack(gather, [view, cp.asarray(idx)],
                                                      [cp.empty(8, cp.float32)]), ValueError)
    texts = {name: text for name, text, program, _ in modules if program is not None}
    for name in ("x_softmax_8192_float32", "x_col_sum_8x14x14x96_float32", "x_split_sum_2d",
                 "x_short_softmax_17"):
        if name not in texts:
            continue
        path = os.path.join(out, "cli_module.txt")
        with open(path, "w") as f:
            f.write(texts[name])
        done = subprocess.run([sys.executable, "-m", "tfjit.api.run_module", "--platform=cuda",
                               "--iterations=3", path], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
                                  os.path.abspath(__file__)))))
        result["cli_" + name] = f"rc={done.returncode}: " + (done.stdout + done.stderr).strip()[-240:]
    return result


def _time_ms(call, finish, inner: int = 10, rounds: int = 11) -> float:
    """Median over ``rounds`` of the time per call of ``inner`` calls enqueued back to back."""
    finish(call())
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(inner):
            last = call()
        finish(last)
        times.append((time.perf_counter() - start) * 1e3 / inner)
    return sorted(times)[len(times) // 2]


def time_workloads(timed: dict) -> dict:
    import cupy as cp
    import numpy as np
    from tfjit.runtime import cuda
    device_sync = cp.cuda.Device().synchronize
    out = {}
    a = cp.random.standard_normal(SEED_N * SEED_N, dtype=cp.float32)
    b = cp.empty_like(a)
    copy = _time_ms(lambda: b.__setitem__(Ellipsis, a), lambda _: device_sync())
    out["copy_GBps"] = round(2 * a.nbytes / copy / 1e6, 1)
    del a, b
    peers = _peers()
    dev = cuda.Device.get(0)
    for name in TIMED:
        row = out[name] = {}
        try:
            program = timed[name]
            xs = [cp.random.standard_normal(shape, dtype=cp.float32) for _, shape in program.inputs]
            ys = [cp.zeros(shape, cp.float32) for _, shape in program.outputs]
            bound = cuda.Bound(dev, program, [x.data.ptr for x in xs], [y.data.ptr for y in ys])
            ms = _time_ms(bound.launch, lambda _: device_sync())
            bound.check()
            moved = sum(x.nbytes for x in xs) + sum(y.nbytes for y in ys)
            row.update(tfjit_ms=round(ms, 4), tfjit_GBps=round(moved / ms / 1e6, 1),
                       pct_of_copy=round(100 * moved / ms / 1e6 / out["copy_GBps"], 1),
                       steps=[[entry, rows] for entry, rows in program.entries],
                       step_ms=[round(_time_ms(lambda k=k: bound.launch(only=k),
                                               lambda _: device_sync()), 4)
                                for k in range(len(bound.steps))])
            bound.close()
            mine = [cp.asnumpy(y).astype(np.float64) for y in ys]
        except Exception as e:       # noqa: BLE001 - reported; the peers still run
            row["tfjit_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            mine = None
        for peer, (make, finish) in peers.get(name, {}).items():
            try:
                call = make(xs)
                row[peer + "_ms"] = round(_time_ms(call, finish), 4)
                if mine is not None:        # the same numbers as the peer's, loosely
                    theirs = np.asarray(cp.asnumpy(cp.asarray(finish(call()))), np.float64)
                    row[peer + "_max_abs_diff"] = float(np.max(np.abs(theirs - mine[0])))
            except Exception as e:   # noqa: BLE001 - a peer that fails is reported
                row[peer + "_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        print(f"  {name}: {row}", flush=True)
        del xs, ys
        cp.get_default_memory_pool().free_all_blocks()
    return out


def _peers() -> dict:
    """{workload: {peer: (make(xs) -> call, finish(result))}} on the same CuPy arrays."""
    import cupy as cp
    peers: dict = {}
    device_sync = cp.cuda.Device().synchronize
    try:
        import jax
        import jax.numpy as jnp
        fns = {"seed": lambda x, y, z: jnp.sum(x + y * z),
               "softmax": lambda x: jax.nn.softmax(x, axis=-1),
               "layernorm": lambda x: (x - x.mean(-1, keepdims=True)) *
               jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5),
               "chain10": lambda x, y: (jnp.minimum(jnp.abs(jnp.maximum(x * y + 1.0, 0.0) * 0.5 - y)
                                                    + x * x, 3.0) / (y * y + 1.0)) * 2.0 - x,
               "rowsum": lambda x: jnp.sum(x, -1), "colsum": lambda x: jnp.sum(x, 0),
               "rowsum64": lambda x: jnp.sum(x, -1)}

        def jax_finish(r):
            r.block_until_ready()
            return cp.from_dlpack(r)
        for name, fn in fns.items():
            jitted = jax.jit(fn)

            def make(xs, j=jitted):
                args = [jax.dlpack.from_dlpack(x) for x in xs]
                return lambda: j(*args)
            peers.setdefault(name, {})["jax"] = (make, jax_finish)
    except ImportError:
        pass
    try:
        import torch
        tfns = {"seed": lambda x, y, z: torch.sum(x + y * z),
                "softmax": lambda x: torch.softmax(x, -1),
                "layernorm": lambda x: (x - x.mean(-1, keepdim=True)) *
                torch.rsqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5),
                "chain10": lambda x, y: (torch.clamp(torch.abs(torch.clamp(x * y + 1.0, min=0.0) * 0.5
                                                               - y) + x * x, max=3.0)
                                         / (y * y + 1.0)) * 2.0 - x,
                "rowsum": lambda x: torch.sum(x, -1), "colsum": lambda x: torch.sum(x, 0),
                "rowsum64": lambda x: torch.sum(x, -1)}

        def torch_finish(r):
            device_sync()
            return cp.from_dlpack(r)
        for name, fn in tfns.items():
            compiled = torch.compile(fn)

            def make(xs, c=compiled):
                args = [torch.from_dlpack(x) for x in xs]
                return lambda: c(*args)
            peers.setdefault(name, {})["torch_compile"] = (make, torch_finish)
    except ImportError:
        pass
    return peers


def _save(report: dict, out: str) -> None:
    with open(os.path.join(out, "gpu_check.json"), "w") as f:
        json.dump(report, f, indent=1)


def run(carry: str, out: str, seconds: float, skip_timing: bool) -> int:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # CuPy holds memory too
    with lzma.open(os.path.join(carry, PACK), "rb") as f:
        pack = pickle.load(f)
    report = {"arch": pack["arch"], "environment": _environment()}
    print(json.dumps(report), flush=True)
    modules = [m for m in pack["modules"] if not m[0].startswith(("timed_", "check_"))]
    timed = {m[0][len("timed_"):]: m[2] for m in pack["modules"] if m[0].startswith("timed_")}
    checks = {m[0][len("check_"):]: m[2] for m in pack["modules"] if m[0].startswith("check_")}
    start = time.perf_counter()
    c = report["compare"] = compare_modules(modules, seconds)
    c["seconds"] = round(time.perf_counter() - start, 1)
    _save(report, out)
    print(f"{c['ran']} modules ran on {pack['arch']} ({c['matched']} matched), {c['refused']} "
          f"refused, {len(c['mismatches'])} mismatches, {len(c['errors'])} errors, "
          f"{c['unchecked']} not reached, in {c['seconds']:.0f} s", flush=True)
    for line in (c["mismatches"] + c["errors"])[:25]:
        print("  " + line)
    if checks:
        report["errors"] = check_errors(checks, modules, out)
        _save(report, out)
        print(json.dumps(report["errors"], indent=1), flush=True)
    if not skip_timing:
        report["timing"] = time_workloads(timed)
        _save(report, out)
    return 1 if c["mismatches"] or c["errors"] else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["prepare", "run"])
    ap.add_argument("directory", help="prepare: the collected modules; run: the carried pack")
    ap.add_argument("--carry", default="gpu_carry", help="prepare: where the pack goes")
    ap.add_argument("--arch", default=ARCH)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--out", default=".")
    ap.add_argument("--compare-seconds", type=float, default=150.0)
    ap.add_argument("--skip-timing", action="store_true")
    args = ap.parse_args(argv)
    if args.what == "prepare":
        prepare(args.directory, args.carry, args.arch, args.processes)
        return 0
    return run(args.directory, args.out, args.compare_seconds, args.skip_timing)


if __name__ == "__main__":
    sys.exit(main())
