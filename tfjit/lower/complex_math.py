"""Complex arithmetic as real IR: the formulas TF's CPU kernels (Eigen) use.

Each helper takes and returns ``registry.Complex`` pairs of f32/f64 IR values of one
shape.  Where Eigen's vectorised (packet) code and its scalar code differ, the packet
code is followed, since it computes all but a tensor's last few elements:
multiplication is the plain (ac - bd) + i(ad + bc), division Eigen's ``pdiv_complex``
(scaled by max(|c|, |d|), no special recovery of infinities).  So where TF's own answer
depends on an element's position (an infinite or zero divisor among the last few
elements, which Eigen's scalar code divides with C99's recovery), tfjit gives the
vector path's, as for casts (tests/test_complex.py checks every pair of special parts).
A mean divides by its count as TF's MeanReducer does in scalar code; TF vectorises that
division for some shapes (complex128 with an infinite part: NaN where tfjit gives inf).
"""
from __future__ import annotations

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.lower.registry import Complex, broadcast_all, scalar_like


def full(m: Module, value: float, like: Instr) -> Instr:
    return scalar_like(m, value, like)


def _e(m: Module, op: Op, *xs: Instr) -> Instr:
    return m.elementwise(op, *xs)


def broadcast(m: Module, *cs: Complex) -> list:
    parts = broadcast_all(m, *[p for c in cs for p in (c.re, c.im)])
    return [Complex(parts[2 * k], parts[2 * k + 1]) for k in range(len(cs))]


def conj(m: Module, z: Complex) -> Complex:
    return Complex(z.re, _e(m, Op.NEG, z.im))


def mul(m: Module, a: Complex, b: Complex) -> Complex:
    re = _e(m, Op.SUB, _e(m, Op.MUL, a.re, b.re), _e(m, Op.MUL, a.im, b.im))
    im = _e(m, Op.ADD, _e(m, Op.MUL, a.re, b.im), _e(m, Op.MUL, a.im, b.re))
    return Complex(re, im)


def div(m: Module, a: Complex, b: Complex) -> Complex:
    """Eigen's pdiv_complex: with s = max(|c|, |d|), c' = c/s, d' = d/s,
    ((a c' + b d') / (c'^2 + d'^2)) / s + i ((b c' - a d') / (c'^2 + d'^2)) / s.
    b = 0 gives NaN parts (0/0), as TF's vectorised kernel does."""
    s = _e(m, Op.MAX, _e(m, Op.ABS, b.re), _e(m, Op.ABS, b.im))
    c, d = _e(m, Op.DIV, b.re, s), _e(m, Op.DIV, b.im, s)
    denom = _e(m, Op.ADD, _e(m, Op.MUL, c, c), _e(m, Op.MUL, d, d))
    re = _e(m, Op.ADD, _e(m, Op.MUL, a.re, c), _e(m, Op.MUL, a.im, d))
    im = _e(m, Op.SUB, _e(m, Op.MUL, a.im, c), _e(m, Op.MUL, a.re, d))
    return Complex(_e(m, Op.DIV, _e(m, Op.DIV, re, denom), s),
                   _e(m, Op.DIV, _e(m, Op.DIV, im, denom), s))


def is_zero(m: Module, z: Complex) -> Instr:
    zero = full(m, 0.0, z.re)
    return _e(m, Op.AND, _e(m, Op.EQ, z.re, zero), _e(m, Op.EQ, z.im, zero))


def select(m: Module, pred: Instr, a: Complex, b: Complex) -> Complex:
    return Complex(_e(m, Op.SELECT, pred, a.re, b.re), _e(m, Op.SELECT, pred, a.im, b.im))


def zeros(m: Module, like: Complex) -> Complex:
    zero = full(m, 0.0, like.re)
    return Complex(zero, zero)


