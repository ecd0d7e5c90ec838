"""Fake quantisation (``tf.quantization.fake_quant_with_min_max_*``): quantise to
``num_bits`` and back, in float32, as TF's kernels (fake_quant_ops_functor.h) do.

The range is nudged so that real zero is a representable value, in float32, step
by step as TF's ``Nudge``: at compile time (``nudge``) when min and max are
constants, else in IR on the run-time values (``nudge_ir``; a scalar for the
``Vars`` ops, one per channel -- the last dim -- for ``PerChannel``).  The
elementwise part (clamp, shift, scale, floor, scale back) is IR, so it fuses with
its neighbours.  The gradients pass the incoming gradient where the input lies in
the nudged range; the ``Vars`` gradients also sum it below and above the range
(wrt min and max), over everything (``Vars``) or per channel (``PerChannel``).
A range of min = max = 0 gives zeros (and passes the whole gradient), as TF's.
"""
from __future__ import annotations

import math

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.ops import Op
from tfjit.lower.registry import Unsupported, register, scalar_like

F32 = np.float32


def nudge(lo: float, hi: float, num_bits: int, narrow_range: bool) -> tuple:
    """(nudged_min, nudged_max, scale, inv_scale) in float32, as TF's Nudge."""
    if not 2 <= num_bits <= 16:
        raise Unsupported(f"num_bits must be between 2 and 16, inclusive, got {num_bits}")
    qmin, qmax = F32(1 if narrow_range else 0), F32((1 << num_bits) - 1)
    lo, hi = F32(lo), F32(hi)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = (hi - lo) / (qmax - qmin)
        inv_scale = (qmax - qmin) / (hi - lo)    # TF recomputes it rather than 1 / scale
        zero_from_min = qmin - lo / scale
    if zero_from_min < qmin:
        zero = qmin
    elif zero_from_min > qmax:
        zero = qmax
    else:   # std::round, halves away from zero (z >= 0 here; in double, so z + 0.5 is exact)
        zero = F32(math.floor(float(zero_from_min) + 0.5))
    return F32((qmin - zero) * scale), F32((qmax - zero) * scale), F32(scale), F32(inv_scale)


def _clamp(m, x, lo, hi):
    """Eigen's x.cwiseMin(hi).cwiseMax(lo): ``b < a ? b : a`` twice (NaN stays NaN)."""
    upper = m.elementwise(Op.SELECT, m.elementwise(Op.LT, hi, x), hi, x)
    return m.elementwise(Op.SELECT, m.elementwise(Op.LT, upper, lo), lo, upper)


def _quantize(m, x, lo: float, hi: float, num_bits: int, narrow: bool, divide: bool):
    """floor((clamp(x) - nudged_min) * inv_scale - quant_zero + 0.5) * scale; ``divide``:
    the Vars kernels' ``/ scale`` where the Args kernel multiplies by inv_scale."""
    n_min, n_max, scale, inv = nudge(lo, hi, num_bits, narrow)
    quant_zero = np.floor(F32(-n_min * inv + F32(0.5)))

    def c(v):
        return scalar_like(m, float(v), x)
    shifted = m.elementwise(Op.SUB, _clamp(m, x, c(n_min), c(n_max)), c(n_min))
    q = m.elementwise(Op.DIV, shifted, c(scale)) if divide else m.elementwise(Op.MUL, shifted, c(inv))
    q = m.elementwise(Op.FLOOR, m.elementwise(Op.ADD, m.elementwise(Op.SUB, q, c(quant_zero)), c(0.5)))
    return m.elementwise(Op.MUL, q, c(scale))


def _args(ctx):
    lo, hi = float(ctx.attr("min", -6.0)), float(ctx.attr("max", 6.0))
    if not lo < hi:         # TF's kernel refuses it (a range without 0 is nudged to one)
        raise Unsupported(f"{ctx.node.op}: needs min < max, got [{lo}, {hi}]")
    return lo, hi, int(ctx.attr("num_bits", 8)), bool(ctx.attr("narrow_range", False))


@register("FakeQuantWithMinMaxArgs", dtypes=(dt.F32,))
def _fake_quant_args(ctx):
    return _quantize(ctx.m, ctx.inputs[0], *_args(ctx), divide=False)


