"""TF's unary special functions as LLVM functions: lgamma, digamma, ndtri, erfinv,
bessel_i0e, bessel_i1e (f32 and f64; f16 is lowered through f32, as TF's half
kernels compute, lower/special.py).

Each is built like codegen/special.py's functions (``_Fn``: the C++'s operations in
its order, no fast-math flags, the C library declared ``nobuiltin``), as a mixin of
its ``_Library``.  What TF's CPU kernel computes differs by op and type
(ir/interp_special_unary.py says which path and why):

* lgamma: the C library's ``lgammaf_r``/``lgamma_r``; digamma: Cephes' psi
  (special.py's ``_digamma``, also polygamma's n = 0), over ``logf``/``tanf``.
* ndtri, erfinv, bessel_i0e, bessel_i1e in f64: Eigen's scalar code (``log`` of
  the C library, correctly rounded sqrt and division, ``a * b + c`` rounded twice).
* the same in f32: Eigen's AVX packet code, which TF's kernel runs for every
  element but the last ``n % 8`` of a tensor: Eigen's own polynomial ``plog``
  instead of ``logf``, and x86's approximate reciprocal (``rcpps``) and
  reciprocal square root (``rsqrtps``) refined by one Newton step.  Those two
  instructions are tables in the CPU (Intel's and AMD's differ), so TF's f32
  results depend on the CPU; this code executes the very same instructions
  (``llvm.x86.sse.rcp.ps``/``rsqrt.ps``, SSE: every x86-64 has them) and so
  matches TF on whichever x86-64 CPU both run.

Why LLVM functions and not tfjit IR, although ndtri and the Bessel series have no
loops: the f32 results hinge on rcpps/rsqrtps, which no IR op (and no GPU)
reproduces, and the f64 ones on glibc's ``log``; the GPU gains nothing TF-exact
from an IR version, so it refuses these ops (codegen/nvptx.py) like the other
special functions.  The functions are straight-line selects (both branches
computed, as Eigen's packet code does), marked ``noinline`` like the others.

Vector code: Eigen's packet code is lane-wise, so the f32 ndtri/erfinv/bessel bodies
are also built over ``<4|8|16 x float>`` (``tfjit.special.ndtri.v8f32``; rcpps and
rsqrtps four lanes at a time: SSE's, on every x86-64, never AVX-512's more precise
``rcp14``) with the same bits in every lane whatever the width; so are the f64
bessel ones (over ``<2|4|8 x double>``: IEEE operations only, which give the same
bits in a vector lane as in a scalar register).  The scalar call
names them in LLVM's ``vector-function-abi-variant`` attribute, so the loop
vectoriser calls the variant of the width it picks for the fused loop (the loop's
remainder still calls the scalar function); a loop that is not vectorised calls the
scalar one.  ``llvm.compiler.used`` keeps the variants until the vectoriser has run.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from tfjit.codegen.llvm_types import F32, I32, PTR
from tfjit.ir import interp_special_unary as K
from tfjit.ir.ops import Op

_V4 = ir.VectorType(F32, 4)
#: f32 ops TF computes with Eigen's packet code (vector variants below)
PACKET = frozenset({Op.NDTRI, Op.ERFINV, Op.BESSEL_I0E, Op.BESSEL_I1E})
#: f64 ops whose scalar code is IEEE arithmetic only (no C library call): lane-wise too
_F64_LANEWISE = frozenset({Op.BESSEL_I0E, Op.BESSEL_I1E})
#: ops whose vector variants call the scalar function (the C library) on each lane,
#: offered for an operand widened from f16 only: a scalar loop loads each half with
#: x86's vpinsrw, which merges into the register the previous call returned in, so
#: every element waited for the one before (f16 lgamma 1.6x TF's time); vectorised,
#: the loads and conversions are whole vectors.  For f32/f64 the lanes cost ~2%.
LANE_BY_LANE = {"lgamma", "digamma"}


def vector_widths(op: Op, f32: bool, from_half: bool = False) -> tuple:
    """The widths of the vector variants made of ``op`` (``from_half``: its operand
    was widened from f16): a loop vectoriser picks by the target's registers."""
    lanes = from_half and f32 and op in (Op.LGAMMA, Op.DIGAMMA)
    if op in (PACKET if f32 else _F64_LANEWISE) or lanes:
        return (4, 8, 16) if f32 else (2, 4, 8)
    return ()


class _CallAttributes(ir.instructions.CallInstrAttributes):
    """A call's attributes with LLVM's string attributes (``"key"="value"``), which
    llvmlite cannot spell."""

    def add_string(self, key: str, value: str) -> None:
        set.add(self, f'"{key}"="{value}"')


