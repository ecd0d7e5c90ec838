"""The GPU check: tfjit's PTX run on an NVIDIA GPU against the IR interpreter, and timed.

Two halves, because the GPU machine has no TensorFlow:

    # here (TensorFlow): the modules to carry -- the op table's and the random graphs',
    # as test_ops/test_random_graphs compile them, and the timed workloads
    TFJIT_COLLECT_MODULES=gpu_modules python -m pytest -q tests/test_ops.py tests/test_random_graphs.py
    python tools/gpu_check.py prepare gpu_modules

    # on the GPU machine (llvmlite, cuda-python, CuPy; JAX and torch for the peers)
    PYTHONPATH=. python tools/gpu_check.py run gpu_modules --out $OUT

``run`` compiles every module for the GPU's arch, runs it through runtime/cuda.py
on random inputs and compares with the interpreter (the same bounds as
tfjit-run-module), then times the seed reduce_sum(x + y*z) on 2^28 elements
against the device-to-device copy bandwidth measured in the same run, softmax and
layernorm on 8192x8192, and a 10-op elementwise chain, each against JAX ``jit`` and
``torch.compile``.  It writes gpu_check.json and prints a summary; keep the whole
run under 5 minutes (``--limit`` caps the modules compared).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SEED_N = 1 << 14          # [2^14, 2^14]: 2^28 elements
ROWS = 8192


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
            ("layernorm", layernorm, [rows]), ("chain10", chain, [big, big])]


def prepare(directory: str) -> None:
    import tfjit
    os.makedirs(os.path.join(directory, "timed"), exist_ok=True)
    for name, fn, specs in _workloads():
        text = tfjit.function(fn, jit_compile=True).experimental_get_compiler_ir(*specs)()
        with open(os.path.join(directory, "timed", name + ".txt"), "w") as f:
            f.write(text)
    print(f"{len(os.listdir(directory)) - 1} modules and {len(_workloads())} timed "
          f"workloads in {directory}")


def _median_ms(fn, sync, runs: int = 20) -> float:
    fn()
    sync()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def compare_modules(directory: str, arch: str, limit: int) -> dict:
    import numpy as np
    from tfjit import pipeline
    from tfjit.api.run_module import DEFAULT_BOUNDS, compare, random_input
    from tfjit.codegen.target import NotForTarget
    from tfjit.ir import interp
    from tfjit.ir.text import parse_module
    from tfjit.runtime import cuda
    names = sorted(n for n in os.listdir(directory) if n.endswith(".txt"))[:limit]
    result = {"modules": len(names), "ran": 0, "refused": 0, "mismatches": [], "errors": []}
    rng = np.random.default_rng(0)
    for k, n in enumerate(names):
        if k % 200 == 0:
            print(f"  {k}/{len(names)} modules", flush=True)
        text = open(os.path.join(directory, n)).read()
        try:
            program = pipeline.compile_ptx(parse_module(text), "m", arch).program()
        except NotForTarget:
            result["refused"] += 1
            continue
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
        result["ran"] += 1
        if want is None or isinstance(got, Exception):
            if (want is None) != isinstance(got, Exception):
                result["mismatches"].append(f"{n}: reference {'error' if want is None else 'ok'}, "
                                            f"gpu {got if isinstance(got, Exception) else 'ok'}")
            continue
        for k, (g, w, o) in enumerate(zip(got, want, ref.outputs)):
            ab, rel = DEFAULT_BOUNDS.get(o.dtype.name, (0.0, 0.0))
            ok, worst = compare(g, w, ab, rel)
            if not ok:
                result["mismatches"].append(f"{n} output {k}: {worst}")
    return result


def time_workloads(directory: str, arch: str) -> dict:
    import cupy as cp
    from tfjit import pipeline
    from tfjit.ir.text import parse_module
    from tfjit.runtime import cuda
    sync = cp.cuda.Device().synchronize
    out = {}
    a = cp.random.standard_normal(SEED_N * SEED_N, dtype=cp.float32)
    b = cp.empty_like(a)
    copy_ms = _median_ms(lambda: b.__setitem__(Ellipsis, a), sync)
    out["copy_GBps"] = 2 * a.nbytes / copy_ms / 1e6
    del a, b
    peers = _peers()
    for name in ("seed", "softmax", "layernorm", "chain10"):
        m = parse_module(open(os.path.join(directory, "timed", name + ".txt")).read())
        program = pipeline.compile_ptx(m, name, arch).program()
        xs = [cp.random.standard_normal(shape, dtype=cp.float32) for _, shape in program.inputs]
        ys = [cp.empty(shape, cp.float32) for _, shape in program.outputs]
        row = {"tfjit_ms": _median_ms(lambda: cuda.run_dlpack(program, xs, ys), sync)}
        moved = sum(x.nbytes for x in xs) + sum(y.nbytes for y in ys)
        row["tfjit_GBps"] = moved / row["tfjit_ms"] / 1e6
        row["pct_of_copy"] = 100 * row["tfjit_GBps"] / out["copy_GBps"]
        for peer, run in peers.get(name, {}).items():
            try:
                row[peer + "_ms"] = _median_ms(run(xs), sync)
            except Exception as e:     # noqa: BLE001 - a peer that fails is reported
                row[peer + "_error"] = f"{type(e).__name__}: {e}"[:200]
        out[name] = row
        del xs, ys
        cp.get_default_memory_pool().free_all_blocks()
    return out


def _peers() -> dict:
    """{workload: {"jax": make(xs) -> fn, "torch_compile": ...}} on the same CuPy arrays."""
    peers: dict = {}
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # CuPy holds memory too
    try:
        import jax
        import jax.numpy as jnp
        fns = {"seed": lambda x, y, z: jnp.sum(x + y * z),
               "softmax": lambda x: jax.nn.softmax(x, axis=-1),
               "layernorm": lambda x: (x - x.mean(-1, keepdims=True)) *
               jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5),
               "chain10": lambda x, y: (jnp.minimum(jnp.abs(jnp.maximum(x * y + 1.0, 0.0) * 0.5 - y)
                                                    + x * x, 3.0) / (y * y + 1.0)) * 2.0 - x}
        for name, fn in fns.items():
            jitted = jax.jit(fn)
            peers.setdefault(name, {})["jax"] = lambda xs, j=jitted: (
                lambda args=[jax.dlpack.from_dlpack(x) for x in xs]:
                j(*args).block_until_ready())
    except ImportError:
        pass
    try:
        import torch
        tfns = {"seed": lambda x, y, z: torch.sum(x + y * z),
                "softmax": lambda x: torch.softmax(x, -1),
                "layernorm": lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:], eps=1e-5),
                "chain10": lambda x, y: (torch.clamp(torch.abs(torch.clamp(x * y + 1.0, min=0.0) * 0.5
                                                               - y) + x * x, max=3.0)
                                         / (y * y + 1.0)) * 2.0 - x}
        for name, fn in tfns.items():
            compiled = torch.compile(fn)
            peers.setdefault(name, {})["torch_compile"] = lambda xs, c=compiled: (
                lambda args=[torch.from_dlpack(x) for x in xs]: c(*args))
    except ImportError:
        pass
    return peers


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["prepare", "run"])
    ap.add_argument("directory")
    ap.add_argument("--out", default=".")
    ap.add_argument("--limit", type=int, default=2000)
    args = ap.parse_args(argv)
    if args.what == "prepare":
        prepare(args.directory)
        return 0
    from tfjit.runtime import cuda
    found = int(cuda.Device.get(0).arch[3:])       # PTX for the newest arch at or below it
    arch = "sm_90" if found >= 90 else "sm_80"
    start = time.perf_counter()
    report = {"arch": arch, "compare": compare_modules(args.directory, arch, args.limit)}
    report["compare"]["seconds"] = time.perf_counter() - start
    report["timing"] = time_workloads(args.directory, arch)
    with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
        json.dump(report, f, indent=1)
    c = report["compare"]
    print(f"{c['ran']} modules ran on {arch}, {c['refused']} refused, "
          f"{len(c['mismatches'])} mismatches, in {c['seconds']:.0f} s")
    for line in c["mismatches"][:20]:
        print("  " + line)
    print(json.dumps(report["timing"], indent=1))
    return 1 if c["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
