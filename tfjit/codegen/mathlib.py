"""Transcendental functions emitted inline as LLVM IR.

Contract: ``emit(builder, name, args)`` appends straight-line IR at the
builder's position and returns the result value; it adds no basic blocks.

* float32: range reduction + minimax polynomials, written only with
  ``fma``/``select``/bitcasts/integer ops and vector-friendly intrinsics
  (``llvm.fma``, ``fabs``, ``copysign``, ``rint``, ``floor``, ``minnum``,
  ``maxnum``; ``ldexp`` where the target has it as a vector instruction).
  Calls to libm or ``llvm.exp`` are not vectorised on CPU (no vector math
  library), so a loop calling these would stay scalar; this code lets the
  loop vectoriser widen such loops to zmm/ymm.
* float64: calls to libm (``exp``, ``atan2``, ...), declared on demand in
  ``builder.module``; correctness over speed, not vectorised.

Accuracy (float32): "Max N ulp" in each docstring is the largest distance,
in representable floats, from numpy's float64 result rounded to float32,
measured by tests/test_mathlib.py and a sweep over every 61st float32 bit
pattern (atan2/pow: 6M random pairs + all special-value pairs).  Denormal inputs and results are handled as IEEE does
(no flush to zero); TensorFlow on CPU runs with FTZ/DAZ, so it may return 0
where these return a denormal.  Polynomial coefficients were fitted for this
module (iterated weighted least squares towards minimax, with each
coefficient rounded to float32 before the higher ones were refitted).
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

__all__ = ["emit", "SUPPORTED", "SINCOS_LIMIT"]

_F32, _F64 = ir.FloatType(), ir.DoubleType()
_INF, _NAN = math.inf, math.nan
#: float32 sin/cos are accurate for |x| below this and NaN above.
SINCOS_LIMIT = 2.0 ** 48

_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471824645996               # float32(ln 2)
_LN2_LO = -1.9046542121259336e-09          # float32(ln 2 - _LN2_HI)
_PIO2_D = (1.5707963267948966,             # pi/2 ~ sum (float64 parts)
           6.123233995736766e-17, -1.4973849048591698e-33)
_PI_HI, _PI_LO = 3.1415927410125732, -8.742277657347586e-08
_PIO2_HI, _PIO2_LO = 1.5707963705062866, -4.371138828673793e-08
_SQRT2 = 1.41421356237
# TF softplus threshold: log(epsilon) + 2, evaluated in the dtype.
_SOFTPLUS_T32 = float(np.log(np.finfo(np.float32).eps) + np.float32(2))
_SOFTPLUS_T64 = float(np.log(np.finfo(np.float64).eps) + 2.0)

# expm1(r) = r + r^2 * P(r), |r| <= 0.35 (0.008 ulp fit error).
_EXPM1_P = (0.5, 1.6666666e-01, 4.1666485e-02, 8.333541e-03, 1.393323e-03,
            1.976692e-04)
# log1p(f) = f + f^2 * P(f), f in [sqrt(.5)-1, sqrt(2)-1] (0.1 ulp fit error).
_LOG1P_P = (-0.5, 3.333333e-01, -2.5000823e-01, 2.000125e-01, -1.6623317e-01,
            1.420127e-01, -1.3160163e-01, 1.2764798e-01, -7.638337e-02)
# erf(x) = C0_HI*x + x*Q(x^2), |x| < 1; Q[0] is the low part of 2/sqrt(pi)
# (C0_HI rounded down so that Q[0] > 0 and erf(-0) = -0).
_ERF_P = (1.1283791678794666, 0.18533684661573194, 0.054280184981412107, 0.003848072038475603,
          0.00037734247025246817, 4.620699313787753e-06, -1.2878441507621073e-08)
_ERF_Q = (1.0, 0.49758389011738174, 0.11396545622374424, 0.015450998256522706,
          0.0013042238150450139, 6.25055539487826e-05)
_SIN_P = (-1.6666667e-01, 8.333377e-03, -1.9851548e-04, 2.8139364e-06)
_COS_P = (4.166664e-02, -1.3887126e-03, 2.4411222e-05)
# atan(t) = t + t^3 * A(t^2), 0 <= t <= 1 (0.05 ulp fit error).
_ATAN_P = (-3.33333e-01, 1.999853e-01, -1.4264014e-01, 1.0950861e-01,
           -8.399208e-02, 5.787887e-02, -3.1093534e-02, 1.0866271e-02,
           -1.7821442e-03)
# float64 helpers for powf: log(1+f) = 2s + s^3 * T(s^2), s = f/(2+f)
# (Taylor, rel. error < 2^-39); 2^r = sum (r ln2)^k / k!, |r| <= 1/2
# (Taylor, rel. error < 2^-37).
_POW_LOG_T = tuple(2.0 / (2 * k + 3) for k in range(6))
_POW_EXP2_P = tuple(math.log(2.0) ** k / math.factorial(k) for k in range(10))


class _Ops:
    """Typed helpers over an IRBuilder for one float type (f32 or f64)."""

    def __init__(self, builder: ir.IRBuilder, ty: ir.Type, native_ldexp: bool = False):
        self.b, self.ty = builder, ty
        self.native_ldexp = native_ldexp
        wide = isinstance(ty, ir.DoubleType)
        self.ity = ir.IntType(64 if wide else 32)
        self.mant, self.bias = (52, 1023) if wide else (23, 127)
        self.suffix = "f64" if wide else "f32"

    # constants and conversions
    def f(self, v):
        return v if isinstance(v, ir.Value) else ir.Constant(self.ty, v)

    def i(self, v):
        return v if isinstance(v, ir.Value) else ir.Constant(self.ity, v)

    def bits(self, x):
        return self.b.bitcast(x, self.ity)

    def flt(self, n):
        return self.b.bitcast(n, self.ty)

    def pow2(self, n):
        """2.0**n for an integer value n in the normal exponent range."""
        return self.flt(self.b.shl(self.b.add(n, self.i(self.bias)),
                                   self.i(self.mant)))

    # declarations
    def _declare(self, name, nargs):
        """Get-or-insert ``ty name(ty, ...)`` in the builder's module."""
        fn = self.b.module.globals.get(name)
        if fn is None:
            fnty = ir.FunctionType(self.ty, [self.ty] * nargs)
            fn = ir.Function(self.b.module, fnty, name)
        return fn

    def intr(self, op, *args):
        fn = self._declare(f"llvm.{op}.{self.suffix}", len(args))
        return self.b.call(fn, [self.f(a) for a in args])

    def libm(self, name, *args):
        return self.b.call(self._declare(name, len(args)), list(args))

    # arithmetic (no fast-math flags: results must be IEEE-exact per op)
    def add(self, a, c):
        return self.b.fadd(self.f(a), self.f(c))

    def sub(self, a, c):
        return self.b.fsub(self.f(a), self.f(c))

    def mul(self, a, c):
        return self.b.fmul(self.f(a), self.f(c))

    def div(self, a, c):
        return self.b.fdiv(self.f(a), self.f(c))

    def neg(self, a):
        return self.b.fneg(a)

    def fma(self, a, c, d):
        return self.intr("fma", a, c, d)

    def fabs(self, a):
        return self.intr("fabs", a)

    def copysign(self, mag, sign):
        return self.intr("copysign", mag, sign)

    def rint(self, a):
        return self.intr("rint", a)

    def floor(self, a):
        return self.intr("floor", a)

    def clamp(self, a, lo, hi):
        """min(max(a, lo), hi); NaN becomes lo (callers restore NaN)."""
        return self.intr("minnum", self.intr("maxnum", a, lo), hi)

    def poly(self, x, coefs):
        """Horner with fma; coefs from low to high order."""
        acc = self.f(coefs[-1])
        for c in reversed(coefs[:-1]):
            acc = self.fma(acc, x, c)
        return acc

    # comparisons and selection
    def cmp(self, op, a, c):
        """Ordered compare (false on NaN); op 'u<' etc. is unordered."""
        if op.startswith("u"):
            return self.b.fcmp_unordered(op[1:], self.f(a), self.f(c))
        return self.b.fcmp_ordered(op, self.f(a), self.f(c))

    def isnan(self, a):
        return self.b.fcmp_unordered("uno", a, a)

    def sel(self, cond, a, c):
        return self.b.select(cond, self.f(a), self.f(c))

    def keep_nan(self, x, r):
        """r, except x where x is NaN."""
        return self.sel(self.isnan(x), x, r)

    def signbit(self, x):
        return self.b.icmp_signed("<", self.bits(x), self.i(0))


