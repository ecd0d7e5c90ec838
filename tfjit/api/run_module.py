"""tfjit-run-module: compile a dumped IR module and check it against a reference.

    tfjit-run-module cluster_0.txt --iterations 3 --use_large_float_range

Reads a module in the IR's text form (``tfjit.ir.text``), compiles it with the
same pipeline as a TF cluster, runs it on random inputs in this process
(``runtime.host``) and compares every output with the numpy interpreter, or
with ``--reference=tf`` with TensorFlow running the cluster graph the dump
wrote next to the module (``module_NNNN.<name>.cluster.pbtxt``; api/tf_reference.py).
``--platform=cuda`` compiles the module for the GPU (PTX for ``--arch``) and runs
it through the CUDA driver (runtime/cuda.py; needs cuda-python and a GPU, not
TensorFlow).
Exit status: 0 all runs agree, 1 some run miscompared, 2 bad usage or input
(a GPU that is not there, a kernel the GPU target refuses).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir import interp
from tfjit.ir.module import IRError
from tfjit.ir.text import parse_module

# Per dtype (abs, rel): compiled math uses polynomial approximations and
# half types round at every store, so the bounds follow the storage precision.
DEFAULT_BOUNDS = {"f16": (1e-2, 1e-2), "bf16": (5e-2, 5e-2), "f32": (1e-3, 1e-3),
                  "f64": (1e-6, 1e-6)}
_SPECIALS = (0.0, -0.0, np.inf, -np.inf, np.nan)


def random_input(rng, dtype: dt.DType, shape: tuple, large_range: bool) -> np.ndarray:
    """Floats: normal, or with ``large_range`` many magnitudes plus specials (no denormals,
    which TF flushes but this process does not); ints in [1, 100] (no zero divisors)."""
    if dtype is dt.PRED:
        return rng.random(shape) < 0.5
    if dtype.is_int:
        return rng.integers(1, 101, size=shape).astype(dtype.numpy())
    if not large_range:
        return rng.standard_normal(shape).astype(dtype.numpy())
    top = {"f16": 4, "bf16": 30, "f32": 30, "f64": 200}[dtype.name]
    x = np.power(10.0, rng.uniform(-top, top, shape)) * rng.choice([-1.0, 1.0], shape)
    special = rng.random(shape) < 0.05
    x = np.where(special, rng.choice(_SPECIALS, shape), x)
    return x.astype(dtype.numpy())


def compare(got: np.ndarray, want: np.ndarray, abs_bound: float, rel_bound: float):
    """(ok, worst-error description) for one output."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False, f"got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}"
    if got.dtype.kind in "biu":
        bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
        if bad.size == 0:
            return True, ""
        k = bad[0]
        return False, (f"{bad.size} elements differ; first at flat index {k}: "
                       f"got {got.reshape(-1)[k]}, want {want.reshape(-1)[k]}")
    g, w = got.astype(np.float64).reshape(-1), want.astype(np.float64).reshape(-1)
    nan_g, nan_w = np.isnan(g), np.isnan(w)
    with np.errstate(invalid="ignore"):
        err = np.where(g == w, 0.0, np.abs(g - w))
    err = np.where(nan_g | nan_w, np.where(nan_g == nan_w, 0.0, np.inf), err)
    bound = np.maximum(abs_bound, rel_bound * np.abs(np.nan_to_num(w)))
    bad = np.flatnonzero(~(err <= bound))
    if bad.size == 0:
        return True, ""
    k = bad[np.argmax(np.where(np.isfinite(err[bad] / bound[bad]), err[bad] / bound[bad], np.inf))]
    return False, (f"{bad.size} elements out of bounds; worst at flat index {k}: got {g[k]!r}, "
                   f"want {w[k]!r} (abs error {abs(g[k] - w[k])!r})")


