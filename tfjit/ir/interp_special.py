"""numpy semantics of TF's special functions: igamma, igammac, betainc, zeta, polygamma.

TF's CPU kernels (cwise_op_igammas.cc, betainc_op.cc, cwise_op_zeta.cc) evaluate
Eigen's scalar code (unsupported/Eigen/src/SpecialFunctions/SpecialFunctionsImpl.h:
Cephes' algorithms) element by element, f32 and f64 only: no x86 packet version
exists (``HasIGamma`` ... are 0), so every element runs the same C++ with
IEEE operations in the element's type and the C library's ``lgamma_r``, ``log``,
``log1p``, ``exp``, ``pow``, ``tan`` (glibc, as here through ctypes).

Each function below is that code step by step, vectorised over elements: a loop
keeps a mask of the lanes still iterating (a lane that leaves Eigen's loop is
frozen), and a branch is taken by the lanes its condition selects, so every
lane sees the operations of the scalar code in its order.  codegen/special.py
emits the same steps as LLVM functions; the two and TF's kernels agree bit for
bit (tests/test_special_functions.py), except that here denormal operands read
as zero (``interp._fpu``) and libm's results are flushed, but arithmetic
intermediates are not flushed as TF's FTZ/DAZ would (results near the bottom
of the range may differ).  Loops run as long as Eigen's do, with no bound of
their own: f64 zeta(x, q) of an integer x and a non-integer q far below zero
steps ``a += 1`` from q up to 9 (about -q times), in TF as here.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

import numpy as np

from tfjit.ir.ops import Op

_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
           7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
           -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18)
# digamma's asymptotic series (Cephes' A, Horner from the first)
_PSI_A = {np.float32: (-4.16666666666666666667e-3, 3.96825396825396825397e-3,
                       -8.33333333333333333333e-3, 8.33333333333333333333e-2),
          np.float64: (8.33333333333333333333e-2, -2.10927960927960927961e-2,
                       7.57575757575757575758e-3, -4.16666666666666666667e-3,
                       3.96825396825396825397e-3, -8.33333333333333333333e-3,
                       8.33333333333333333333e-2)}
_PSI_LIMIT = {np.float32: 1.0e8, np.float64: 1.0e17}


@functools.lru_cache(maxsize=None)
def constants(t) -> dict:
    """Cephes' machep/big/biginv of Eigen's cephes_helper, and -log(highest)."""
    t = np.dtype(t).type
    eps = np.finfo(t).eps
    if t is np.float32:
        machep = t(eps / 2)
        big, biginv = t(1) / machep, machep
    else:
        machep = t(eps / 2)
        big, biginv = t(1) / t(eps), t(eps)
    return {"machep": machep, "big": big, "biginv": biginv,
            "neg_log_max": -libm("log", np.asarray(np.finfo(t).max, t))[()]}


@functools.lru_cache(maxsize=None)
def _c_function(symbol: str, nargs: int):
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    fn = getattr(lib, symbol)
    t = ctypes.c_float if symbol.endswith("f") or symbol == "lgammaf_r" else ctypes.c_double
    if symbol.startswith("lgamma"):
        fn.restype, fn.argtypes = t, [t, ctypes.POINTER(ctypes.c_int)]
        sign = ctypes.c_int()
        return np.frompyfunc(lambda v: fn(v, ctypes.byref(sign)), 1, 1)
    fn.restype, fn.argtypes = t, [t] * nargs
    return np.frompyfunc(fn, nargs, 1)


def libm(name: str, *xs: np.ndarray) -> np.ndarray:
    """The C library's ``name`` (log, log1p, exp, pow, tan, lgamma) of f32 or f64
    arrays: logf... for f32, lgammaf_r/lgamma_r for lgamma (what Eigen calls)."""
    dtype = xs[0].dtype
    f32 = dtype == np.float32
    symbol = {"lgamma": "lgammaf_r" if f32 else "lgamma_r"}.get(name, name + ("f" if f32 else ""))
    out = np.asarray(_c_function(symbol, len(xs))(*xs), dtype=object).astype(dtype)
    out = out.reshape(np.shape(xs[0]))
    # TF runs these with FTZ: a result that would be a denormal is zero
    return np.where(np.abs(out) < np.finfo(dtype).tiny, np.copysign(dtype.type(0), out), out)


def _where(mask, x, y):
    return np.where(mask, x, y).astype(np.asarray(y).dtype)


def _main_igamma_term(a, x):
    t, k = a.dtype.type, constants(a.dtype.type)
    logax = a * libm("log", x) - x - libm("lgamma", a)
    zero = (logax < k["neg_log_max"]) | np.isnan(logax)
    out = np.zeros_like(a)
    out[~zero] = libm("exp", logax[~zero])
    return out.astype(t)


def _igamma_series(a, x):
    t, k = a.dtype.type, constants(a.dtype.type)
    ax = _main_igamma_term(a, x)
    nonzero = ax != 0
    ax = ax / a
    r, c, ans = a.copy(), np.ones_like(a), np.ones_like(a)
    live = nonzero.copy()
    for _ in range(2000):
        if not live.any():
            break
        r = _where(live, r + t(1), r)
        term = x / r
        c = _where(live, c * term, c)
        ans = _where(live, ans + c, ans)
        live &= ~(c <= k["machep"] * ans)
    return _where(nonzero, ans * ax, np.zeros_like(a))


def _igammac_cf(a, x):
    t, k = a.dtype.type, constants(a.dtype.type)
    out = np.zeros_like(a)
    finite = ~np.isinf(x)
    ax = np.zeros_like(a)
    ax[finite] = _main_igamma_term(a[finite], x[finite])
    live = finite & (ax != 0)
    one = t(1)
    y = one - a
    z = x + y + one
    c = np.zeros_like(a)
    pkm2, qkm2, pkm1 = np.ones_like(a), x.copy(), x + one
    qkm1 = z * x
    ans = pkm1 / qkm1
    go = live.copy()
    for _ in range(2000):
        if not go.any():
            break
        c, y, z = c + one, y + one, z + t(2)
        yc = y * c
        pk = pkm1 * z - pkm2 * yc
        qk = qkm1 * z - qkm2 * yc
        update = go & (qk != 0)
        ans_prev = ans
        ans = _where(update, pk / qk, ans)
        go &= ~(update & (np.abs(ans_prev - ans) <= k["machep"] * np.abs(ans)))
        pkm2, pkm1 = _where(go, pkm1, pkm2), _where(go, pk, pkm1)
        qkm2, qkm1 = _where(go, qkm1, qkm2), _where(go, qk, qkm1)
        rescale = go & (np.abs(pk) > k["big"])
        pkm2, pkm1, qkm2, qkm1 = (_where(rescale, v * k["biginv"], v) for v in (pkm2, pkm1, qkm2, qkm1))
    out[live] = (ans * ax)[live]
    return out


def igamma(a, x, complement: bool = False):
    """Eigen's igamma_generic_impl<VALUE> (complement=False) or igammac_impl."""
    t = a.dtype.type
    a, x = np.broadcast_arrays(a, x)
    a, x = a.copy(), x.copy()
    with np.errstate(all="ignore"):
        out = np.full(a.shape, np.nan, a.dtype)
        valid = ~((x < 0) | (a <= 0) | np.isnan(a) | np.isnan(x))
        if complement:
            series = valid & ((x < 1) | (x < a))
            cf = valid & ~series
            out[series] = t(1) - _igamma_series(a[series], x[series])
            out[cf] = _igammac_cf(a[cf], x[cf])
        else:
            valid &= x != 0
            cf = valid & (x > 1) & (x > a)
            series = valid & ~cf
            out[cf] = t(1) - _igammac_cf(a[cf], x[cf])
            out[series] = _igamma_series(a[series], x[series])
            out[x == 0] = 0
        return out