def div_by_count(m: Module, z: Complex, n: int) -> Complex:
    """z / (n + 0i) as TF's mean divides (Eigen's MeanReducer: one scalar complex division
    per result, compiler-rt's __divsc3): the divisor scaled by 2^-ilogb(n), and where both
    parts come out NaN with an infinite part in z, the recovery inf * (a' c, b' c)."""
    part = z.re.dtype.numpy()
    a, b = z.re, z.im
    if n > 0:
        k = int(np.floor(np.log2(n)))
        c, scale = part.type(n / 2.0 ** k), part.type(2.0 ** -k)
    else:
        c, scale = part.type(0), part.type(1)
    denom = part.type(c * c)
    zero = full(m, 0.0, a)

    def scaled(x):
        return _e(m, Op.MUL, _e(m, Op.DIV, x, full(m, denom, a)), full(m, scale, a))
    re = scaled(_e(m, Op.ADD, _e(m, Op.MUL, a, full(m, c, a)), _e(m, Op.MUL, b, zero)))
    im = scaled(_e(m, Op.SUB, _e(m, Op.MUL, b, full(m, c, a)), _e(m, Op.MUL, a, zero)))
    inf = full(m, float("inf"), a)
    both_nan = _e(m, Op.AND, _e(m, Op.IS_NAN, re), _e(m, Op.IS_NAN, im))
    a_inf, b_inf = _e(m, Op.IS_INF, a), _e(m, Op.IS_INF, b)
    if n > 0:       # recovery for an infinite numerator over a finite divisor
        unit_a = copysign(m, _e(m, Op.SELECT, a_inf, full(m, 1.0, a), zero), a)
        unit_b = copysign(m, _e(m, Op.SELECT, b_inf, full(m, 1.0, a), zero), b)
        rec = Complex(_e(m, Op.MUL, inf, _e(m, Op.ADD, _e(m, Op.MUL, unit_a, full(m, c, a)),
                                            _e(m, Op.MUL, unit_b, zero))),
                      _e(m, Op.MUL, inf, _e(m, Op.SUB, _e(m, Op.MUL, unit_b, full(m, c, a)),
                                            _e(m, Op.MUL, unit_a, zero))))
        return select(m, _e(m, Op.AND, both_nan, _e(m, Op.OR, a_inf, b_inf)), rec, Complex(re, im))
    # n = 0: __divsc3's zero-divisor recovery, inf * a and inf * b (NaN for an empty sum)
    some = _e(m, Op.NOT, _e(m, Op.AND, _e(m, Op.IS_NAN, a), _e(m, Op.IS_NAN, b)))
    rec = Complex(_e(m, Op.MUL, inf, a), _e(m, Op.MUL, inf, b))
    return select(m, _e(m, Op.AND, both_nan, some), rec, Complex(re, im))


def div_no_nan(m: Module, a: Complex, b: Complex) -> Complex:
    """TF's div_no_nan for complex: +0 where b == 0 or a * conj(b) == 0 (so a zero
    numerator gives +0 even when |b|^2 underflows), else a / b."""
    zero = _e(m, Op.OR, is_zero(m, b), is_zero(m, mul(m, a, conj(m, b))))
    return select(m, zero, zeros(m, a), div(m, a, b))


def reciprocal(m: Module, z: Complex) -> Complex:
    """TF's scalar_inverse_op: 1 / z, Eigen's complex division."""
    one = Complex(full(m, 1.0, z.re), full(m, 0.0, z.re))
    return div(m, one, z)


def squared_difference(m: Module, a: Complex, b: Complex) -> Complex:
    """TF's squared_difference for complex: v * conj(v), v = a - b (a zero imaginary
    part, NaN where v has an infinite part, as TF's)."""
    v = Complex(_e(m, Op.SUB, a.re, b.re), _e(m, Op.SUB, a.im, b.im))
    return mul(m, v, conj(m, v))


def compare(m: Module, a: Complex, b: Complex, equal: bool) -> Instr:
    if equal:
        return _e(m, Op.AND, _e(m, Op.EQ, a.re, b.re), _e(m, Op.EQ, a.im, b.im))
    return _e(m, Op.OR, _e(m, Op.NE, a.re, b.re), _e(m, Op.NE, a.im, b.im))