# ---------------------------------------------------------------- float32

def _exp_reduce(o, x, lo=None, hi=None):
    """e^x = 2^n * (1 + q): n = rint(x/ln2), r = x - n*ln2 (two-part ln2,
    exact first step thanks to fma), q = expm1(r) by a degree-7 polynomial.
    x is clamped to [lo, hi] when given (NaN becomes a bound)."""
    if lo is not None:
        x = o.clamp(x, lo, hi)
    n = o.rint(o.mul(x, _LOG2E))
    r = o.fma(n, -_LN2_HI, x)
    r = o.fma(n, -_LN2_LO, r)
    q = o.fma(o.mul(r, r), o.poly(r, _EXPM1_P), r)
    return o.b.fptosi(n, o.ity), q


def _ldexp(o, p, n):
    """p * 2^n for n in [-252, 254] with a single rounding: two normal-range
    factors, so denormal results round once and large n overflows to inf.
    With ``native_ldexp``, ``llvm.ldexp`` (the same single rounding), which
    the loop vectoriser widens and LLVM lowers to one AVX-512 ``vscalefps``
    in place of the eight integer and float operations (elsewhere it is a
    scalar libm call: the target decides, codegen/target.py)."""
    if o.native_ldexp:
        name = f"llvm.ldexp.{o.suffix}.{o.ity}"
        fn = o.b.module.globals.get(name) or ir.Function(
            o.b.module, ir.FunctionType(o.ty, [o.ty, o.ity]), name)
        return o.b.call(fn, [p, n])
    n1 = o.b.ashr(n, o.i(1))
    return o.mul(o.mul(p, o.pow2(n1)), o.pow2(o.b.sub(n, n1)))


