"""Lowerings of TF's NN ops that are elementwise math plus reductions:
Erfc (exact GELU), OneHot, L2Loss, BiasAddGrad and the softmax cross-entropy
ops (loss and backprop outputs).

Cross-entropy follows TF's kernels (xent_op.h, sparse_xent_op.h): logits are
shifted by their row max, the loss is ``sum(labels * (log(sum(exp)) -
shifted))`` and the backprop ``exp(shifted) / sum(exp) - labels``, so NaN and
inf rows come out as TF's do.
"""
from __future__ import annotations

import math

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.ops import Op
from tfjit.lower.reduce import reduce_axes
from tfjit.lower.registry import ALL, FLOATS, Unsupported, broadcast_all, register, scalar_like

# -- Erfc ------------------------------------------------------------------------

ERFC_SPLIT = 2.0       # below: 1 - erf(|x|); above: the continued fraction
ERFC_ZERO = 27.0       # erfc(x) underflows float64 from here on


def _erfc_terms(d: dt.DType) -> int:
    """Continued-fraction terms for ``d``'s precision from |x| = 2 on
    (relative error ~1e-9 with 20 terms, ~5e-14 with 40)."""
    return 40 if d is dt.F64 else 20


def erfc(m, x):
    """erfc(x) with relative accuracy also where erfc is tiny (1 - erf(x) loses it
    from x ~ 1 on).  Computed in float64; for |x| >= 2 through the continued
    fraction erfc(a) = exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + (2/2)/(a + ...))),
    whose convergents A/B follow the forward recurrence (no division per term)."""
    d = x.dtype
    x64 = m.convert(x, dt.F64)
    a = m.elementwise(Op.ABS, x64)

    def c(v):
        return scalar_like(m, v, a)

    near = m.elementwise(Op.SUB, c(1.0), m.elementwise(Op.ERF, a))
    # A_n = a A_{n-1} + (n/2) A_{n-2}, likewise B, from A_{-1} = 1, A_0 = a, B_{-1} = 0, B_0 = 1.
    a_prev, a_cur, b_prev, b_cur = c(1.0), a, c(0.0), c(1.0)
    for n in range(1, _erfc_terms(d) + 1):
        a_prev, a_cur = a_cur, m.elementwise(Op.ADD, m.elementwise(Op.MUL, a, a_cur),
                                              m.elementwise(Op.MUL, c(n / 2), a_prev))
        b_prev, b_cur = b_cur, m.elementwise(Op.ADD, m.elementwise(Op.MUL, a, b_cur),
                                              m.elementwise(Op.MUL, c(n / 2), b_prev))
    gauss = m.elementwise(Op.EXP, m.elementwise(Op.NEG, m.elementwise(Op.MUL, a, a)))
    far = m.elementwise(Op.MUL, m.elementwise(Op.MUL, gauss, c(1 / math.sqrt(math.pi))),
                        m.elementwise(Op.DIV, b_cur, a_cur))
    far = m.elementwise(Op.SELECT, m.elementwise(Op.GE, a, c(ERFC_ZERO)), c(0.0), far)   # A/B overflow there
    tail = m.elementwise(Op.SELECT, m.elementwise(Op.LT, a, c(ERFC_SPLIT)), near, far)   # NaN takes `far`
    signed = m.elementwise(Op.SELECT, m.elementwise(Op.LT, x64, c(0.0)),
                           m.elementwise(Op.SUB, c(2.0), tail), tail)
    return m.convert(signed, d)


@register("Erfc", dtypes=FLOATS, half_in_f32=True)
def _erfc(ctx):
    return erfc(ctx.m, ctx.inputs[0])


# -- OneHot, L2Loss, BiasAddGrad ---------------------------------------------------------

@register("OneHot", dtypes=ALL)
def _one_hot(ctx):
    m = ctx.m
    indices, _, on, off = ctx.inputs
    depth = ctx.const_ints(1, "OneHot's depth")
    if len(depth) != 1 or depth[0] < 0:
        raise Unsupported(f"OneHot: depth must be a non-negative scalar, got {depth}")
    if on.size != 1 or off.size != 1:
        raise Unsupported("OneHot: on_value and off_value must be scalars")
    axis = int(ctx.attr("axis", -1))
    if not -1 <= axis <= indices.rank:
        raise Unsupported(f"OneHot: axis {axis} out of range for indices of rank {indices.rank}")
    axis = indices.rank if axis == -1 else axis
    shape = indices.shape[:axis] + (depth[0],) + indices.shape[axis:]
    spread = m.broadcast(m.convert(indices, dt.I64), shape, [d for d in range(len(shape)) if d != axis])
    hot = m.elementwise(Op.EQ, spread, m.iota(dt.I64, shape, axis))
    on, off = (m.broadcast(m.reshape(v, ()), shape, ()) for v in (on, off))
    return m.elementwise(Op.SELECT, hot, on, off)


@register("L2Loss", dtypes=FLOATS, half_in_f32=True)
def _l2_loss(ctx):
    """sum(x * x * 0.5), in that order, as TF's kernel."""
    m, x = ctx.m, ctx.inputs[0]
    half_squares = m.elementwise(Op.MUL, m.elementwise(Op.MUL, x, x), scalar_like(m, 0.5, x))
    return reduce_axes(m, half_squares, "sum", list(range(x.rank)), False)