def abs_(m: Module, z: Complex) -> Instr:
    """|z| as the C library's cabs (hypot): infinite when a part is infinite (even if
    the other is NaN).  complex64 computes sqrt(re^2 + im^2) in f64 and rounds once, as
    glibc's hypotf; complex128 scales by max(|re|, |im|) where the squares would
    overflow or underflow."""
    inf = _e(m, Op.OR, _e(m, Op.IS_INF, z.re), _e(m, Op.IS_INF, z.im))
    if z.re.dtype is dt.F32:
        re, im = m.convert(z.re, dt.F64), m.convert(z.im, dt.F64)
        r = m.convert(_e(m, Op.SQRT, _e(m, Op.ADD, _e(m, Op.MUL, re, re), _e(m, Op.MUL, im, im))), dt.F32)
        return _e(m, Op.SELECT, inf, full(m, float("inf"), r), r)
    a, b = _e(m, Op.ABS, z.re), _e(m, Op.ABS, z.im)
    big = _e(m, Op.MAX, a, b)
    small = _e(m, Op.MIN, a, b)
    plain = _e(m, Op.SQRT, _e(m, Op.ADD, _e(m, Op.MUL, a, a), _e(m, Op.MUL, b, b)))
    t = _e(m, Op.DIV, small, big)
    scaled = _e(m, Op.MUL, big, _e(m, Op.SQRT, _e(m, Op.ADD, full(m, 1.0, a), _e(m, Op.MUL, t, t))))
    safe = _e(m, Op.AND, _e(m, Op.LT, big, full(m, 1e150, a)), _e(m, Op.GT, big, full(m, 1e-150, a)))
    zero = _e(m, Op.EQ, big, full(m, 0.0, a))
    r = _e(m, Op.SELECT, _e(m, Op.OR, safe, zero), plain, scaled)
    return _e(m, Op.SELECT, inf, full(m, float("inf"), r), r)


def sign(m: Module, z: Complex) -> Complex:
    """Eigen's scalar_sign_op for complex: 0 when |z| == 0, else z * (1 / |z|)."""
    a = abs_(m, z)
    inv = _e(m, Op.DIV, full(m, 1.0, a), a)
    out = Complex(_e(m, Op.MUL, z.re, inv), _e(m, Op.MUL, z.im, inv))
    return select(m, _e(m, Op.EQ, a, full(m, 0.0, a)), zeros(m, z), out)


# -- transcendental functions (Eigen's packet formulas where it has them) ---------------

def copysign(m: Module, mag: Instr, sign: Instr) -> Instr:
    """|mag| with the sign bit of ``sign`` (-0.0 included)."""
    u = dt.U32 if mag.dtype is dt.F32 else dt.U64
    bit = 1 << (u.bits - 1)
    a, b = m.bitcast(mag, u), m.bitcast(sign, u)
    body = _e(m, Op.AND, a, full(m, bit - 1, a))
    return m.bitcast(_e(m, Op.OR, body, _e(m, Op.AND, b, full(m, bit, b))), mag.dtype)


def sqrt(m: Module, z: Complex) -> Complex:
    """Eigen's psqrt_complex: with l = |z| (max * sqrt(1 + (min/max)^2)) and
    t = sqrt((|x| + l) / 2): (t, y / 2t) for x >= 0, (|y / 2t|, copysign(t, y)) for
    x < 0; x = +-inf gives (inf, 0 * |y|) (flipped for -inf), y = +-inf gives (inf, y)."""
    x, y = z.re, z.im
    ax, ay = _e(m, Op.ABS, x), _e(m, Op.ABS, y)
    big, small = _e(m, Op.MAX, ax, ay), _e(m, Op.MIN, ax, ay)
    zero, half, inf = full(m, 0.0, x), full(m, 0.5, x), full(m, float("inf"), x)
    r = _e(m, Op.DIV, small, big)
    l = _e(m, Op.MUL, big, _e(m, Op.SQRT, _e(m, Op.ADD, full(m, 1.0, x), _e(m, Op.MUL, r, r))))
    l = _e(m, Op.SELECT, _e(m, Op.EQ, small, zero), big, l)
    t = _e(m, Op.SQRT, _e(m, Op.MUL, half, _e(m, Op.ADD, ax, l)))
    eta = _e(m, Op.MUL, half, _e(m, Op.DIV, y, t))
    eta = _e(m, Op.SELECT, _e(m, Op.EQ, big, zero), zero, eta)
    negative = _e(m, Op.LT, x, zero)
    out = select(m, negative, Complex(_e(m, Op.ABS, eta), copysign(m, t, y)), Complex(t, eta))
    ay0 = _e(m, Op.MUL, ay, zero)
    real_inf = select(m, negative, Complex(ay0, ax), Complex(ax, ay0))
    out = select(m, _e(m, Op.EQ, ax, inf), real_inf, out)
    return select(m, _e(m, Op.EQ, ay, inf), Complex(inf, y), out)


