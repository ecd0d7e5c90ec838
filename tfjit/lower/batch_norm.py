"""Lowerings of TF's fused batch normalisation: FusedBatchNorm (V1, V2, V3) and
FusedBatchNormGrad (V1, V2, V3), training and inference forms.

x is T (f16, bf16, f32); scale, offset, the statistics and every output but
y are U (f32; TF has no float64 kernels).  The formulas are TF's CPU kernel's
(fused_batch_norm_op.cc), computed in U:

training   mean = sum(x) * (1/n),  var = sum((x - mean)^2) * (1/n)
           y = (x - mean) * (rsqrt(var + eps) * scale) + offset
           batch_mean = mean, batch_variance = var * n/(n-1) (unbiased; n = 1 gives 0),
           or, with exponential_avg_factor f != 1, the running averages
           (1-f) * mean_in + f * mean and (1-f) * variance_in + f * var * n/(n-1);
           reserve_space_1 = mean, reserve_space_2 = var (biased), for the gradient.
inference  y from the given mean/variance; batch_mean/batch_variance are those
           inputs.  TF leaves the reserve spaces uninitialised there; tfjit
           writes zeros.
empty x    batch_mean/batch_variance NaN (also in inference), reserve spaces zeros.

reserve_space_3 (V3) is a float scalar TF's CPU kernel does not use; it is 0.
"""
from __future__ import annotations

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.lower.reduce import reduce_axes
from tfjit.lower.registry import LowerCtx, Unsupported, register

BN_TYPES = (dt.F16, dt.BF16, dt.F32)
FORMATS = {b"NHWC": 3, b"NDHWC": 4, b"NCHW": 1, b"NCDHW": 1}


class _Channels:
    """Broadcasting and reducing between [C] statistics and the input's layout."""

    def __init__(self, ctx: LowerCtx, x: Instr, params: list):
        fmt = ctx.attr("data_format", b"NHWC")
        if fmt not in FORMATS or x.rank != (5 if b"D" in fmt else 4):
            raise Unsupported(f"{ctx.node.op}: data_format {fmt!r} does not fit input shape {list(x.shape)}")
        self.m = ctx.m
        self.shape = x.shape
        self.c = FORMATS[fmt]
        self.others = [d for d in range(x.rank) if d != self.c]
        self.n = int(np.prod([x.shape[d] for d in self.others]))
        depth = x.shape[self.c]
        for p in params:
            if p.shape != (depth,):
                raise Unsupported(f"{ctx.node.op}: statistics must have shape [{depth}], got {list(p.shape)}")

    def spread(self, v: Instr) -> Instr:
        return self.m.broadcast(v, self.shape, (self.c,))

    def sum(self, v: Instr) -> Instr:
        return reduce_axes(self.m, v, "sum", self.others, False)


def _u(ctx: LowerCtx) -> dt.DType:
    u = ctx.attr("U")
    return u.ir if u is not None else ctx.dtype


def _scalar_like(m: Module, value, v: Instr) -> Instr:
    return m.broadcast(m.scalar(value, v.dtype), v.shape, ())


def _inverse(n: int):
    """1/n as TF computes it: ``1.0f / U(n)``, rounded to U."""
    return np.float32(1.0) / np.float32(max(n, 1))


def _check_types(ctx: LowerCtx, u: dt.DType) -> None:
    if u is not dt.F32:
        raise Unsupported(f"{ctx.node.op}: T={ctx.dtype} with U={u} has no CPU kernel in TensorFlow")


