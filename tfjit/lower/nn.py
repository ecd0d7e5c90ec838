"""Lowerings of TF's NN ops that are elementwise math plus reductions:
Erfc (exact GELU), OneHot, L2Loss, BiasAddGrad and the softmax cross-entropy
ops (loss and backprop outputs), InTopK and InTopKV2.

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
from tfjit.lower.registry import (ALL, FLOATS, InvalidArgument, Unsupported, broadcast_all, register,
                                  scalar_like)

# -- Erfc ------------------------------------------------------------------------

ERFC_SPLIT = 2.0       # float64: below, 1 - erf(|x|); above, the continued fraction
ERFC_ZERO = 27.0       # erfc(x) underflows float64 from here on
ERFC_TERMS = 40        # continued-fraction terms: relative error ~5e-14 from |x| = 2 on
# erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0: the Chebyshev fit of
# Numerical Recipes' erfcc, relative error < 1.2e-7 for all z (float32 and halves).
ERFCC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
         1.48851587, -0.82215223, 0.17087277)
ERFCC_ZERO = 16.0      # erfc underflows float32 long before


def _erfc_f64(m, a):
    """erfc(a), a = |x| in float64, accurate also where erfc is tiny (1 - erf(a)
    loses it from a ~ 1 on): from a = 2 on the continued fraction
    exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + (2/2)/(a + ...))), whose convergents A/B
    follow the forward recurrence (no division per term)."""
    def c(v):
        return scalar_like(m, v, a)

    near = m.elementwise(Op.SUB, c(1.0), m.elementwise(Op.ERF, a))
    # A_n = a A_{n-1} + (n/2) A_{n-2}, likewise B, from A_{-1} = 1, A_0 = a, B_{-1} = 0, B_0 = 1.
    a_prev, a_cur, b_prev, b_cur = c(1.0), a, c(0.0), c(1.0)
    for n in range(1, ERFC_TERMS + 1):
        a_prev, a_cur = a_cur, m.elementwise(Op.ADD, m.elementwise(Op.MUL, a, a_cur),
                                              m.elementwise(Op.MUL, c(n / 2), a_prev))
        b_prev, b_cur = b_cur, m.elementwise(Op.ADD, m.elementwise(Op.MUL, a, b_cur),
                                              m.elementwise(Op.MUL, c(n / 2), b_prev))
    gauss = m.elementwise(Op.EXP, m.elementwise(Op.NEG, m.elementwise(Op.MUL, a, a)))
    far = m.elementwise(Op.MUL, m.elementwise(Op.MUL, gauss, c(1 / math.sqrt(math.pi))),
                        m.elementwise(Op.DIV, b_cur, a_cur))
    far = m.elementwise(Op.SELECT, m.elementwise(Op.GE, a, c(ERFC_ZERO)), c(0.0), far)   # A/B overflow there
    return m.elementwise(Op.SELECT, m.elementwise(Op.LT, a, c(ERFC_SPLIT)), near, far)   # NaN takes `far`


def _estrin(op, c, t, coefs):
    """sum(coefs[k] t^k) by Estrin's scheme: pairs a + b t, then pairs of pairs with
    t^2, t^4, ...: a dependency chain of log2(n) steps instead of Horner's n, which
    for erfc's 10 terms (a mul and an add each, ~8 cycles) kept the CPU waiting."""
    terms = [op(Op.ADD, c(a), op(Op.MUL, t, c(b))) for a, b in zip(coefs[::2], coefs[1::2])]
    if len(coefs) % 2:
        terms.append(c(coefs[-1]))
    power = op(Op.MUL, t, t)
    while len(terms) > 1:
        pairs = [op(Op.ADD, a, op(Op.MUL, power, b)) for a, b in zip(terms[::2], terms[1::2])]
        terms = pairs + ([terms[-1]] if len(terms) % 2 else [])
        power = op(Op.MUL, power, power)
    return terms[0]