def _digamma(x):
    t = x.dtype.type
    one, half = t(1), t(0.5)
    with np.errstate(all="ignore"):
        negative = x <= 0
        p = np.floor(x)
        pole = negative & (p == x)
        nz = x - p
        up = negative & (nz != half) & (nz > half)
        p = _where(up, p + one, p)
        nz = _where(up, x - p, nz)
        reflect = negative & (nz != half)
        nz = _where(reflect, t(np.pi) / libm("tan", t(np.pi) * nz), np.zeros_like(x))
        s = _where(negative, one - x, x)
        w = np.zeros_like(x)
        while True:                             # s < 10 holds at most 10 times (s > 0)
            live = s < 10
            if not live.any():
                break
            w = _where(live, w + one / s, w)
            s = _where(live, s + one, s)
        coeff = _PSI_A[x.dtype.type]
        z = one / (s * s)
        poly = np.full_like(x, coeff[0])
        for c in coeff[1:]:
            poly = poly * z + t(c)
        y = _where(s < t(_PSI_LIMIT[x.dtype.type]), z * poly, np.zeros_like(x))
        y = libm("log", s) - (half / s) - y - w
        return _where(pole, np.full_like(x, np.nan), _where(negative, y - nz, y))


def _zeta_series_done(x, a, b, s, machep, wide: bool):
    """Eigen's zeta_impl_series: (done, a, b, s); f64 also runs while a <= 9."""
    one = x.dtype.type(1)
    done = np.zeros(x.shape, bool)
    live = np.ones(x.shape, bool)
    i = 0
    while True:
        live &= ((i < 9) | (a <= 9.0)) if wide else (i < 9)
        if not live.any():
            return done, a, b, s
        i += 1
        a = _where(live, a + one, a)
        b = _where(live, libm("pow", a, -x), b)
        s = _where(live, s + b, s)
        hit = live & (np.abs(b / s) < machep)
        done |= hit
        live &= ~hit