def _exp(o, x):
    """exp: Cody-Waite by ln2, degree-7 polynomial, 2^n by two factors.
    x < -104 -> 0 (denormals on the way), x > 88.72 -> inf.  Max 1 ulp."""
    n, q = _exp_reduce(o, x, -104.0, 88.8)
    return o.keep_nan(x, _ldexp(o, o.add(1.0, q), n))


def _expm1(o, x):
    """expm1 = 2^n * q + (2^n - 1) in one fma (exact for n = 0, so relative
    accuracy near 0 is that of the polynomial); n = 128 is done as
    2 * (2^127 ...) to overflow correctly.  |x| < 2^-25 returns x (keeps -0
    and denormals).  Max 1 ulp."""
    n, q = _exp_reduce(o, x, -30.0, 88.8)
    big = o.b.icmp_signed(">", n, o.i(127))
    s = o.pow2(o.b.select(big, o.i(127), n))
    t = o.mul(o.fma(s, q, o.sub(s, 1.0)), o.sel(big, 2.0, 1.0))
    t = o.sel(o.cmp("<", o.fabs(x), 2.0 ** -25), x, t)
    return o.keep_nan(x, t)


def _log_split(o, u):
    """u = 2^e * m with m in [sqrt(1/2), sqrt(2)), for u positive normal."""
    bits = o.bits(u)
    e = o.b.sub(o.b.lshr(bits, o.i(23)), o.i(127))
    m = o.flt(o.b.or_(o.b.and_(bits, o.i(0x7FFFFF)), o.i(0x3F800000)))
    big = o.cmp(">", m, _SQRT2)
    m = o.sel(big, o.mul(m, 0.5), m)
    return o.b.add(e, o.b.zext(big, o.ity)), m