def channel_dim(data_format: bytes, rank: int) -> int:
    """The channel dimension of BiasAdd/BiasAddGrad (NCHW only from rank 3 on)."""
    if data_format in (b"NCHW", b"NCDHW") and rank > 2:
        return 1
    return rank - 1


@register("BiasAddGrad", half_in_f32=True)
def _bias_add_grad(ctx):
    m, dy = ctx.m, ctx.inputs[0]
    if dy.rank < 2:
        raise Unsupported(f"BiasAddGrad: input must be at least 2-D, got shape {list(dy.shape)}")
    c = channel_dim(ctx.attr("data_format", b"NHWC"), dy.rank)
    return reduce_axes(m, dy, "sum", [d for d in range(dy.rank) if d != c], False)


# -- softmax cross-entropy -------------------------------------------------------------

def _xent_parts(m, logits):
    """(shifted logits, exp(shifted), row sums of exp, log of the row sums), rows broadcast."""
    rows = logits.shape[:1]
    row_max = m.reduce(logits, "maxnum", 1)      # a NaN in the row makes the row NaN anyway
    shifted = m.elementwise(Op.SUB, logits, m.broadcast(row_max, logits.shape, (0,)))
    e = m.elementwise(Op.EXP, shifted)
    total = m.reduce(e, "sum", 1)
    assert total.shape == rows
    return shifted, e, m.broadcast(total, logits.shape, (0,)), m.broadcast(
        m.elementwise(Op.LOG, total), logits.shape, (0,))


@register("SoftmaxCrossEntropyWithLogits", dtypes=FLOATS, half_in_f32=True)
def _softmax_xent(ctx):
    m = ctx.m
    logits, labels = ctx.inputs
    if logits.rank not in (1, 2) or labels.rank not in (1, 2):
        raise Unsupported("SoftmaxCrossEntropyWithLogits: logits and labels must be 2-D (or broadcast to 2-D)")
    logits, labels = broadcast_all(m, logits, labels)
    if logits.rank != 2:
        raise Unsupported("SoftmaxCrossEntropyWithLogits: logits and labels must be 2-D (or broadcast to 2-D)")
    if logits.shape[1] == 0:
        raise Unsupported("SoftmaxCrossEntropyWithLogits: must have at least one class")
    shifted, e, total, log_total = _xent_parts(m, logits)
    loss = m.reduce(m.elementwise(Op.MUL, labels, m.elementwise(Op.SUB, log_total, shifted)), "sum", 1)
    backprop = m.elementwise(Op.SUB, m.elementwise(Op.DIV, e, total), labels)
    return [loss, backprop]


@register("SparseSoftmaxCrossEntropyWithLogits", dtypes=FLOATS, half_in_f32=True)
def _sparse_softmax_xent(ctx):
    """Labels outside [0, classes) give NaN loss and backprop rows, as TF on GPU and
    TF's XLA do; TF's CPU kernel raises an error instead (refused here when the
    labels are compile-time constants, with TF's message)."""
    m = ctx.m
    logits, labels = ctx.inputs
    if logits.rank != 2 or labels.shape != logits.shape[:1]:
        raise Unsupported(f"SparseSoftmaxCrossEntropyWithLogits: logits must be 2-D and labels 1-D with "
                          f"the batch size, got {list(logits.shape)} and {list(labels.shape)}")
    classes = logits.shape[1]
    if classes == 0:
        raise Unsupported("SparseSoftmaxCrossEntropyWithLogits: must have at least one class")
    if labels.op is Op.CONSTANT:
        bad = [int(v) for v in np.asarray(labels.value).reshape(-1) if not 0 <= int(v) < classes]
        if bad and logits.shape[0]:
            raise Unsupported(f"Received a label value of {bad[0]} which is outside the valid range "
                              f"of [0, {classes})")
    index = m.convert(labels, dt.I64)
    hot = m.elementwise(Op.EQ, m.broadcast(index, logits.shape, (0,)), m.iota(dt.I64, logits.shape, 1))
    valid = m.elementwise(Op.AND, m.elementwise(Op.GE, index, scalar_like(m, 0, index)),
                          m.elementwise(Op.LT, index, scalar_like(m, classes, index)))
    shifted, e, total, log_total = _xent_parts(m, logits)
    zero = scalar_like(m, 0, logits)
    loss = m.reduce(m.elementwise(Op.SELECT, hot, m.elementwise(Op.SUB, log_total, shifted), zero), "sum", 1)
    backprop = m.elementwise(Op.SUB, m.elementwise(Op.DIV, e, total),
                             m.convert(hot, logits.dtype))
    nan = scalar_like(m, np.nan, loss)
    loss = m.elementwise(Op.SELECT, valid, loss, nan)
    backprop = m.elementwise(Op.SELECT, m.broadcast(valid, logits.shape, (0,)), backprop,
                             scalar_like(m, np.nan, backprop))
    return [loss, backprop]
