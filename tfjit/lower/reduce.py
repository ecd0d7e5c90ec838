"""Lowerings of reductions (Sum, Mean, Max, ..., ArgMax) and Softmax/LogSoftmax.

The IR reduces trailing dimensions only, so a reduction over other axes first
transposes the reduced axes to the end (fusion turns that transpose into index
arithmetic; no copy is made).  Softmax is written in its numerically stable
form, exactly as TF's kernel computes it, so fusion can see the row structure.
"""
from __future__ import annotations

import math

from tfjit import dtypes as dt
from tfjit.ir.ops import Op
from tfjit.lower.registry import (ALL, FLOATS, NUMERIC, InvalidArgument, Unsupported, register,
                                  scalar_like)


def _axes(ctx, rank: int) -> list:
    """The reduction axes, normalised and sorted.  An axis out of range, or axes naming
    one dimension twice ([0, -2] of a matrix included), are TF's kernel's
    InvalidArgumentError, in its words (tf2xla refuses them too)."""
    axes = ctx.const_ints(1, "reduction axes")
    out = []
    for a in axes:
        if not -max(rank, 1) <= a < max(rank, 1):
            raise InvalidArgument(f"Invalid reduction dimension ({a} for input with {rank} "
                                  "dimension(s)")
        d = a % rank if rank else 0
        if d in out:
            raise InvalidArgument("Invalid reduction arguments: Axes contains duplicate "
                                  f"dimension: {d}")
        out.append(d)
    return sorted(out) if rank else []


def reduce_axes(m, x, kind: str, axes: list, keep_dims: bool):
    """Reduces ``x`` over ``axes`` (sorted, unique) with TF's result shape.

    Axes of size 1 are dropped, not reduced, as TF does (so a Sum over them
    copies -0.0 instead of adding it to +0.0)."""
    kept = [d for d in range(x.rank) if d not in axes]
    reduced = [d for d in axes if x.shape[d] != 1]
    out_shape = [1 if d in axes else x.shape[d] for d in range(x.rank)] if keep_dims else [x.shape[d] for d in kept]
    if not reduced:
        return m.reshape(x, out_shape)
    moved = m.transpose(x, kept + reduced + [d for d in axes if x.shape[d] == 1])
    moved = m.reshape(moved, [x.shape[d] for d in kept + reduced])
    return m.reshape(m.reduce(moved, kind, len(reduced)), out_shape)


def _rule(kind: str, dtypes):
    def rule(ctx):
        x = ctx.inputs[0]
        axes = _axes(ctx, x.rank)
        return reduce_axes(ctx.m, x, kind, axes, bool(ctx.attr("keep_dims", False)))
    return rule


register("Sum", half_in_f32=True, const_inputs=(1,))(_rule("sum", NUMERIC))
register("Prod", half_in_f32=True, const_inputs=(1,))(_rule("prod", NUMERIC))
register("Max", half_in_f32=True, const_inputs=(1,))(_rule("max", NUMERIC))
register("Min", half_in_f32=True, const_inputs=(1,))(_rule("min", NUMERIC))
register("All", dtypes=(dt.PRED,), const_inputs=(1,))(_rule("and", ALL))
register("Any", dtypes=(dt.PRED,), const_inputs=(1,))(_rule("or", ALL))


@register("Mean", half_in_f32=True, const_inputs=(1,))
def _mean(ctx):
    """TF sums integers narrower than 64 bits in int64/uint64 (no wrap-around),
    divides (truncating) and casts back."""
    m, x = ctx.m, ctx.inputs[0]
    axes = _axes(ctx, x.rank)
    count = math.prod(x.shape[a] for a in axes)
    if count == 0 and not x.dtype.is_float:
        return scalar_like(m, 0, reduce_axes(m, x, "sum", axes, bool(ctx.attr("keep_dims", False))))
    wide = x.dtype
    if x.dtype.is_int and x.dtype.bits < 64:
        wide = dt.I64 if x.dtype.is_signed else dt.U64
    total = reduce_axes(m, m.convert(x, wide), "sum", axes, bool(ctx.attr("keep_dims", False)))
    if count != 1:
        total = m.elementwise(Op.DIV, total, scalar_like(m, count, total))
    return m.convert(total, x.dtype)


