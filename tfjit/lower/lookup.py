"""Lowerings of value lookups: Bucketize, LowerBound/UpperBound (searchsorted), and ListDiff
of operands known at compile time.

ListDiff's output shape depends on its operands' values, so (as in XLA, whose kernel
needs them constant) both operands are constant inputs: the result is a constant,
and operands fed at run time compile once per value (constant arguments).
"""
from __future__ import annotations

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.ops import Op
from tfjit.lower import registry
from tfjit.lower.registry import (InvalidArgument, LowerCtx, Unsupported, broadcast_to, register,
                                  scalar_like)


@register("ListDiff", dtypes=registry.ALL, const_inputs=(0, 1))
def _list_diff(ctx: LowerCtx):
    """The elements of x not in y, in x's order, and their positions in x (TF's kernel:
    membership by ==, so NaN is never found and -0.0 finds 0.0)."""
    x, y = (np.asarray(ctx.const(i, f"ListDiff's {w}")) for i, w in ((0, "x"), (1, "y")))
    if x.ndim != 1 or y.ndim != 1:
        raise InvalidArgument(f"{'x' if x.ndim != 1 else 'y'} should be a 1D vector.")
    keep = ~np.isin(x, y)
    out_idx = ctx.attr("out_idx")
    return [ctx.m.constant(x[keep], ctx.dtype),
            ctx.m.constant(np.flatnonzero(keep).astype(out_idx.ir.numpy()), out_idx.ir)]


@register("Bucketize", dtypes=(dt.I32, dt.I64, dt.F32, dt.F64))
def _bucketize(ctx: LowerCtx):
    """The index of the first boundary greater than x (std::upper_bound, as TF's
    kernel): the count of boundaries b with !(x < b), so NaN lands past the last.  The
    float boundaries compare with x as C++ does: int and float x in f32, double in f64."""
    m, x = ctx.m, ctx.inputs[0]
    bounds = [float(b) for b in ctx.attr("boundaries", ())]
    if any(a > b for a, b in zip(bounds, bounds[1:])):
        raise InvalidArgument("Expected sorted boundaries")
    wide = dt.F64 if x.dtype is dt.F64 else dt.F32
    xc = m.convert(x, wide)
    out = broadcast_to(m, m.scalar(0, dt.I32), x.shape)
    for b in bounds:
        below = m.elementwise(Op.LT, xc, scalar_like(m, float(np.float32(b)), xc))
        out = m.elementwise(Op.ADD, out, m.convert(m.elementwise(Op.NOT, below), dt.I32))
    return out



@register("LowerBound", "UpperBound", dtypes=registry.NUMERIC)
def _search_sorted(ctx: LowerCtx):
    """Per row, the std::lower_bound (upper_bound) position of each value in the sorted
    row: the count of row elements e with e < v (with !(v < e)), as one compare of
    [rows, values, elements] reduced over the elements (NaN values: 0, and the row length)."""
    from tfjit.lower.reduce import reduce_axes
    m, (seq, values) = ctx.m, ctx.inputs
    if seq.rank != 2 or values.rank != 2 or seq.shape[0] != values.shape[0]:
        raise Unsupported(f"{ctx.node.op}: sorted_inputs {list(seq.shape)} and values "
                          f"{list(values.shape)} must be matrices with the same rows")
    rows, n, k = seq.shape[0], seq.shape[1], values.shape[1]
    e = m.broadcast(seq, (rows, k, n), (0, 2))
    v = m.broadcast(values, (rows, k, n), (0, 1))
    hit = (m.elementwise(Op.LT, e, v) if ctx.node.op == "LowerBound"
           else m.elementwise(Op.NOT, m.elementwise(Op.LT, v, e)))
    out = ctx.attr("out_type").ir
    return reduce_axes(m, m.convert(hit, out), "sum", [2], False)