def _log_finish(o, e, f):
    """e*ln2 + log1p(f), |f| <= 0.42: f + f^2 * P(f) (degree 10), then the
    exponent term with a two-part ln2."""
    y = o.fma(o.mul(f, f), o.poly(f, _LOG1P_P), f)
    ef = o.b.sitofp(e, o.ty)
    return o.fma(ef, _LN2_HI, o.fma(ef, _LN2_LO, y))


def _log(o, x):
    """log: exponent/mantissa split (denormals pre-scaled by 2^23), degree-10
    polynomial for log1p on [sqrt(.5)-1, sqrt(2)-1].  log(0) = -inf,
    log(<0) = NaN, log(inf) = inf.  Max 1 ulp."""
    tiny = o.cmp("<", x, 1.17549435e-38)
    e, m = _log_split(o, o.sel(tiny, o.mul(x, 8388608.0), x))
    e = o.b.sub(e, o.b.select(tiny, o.i(23), o.i(0)))
    y = _log_finish(o, e, o.sub(m, 1.0))
    y = o.sel(o.cmp("==", x, _INF), _INF, y)
    y = o.sel(o.cmp("==", x, 0.0), -_INF, y)
    return o.sel(o.cmp("u<", x, 0.0), _NAN, y)


def _log1p(o, x):
    """log1p: u = 1 + x with its exact rounding error c (TwoSum); u = 2^e m,
    log1p(x) = e*ln2 + log1p(m - 1 + c/2^e).  log1p(-1) = -inf, x < -1 ->
    NaN, |x| < 2^-24 returns x (keeps -0).  Max 1 ulp."""
    u = o.add(1.0, x)
    bb = o.sub(u, 1.0)
    c = o.add(o.sub(1.0, o.sub(u, bb)), o.sub(x, bb))
    e, m = _log_split(o, u)
    ne = o.b.sub(o.i(0), e)
    ne = o.b.select(o.b.icmp_signed("<", ne, o.i(-126)), o.i(-126), ne)
    y = _log_finish(o, e, o.fma(c, o.pow2(ne), o.sub(m, 1.0)))
    y = o.sel(o.cmp("<", o.fabs(x), 2.0 ** -24), x, y)
    y = o.sel(o.cmp("==", x, _INF), _INF, y)
    y = o.sel(o.cmp("==", x, -1.0), -_INF, y)
    return o.sel(o.cmp("u<", x, -1.0), _NAN, y)


def _tanh(o, x):
    """tanh = sign(x) * -e / (2 + e), e = expm1(-2|x|): accurate for small
    |x| (expm1 keeps relative accuracy) and saturates to +-1.  Max 2 ulp."""
    e = _expm1(o, o.mul(o.fabs(x), -2.0))
    return o.copysign(o.div(o.neg(e), o.add(2.0, e)), x)


def _sigmoid(o, x):
    """sigmoid = (x < 0 ? e : 1) / (1 + e), e = exp(-|x|): no overflow, full
    relative accuracy for large negative x (denormal results kept; TF gives 0
    there because of FTZ).  Max 2 ulp."""
    e = _exp(o, o.neg(o.fabs(x)))
    return o.div(o.sel(o.cmp("<", x, 0.0), e, 1.0), o.add(1.0, e))