def _run(fn):
    try:
        return fn(), None
    except (ValueError, ArithmeticError) as e:       # (cuda.KernelError is a ValueError)
        return None, f"{type(e).__name__}: {e}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tfjit-run-module", description=__doc__.splitlines()[0])
    ap.add_argument("path", help="file holding one module in the IR's text form")
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--use_large_float_range", action="store_true")
    ap.add_argument("--reference", default="interp", choices=["interp", "tf"],
                    help="interp: tfjit's IR interpreter; tf: TensorFlow running the cluster graph")
    ap.add_argument("--tf_graph", default=None,
                    help="with --reference=tf: the cluster GraphDef (default: the dump's "
                         "module_NNNN.<name>.cluster.pbtxt next to PATH)")
    ap.add_argument("--abs_error_bound", type=float, default=None,
                    help="default per dtype: " + str(DEFAULT_BOUNDS))
    ap.add_argument("--rel_error_bound", type=float, default=None)
    ap.add_argument("--print_literals", action="store_true")
    ap.add_argument("--platform", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--arch", default="sm_90", help="with --platform=cuda: sm_80 or sm_90")
    args = ap.parse_args(argv)
    from tfjit.codegen.target import NotForTarget
    from tfjit.pipeline import compile_module, compile_ptx   # the compiler loads only now
    from tfjit.runtime import cuda
    from tfjit.runtime.host import as_tf_outputs, run_compiled
    try:
        with open(args.path) as f:
            text = f.read()
        reference = parse_module(text)
        if args.reference == "tf":
            from tfjit.api.tf_reference import TFReference, cluster_graph_path
            tf_ref = TFReference(args.tf_graph or cluster_graph_path(args.path), reference)
            evaluate = tf_ref
        else:
            evaluate = lambda inputs: interp.evaluate(reference, inputs)
        if args.platform == "cuda":
            ptx = compile_ptx(parse_module(text), reference.name, args.arch)
            program = ptx.program()
            kernels = len(ptx.fusions)
            run_compiled = lambda _, inputs: cuda.run(program, inputs)   # noqa: E731
            compiled = None
            cuda.Device.get(0)                  # no GPU: say so now, once
        else:
            compiled = compile_module(parse_module(text), reference.name)
            kernels = compiled.num_kernels
    except NotForTarget as e:
        print(f"error: {e.reason}" + (f" ({e.instr})" if e.instr is not None else ""))
        return 2
    except (OSError, IRError, cuda.GpuError) as e:
        print(f"error: {e}")
        return 2
    print(f"module {reference.name}: {len(reference.params)} parameters, "
          f"{len(reference.outputs)} outputs, {kernels} kernels on {args.platform}; "
          f"reference: {'TensorFlow' if args.reference == 'tf' else 'IR interpreter'}")
    rng = np.random.default_rng(args.seed)
    failures = 0
    for it in range(args.iterations):
        inputs = [random_input(rng, p.dtype, p.shape, args.use_large_float_range)
                  for p in reference.params]
        want, want_err = _run(lambda: evaluate(inputs))
        got, got_err = _run(lambda: run_compiled(compiled, inputs))
        if got and reference.complex_outputs:      # compared as the IR's real views
            got = [dt.complex_view(g) if k in reference.complex_outputs else g for k, g in enumerate(got)]
        if got and reference.output_rows and args.reference == "tf":   # TF's [count, rank]
            got = as_tf_outputs(reference.output_rows, got)
        problems = []
        if want_err or got_err:
            if bool(want_err) != bool(got_err):
                problems.append(f"reference: {want_err or 'ok'}; compiled: {got_err or 'ok'}")
        else:
            for k, (g, w, o) in enumerate(zip(got, want, reference.outputs)):
                default_abs, default_rel = DEFAULT_BOUNDS.get(o.dtype.name, (0.0, 0.0))
                ok, worst = compare(g, w,
                                    default_abs if args.abs_error_bound is None else args.abs_error_bound,
                                    default_rel if args.rel_error_bound is None else args.rel_error_bound)
                if not ok:
                    problems.append(f"output {k} ({o!r}): {worst}")
        if args.print_literals:
            for k, x in enumerate(inputs):
                print(f"run {it} input {k}:\n{x}")
            for k, (g, w) in enumerate(zip(got or [], want or [])):
                print(f"run {it} output {k} compiled:\n{g}\nreference:\n{w}")
        if problems:
            failures += 1
            print(f"run {it} miscompared:")
            for p in problems:
                print("  " + p)
    print(f"{failures}/{args.iterations} runs miscompared")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