def zeta(x, q):
    t = x.dtype.type
    x, q = (v.copy() for v in np.broadcast_arrays(x, q))
    k = constants(x.dtype.type)
    one, half = t(1), t(0.5)
    with np.errstate(all="ignore"):
        out = np.full(x.shape, np.nan, x.dtype)
        decided = (x == one) | (x < one)
        out[x == one] = np.inf
        nonpos = ~decided & (q <= 0)
        integer_q = nonpos & (q == np.floor(q))
        even = np.rint(half * x) == half * x
        out[integer_q & even] = np.inf
        decided |= integer_q | (nonpos & (x != np.floor(x)))
        live = ~decided
        if not live.any():
            return out
        xs, qs = x[live], q[live]
        s = libm("pow", qs, -xs)
        done, a, b, s = _zeta_series_done(xs, qs.copy(), np.zeros_like(xs), s, k["machep"],
                                          x.dtype == np.float64)
        tail = ~done & (b != 0)
        w = a
        s = _where(tail, s + b * w / (xs - one), s)
        s = _where(tail, s - half * b, s)
        a, kk = np.ones_like(xs), np.zeros_like(xs)
        for coeff in _ZETA_A:
            if not tail.any():
                break
            a = _where(tail, a * (xs + kk), a)
            b = _where(tail, b / w, b)
            term = a * b / t(coeff)
            s = _where(tail, s + term, s)
            tail &= ~(np.abs(term / s) < k["machep"])
            kk = _where(tail, kk + one, kk)
            a = _where(tail, a * (xs + kk), a)
            b = _where(tail, b / w, b)
            kk = _where(tail, kk + one, kk)
        out[live] = s
        return out


def polygamma(n, x):
    t = n.dtype.type
    n, x = (v.copy() for v in np.broadcast_arrays(n, x))
    with np.errstate(all="ignore"):
        out = np.full(n.shape, np.nan, n.dtype)
        valid = ~((np.floor(n) != n) | (n < 0))
        psi = valid & (n == 0)
        out[psi] = _digamma(x[psi])
        rest = valid & ~psi
        nplus = n[rest] + t(1)
        factorial = libm("exp", libm("lgamma", nplus))
        sign = libm("pow", np.full_like(nplus, -1), nplus)
        out[rest] = sign * factorial * zeta(nplus, x[rest])
        return out


