"""Lowerings of TF's activation-gradient ops (ReluGrad, SigmoidGrad, ...).

Each rule is the formula of TF's CPU functor, operation by operation and in
the same order (relu_op_functor.h, softplus_op.h, cwise_ops_gradients.h), so
NaN/inf propagation and the sign of zero follow TF: ReluGrad multiplies by the
0/1 mask ``features > 0`` (an inf gradient where features <= 0 gives NaN),
while LeakyReluGrad, EluGrad and SeluGrad select.  Where TF's scalar and
vector code differ in the order of multiplications, the vector (bulk) order is
used.  The sqrt/rsqrt/reciprocal gradients return +0 where the incoming
gradient is 0, as TF's ``mul_no_nan`` does (0 * inf is 0 there, not NaN).
"""
from __future__ import annotations

from tfjit.ir.ops import Op
from tfjit.lower.registry import FLOATS, Unsupported, register, scalar_like

SELU_SCALE = 1.0507009873554804934193349852946
SELU_SCALE_ALPHA = 1.7580993408473768599402175208123


def _same_shape(ctx):
    a, b = ctx.inputs[:2]
    if a.shape != b.shape:
        raise Unsupported(f"{ctx.node.op}: inputs differ in shape: {list(a.shape)} vs {list(b.shape)}")
    return a, b


def _mask(m, pred, like):
    """The 0/1 value of ``pred`` in ``like``'s type (Eigen's bool -> T cast)."""
    return m.convert(pred, like.dtype)


@register("ReluGrad", half_in_f32=True)
def _relu_grad(ctx):
    m = ctx.m
    g, f = _same_shape(ctx)
    return m.elementwise(Op.MUL, g, _mask(m, m.elementwise(Op.GT, f, scalar_like(m, 0, f)), g))


@register("Relu6Grad", half_in_f32=True)
def _relu6_grad(ctx):
    m = ctx.m
    g, f = _same_shape(ctx)
    inside = m.elementwise(Op.AND, m.elementwise(Op.GT, f, scalar_like(m, 0, f)),
                           m.elementwise(Op.LT, f, scalar_like(m, 6, f)))
    return m.elementwise(Op.MUL, g, _mask(m, inside, g))


@register("LeakyReluGrad", dtypes=FLOATS, half_in_f32=True)
def _leaky_relu_grad(ctx):
    m = ctx.m
    g, f = _same_shape(ctx)
    alpha = float(ctx.attr("alpha", 0.2))
    scaled = m.elementwise(Op.MUL, g, scalar_like(m, alpha, g))
    return m.elementwise(Op.SELECT, m.elementwise(Op.GT, f, scalar_like(m, 0, f)), g, scaled)


@register("EluGrad", dtypes=FLOATS, half_in_f32=True)
def _elu_grad(ctx):
    """Inputs: gradients, the Elu's *outputs*."""
    m = ctx.m
    g, y = _same_shape(ctx)
    negative = m.elementwise(Op.MUL, m.elementwise(Op.ADD, y, scalar_like(m, 1, y)), g)
    return m.elementwise(Op.SELECT, m.elementwise(Op.LT, y, scalar_like(m, 0, y)), negative, g)


@register("SeluGrad", dtypes=FLOATS, half_in_f32=True)
def _selu_grad(ctx):
    """Inputs: gradients, the Selu's *outputs*."""
    m = ctx.m
    g, y = _same_shape(ctx)
    negative = m.elementwise(Op.MUL, g, m.elementwise(Op.ADD, y, scalar_like(m, SELU_SCALE_ALPHA, y)))
    positive = m.elementwise(Op.MUL, g, scalar_like(m, SELU_SCALE, g))
    return m.elementwise(Op.SELECT, m.elementwise(Op.LT, y, scalar_like(m, 0, y)), negative, positive)


@register("SoftplusGrad", dtypes=FLOATS, half_in_f32=True)
def _softplus_grad(ctx):
    m = ctx.m
    g, f = _same_shape(ctx)
    denominator = m.elementwise(Op.ADD, m.elementwise(Op.EXP, m.elementwise(Op.NEG, f)), scalar_like(m, 1, f))
    return m.elementwise(Op.DIV, g, denominator)


# -- gradients written in terms of the forward op's output y and dy -------------

@register("SigmoidGrad", dtypes=FLOATS, half_in_f32=True)
def _sigmoid_grad(ctx):
    m = ctx.m
    y, dy = _same_shape(ctx)
    return m.elementwise(Op.MUL, dy, m.elementwise(Op.MUL, y, m.elementwise(Op.SUB, scalar_like(m, 1, y), y)))


@register("TanhGrad", dtypes=FLOATS, half_in_f32=True)
def _tanh_grad(ctx):
    m = ctx.m
    y, dy = _same_shape(ctx)
    return m.elementwise(Op.MUL, dy, m.elementwise(Op.SUB, scalar_like(m, 1, y), m.elementwise(Op.MUL, y, y)))


def _no_nan_mul(m, a, b):
    """TF's mul_no_nan: +0 where ``b`` is 0, else a * b."""
    zero = scalar_like(m, 0, b)
    return m.elementwise(Op.SELECT, m.elementwise(Op.EQ, b, zero), zero, m.elementwise(Op.MUL, a, b))


@register("SqrtGrad", dtypes=FLOATS, half_in_f32=True)
def _sqrt_grad(ctx):
    m = ctx.m
    y, dy = _same_shape(ctx)
    return _no_nan_mul(m, m.elementwise(Op.DIV, scalar_like(m, 0.5, y), y), dy)


@register("RsqrtGrad", dtypes=FLOATS, half_in_f32=True)
def _rsqrt_grad(ctx):
    m = ctx.m
    y, dy = _same_shape(ctx)
    factor = m.elementwise(Op.MUL, scalar_like(m, -0.5, y), m.elementwise(Op.MUL, y, y))
    return _no_nan_mul(m, factor, _no_nan_mul(m, y, dy))


@register("ReciprocalGrad", "InvGrad", dtypes=FLOATS, half_in_f32=True)
def _reciprocal_grad(ctx):
    m = ctx.m
    y, dy = _same_shape(ctx)
    return _no_nan_mul(m, m.elementwise(Op.NEG, m.elementwise(Op.MUL, y, y)), dy)