@register("EuclideanNorm", dtypes=(dt.BF16, dt.F32, dt.F64, dt.I32, dt.I64), half_in_f32=True,
          const_inputs=(1,))
def _euclidean_norm(ctx):
    """sqrt(sum(x * x)) as TF's kernel: bfloat16 in float32; integers square and sum
    wrapping, then take the C++ sqrt of that integer (a double) truncated back."""
    m, x = ctx.m, ctx.inputs[0]
    total = reduce_axes(m, m.elementwise(Op.MUL, x, x), "sum", _axes(ctx, x.rank),
                        bool(ctx.attr("keep_dims", False)))
    if x.dtype.is_float:
        return m.elementwise(Op.SQRT, total)
    return m.convert(m.elementwise(Op.SQRT, m.convert(total, dt.F64)), x.dtype)


def _argreduce(kind: str):
    def rule(ctx):
        m, x = ctx.m, ctx.inputs[0]
        axis = ctx.const_ints(1, "ArgMax/ArgMin axis")
        if len(axis) != 1 or not -x.rank <= axis[0] < x.rank:
            raise Unsupported(f"axis {axis} is out of range for rank {x.rank}")
        a = axis[0] % x.rank
        if x.shape[a] == 0:
            raise Unsupported(f"Reduction axis {a} is empty in shape {list(x.shape)}")
        if x.dtype is dt.PRED:      # False < True, as 0 < 1
            x = m.convert(x, dt.U8)
        moved = m.transpose(x, [d for d in range(x.rank) if d != a] + [a])
        return m.argreduce(moved, kind, ctx.attr("output_type").ir)
    return rule


# Halves stay halves (compared in f32 registers): TF's start value is their own lowest.
register("ArgMax", dtypes=ALL, const_inputs=(1,))(_argreduce("max"))
register("ArgMin", dtypes=ALL, const_inputs=(1,))(_argreduce("min"))


def _shifted_logits(m, x):
    if x.rank < 1:
        raise Unsupported("Softmax needs at least rank 1")
    row = m.reduce(x, "maxnum", 1)     # a NaN in the row makes x - max NaN anyway
    return m.elementwise(Op.SUB, x, m.broadcast(row, x.shape, range(x.rank - 1)))


# TF's Softmax and LogSoftmax kernels (softmax_op_functor.h) evaluate four Eigen
# expressions, each a pass over the tensor: the row max, the shifted (and for Softmax
# exponentiated) values written out, their row sum, and the rescaling written again.
@register("Softmax", dtypes=FLOATS, half_in_f32=True, tf_passes=4)
def _softmax(ctx):
    m, x = ctx.m, ctx.inputs[0]
    e = m.elementwise(Op.EXP, _shifted_logits(m, x))
    total = m.reduce(e, "sum", 1)
    # TF's kernel multiplies by the inverse of the row sum (one division per row).
    inverse = m.elementwise(Op.DIV, scalar_like(m, 1, total), total)
    return m.elementwise(Op.MUL, e, m.broadcast(inverse, x.shape, range(x.rank - 1)))


@register("LogSoftmax", dtypes=FLOATS, half_in_f32=True, tf_passes=4)
def _log_softmax(ctx):
    m, x = ctx.m, ctx.inputs[0]
    shifted = _shifted_logits(m, x)
    total = m.reduce(m.elementwise(Op.EXP, shifted), "sum", 1)
    return m.elementwise(Op.SUB, shifted, m.broadcast(m.elementwise(Op.LOG, total), x.shape, range(x.rank - 1)))
