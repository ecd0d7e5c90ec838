"""tfjit.codegen.mathlib: compiled, O3-vectorised loops against references.

Each function runs as ``out[i] = f(a[i][, b[i]])`` in a loop optimised by tfjit's
own pipeline (O3, ``llvm_target.optimise``) for the host CPU and JIT-compiled with
MCJIT.  float32 results are compared in ulps with numpy's float64 result rounded to
float32 (NaN positions and the sign of zero must match); float64 (libm) results
with numpy float64.  A second table checks float32 against TensorFlow's own kernels.

``python tests/test_mathlib.py`` prints the measured max-ulp table.
"""
from __future__ import annotations

import ctypes
import functools
import math
import re

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from tfjit.codegen import llvm_target, mathlib

F32 = np.float32
F64 = np.float64
_IR_TYPES = {F32: ir.FloatType(), F64: ir.DoubleType()}
_TINY = np.finfo(F32).tiny
_MAX = np.finfo(F32).max


# ------------------------------------------------------------ compile helpers

@functools.cache
def target_machine() -> llvm.TargetMachine:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(), opt=3)


def build_loop(name: str, dtype, nargs: int, native_ldexp: bool = False,
               tm: llvm.TargetMachine | None = None) -> ir.Module:
    """``void kernel(T* out, T* a[, T* b], i64 n)``: out[i] = name(a[i], ...), for
    ``tm`` (the host's by default)."""
    tm = tm or target_machine()
    ty, ptr, i64 = _IR_TYPES[dtype], ir.PointerType(), ir.IntType(64)
    mod = ir.Module(name=f"mathlib_{name}")
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr] * (1 + nargs)
                                          + [i64]), "kernel")
    for arg in fn.args[:-1]:
        arg.add_attribute("noalias")
    n = fn.args[-1]
    entry, body, done = (fn.append_basic_block(s) for s in ("entry", "body",
                                                            "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, i64(0)), body, done)
    b.position_at_end(body)
    i = b.phi(i64)
    i.add_incoming(i64(0), entry)
    ins = [b.load(b.gep(p, [i], inbounds=True, source_etype=ty), typ=ty)
           for p in fn.args[1:-1]]
    out = mathlib.emit(b, name, ins, native_ldexp=native_ldexp)
    b.store(out, b.gep(fn.args[0], [i], inbounds=True, source_etype=ty))
    nxt = b.add(i, i64(1))
    i.add_incoming(nxt, body)
    b.cbranch(b.icmp_signed("<", nxt, n), body, done)
    b.position_at_end(done)
    b.ret_void()
    return mod


def optimise(mod: ir.Module, tm: llvm.TargetMachine | None = None) -> llvm.ModuleRef:
    """Parse, verify and run tfjit's own pipeline (``llvm_target.optimise``: O3, both
    vectorisers on, as the compiled kernels get it)."""
    ref = llvm.parse_assembly(str(mod))
    ref.verify()
    llvm_target.optimise(ref, tm or target_machine())
    return ref


@functools.cache
def compiled(name: str, dtype, native_ldexp: bool = False):
    """(engine, ctypes kernel, optimised module) for name/dtype; cached."""
    nargs = 2 if name in ("atan2", "pow") else 1
    ref = optimise(build_loop(name, dtype, nargs, native_ldexp))
    engine = llvm.create_mcjit_compiler(ref, target_machine())
    engine.finalize_object()
    cptr = ctypes.POINTER(ctypes.c_float if dtype is F32 else ctypes.c_double)
    kernel = ctypes.CFUNCTYPE(None, *[cptr] * (1 + nargs), ctypes.c_int64)(
        engine.get_function_address("kernel"))
    return engine, kernel, ref


def run(name: str, dtype, *inputs: np.ndarray, native_ldexp: bool = False) -> np.ndarray:
    _, kernel, _ = compiled(name, dtype, native_ldexp)
    ins = [np.ascontiguousarray(a, dtype=dtype) for a in inputs]
    out = np.empty_like(ins[0])
    cptr = ctypes.POINTER(ctypes.c_float if dtype is F32 else ctypes.c_double)
    kernel(*(a.ctypes.data_as(cptr) for a in [out] + ins), out.size)
    return out


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Number of representable floats between a and b (same dtype); +-0 are
    one apart; NaN anywhere gives 0 (NaN positions are checked separately)."""
    ity = np.int32 if a.dtype == F32 else np.int64
    uty = np.uint32 if a.dtype == F32 else np.uint64

    def ordered(x):
        i = x.view(ity).astype(np.int64)
        mag = (x.view(uty) & ~(uty(1) << uty(8 * x.itemsize - 1))).astype(np.int64)
        return np.where(i < 0, -mag - 1, mag)

    with np.errstate(invalid="ignore"):
        nan = np.isnan(a) | np.isnan(b)
    d = np.abs(ordered(np.where(nan, 0, a).astype(a.dtype))
               - ordered(np.where(nan, 0, b).astype(a.dtype)))
    return np.where(nan, 0, d)


def compare(got: np.ndarray, ref64: np.ndarray, inputs, what: str) -> int:
    """Assert NaN positions, infinities and signed zeros match; return the
    max ulp distance between got and ref64 rounded to got's dtype."""
    with np.errstate(over="ignore", invalid="ignore"):
        ref = ref64.astype(got.dtype)
    bad_nan = np.isnan(got) != np.isnan(ref)
    zero = (ref == 0) & (got == 0)
    bad_zero = zero & (np.signbit(got) != np.signbit(ref))
    for mask, why in ((bad_nan, "NaN mismatch"), (bad_zero, "sign of zero")):
        if mask.any():
            k = np.flatnonzero(mask)[:5]
            pytest.fail(f"{what}: {why} at inputs "
                        f"{[tuple(x[j] for x in inputs) for j in k]}: got "
                        f"{got[k].tolist()}, want {ref[k].tolist()}")
    return int(ulp_distance(got, ref).max())


# ---------------------------------------------------------- reference table

def _stable_sigmoid(x):
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x))
    return np.where(x < 0, e, 1.0) / (1.0 + e)