def exp(m: Module, z: Complex) -> Complex:
    """exp(x) (cos y, sin y) with the special values of TF's kernels: complex64 runs
    Eigen's vectorised pexp_complex, complex128 the C library's cexp (Eigen has no
    vector exp for it).  Both: y = 0 gives (exp(x), y), x = -inf with y finite zeros
    signed as cos y and sin y.  x = +inf with y infinite or NaN: (+-inf as y's sign, NaN)
    (complex64) or (+inf, NaN) (complex128); x = -inf with y infinite or NaN:
    (-0, copysign(0, -y)) for an infinite y and (+0, copysign(0, y)) for NaN (complex64),
    or (+0, copysign(0, y)) (complex128)."""
    x, y = z.re, z.im
    ex = _e(m, Op.EXP, x)
    c, s = _e(m, Op.COS, y), _e(m, Op.SIN, y)
    one, zero = full(m, 1.0, x), full(m, 0.0, x)
    neg_inf = _e(m, Op.EQ, x, full(m, float("-inf"), x))
    pos_inf = _e(m, Op.EQ, x, full(m, float("inf"), x))
    y_bad = _e(m, Op.NOT, _e(m, Op.IS_FINITE, y))
    if x.dtype is dt.F32:
        c = _e(m, Op.SELECT, neg_inf, copysign(m, one, c), c)
        s = _e(m, Op.SELECT, neg_inf, copysign(m, one, s), s)
        undefined = _e(m, Op.AND, pos_inf, y_bad)
        c = _e(m, Op.SELECT, undefined, copysign(m, one, y), c)
        s = _e(m, Op.SELECT, undefined, zero, s)
        out = Complex(_e(m, Op.MUL, ex, c), _e(m, Op.MUL, ex, s))
        # x = -inf, y not finite: the signs of Eigen's cos and sin NaNs (measured on
        # TF's kernel): (-0, copysign(0, -y)) for y = +-inf, (+0, copysign(0, y)) for NaN
        y_inf = _e(m, Op.IS_INF, y)
        zeros_ = Complex(_e(m, Op.SELECT, y_inf, full(m, -0.0, x), zero),
                         copysign(m, zero, _e(m, Op.SELECT, y_inf, _e(m, Op.NEG, y), y)))
        out = select(m, _e(m, Op.AND, neg_inf, y_bad), zeros_, out)
    else:
        c = _e(m, Op.SELECT, neg_inf, copysign(m, one, c), c)
        s = _e(m, Op.SELECT, neg_inf, copysign(m, one, s), s)
        out = Complex(_e(m, Op.MUL, ex, c), _e(m, Op.MUL, ex, s))
        out = select(m, _e(m, Op.AND, neg_inf, y_bad), Complex(zero, copysign(m, zero, y)), out)
        out = select(m, _e(m, Op.AND, pos_inf, y_bad), Complex(ex, _e(m, Op.SUB, y, y)), out)
    return select(m, _e(m, Op.EQ, y, zero), Complex(ex, y), out)


def log(m: Module, z: Complex) -> Complex:
    """Eigen's plog_complex: (log |z|, atan2(y, x)); |z| infinite when a part is."""
    return Complex(_e(m, Op.LOG, abs_(m, z)), _e(m, Op.ATAN2, z.im, z.re))



def expm1(m: Module, z: Complex) -> Complex:
    """Eigen's scalar complex expm1 (TF's kernel: no vector form for complex), in real
    arithmetic over the C library's expm1 and sin, so every special value is TF's:
    e1 = expm1(x), e = e1 + 1: (e1 - 2 e sin(y / 2)^2, e sin y)."""
    x, y = z.re, z.im
    e1 = _e(m, Op.EXPM1_LIBM, x)
    e = _e(m, Op.ADD, e1, full(m, 1.0, x))
    half = _e(m, Op.SIN_LIBM, _e(m, Op.DIV, y, full(m, 2.0, y)))
    twice = _e(m, Op.MUL, _e(m, Op.MUL, full(m, 2.0, x), e), _e(m, Op.MUL, half, half))
    return Complex(_e(m, Op.SUB, e1, twice), _e(m, Op.MUL, e, _e(m, Op.SIN_LIBM, y)))
