"""Complex arithmetic as real IR: the formulas TF's CPU kernels (Eigen) use.

Each helper takes and returns ``registry.Complex`` pairs of f32/f64 IR values of one
shape.  Where Eigen's vectorised (packet) code and its scalar code differ, the packet
code is followed, since it computes all but a tensor's last few elements:
multiplication is the plain (ac - bd) + i(ad + bc), division Eigen's ``pdiv_complex``
(scaled by max(|c|, |d|), no special recovery of infinities).
"""
from __future__ import annotations

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


def div_no_nan(m: Module, a: Complex, b: Complex) -> Complex:
    """TF's div_no_nan: 0 where b == 0 (both parts zero), else a / b."""
    return select(m, is_zero(m, b), zeros(m, a), div(m, a, b))


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