def _tf_softplus(t):
    def f(x):
        with np.errstate(over="ignore"):
            e = np.exp(x)
            return np.where(x > -t, x, np.where(x < t, e, np.log1p(e)))
    return f


_erf = np.vectorize(math.erf, otypes=[F64])

# name -> (float64 reference, float32 max-ulp bound, uniform input ranges);
# every function also gets SPECIALS and a log-uniform sweep of all exponents.
REFERENCE = {
    "exp": (np.exp, 4, [(-110, 90), (-1, 1)]),
    "expm1": (np.expm1, 4, [(-30, 90), (-1, 1), (-1e-5, 1e-5)]),
    "log": (np.log, 4, [(0, 4), (0.5, 2), (0, 1e30)]),
    "log1p": (np.log1p, 4, [(-1, 1), (-1e-5, 1e-5), (-1, 1e6)]),
    "tanh": (np.tanh, 4, [(-10, 10), (-1, 1), (-1e-3, 1e-3)]),
    "sigmoid": (_stable_sigmoid, 4, [(-110, 110), (-20, 20)]),
    "erf": (_erf, 8, [(-5, 5), (-1.5, 1.5), (-1e-3, 1e-3)]),   # rational fit, see mathlib._erf
    "sin": (np.sin, 4, [(-10, 10), (-1e4, 1e4), (-1e12, 1e12)]),
    "cos": (np.cos, 4, [(-10, 10), (-1e4, 1e4), (-1e12, 1e12)]),
    "softplus": (_tf_softplus(mathlib._SOFTPLUS_T32), 4,
                 [(-120, 100), (-20, 20)]),
    "atan2": (np.arctan2, 4, [(-10, 10), (-1e-3, 1e-3)]),
    "pow": (np.power, 4, None),
    "atan": (np.arctan, 4, [(-10, 10), (-1, 1), (-1e-3, 1e-3)]),
    "asin": (np.arcsin, 4, [(-1, 1), (0.9, 1), (-1e-3, 1e-3)]),
    "acos": (np.arccos, 4, [(-1, 1), (0.9, 1), (-1, -0.9)]),
    "atanh": (np.arctanh, 4, [(-1, 1), (0.9, 1), (-1e-3, 1e-3)]),
}
SPECIALS = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, -1e-40,
     _TINY, -_TINY, _MAX, -_MAX, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0,
     1e-30, 88.72, 88.73, -87.3, -103.9, -104.0, 1e-8, -1e-8, 3.92, 4.0,
     13.9, 13.95, -13.9, -13.95, math.pi, -math.pi / 2, 1e10, -1e20],
    dtype=F32)