# -- betainc ------------------------------------------------------------------

def _incbeta_cfe(a, b, x, small: np.ndarray):
    t, k = a.dtype.type, constants(a.dtype.type)
    f32 = a.dtype == np.float32
    one, two = t(1), t(2)
    thresh = k["machep"] if f32 else t(3) * k["machep"]
    k1, k3, k4, k5, k8 = a, a, a + one, np.ones_like(a), a + two
    k2 = _where(small, a + b, b - one)
    k6 = _where(small, b - one, a + b)
    k7 = _where(small, k4, a + one)
    k26 = _where(small, np.ones_like(a), -np.ones_like(a))
    x = _where(small, x, x / (one - x))
    pkm2, qkm2, pkm1, qkm1, ans = (np.full_like(a, v) for v in (0, 1, 1, 1, 1))
    result = np.zeros_like(a)
    live = np.ones(a.shape, bool)
    for _ in range(100 if f32 else 300):
        if not live.any():
            break
        xk = -(x * k1 * k2) / (k3 * k4)
        pk, qk = pkm1 + pkm2 * xk, qkm1 + qkm2 * xk
        pkm2, pkm1, qkm2, qkm1 = pkm1, pk, qkm1, qk
        xk = (x * k5 * k6) / (k7 * k8)
        pk, qk = pkm1 + pkm2 * xk, qkm1 + qkm2 * xk
        pkm2, pkm1, qkm2, qkm1 = pkm1, pk, qkm1, qk
        nonzero = live & (qk != 0)
        r = pk / qk
        converged = nonzero & (np.abs(ans - r) < np.abs(r) * thresh)
        result = _where(converged, r, result)
        live &= ~converged
        ans = _where(nonzero & live, r, ans)
        k1, k2, k3, k4 = k1 + one, k2 + k26, k3 + two, k4 + two
        k5, k6, k7, k8 = k5 + one, k6 - k26, k7 + two, k8 + two
        down = (np.abs(qk) + np.abs(pk)) > k["big"]
        pkm2, pkm1, qkm2, qkm1 = (_where(down, v * k["biginv"], v) for v in (pkm2, pkm1, qkm2, qkm1))
        up = (np.abs(qk) < k["biginv"]) | (np.abs(pk) < k["biginv"])
        pkm2, pkm1, qkm2, qkm1 = (_where(up, v * k["big"], v) for v in (pkm2, pkm1, qkm2, qkm1))
    return _where(live, ans, result)


def _lg(v):
    return libm("lgamma", v)


def _incbps_f32(a, b, x):
    t, k = a.dtype.type, constants(a.dtype.type)
    one = t(1)
    y = a * libm("log", x) + (b - one) * libm("log1p", -x) - libm("log", a)
    y = y - (_lg(a) + _lg(b))
    y = y + _lg(a + b)
    tt = x / (one - x)
    s, u = np.zeros_like(a), np.ones_like(a)
    live = np.ones(a.shape, bool)
    while live.any():
        b = _where(live, b - one, b)
        live &= b != 0
        a = _where(live, a + one, a)
        u = _where(live, u * (tt * b / a), u)
        s = _where(live, s + u, s)
        live &= np.abs(u) > k["machep"]
    return libm("exp", y) * (one + s)


def _incbsa_f32(aa, bb, xx):
    t = aa.dtype.type
    one = t(1)
    onemx = one - xx
    rev = xx > (aa / (aa + bb))
    a, b = _where(rev, bb, aa), _where(rev, aa, bb)
    tt, x = _where(rev, xx, onemx), _where(rev, onemx, xx)
    out = np.zeros_like(aa)
    ps = (b > t(10)) & (np.abs(b * x / a) < t(0.3))
    out[ps] = _incbps_f32(a[ps], b[ps], x[ps])
    cf = ~ps
    a, b, x, tt = a[cf], b[cf], x[cf], tt[cf]
    small = (x * (a + b - t(2)) / (a - one)) < one
    ans = _incbeta_cfe(a, b, x, small)
    tt = _where(small, b * libm("log", tt), (b - one) * libm("log", tt))
    tt = tt + (a * libm("log", x) + _lg(a + b) - _lg(a) - _lg(b))
    tt = tt + libm("log", ans / a)
    out[cf] = libm("exp", tt)
    return _where(rev, one - out, out)


