"""Lowerings of TF's local response normalisation, LRN and LRNGrad (NHWC, the
depth window along the last dimension), in the formulas of TF's CPU kernels
(lrn_op.cc):

    norm[d] = bias + alpha * sum(x[k]^2 for |k - d| <= depth_radius)
    LRN:     y[d] = x[d] * norm[d]^-beta   (1 / norm for beta 1, rsqrt for 0.5)
    LRNGrad: dx[k] = g[k] * norm[k]^-beta
                     - 2 alpha beta x[k] * sum(g[j] y[j] / norm[j] for |j - k| <= depth_radius)

Halves are computed in float and rounded once (TF's kernel rounds every step in
half), so they match within half tolerance, not bit for bit.  bfloat16, which TF's
CPU kernels lack (XLA compiles it), is the float result rounded.
"""
from __future__ import annotations

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.ops import Op
from tfjit.lower.registry import InvalidArgument, Unsupported, register, scalar_like

SLICE_WINDOW = 33      # windows up to this many channels are summed from shifted slices; wider: a band matmul
MAX_BAND_DEPTH = 4096  # the band matrix is a depth x depth constant (64 MiB of f32 at this depth)


def _window_sum(m, x, radius: int):
    """out[..., d] = sum(x[..., k] for max(0, d - r) <= k <= min(D - 1, d + r))."""
    depth = x.shape[-1]
    r = min(radius, max(depth - 1, 0))
    if depth == 0 or r == 0:
        return x
    if 2 * r + 1 <= SLICE_WINDOW:
        zero = m.scalar(0, x.dtype)
        padded = m.pad(x, zero, (0,) * (x.rank - 1) + (r,), (0,) * (x.rank - 1) + (r,))
        out = None
        for off in range(2 * r + 1):
            part = m.slice(padded, (0,) * (x.rank - 1) + (off,), x.shape)
            out = part if out is None else m.elementwise(Op.ADD, out, part)
        return out
    if depth > MAX_BAND_DEPTH:
        raise Unsupported(f"LRN: a {2 * r + 1}-channel window over depth {depth} needs a "
                          f"{depth}x{depth} band matrix (more than {MAX_BAND_DEPTH} channels)")
    idx = np.arange(depth)
    band = (np.abs(idx[:, None] - idx[None, :]) <= r).astype(x.dtype.numpy())
    rows = int(np.prod(x.shape[:-1]))
    flat = m.reshape(x, (rows, depth))
    return m.reshape(m.dot(flat, m.constant(band, x.dtype)), x.shape)


def _attrs(ctx, x):
    if x.rank != 4:
        raise InvalidArgument("input must be 4-dimensional")
    radius = int(ctx.attr("depth_radius", 5))
    if radius < 0:
        raise InvalidArgument(f"depth_radius = {radius} must be non-negative")
    return radius, float(ctx.attr("bias", 1.0)), float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 0.5))


def _norm(m, x, radius, bias, alpha):
    sq = _window_sum(m, m.elementwise(Op.MUL, x, x), radius)
    return m.elementwise(Op.ADD, m.elementwise(Op.MUL, sq, scalar_like(m, alpha, sq)), scalar_like(m, bias, sq))


def _neg_power(m, norm, beta):
    """norm^-beta, by TF's special cases."""
    if beta == 1.0:
        return m.elementwise(Op.DIV, scalar_like(m, 1.0, norm), norm)
    if beta == 0.5:
        return m.elementwise(Op.RSQRT, norm)
    return m.elementwise(Op.EXP, m.elementwise(Op.MUL, m.elementwise(Op.LOG, norm), scalar_like(m, -beta, norm)))


@register("LRN", dtypes=(dt.F16, dt.BF16, dt.F32), half_in_f32=True)
def _lrn(ctx):
    m, x = ctx.m, ctx.inputs[0]
    radius, bias, alpha, beta = _attrs(ctx, x)
    return m.elementwise(Op.MUL, x, _neg_power(m, _norm(m, x, radius, bias, alpha), beta))


@register("LRNGrad", dtypes=(dt.F16, dt.BF16, dt.F32), half_in_f32=True)
def _lrn_grad(ctx):
    m = ctx.m
    g, x, y = ctx.inputs
    radius, bias, alpha, beta = _attrs(ctx, x)
    if not (g.shape == x.shape == y.shape):
        raise InvalidArgument("input_grads, input_image, and out_image should have the same shape")
    norm = _norm(m, x, radius, bias, alpha)
    t = _window_sum(m, m.elementwise(Op.DIV, m.elementwise(Op.MUL, g, y), norm), radius)
    cross = m.elementwise(Op.MUL, m.elementwise(Op.MUL, x, scalar_like(m, -2.0 * alpha * beta, x)), t)
    own = m.elementwise(Op.MUL, g, m.elementwise(Op.POW, norm, scalar_like(m, -beta, norm)))
    return m.elementwise(Op.ADD, own, cross)
