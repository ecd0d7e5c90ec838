"""Lowerings of TF's activation-gradient ops (ReluGrad, SigmoidGrad, ...), and Softsign.

Each rule is the formula of TF's CPU functor, operation by operation and in
the same order (relu_op_functor.h, softplus_op.h, cwise_ops_gradients.h), so
NaN/inf propagation and the sign of zero follow TF: ReluGrad multiplies by the
0/1 mask ``features > 0`` (an inf gradient where features <= 0 gives NaN),
while LeakyReluGrad, EluGrad and SeluGrad select.  Where TF's scalar code
(the last few elements of a tensor) and its vector code (all others) differ
in the order of operations, the vector order is used.  The sqrt/rsqrt/
reciprocal gradients return +0 where the incoming gradient is 0, as TF's
``mul_no_nan`` does (0 * inf is 0 there, not NaN).  Half types round after
every operation, as TF's do (``halfmath.Arith``).
"""
from __future__ import annotations

from tfjit.ir.ops import Op
from tfjit.lower.halfmath import Arith
from tfjit.lower.registry import FLOATS, NUMERIC, Unsupported, register

SELU_SCALE = 1.0507009873554804934193349852946
SELU_SCALE_ALPHA = 1.7580993408473768599402175208123


def _grad_rule(*ops: str, dtypes=FLOATS):
    """Registers ``body(a, first, second, ctx)`` for ops taking two same-shaped
    tensors; ``a`` is the node's ``Arith``, the inputs are loaded into it."""
    def deco(body):
        def rule(ctx):
            first, second = ctx.inputs[:2]
            if first.shape != second.shape:
                raise Unsupported(f"{ctx.node.op}: inputs differ in shape: {list(first.shape)} vs "
                                  f"{list(second.shape)}")
            a = Arith(ctx.m, ctx.dtype)
            return a.store(body(a, a.load(first), a.load(second), ctx))
        register(*ops, dtypes=dtypes)(rule)
        return body
    return deco


def _mask(a: Arith, pred, like):
    """The 0/1 value of ``pred`` in ``like``'s type (Eigen's bool -> T cast)."""
    return a.m.convert(pred, like.dtype)


@_grad_rule("ReluGrad", dtypes=NUMERIC)
def _relu_grad(a, g, f, ctx):
    return a.op(Op.MUL, g, _mask(a, a.op(Op.GT, f, a.like(0, f)), g))


@_grad_rule("Relu6Grad", dtypes=NUMERIC)
def _relu6_grad(a, g, f, ctx):
    inside = a.op(Op.AND, a.op(Op.GT, f, a.like(0, f)), a.op(Op.LT, f, a.like(6, f)))
    return a.op(Op.MUL, g, _mask(a, inside, g))


@_grad_rule("LeakyReluGrad")
def _leaky_relu_grad(a, g, f, ctx):
    scaled = a.op(Op.MUL, g, a.like(float(ctx.attr("alpha", 0.2)), g))
    return a.op(Op.SELECT, a.op(Op.GT, f, a.like(0, f)), g, scaled)


@_grad_rule("EluGrad")
def _elu_grad(a, g, y, ctx):
    """Inputs: gradients, the Elu's *outputs*."""
    negative = a.op(Op.MUL, a.op(Op.ADD, y, a.like(1, y)), g)
    return a.op(Op.SELECT, a.op(Op.LT, y, a.like(0, y)), negative, g)


@_grad_rule("SeluGrad")
def _selu_grad(a, g, y, ctx):
    """Inputs: gradients, the Selu's *outputs*."""
    negative = a.op(Op.MUL, g, a.op(Op.ADD, y, a.like(SELU_SCALE_ALPHA, y)))
    positive = a.op(Op.MUL, g, a.like(SELU_SCALE, g))
    return a.op(Op.SELECT, a.op(Op.LT, y, a.like(0, y)), negative, positive)


@_grad_rule("SoftplusGrad")
def _softplus_grad(a, g, f, ctx):
    denominator = a.op(Op.ADD, a.op(Op.EXP, a.op(Op.NEG, f)), a.like(1, f))
    return a.op(Op.DIV, g, denominator)


@_grad_rule("SoftsignGrad")
def _softsign_grad(a, g, f, ctx):
    """softsign_op.h: gradients / (|features| + 1)^2."""
    denominator = a.op(Op.ADD, a.op(Op.ABS, f), a.like(1, f))
    return a.op(Op.DIV, g, a.op(Op.MUL, denominator, denominator))


@register("Softsign", dtypes=FLOATS)
def _softsign(ctx):
    """softsign_op.h: features / (|features| + 1), rounded per op in half types."""
    a = Arith(ctx.m, ctx.dtype)
    x = a.load(ctx.inputs[0])
    return a.store(a.op(Op.DIV, x, a.op(Op.ADD, a.op(Op.ABS, x), a.like(1, x))))


# -- gradients written in terms of the forward op's output y and dy -------------

@_grad_rule("SigmoidGrad")
def _sigmoid_grad(a, y, dy, ctx):
    return a.op(Op.MUL, dy, a.op(Op.MUL, y, a.op(Op.SUB, a.like(1, y), y)))


@_grad_rule("TanhGrad")
def _tanh_grad(a, y, dy, ctx):
    return a.op(Op.MUL, dy, a.op(Op.SUB, a.like(1, y), a.op(Op.MUL, y, y)))


def _no_nan_mul(a, x, y):
    """TF's mul_no_nan: +0 where ``y`` is 0, else x * y."""
    zero = a.like(0, y)
    return a.op(Op.SELECT, a.op(Op.EQ, y, zero), zero, a.op(Op.MUL, x, y))


@_grad_rule("SqrtGrad")
def _sqrt_grad(a, y, dy, ctx):
    return _no_nan_mul(a, a.op(Op.DIV, a.like(0.5, y), y), dy)


@_grad_rule("RsqrtGrad")
def _rsqrt_grad(a, y, dy, ctx):
    factor = a.op(Op.MUL, a.like(-0.5, y), a.op(Op.MUL, y, y))
    return _no_nan_mul(a, factor, _no_nan_mul(a, y, dy))


@_grad_rule("ReciprocalGrad", "InvGrad")
def _reciprocal_grad(a, y, dy, ctx):
    return _no_nan_mul(a, a.op(Op.NEG, a.op(Op.MUL, y, y)), dy)