def offer_vector_variants(call: ir.CallInstr, scalar: ir.Function, variants: list) -> None:
    """Names ``variants`` (functions over ``<n x float>`` computing ``scalar`` lane by
    lane) as the vector versions of ``call`` for LLVM's loop vectoriser (VFABI names,
    unmasked, every operand a vector), and keeps them in the module until it has run."""
    attrs = _CallAttributes()
    for a in call.attributes:
        attrs.add(a)
    attrs.add_string("vector-function-abi-variant", ",".join(
        f"_ZGV_LLVM_N{v.ftype.return_type.count}{'v' * len(v.args)}_{scalar.name}({v.name})"
        for v in variants))
    call.attributes = attrs
    _compiler_used(call.module, variants)


def _compiler_used(module: ir.Module, fns: list) -> None:
    """Adds ``fns`` to ``@llvm.compiler.used``: LLVM's optimiser keeps them (the
    vectoriser may call them), and the linker may still drop those left uncalled."""
    used = module.globals.get(_CompilerUsed.NAME) or _CompilerUsed(module)
    used.fns += [f for f in fns if f not in used.fns]


class _CompilerUsed(ir.GlobalVariable):
    """``@llvm.compiler.used``, whose list grows while the module is built (llvmlite
    fixes a global's type when it is made): typed when printed, never cached."""
    NAME = "llvm.compiler.used"

    def __init__(self, module: ir.Module):
        super().__init__(module, ir.ArrayType(PTR, 0), name=self.NAME)
        self.linkage, self.section = "appending", "llvm.metadata"
        self.fns: list = []

    def __str__(self):
        return self._to_string()

    def descr(self, buf):
        self.value_type = ir.ArrayType(PTR, len(self.fns))
        self.initializer = ir.Constant(self.value_type, self.fns)
        super().descr(buf)