@register("FakeQuantWithMinMaxArgsGradient", dtypes=(dt.F32,))
def _fake_quant_args_gradient(ctx):
    """The gradient passes where the input is inside the nudged range, else 0."""
    m, (g, x) = ctx.m, ctx.inputs
    n_min, n_max, _, _ = nudge(*_args(ctx))
    inside = m.elementwise(Op.AND, m.elementwise(Op.GE, x, scalar_like(m, float(n_min), x)),
                           m.elementwise(Op.LE, x, scalar_like(m, float(n_max), x)))
    return m.elementwise(Op.MUL, g, m.elementwise(Op.CONVERT, inside, dtype=dt.F32))


def _bits(ctx) -> tuple:
    num_bits = int(ctx.attr("num_bits", 8))
    if not 2 <= num_bits <= 16:
        raise Unsupported(f"num_bits must be between 2 and 16, inclusive, got {num_bits}")
    return num_bits, bool(ctx.attr("narrow_range", False))


def nudge_ir(m, lo, hi, num_bits: int, narrow: bool) -> tuple:
    """TF's Nudge on run-time min/max (any shape, f32): IR for (nudged_min, nudged_max,
    scale, inv_scale, quant_zero), each in lo's shape.  Every step is TF's float32
    operation in TF's order; the zero point's std::round (halves away from zero) is
    floor(z + 0.5) in float64, exact for a float32 z (z + 0.5 cannot round up to the
    next integer there, as it can in float32 for z = 0.49999997)."""
    def c(v, dtype=dt.F32):
        return scalar_like(m, float(v), lo) if dtype is dt.F32 else \
            scalar_like(m, float(v), m.convert(lo, dtype))

    def op(o, *xs):
        return m.elementwise(o, *xs)
    qmin, qmax = c(1 if narrow else 0), c((1 << num_bits) - 1)
    steps = c(F32((1 << num_bits) - 1) - F32(1 if narrow else 0))
    width = op(Op.SUB, hi, lo)
    scale = op(Op.DIV, width, steps)
    inv = op(Op.DIV, steps, width)
    z = op(Op.SUB, qmin, op(Op.DIV, lo, scale))
    rounded = m.convert(op(Op.FLOOR, op(Op.ADD, m.convert(z, dt.F64), c(0.5, dt.F64))), dt.F32)
    # a NaN z (min or max infinite or NaN) reaches TF's static_cast<uint16_t>, which
    # x86's cvttss2si turns into 0x80000000, whose low 16 bits are 0
    rounded = op(Op.SELECT, op(Op.IS_NAN, z), c(0), rounded)
    zero = op(Op.SELECT, op(Op.LT, z, qmin), qmin,
              op(Op.SELECT, op(Op.GT, z, qmax), qmax, rounded))
    n_min = op(Op.MUL, op(Op.SUB, qmin, zero), scale)
    n_max = op(Op.MUL, op(Op.SUB, qmax, zero), scale)
    quant_zero = op(Op.FLOOR, op(Op.ADD, op(Op.MUL, op(Op.NEG, n_min), inv), c(0.5)))
    return n_min, n_max, scale, inv, quant_zero


def _both_zero(m, lo, hi):
    """TF's special case min == max == 0 (either zero's sign)."""
    zero = scalar_like(m, 0.0, lo)
    return m.elementwise(Op.AND, m.elementwise(Op.EQ, lo, zero), m.elementwise(Op.EQ, hi, zero))