def _log_uniform(rng, n, lo=-45, hi=38):
    mag = 10.0 ** rng.uniform(lo, hi, n)
    return (mag * rng.choice([-1.0, 1.0], n)).astype(F32)


def unary_inputs(name, seed=0, n=200_000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    parts = [SPECIALS, _log_uniform(rng, n)]
    parts += [rng.uniform(lo, hi, n).astype(F32) for lo, hi in REFERENCE[name][2]]
    x = np.concatenate(parts)
    if name in ("sin", "cos"):
        x = x[~(np.isfinite(x) & (np.abs(x) >= mathlib.SINCOS_LIMIT))]
    return x


def binary_inputs(name, seed=0, n=200_000):
    rng = np.random.default_rng(seed)
    sx, sy = np.meshgrid(SPECIALS, SPECIALS)
    xs, ys = [sx.ravel(), _log_uniform(rng, n)], [sy.ravel(), _log_uniform(rng, n)]
    if name == "atan2":
        for lo, hi in REFERENCE[name][2]:
            xs.append(rng.uniform(lo, hi, n).astype(F32))
            ys.append(rng.uniform(lo, hi, n).astype(F32))
    else:  # pow: moderate results, integer exponents for negative bases
        xs += [10.0 ** rng.uniform(-3, 3, n), rng.uniform(0.5, 2, n),
               -rng.uniform(0, 10, n), rng.uniform(-10, 10, n)]
        ys += [rng.uniform(-12, 12, n), rng.uniform(-200, 200, n),
               rng.integers(-40, 40, n), rng.integers(-5, 5, n) + 0.5]
        xs = [x.astype(F32) for x in xs]
        ys = [y.astype(F32) for y in ys]
    # the second argument of atan2(y, x) is x: keep (y, x) order
    return np.concatenate(ys), np.concatenate(xs)


SPECIALS64 = np.array([5e-324, -5e-324, 2.2250738585072014e-308, 1e-300,
                       1.7976931348623157e308, -1e300, 709.78, 709.79, -708.4,
                       -745.2, -745.1, 36.0, -36.0, 1e-17, -1e-17])


def inputs_for(name, dtype):
    if name in ("atan2", "pow"):
        return tuple(a.astype(dtype) for a in binary_inputs(name))
    x = unary_inputs(name).astype(dtype)
    return (np.concatenate([x, SPECIALS64]) if dtype is F64 else x,)


# float64 references where TF's formula is not the exact function: TF's
# sigmoid<double> is 1/(1+exp(-x)) (0 instead of denormals for x < -709).
REFERENCE64 = {
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "softplus": _tf_softplus(mathlib._SOFTPLUS_T64),
}


def reference(name, dtype, args64):
    fn = REFERENCE64.get(name) if dtype is F64 else None
    with np.errstate(all="ignore"):
        return (fn or REFERENCE[name][0])(*args64)


def measure(name, dtype) -> int:
    """Max ulp error of the compiled name[dtype] over its test inputs."""
    args = inputs_for(name, dtype)
    got = run(name, dtype, *args)
    want = reference(name, dtype, [a.astype(F64) for a in args])
    return compare(got, want, args, f"{name}[{dtype.__name__}]")


# ------------------------------------------------------------------- tests

@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_float32_accuracy(name):
    assert measure(name, F32) <= REFERENCE[name][1]


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_float64_libm(name):
    # libm and numpy are each within ~2 ulp of exact; they differ by up to 3.
    assert measure(name, F64) <= 4


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_cos_beyond_limit_is_nan(name):
    # Documented limit: the float64 Cody-Waite reduction is exact below it.
    x = np.array([mathlib.SINCOS_LIMIT, -mathlib.SINCOS_LIMIT, 1e20, _MAX],
                 F32)
    assert np.isnan(run(name, F32, x)).all()


@pytest.mark.parametrize("x, y, want", [
    (np.nan, 0.0, 1.0), (1.0, np.nan, 1.0), (-1.0, np.inf, 1.0),
    (-1.0, -np.inf, 1.0), (-2.0, 0.5, np.nan), (-0.0, -3.0, -np.inf),
    (-0.0, 3.0, -0.0), (-0.0, 2.0, 0.0), (-np.inf, 3.0, -np.inf),
    (-np.inf, -3.0, -0.0), (0.5, np.inf, 0.0), (2.0, -np.inf, 0.0),
    (2.0, 0.5, math.sqrt(2.0)), (-2.0, 3.0, -8.0), (2.0, -149.0, 2.0**-149),
    (2.0, 128.0, np.inf),
])
def test_pow_special_values(x, y, want):
    got = run("pow", F32, np.array([x], F32), np.array([y], F32))[0]
    want = F32(want)
    assert (np.isnan(got) and np.isnan(want)) or (
        got == want and np.signbit(got) == np.signbit(want)), (x, y, got)


@pytest.mark.parametrize("y, x, want", [
    (0.0, -0.0, math.pi), (-0.0, -0.0, -math.pi), (0.0, 0.0, 0.0),
    (-0.0, 0.0, -0.0), (np.inf, np.inf, math.pi / 4),
    (-np.inf, -np.inf, -3 * math.pi / 4), (1.0, -np.inf, math.pi),
    (-1.0, np.inf, -0.0), (np.inf, -1.0, math.pi / 2), (1.0, 0.0, math.pi / 2),
])
def test_atan2_special_values(y, x, want):
    got = run("atan2", F32, np.array([y], F32), np.array([x], F32))[0]
    assert got == F32(want) and np.signbit(got) == np.signbit(F32(want))


def test_exp_loop_is_vectorised():
    asm = target_machine().emit_assembly(compiled("exp", F32)[2])
    assert re.search(r"vfmadd\w*ps\s+.*%[yz]mm", asm), "no packed fma"
    assert not re.search(r"\bcall", asm), "scalar libm call left in the loop"


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_every_float32_function_vectorises(name):
    asm = target_machine().emit_assembly(compiled(name, F32)[2])
    assert re.search(r"v\w+p[sd]\s+.*%[yz]mm", asm), "no packed vector math"
    assert not re.search(r"\bcall", asm)


# The functions whose float32 code ends in exp's ldexp (mathlib._exp).
LDEXP_USERS = ("exp", "sigmoid", "softplus")


@pytest.mark.parametrize("name", LDEXP_USERS)
def test_native_ldexp_gives_the_same_bits(name):
    """exp's 2^n by llvm.ldexp (AVX-512 targets) or by integer ops (the rest) must not
    change a bit, so the choice the target makes cannot change a result.  Runs on any
    host: without AVX-512, LLVM makes the ldexp a libm call (slow, still exact).  The
    inputs: the accuracy test's, uniform over exp's whole range, and dense grids over
    the overflow edge (88.72), the denormal results (below -87.3) and around 0."""
    rng = np.random.default_rng(7)
    edges = [np.linspace(lo, hi, 100_001, dtype=F32) for lo, hi in
             ((-104.5, -86.0), (87.0, 89.5), (-1.0, 1.0))]
    x = np.concatenate([unary_inputs("exp"), rng.uniform(-110, 100, 400_000).astype(F32)]
                       + edges)
    if name != "exp":
        x = np.concatenate([x, -x])
    want = run(name, F32, x)
    got = run(name, F32, x, native_ldexp=True)
    differ = np.flatnonzero(want.view(np.int32) != got.view(np.int32))
    assert differ.size == 0, (f"{differ.size} results differ, first x={x[differ[0]]!r}: "
                              f"{want[differ[0]]!r} vs {got[differ[0]]!r}")


@pytest.mark.parametrize("name", ["exp", "sigmoid", "softplus"])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_denormal_argument_gives_the_zero_result(name, dtype):
    """elemental.py skips DAZ (reading a denormal argument as a zero of its sign, as TF's
    code does) for these functions, because their result is the same bits either way."""
    tiny = np.finfo(dtype).smallest_normal
    rng = np.random.default_rng(3)
    mags = np.concatenate([[np.finfo(dtype).smallest_subnormal, tiny * (1 - np.finfo(dtype).eps)],
                           rng.uniform(0, 1, 1000) * tiny]).astype(dtype)
    x = np.concatenate([mags, -mags])
    zeros = np.where(np.signbit(x), dtype(-0.0), dtype(0.0)).astype(dtype)
    got, want = run(name, dtype, x), run(name, dtype, zeros)
    assert np.array_equal(got.view(f"i{got.itemsize}"), want.view(f"i{want.itemsize}"))


@pytest.mark.parametrize("cpu, features, scalef", [
    ("skylake-avx512", "+avx512f,+avx512dq,+avx512bw,+avx512vl,+avx2,+fma,-prefer-256-bit",
     True),
    ("haswell", "+avx2,+fma,-avx512f", False)])
def test_exp_code_for_both_kinds_of_cpu(cpu, features, scalef):
    """What tfjit's targets choose for each CPU kind, compiled (not run) on any host: an
    AVX-512 target gets exp's 2^n as packed vscalefps; an AVX2 one keeps the integer
    ops (ldexp there would be a scalar libm call per element).  Both have no call."""
    assert llvm_target.vector_ldexp(features) is scalef
    tm = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=features,
                                                                  opt=3)
    asm = tm.emit_assembly(optimise(build_loop("exp", F32, 1, scalef, tm), tm))
    assert bool(re.search(r"vscalefps\s+.*%zmm", asm)) is scalef
    assert re.search(r"vfmadd\w*ps\s+.*%[yz]mm", asm), "no packed fma"
    assert not re.search(r"\bcall", asm), "libm call left in the loop"