class UnaryBuilders:
    """Mixin of special._Library: ``_<name>(self, f, x)`` builds one function body."""

    def _lgamma(self, f, x):
        f.ret(f.lgamma(x))

    # -- Eigen's helpers as they are in the path TF's kernel takes ------------
    def _madd(self, f, a, b, c):
        """pmadd without FMA (TF's AVX build has none): two roundings."""
        return f.add(f.mul(a, b), c)

    def _polevl(self, f, x, coeffs):
        acc = f.c(coeffs[0])
        for c in coeffs[1:]:
            acc = self._madd(f, acc, x, c)
        return acc

    def _chebevl(self, f, x, coeffs):
        b0, b1, b2 = f.c(coeffs[0]), f.c(0.0), None
        for c in coeffs[1:]:
            b2, b1 = b1, b0
            b0 = f.sub(self._madd(f, x, b1, c), b2)
        return f.mul(0.5, f.sub(b0, b2))

    def _x86(self, f, name, x):
        """SSE's ``rcpps``/``rsqrtps`` (the CPU's approximation table) of one lane, or of
        each lane of a vector, four at a time."""
        fn = f.lib.module.globals.get(f"llvm.x86.sse.{name}.ps") or ir.Function(
            f.lib.module, ir.FunctionType(_V4, [_V4]), name=f"llvm.x86.sse.{name}.ps")
        b = f.b
        if not f.lanes:
            v = b.insert_element(ir.Constant(_V4, None), x, ir.Constant(I32, 0))
            return b.extract_element(b.call(fn, [v]), ir.Constant(I32, 0))
        if f.lanes == 4:
            return b.call(fn, [x])
        quads = [b.call(fn, [b.shuffle_vector(x, x, _mask(range(k, k + 4)))])
                 for k in range(0, f.lanes, 4)]
        while len(quads) > 1:       # concatenated pairwise, in lane order
            quads = [b.shuffle_vector(lo, hi, _mask(range(2 * lo.type.count)))
                     for lo, hi in zip(quads[::2], quads[1::2])]
        return quads[0]

    def _reciprocal(self, f, a):
        if not self.f32:
            return f.div(1.0, a)
        approx = self._x86(f, "rcp", a)                 # generic_reciprocal_newton_step<1>
        tmp = f.sub(1.0, f.mul(a, approx))
        return f.select(f.cmp("==", tmp, tmp), self._madd(f, approx, tmp, approx), approx)

    def _rsqrt(self, f, a):
        if not self.f32:
            return f.div(1.0, f._intrinsic("sqrt", a))
        approx = self._x86(f, "rsqrt", a)               # generic_rsqrt_newton_step<1>
        r2 = f.mul(a, approx)
        half_r = f.mul(approx, -0.5)
        h = self._madd(f, r2, approx, -1.0)
        inv = self._madd(f, half_r, h, approx)
        return f.select(f.isnan(inv), approx, inv)

    def _log(self, f, x):
        """plog: the C library's log (f64), Eigen's plog_float (f32)."""
        if not self.f32:
            return f.libm("log", x)
        b, i32 = f.b, f.lanewise(I32)
        bits = lambda v: b.bitcast(v, i32)                               # noqa: E731
        flt = lambda v: b.bitcast(v, f.ty)                               # noqa: E731
        # pfrexp_generic: mantissa in [0.5, 1) and exponent, denormals normalised
        denormal = f.cmp("<", f.abs(x), float(np.finfo(np.float32).tiny))
        norm = f.select(denormal, f.mul(x, 2.0 ** 24), x)
        offset = f.select(denormal, -126.0 - 24.0, -126.0)
        biased = b.sitofp(b.lshr(bits(f.abs(norm)), f.ic(23)), f.ty)
        special = b.or_(f.cmp("==", x, 0.0), f.cmp("==", biased, 255.0))
        mant = flt(b.or_(b.and_(bits(norm), f.ic(~0x7f800000 & 0xFFFFFFFF)), bits(f.c(0.5))))
        m = f.select(special, x, mant)
        e = f.select(special, 0.0, f.add(biased, offset))
        # plog_impl_float
        small = f.cmp("<", m, K.SQRTHF)
        tmp = f.select(small, m, 0.0)
        m = f.sub(m, 1.0)
        e = f.sub(e, f.select(small, 1.0, 0.0))
        m = f.add(m, tmp)
        p = f.mul(m, self._polevl(f, m, K.LOG_ALPHA))
        q = self._polevl(f, m, K.LOG_BETA)
        r = self._madd(f, e, K.LN2, f.div(p, q))
        invalid = b.not_(f.cmp(">=", x, 0.0))                           # x < 0 or NaN
        r = f.select(f.cmp("==", x, np.inf), np.inf, r)
        r = f.select(invalid, flt(f.ic(0xFFFFFFFF)), r)                  # por(..., all ones)
        return f.select(f.cmp("==", x, 0.0), -np.inf, r)

    # -- ndtri, erfinv (Eigen's generic_ndtri, TF's scalar_erfinv_op) ----------
    def _ndtri(self, f, a):
        t = np.float32 if self.f32 else np.float64
        exp_neg_two = t(K.EXP_NEG_TWO)
        flip = f.cmp("<=", a, f.sub(1.0, exp_neg_two))
        b = f.select(flip, a, f.sub(1.0, a))
        # b > exp(-2)
        c = f.sub(b, 0.5)
        c2 = f.mul(c, c)
        ratio = f.div(self._polevl(f, c2, K.NDTRI_P0), self._polevl(f, c2, K.NDTRI_Q0))
        gt = f.mul(self._madd(f, c, f.mul(c2, ratio), c), K.SQRT2PI)
        # b <= exp(-2)
        x = f._intrinsic("sqrt", f.mul(-2.0, self._log(f, b)))
        x0 = f.sub(x, f.div(self._log(f, x), x))
        z = self._reciprocal(f, x)
        r1 = f.div(self._polevl(f, z, K.NDTRI_P1), self._polevl(f, z, K.NDTRI_Q1))
        r2 = f.div(self._polevl(f, z, K.NDTRI_P2), self._polevl(f, z, K.NDTRI_Q2))
        lt = f.sub(x0, f.mul(z, f.select(f.cmp("<", x, 8.0), r1, r2)))
        lt = f.select(flip, f.neg(lt), lt)
        r = f.select(f.cmp("<", exp_neg_two, b), gt, lt)
        f.ret(f.select(f.cmp("==", a, 0.0), -np.inf, f.select(f.cmp("==", a, 1.0), np.inf, r)))

    def _erfinv(self, f, x):
        y = f.call("ndtri", self._madd(f, 0.5, x, 0.5))
        f.ret(f.mul(y, K.SQRT1_2))

    # -- bessel_i0e, bessel_i1e (Eigen's generic_i0e, generic_i1e) ------------
    def _bessel(self, f, x, order: int):
        A, B = K.bessel_coefficients(order, self.f32)
        y = f.abs(x)
        small = self._chebevl(f, self._madd(f, 0.5, y, -2.0), A)
        if order == 1:
            small = f.mul(y, small)
        large = f.mul(self._chebevl(f, f.sub(f.div(32.0, y), 2.0), B), self._rsqrt(f, y))
        r = f.select(f.cmp("<=", y, 8.0), small, large)
        if order == 1:
            r = f.select(f.cmp("<", x, 0.0), f.neg(r), r)
        f.ret(r)

    def _bessel_i0e(self, f, x):
        self._bessel(f, x, 0)

    def _bessel_i1e(self, f, x):
        self._bessel(f, x, 1)


def _mask(lanes) -> ir.Constant:
    return ir.Constant(ir.VectorType(I32, len(lanes)), list(lanes))