def _erf(o, x):
    """erf = c * P(c^2) / Q(c^2), c = x clamped to [-4, 4] (|erf| rounds to 1 beyond):
    a rational fit (Loeb's iteration on relative error, 6e-9 in exact arithmetic),
    chosen for speed (one division, no exp: GELU is erf-bound).  Measured max 5 ulp
    from the exact value (tests allow 8), up to 7 ulp from TF's result where erf is
    within 3e-5 of 1 (|x| > 2.9); TF's own erf is up to 6 ulp off elsewhere."""
    c = o.clamp(x, -4.0, 4.0)
    t = o.mul(c, c)
    r = o.div(o.mul(c, o.poly(t, _ERF_P)), o.poly(t, _ERF_Q))
    return o.keep_nan(x, o.copysign(o.intr("minnum", o.fabs(r), 1.0), x))


def _sincos(o, x, cos):
    """sin/cos: q = rint(|x| * 2/pi), r = |x| - q*pi/2 in float64 with a
    three-part pi/2 (fma Cody-Waite, exact first step); then float32
    degree-9 sin / degree-8 cos polynomials on |r| <= 0.81, the quadrant
    from q's low bits and the sign by xor.  Max 1 ulp for |x| < 2^48
    (2.8e14; the float64 reduction costs ~30% over a float32 one accurate
    only to 2^17).  Beyond that q is inexact, and the result is NaN rather
    than silently wrong (TF/Eigen use a scalar Payne-Hanek path there, which
    would need a branch or table gathers).  inf/NaN -> NaN."""
    ax = o.fabs(x)
    d = _Ops(o.b, _F64)
    xd = o.b.fpext(ax, _F64)
    qd = d.rint(d.mul(xd, 2.0 / math.pi))
    rd = xd
    for part in _PIO2_D:
        rd = d.fma(qd, -part, rd)
    r = o.b.fptrunc(rd, o.ty)
    q = o.b.trunc(o.b.fptosi(d.intr("minnum", qd, 2.0 ** 62), d.ity), o.ity)
    if cos:
        q = o.b.add(q, o.i(1))
    w = o.mul(r, r)
    s = o.fma(o.mul(r, w), o.poly(w, _SIN_P), r)
    c = o.fma(w, o.fma(w, o.poly(w, _COS_P), -0.5), 1.0)
    odd = o.b.trunc(q, ir.IntType(1))
    sign = o.b.shl(o.b.and_(q, o.i(2)), o.i(30))
    if not cos:
        sign = o.b.xor(sign, o.b.and_(o.bits(x), o.i(-0x80000000)))
    res = o.flt(o.b.xor(o.bits(o.b.select(odd, c, s)), sign))
    return o.sel(o.cmp("<", ax, SINCOS_LIMIT), res, _NAN)


def _atan2(o, y, x):
    """atan2: t = min(|x|,|y|) / max(|x|,|y|) in [0, 1], atan(t) by a
    degree-19 odd polynomial, then base + (+-atan t) with base in
    {0, pi/2, pi} (two-part constants), sign from y.  All C99/numpy special
    cases (signed zeros, infinities).  Max 1 ulp."""
    ax, ay = o.fabs(x), o.fabs(y)
    swap = o.cmp(">", ay, ax)
    mn, mx = o.sel(swap, ax, ay), o.sel(swap, ay, ax)
    t = o.div(mn, mx)
    t = o.sel(o.cmp("==", mx, 0.0), 0.0, t)          # 0/0
    a = o.fma(o.mul(t, o.mul(t, t)), o.poly(o.mul(t, t), _ATAN_P), t)
    a = o.sel(o.cmp("==", mn, _INF), math.pi / 4, a)  # inf/inf
    xneg = o.signbit(x)
    flip = o.b.xor(swap, xneg)
    a = o.sel(flip, o.neg(a), a)
    hi = o.sel(swap, _PIO2_HI, o.sel(xneg, _PI_HI, 0.0))
    lo = o.sel(swap, _PIO2_LO, o.sel(xneg, _PI_LO, 0.0))
    res = o.copysign(o.add(o.add(lo, a), hi), y)
    return o.sel(o.b.fcmp_unordered("uno", x, y), _NAN, res)


def _atan(o, x):
    """atan(x) = atan2(x, 1).  Max 1 ulp."""
    return _atan2(o, x, o.f(1.0))