def test_has_feature_reads_the_last_mention():
    assert llvm_target.has_feature("+avx2,+avx512f", "avx512f")
    assert not llvm_target.has_feature("+avx512f,-avx512f", "avx512f")
    assert not llvm_target.has_feature("+avx512fp16", "avx512f")
    assert not llvm_target.has_feature("", "avx512f")


def test_emit_rejects_bad_calls():
    mod = ir.Module()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.IntType(32),
                                                         ir.FloatType()]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    with pytest.raises(ValueError):
        mathlib.emit(b, "sqrt", [fn.args[1]])
    with pytest.raises(ValueError):
        mathlib.emit(b, "pow", [fn.args[1]])
    with pytest.raises(TypeError):
        mathlib.emit(b, "exp", [fn.args[0]])


# ------------------------------------------------------ against TensorFlow

TF_FUNCS = ("exp", "expm1", "log1p", "tanh", "erf", "sigmoid", "softplus", "atan", "asin", "acos",
            "atanh")


@pytest.mark.parametrize("name", TF_FUNCS)
def test_float32_matches_tensorflow(name):
    tf = pytest.importorskip("tensorflow")
    x = unary_inputs(name, seed=2, n=50_000)
    want = getattr(tf.math, name)(tf.constant(x)).numpy()
    got = run(name, F32, x)
    with np.errstate(all="ignore"):
        ref = REFERENCE[name][0](x.astype(F64)).astype(F32)
    assert (np.isnan(got) == np.isnan(want)).all()
    # Close to TF, or at least as close to the exact value as TF is (this
    # also covers TF's flush-to-zero of denormal inputs and results).
    bound = max(4, REFERENCE[name][1])          # a function's documented max ulp
    ok = (ulp_distance(got, want) <= bound) | (
        ulp_distance(got, ref) <= np.maximum(ulp_distance(want, ref), 1))
    assert ok.all(), (x[~ok][:5], got[~ok][:5], want[~ok][:5])


if __name__ == "__main__":
    print(f"{'function':10} {'f32 max ulp':>12} {'f64 max ulp':>12}")
    for fname in sorted(REFERENCE):
        print(f"{fname:10} {measure(fname, F32):12d} {measure(fname, F64):12d}")