class _Range:
    """A run-time range (scalar, or per channel: x's last dim) nudged in IR and spread
    over x's shape."""

    def __init__(self, ctx, x, per_channel: bool):
        m, (lo, hi) = ctx.m, ctx.inputs[-2:]
        want = (x.shape[-1],) if per_channel and x.rank else ()
        if per_channel and not 1 <= x.rank <= 4:
            raise Unsupported(f"{ctx.node.op}: inputs must have rank 1 to 4, got {x.rank}")
        if lo.shape != want or hi.shape != want:
            raise Unsupported(f"{ctx.node.op}: min and max must have shape {list(want)}, got "
                              f"{list(lo.shape)} and {list(hi.shape)}")
        self.m, self.x = m, x
        nudged = nudge_ir(m, lo, hi, *_bits(ctx))
        self.zero_lo = _both_zero(m, lo, hi)
        self.zero_range = self.spread(self.zero_lo)
        self.n_min, self.n_max, self.scale, self.inv, self.quant_zero = map(self.spread, nudged)

    def spread(self, v):
        if v.shape == self.x.shape:
            return v
        return self.m.broadcast(v, self.x.shape, (self.x.rank - 1,) if v.rank else ())

    def quantize(self, divide: bool):
        """floor((clamp(x) - nudged_min) / scale (or * inv_scale) - quant_zero + 0.5) *
        scale, or 0 for the zero range: TF's Vars (divide) and PerChannel kernels."""
        m, x = self.m, self.x
        shifted = m.elementwise(Op.SUB, _clamp(m, x, self.n_min, self.n_max), self.n_min)
        q = m.elementwise(Op.DIV if divide else Op.MUL, shifted, self.scale if divide else self.inv)
        q = m.elementwise(Op.FLOOR, m.elementwise(Op.ADD, m.elementwise(Op.SUB, q, self.quant_zero),
                                                  scalar_like(m, 0.5, x)))
        out = m.elementwise(Op.MUL, q, self.scale)
        return m.elementwise(Op.SELECT, self.zero_range, scalar_like(m, 0.0, x), out)

    def gradients(self, g, sum_dims: int):
        """(wrt input, wrt min, wrt max): g times 1.0 or 0.0 (so inf * 0 is NaN, as
        TF's), the last two summed over x's leading ``sum_dims`` dims after moving
        them last.  The zero range passes g and gives zero sums."""
        m, x = self.m, self.x

        def masked(pred):
            return m.elementwise(Op.MUL, g, m.elementwise(Op.CONVERT, pred, dtype=dt.F32))

        def total(v):
            v = m.transpose(v, list(range(sum_dims, x.rank)) + list(range(sum_dims)))
            v = m.reshape(v, x.shape[sum_dims:] + (math.prod(x.shape[:sum_dims]),))
            s = m.reduce(v, "sum", 1)
            return m.elementwise(Op.SELECT, self.zero_lo, scalar_like(m, 0.0, s), s)
        inside = m.elementwise(Op.AND, m.elementwise(Op.GE, x, self.n_min),
                               m.elementwise(Op.LE, x, self.n_max))
        wrt_x = m.elementwise(Op.SELECT, self.zero_range, g, masked(inside))
        return (wrt_x, total(masked(m.elementwise(Op.LT, x, self.n_min))),
                total(masked(m.elementwise(Op.GT, x, self.n_max))))


def _constant_range(ctx):
    """(min, max) as floats when both are compile-time constants, else None."""
    lo, hi = ctx.inputs[-2:]
    if lo.op is not Op.CONSTANT or hi.op is not Op.CONSTANT or lo.shape or hi.shape:
        return None
    return float(lo.value), float(hi.value)


@register("FakeQuantWithMinMaxVars", dtypes=(dt.F32,))
def _fake_quant_vars(ctx):
    x = ctx.inputs[0]
    const = _constant_range(ctx)
    if const is None or not (const[0] < const[1] or const == (0.0, 0.0)):
        return _Range(ctx, x, per_channel=False).quantize(divide=True)
    lo, hi = const
    if lo == 0.0 and hi == 0.0:                # TF: all zeros
        return scalar_like(ctx.m, 0.0, x)
    return _quantize(ctx.m, x, lo, hi, *_bits(ctx), divide=True)


@register("FakeQuantWithMinMaxVarsGradient", dtypes=(dt.F32,))
def _fake_quant_vars_gradient(ctx):
    g, x = ctx.inputs[:2]
    return _Range(ctx, x, per_channel=False).gradients(g, x.rank)


@register("FakeQuantWithMinMaxVarsPerChannel", dtypes=(dt.F32,))
def _fake_quant_per_channel(ctx):
    return _Range(ctx, ctx.inputs[0], per_channel=True).quantize(divide=False)


@register("FakeQuantWithMinMaxVarsPerChannelGradient", dtypes=(dt.F32,))
def _fake_quant_per_channel_gradient(ctx):
    g, x = ctx.inputs[:2]
    return _Range(ctx, x, per_channel=True).gradients(g, x.rank - 1)