def _fused_batch_norm(ctx: LowerCtx):
    m = ctx.m
    u = _u(ctx)
    _check_types(ctx, u)
    x, scale, offset, mean_in, var_in = ctx.inputs[:5]
    training = bool(ctx.attr("is_training", True))
    eps = float(ctx.attr("epsilon", 1e-4))
    factor = float(ctx.attr("exponential_avg_factor", 1.0))
    if not training or factor != 1.0:
        stats = [scale, offset, mean_in, var_in]
    else:
        stats = [scale, offset]        # the running statistics are not read (and may be empty)
    ch = _Channels(ctx, x, stats)
    depth = x.shape[ch.c]
    xu = m.convert(x, u)
    zeros = m.broadcast(m.scalar(0, u), (depth,), ())
    outs_v3 = [m.scalar(0, dt.F32)] if ctx.node.op == "FusedBatchNormV3" else []

    def normalize(mean, var):
        centered = m.elementwise(Op.SUB, xu, ch.spread(mean))
        eps_v = _scalar_like(m, eps, var)
        scaling = m.elementwise(Op.MUL, m.elementwise(Op.RSQRT, m.elementwise(Op.ADD, var, eps_v)), scale)
        y = m.elementwise(Op.ADD, m.elementwise(Op.MUL, centered, ch.spread(scaling)), ch.spread(offset))
        return m.convert(y, x.dtype)

    if x.size == 0:
        nan = m.broadcast(m.scalar(np.nan, u), (depth,), ())
        return [m.convert(xu, x.dtype), nan, nan, zeros, zeros] + outs_v3
    if not training:
        y = normalize(mean_in, var_in)
        return [y, mean_in, var_in, zeros, zeros] + outs_v3
    inv_n = m.broadcast(m.scalar(_inverse(ch.n), u), (depth,), ())
    mean = m.elementwise(Op.MUL, ch.sum(xu), inv_n)
    centered = m.elementwise(Op.SUB, xu, ch.spread(mean))
    var = m.elementwise(Op.MUL, ch.sum(m.elementwise(Op.MUL, centered, centered)), inv_n)
    y = normalize(mean, var)
    adjust = ch.n / max(ch.n - 1, 1)
    unbiased = m.elementwise(Op.MUL, var, _scalar_like(m, adjust, var))
    batch_mean, batch_var = mean, unbiased
    if factor != 1.0:
        keep, take = _scalar_like(m, 1.0 - factor, mean), _scalar_like(m, factor, mean)
        batch_mean = m.elementwise(Op.ADD, m.elementwise(Op.MUL, keep, mean_in), m.elementwise(Op.MUL, take, mean))
        batch_var = m.elementwise(Op.ADD, m.elementwise(Op.MUL, keep, var_in), m.elementwise(Op.MUL, take, unbiased))
    return [y, batch_mean, batch_var, mean, var] + outs_v3


register("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", dtypes=BN_TYPES)(_fused_batch_norm)


def _fused_batch_norm_grad(ctx: LowerCtx):
    """Training: reserve_space_1/2 are the batch mean and (biased) variance;
    inference: the population mean and variance the forward op was given."""
    m = ctx.m
    u = _u(ctx)
    _check_types(ctx, u)
    dy, x, scale, mean, var = ctx.inputs[:5]
    if dy.shape != x.shape:
        raise Unsupported(f"{ctx.node.op}: y_backprop {list(dy.shape)} and x {list(x.shape)} differ in shape")
    training = bool(ctx.attr("is_training", True))
    eps = float(ctx.attr("epsilon", 1e-4))
    ch = _Channels(ctx, x, [scale, mean, var])
    if not training and ch.c != x.rank - 1:
        raise Unsupported(f"The implementation of {ctx.node.op} with is_training=False only support NHWC "
                          "tensor format for now (TF's CPU kernel)")
    empty = m.constant(np.zeros((0,), u.numpy()), u)
    xu, g = m.convert(x, u), m.convert(dy, u)
    rsqrt = m.elementwise(Op.RSQRT, m.elementwise(Op.ADD, var, _scalar_like(m, eps, var)))
    centered = m.elementwise(Op.SUB, xu, ch.spread(mean))
    offset_bp = ch.sum(g)
    if not training:
        scale_bp = m.elementwise(Op.MUL, ch.sum(m.elementwise(Op.MUL, g, centered)), rsqrt)
        x_bp = m.elementwise(Op.MUL, g, ch.spread(m.elementwise(Op.MUL, rsqrt, scale)))
        return [m.convert(x_bp, x.dtype), scale_bp, offset_bp, empty, empty]
    scale_bp = ch.sum(m.elementwise(Op.MUL, g, m.elementwise(Op.MUL, centered, ch.spread(rsqrt))))
    inv_n = _inverse(ch.n)
    g_centered = m.elementwise(Op.SUB, g, ch.spread(m.elementwise(Op.MUL, offset_bp, _scalar_like(m, inv_n, offset_bp))))
    g_x_mean = m.elementwise(Op.DIV, ch.sum(m.elementwise(Op.MUL, g, centered)),
                       _scalar_like(m, float(ch.n), offset_bp))
    coef1 = m.elementwise(Op.MUL, scale, rsqrt)
    coef2 = m.elementwise(Op.MUL, m.elementwise(Op.MUL, rsqrt, rsqrt), g_x_mean)
    x_bp = m.elementwise(Op.MUL, ch.spread(coef1),
                   m.elementwise(Op.SUB, g_centered, m.elementwise(Op.MUL, centered, ch.spread(coef2))))
    return [m.convert(x_bp, x.dtype), scale_bp, offset_bp, empty, empty]


register("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3", dtypes=BN_TYPES)(
    _fused_batch_norm_grad)