def _cos_of_asin(o, a):
    """sqrt(1 - a*a) for a = |x|: the fma rounds 1 - a^2 once, so it stays accurate
    near 1 (where it is small); NaN for a > 1 and for inf."""
    return o.intr("sqrt", o.fma(o.neg(a), a, 1.0))


def _asin(o, x):
    """asin = copysign(atan2(|x|, sqrt(1 - x^2)), x): NaN outside [-1, 1],
    signed zero kept.  Max 2 ulp."""
    a = o.fabs(x)
    return o.copysign(_atan2(o, a, _cos_of_asin(o, a)), x)


def _acos(o, x):
    """acos = atan2(sqrt(1 - x^2), x): pi at -1, +0 at 1, NaN outside [-1, 1].
    Max 2 ulp."""
    return _atan2(o, _cos_of_asin(o, o.fabs(x)), x)


def _atanh(o, x):
    """atanh = copysign(log1p(2a / (1 - a)) / 2, x), a = |x|: 1 - a is exact near
    1, so only the division and log1p round; +-inf at +-1, NaN beyond.  Max 2 ulp."""
    a = o.fabs(x)
    r = _log1p(o, o.div(o.add(a, a), o.sub(1.0, a)))
    return o.copysign(o.mul(r, 0.5), x)


def _log2_f64(d, x):
    """log2 of a positive (possibly denormal-as-float) double, rel. error
    ~2^-39: x = 2^e m, s = (m-1)/(m+1), log(m) = 2s + s^3 T(s^2)."""
    bits = d.bits(x)
    e = d.b.sub(d.b.lshr(bits, d.i(52)), d.i(1023))
    m = d.flt(d.b.or_(d.b.and_(bits, d.i((1 << 52) - 1)),
                      d.i(0x3FF0000000000000)))
    big = d.cmp(">", m, _SQRT2)
    m = d.sel(big, d.mul(m, 0.5), m)
    e = d.b.add(e, d.b.zext(big, d.ity))
    f = d.sub(m, 1.0)
    s = d.div(f, d.add(2.0, f))
    s2 = d.mul(s, s)
    ln = d.fma(d.mul(s, s2), d.poly(s2, _POW_LOG_T), d.mul(s, 2.0))
    return d.fma(ln, _LOG2E, d.b.sitofp(e, d.ty))


def _pow(o, x, y):
    """powf = 2^(y * log2|x|) evaluated in float64 (log2 and exp2 to ~2^-37
    relative; the final fptrunc rounds once, giving correct denormals and
    overflow), sign for negative x with odd integer y, then the C99 special
    cases by select (pow(x, 0) = pow(1, y) = 1 even for NaN, pow(-1, inf) =
    1, negative x with non-integer y -> NaN, +-0 and +-inf).  Max 1 ulp."""
    d = _Ops(o.b, _F64)
    ax = o.fabs(x)
    lg = _log2_f64(d, o.b.fpext(ax, _F64))
    lg = d.sel(o.cmp("==", ax, 0.0), -_INF, lg)
    lg = d.sel(o.cmp("==", ax, _INF), _INF, lg)
    z = d.clamp(d.mul(o.b.fpext(y, _F64), lg), -300.0, 300.0)
    nf = d.rint(z)
    p = d.poly(d.sub(z, nf), _POW_EXP2_P)
    mag = o.b.fptrunc(d.mul(p, d.pow2(d.b.fptosi(nf, d.ity))), o.ty)
    yint = o.cmp("==", o.floor(y), y)                # true for +-inf
    half = o.mul(y, 0.5)
    yodd = o.b.and_(yint, o.cmp("!=", o.floor(half), half))
    res = o.sel(o.b.and_(o.signbit(x), yodd), o.neg(mag), mag)
    bad = o.b.and_(o.b.and_(o.cmp("<", x, 0.0), o.cmp(">", x, -_INF)),
                   o.b.not_(yint))
    bad = o.b.or_(bad, o.b.fcmp_unordered("uno", x, y))
    res = o.sel(bad, _NAN, res)
    one = o.b.or_(o.cmp("==", x, 1.0), o.cmp("==", y, 0.0))
    one = o.b.or_(one, o.b.and_(o.cmp("==", x, -1.0),
                                o.cmp("==", o.fabs(y), _INF)))
    return o.sel(one, 1.0, res)


