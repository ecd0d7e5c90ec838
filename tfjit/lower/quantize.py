"""Fake quantisation (``tf.quantization.fake_quant_with_min_max_*``): quantise to
``num_bits`` and back, in float32, as TF's kernels (fake_quant_ops_functor.h) do.

The range is nudged so that real zero is a representable value (``nudge``, done
here at compile time in float32, step by step as TF's ``Nudge``); the elementwise
part (clamp, shift, scale, floor, scale back) is IR, so it fuses with its
neighbours.  The ``Vars`` form needs its min and max as compile-time constants.
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
    if not lo <= 0.0 <= hi or not lo < hi:
        raise Unsupported(f"{ctx.node.op}: needs min <= 0 <= max and min < max, got "
                          f"[{lo}, {hi}]")
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


@register("FakeQuantWithMinMaxVars", dtypes=(dt.F32,))
def _fake_quant_vars(ctx):
    x = ctx.inputs[0]
    lo, hi = (float(np.asarray(ctx.const(i, f"{ctx.node.op}'s {w}")).reshape(-1)[0])
              for i, w in ((1, "min"), (2, "max")))
    if lo == 0.0 and hi == 0.0:                # TF: all zeros
        return scalar_like(ctx.m, 0.0, x)
    if not lo < hi:
        raise Unsupported(f"{ctx.node.op}: needs min < max, got [{lo}, {hi}]")
    return _quantize(ctx.m, x, lo, hi, int(ctx.attr("num_bits", 8)),
                     bool(ctx.attr("narrow_range", False)), divide=True)