def _erfc_f32(m, z):
    """erfc(z), z >= 0 in float32, by the erfcc fit.  The exponent -z^2 + P is
    split as -zh^2 + (P - (z - zh)(z + zh)) with zh = z to 12 bits, so zh^2 is
    exact, and the two parts' sum s is kept with its rounding error (Fast2Sum:
    exact where |zh^2| >= |P - ...|, the large z where the error matters), so
    exp(s) * (1 + error) has the exponent's full accuracy with one exp instead of
    one per part: exact GELU (TF's gelu is 0.5 x erfc(-x / sqrt 2)) on 4096^2,
    10.9 -> 8.9 ms (XLA 18.8).  The polynomial is by Estrin's scheme."""
    def c(v):
        return scalar_like(m, v, z)

    def op(o, *args):
        return m.elementwise(o, *args)

    t = op(Op.DIV, c(1.0), op(Op.ADD, c(1.0), op(Op.MUL, c(0.5), z)))
    p = _estrin(op, c, t, ERFCC)
    zh = op(Op.MUL, op(Op.FLOOR, op(Op.MUL, z, c(256.0))), c(1 / 256))
    rest = op(Op.MUL, op(Op.SUB, z, zh), op(Op.ADD, z, zh))
    large, small = op(Op.NEG, op(Op.MUL, zh, zh)), op(Op.SUB, p, rest)
    s = op(Op.ADD, large, small)
    error = op(Op.ADD, op(Op.SUB, large, s), small)
    g = op(Op.EXP, s)
    r = op(Op.MUL, t, op(Op.ADD, g, op(Op.MUL, g, error)))
    return op(Op.SELECT, op(Op.GT, z, c(ERFCC_ZERO)), c(0.0), r)   # inf - inf there


def erfc(m, x):
    """erfc(x) with relative accuracy also where it is tiny (TF's is): float64 by a
    continued fraction, float32 (and halves, computed in it) by the erfcc fit;
    erfc(-a) = 2 - erfc(a)."""
    a = m.elementwise(Op.ABS, x)
    tail = _erfc_f64(m, a) if x.dtype is dt.F64 else _erfc_f32(m, a)
    negative = m.elementwise(Op.LT, x, scalar_like(m, 0.0, x))
    return m.elementwise(Op.SELECT, negative, m.elementwise(Op.SUB, scalar_like(m, 2.0, x), tail), tail)


@register("Erfc", dtypes=FLOATS, half_in_f32=True)
def _erfc(ctx):
    return erfc(ctx.m, ctx.inputs[0])


# -- OneHot, L2Loss, BiasAddGrad ---------------------------------------------------------

@register("OneHot", dtypes=ALL, const_inputs=(1,))
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


# -- InTopK ------------------------------------------------------------------------------

def _in_top_k(m, predictions, targets, k):
    """TF's kernel (in_topk_op.h): row b is true when targets[b] is a class, every
    prediction of the row is finite and fewer than k classes predict strictly more
    (ties with the target count for it).  (The kernel stops scanning a row once more
    than k classes are greater, so it skips later non-finite values only where the
    answer is false anyway.)"""
    if predictions.rank != 2 or targets.rank != 1 or targets.shape[0] != predictions.shape[0]:
        raise InvalidArgument(f"predictions must be 2-dimensional and targets 1-dimensional with the "
                              f"batch size, got {list(predictions.shape)} and {list(targets.shape)}")
    batch, classes = predictions.shape
    if classes == 0 or batch == 0:
        return m.broadcast(m.scalar(False, dt.PRED), (batch,), ())
    index = m.convert(targets, dt.I64)
    hot = m.elementwise(Op.EQ, m.broadcast(index, predictions.shape, (0,)),
                        m.iota(dt.I64, predictions.shape, 1))
    target = m.reduce(m.elementwise(Op.SELECT, hot, predictions, scalar_like(m, 0.0, predictions)), "sum", 1)
    greater = m.elementwise(Op.GT, predictions, m.broadcast(target, predictions.shape, (0,)))
    count = m.reduce(m.convert(greater, dt.I64), "sum", 1)
    valid = m.elementwise(Op.AND, m.elementwise(Op.GE, index, scalar_like(m, 0, index)),
                          m.elementwise(Op.LT, index, scalar_like(m, classes, index)))
    valid = m.elementwise(Op.AND, valid, m.reduce(m.elementwise(Op.IS_FINITE, predictions), "and", 1))
    return m.elementwise(Op.AND, valid, m.elementwise(Op.LT, count, m.broadcast(k, (batch,), ())))


@register("InTopKV2", dtypes=(dt.I32, dt.I64))
def _in_top_k_v2(ctx):
    """k is an input here (any value at run time; k <= 0 gives all false, as TF's)."""
    m, (predictions, targets, k) = ctx.m, ctx.inputs
    if k.rank != 0:
        raise InvalidArgument(f"k must be 0 D, got shape {list(k.shape)}")
    return _in_top_k(m, predictions, targets, m.convert(k, dt.I64))


@register("InTopK", dtypes=(dt.I32, dt.I64))
def _in_top_k_v1(ctx):
    return _in_top_k(ctx.m, ctx.inputs[0], ctx.inputs[1], ctx.m.scalar(int(ctx.attr("k")), dt.I64))