def _softplus(o, x):
    """TF's softplus: x if x > -T, exp(x) if x < T, else log1p(exp(x)),
    T = log(eps) + 2 = -13.94.  Max 2 ulp from TF's formula (which itself is
    up to ~7 ulp from exact log1p(exp(x)) just below T)."""
    e = _exp(o, x)
    inner = o.sel(o.cmp("<", x, _SOFTPLUS_T32), e, _log1p(o, e))
    return o.sel(o.cmp(">", x, -_SOFTPLUS_T32), x, inner)


_EMIT_F32 = {
    "exp": _exp, "expm1": _expm1, "log": _log, "log1p": _log1p,
    "tanh": _tanh, "sigmoid": _sigmoid, "erf": _erf,
    "sin": lambda o, x: _sincos(o, x, cos=False),
    "cos": lambda o, x: _sincos(o, x, cos=True),
    "atan2": _atan2, "pow": _pow, "softplus": _softplus,
    "atan": _atan, "asin": _asin, "acos": _acos, "atanh": _atanh,
}


# ---------------------------------------------------------------- float64

def _libm_fn(name):
    return lambda o, *args: o.libm(name, *args)


def _sigmoid64(o, x):
    """Eigen's generic logistic: 1 / (1 + exp(-x))."""
    return o.div(1.0, o.add(1.0, o.libm("exp", o.neg(x))))


def _softplus64(o, x):
    """TF's softplus with T = log(eps) + 2 = -34.04 and libm exp/log1p."""
    e = o.libm("exp", x)
    inner = o.sel(o.cmp("<", x, _SOFTPLUS_T64), e, o.libm("log1p", e))
    return o.sel(o.cmp(">", x, -_SOFTPLUS_T64), x, inner)


_EMIT_F64 = {name: _libm_fn(name) for name in (
    "exp", "expm1", "log", "log1p", "tanh", "erf", "sin", "cos", "atan2",
    "pow", "atan", "asin", "acos", "atanh")}
_EMIT_F64.update(sigmoid=_sigmoid64, softplus=_softplus64)

_ARITY = {"atan2": 2, "pow": 2}

SUPPORTED: frozenset[str] = frozenset(_EMIT_F32)
assert SUPPORTED == frozenset(_EMIT_F64)


def emit(builder: ir.IRBuilder, name: str, args: list[ir.Value], *,
         native_ldexp: bool = False) -> ir.Value:
    """Emit ``name(*args)`` at the builder's position; args are all float or
    all double scalars.  ``native_ldexp``: the target has a vector ldexp
    instruction (``Target.vector_ldexp``; see ``_ldexp``).  Raises ValueError
    for an unknown name or a wrong argument count, TypeError for other
    argument types."""
    if name not in SUPPORTED:
        raise ValueError(f"mathlib: no emitter for {name!r}")
    if len(args) != _ARITY.get(name, 1):
        raise ValueError(f"mathlib: {name} takes {_ARITY.get(name, 1)} "
                         f"argument(s), got {len(args)}")
    ty = args[0].type
    if any(a.type != ty for a in args):
        raise TypeError(f"mathlib: {name} arguments differ in type")
    if isinstance(ty, ir.FloatType):
        table = _EMIT_F32
    elif isinstance(ty, ir.DoubleType):
        table = _EMIT_F64
    else:
        raise TypeError(f"mathlib: {name} needs float or double, got {ty}")
    return table[name](_Ops(builder, ty, native_ldexp), *args)
