"""Lowerings of TF's bitwise ops (tf.bitwise) and Bitcast.

Semantics are TF's CPU kernels' (tensorflow/core/kernels/cwise_ops.h):
LeftShift shifts as unsigned and wraps, RightShift is arithmetic for signed
types and logical for unsigned ones, and both clamp the shift amount to
[0, bits - 1] (so ``1 << 40`` is ``1 << 31`` for int32, and ``x >> -1`` is x).
"""
from __future__ import annotations

from tfjit.ir.ops import Op
from tfjit.lower.registry import INTS, NUMERIC, Unsupported, broadcast_all, register

_BINARY = {"BitwiseAnd": Op.AND, "BitwiseOr": Op.OR, "BitwiseXor": Op.XOR, "LeftShift": Op.SHL}
for _tf, _op in _BINARY.items():
    register(_tf, dtypes=INTS)(lambda ctx, _op=_op: ctx.m.elementwise(_op, *broadcast_all(ctx.m, *ctx.inputs)))

register("Invert", dtypes=INTS)(lambda ctx: ctx.m.elementwise(Op.NOT, ctx.inputs[0]))


@register("RightShift", dtypes=INTS)
def _right_shift(ctx):
    op = Op.SHR_ARITH if ctx.dtype.is_signed else Op.SHR_LOGICAL
    return ctx.m.elementwise(op, *broadcast_all(ctx.m, *ctx.inputs))


@register("Bitcast", dtypes=NUMERIC)
def _bitcast(ctx):
    x, target = ctx.inputs[0], ctx.attr("type").ir
    if target.bits != x.dtype.bits:
        raise Unsupported(f"Bitcast from {x.dtype} to {target} changes the shape (widths differ); "
                          "tfjit compiles only same-width bitcasts")
    return ctx.m.bitcast(x, target)