def _betainc_f32(a, b, x):
    one = a.dtype.type(1)
    out = np.empty_like(a)
    low = a <= one
    al, bl, xl = a[low], b[low], x[low]
    ans = _incbsa_f32(al + one, bl, xl)
    tt = al * libm("log", xl) + bl * libm("log1p", -xl) + _lg(al + bl) - _lg(al + one) - _lg(bl)
    out[low] = ans + libm("exp", tt)
    out[~low] = _incbsa_f32(a[~low], b[~low], x[~low])
    return out


def _incbps_f64(a, b, x):
    t, k = a.dtype.type, constants(a.dtype.type)
    one = t(1)
    ai = one / a
    u = (one - b) * x
    v = u / (a + one)
    t1, tt, n, s = v, u, np.full_like(a, 2), np.zeros_like(a)
    z = k["machep"] * ai
    live = np.abs(v) > z
    while live.any():
        u = (n - b) * x / n
        tt = _where(live, tt * u, tt)
        v = _where(live, tt / (a + n), v)
        s = _where(live, s + v, s)
        n = _where(live, n + one, n)
        live &= np.abs(v) > z
    s = s + t1
    s = s + ai
    u = a * libm("log", x)
    tt = _lg(a + b) - _lg(a) - _lg(b) + u + libm("log", s)
    return libm("exp", tt)


def _betainc_f64(aa, bb, xx):
    t, k = aa.dtype.type, constants(aa.dtype.type)
    one = t(1)
    out = np.empty_like(aa)
    direct = (bb * xx <= one) & (xx <= t(0.95))
    out[direct] = _incbps_f64(aa[direct], bb[direct], xx[direct])
    aa, bb, xx = aa[~direct], bb[~direct], xx[~direct]
    w = one - xx
    rev = xx > (aa / (aa + bb))
    a, b = _where(rev, bb, aa), _where(rev, aa, bb)
    xc, x = _where(rev, xx, w), _where(rev, w, xx)
    res = np.empty_like(aa)
    ps = rev & (b * x <= one) & (x <= t(0.95))
    res[ps] = _incbps_f64(a[ps], b[ps], x[ps])
    cf = ~ps
    a, b, x, xc = a[cf], b[cf], x[cf], xc[cf]
    small = (x * (a + b - t(2)) - (a - one)) < 0
    w = _incbeta_cfe(a, b, x, small)
    w = _where(small, w, w / xc)
    y = a * libm("log", x)
    tt = b * libm("log", xc)
    y = y + (tt + _lg(a + b) - _lg(a) - _lg(b))
    y = y + libm("log", w / a)
    res[cf] = libm("exp", y)
    res = _where(rev, _where(res <= k["machep"], np.full_like(res, one - k["machep"]), one - res), res)
    out[~direct] = res
    return out


def betainc(a, b, x):
    t = a.dtype.type
    a, b, x = (v.copy() for v in np.broadcast_arrays(a, b, x))
    with np.errstate(all="ignore"):
        out = np.full(a.shape, np.nan, a.dtype)
        bad = (a <= 0) | (b <= 0)
        edge = ~bad & ((x <= 0) | (x >= 1))
        out[edge & (x == 0)] = t(0)
        out[edge & (x == 1)] = t(1)
        live = ~bad & ~edge
        fn = _betainc_f32 if a.dtype == np.float32 else _betainc_f64
        out[live] = fn(a[live], b[live], x[live])
        return out


# the IR ops' functions (interp.py wraps them: denormal operands and results flushed)
FUNCTIONS = {
    Op.IGAMMA: igamma, Op.IGAMMAC: lambda a, x: igamma(a, x, complement=True),
    Op.BETAINC: betainc, Op.ZETA: zeta, Op.POLYGAMMA: polygamma,
}
