"""Lowerings of TF's bitwise ops (tf.bitwise, PopulationCount) and Bitcast.

Semantics are TF's CPU kernels' (tensorflow/core/kernels/cwise_ops.h):
LeftShift shifts as unsigned and wraps, RightShift is arithmetic for signed
types and logical for unsigned ones, and both clamp the shift amount to
[0, bits - 1] (so ``1 << 40`` is ``1 << 31`` for int32, and ``x >> -1`` is x).
"""
from __future__ import annotations

from tfjit import dtypes as dt
from tfjit.ir.ops import Op
from tfjit.lower.registry import INTS, NUMERIC, Unsupported, broadcast_all, register, scalar_like

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
    """TF's Bitcast reinterprets memory: to a narrower type each element becomes a new
    last dimension of its pieces, lowest-addressed first (little-endian: the low bits);
    to a wider type the last dimension, of exactly that many pieces, joins into one."""
    m, x, target = ctx.m, ctx.inputs[0], ctx.attr("type").ir
    if target.bits == x.dtype.bits:
        return m.bitcast(x, target)
    if target is dt.PRED:
        raise Unsupported("Bitcast to bool")
    src, dst = dt.BY_NAME[f"u{x.dtype.bits}"], dt.BY_NAME[f"u{target.bits}"]
    u = m.bitcast(x, src) if x.dtype is not src else x
    if x.dtype.bits > target.bits:
        k, mask = x.dtype.bits // target.bits, (1 << target.bits) - 1
        pieces = [m.convert(m.elementwise(Op.AND, m.elementwise(
            Op.SHR_LOGICAL, u, scalar_like(m, i * target.bits, u)), scalar_like(m, mask, u)), dst)
            for i in range(k)]
        out = m.concat([m.reshape(p, x.shape + (1,)) for p in pieces], x.rank)
    else:
        k = target.bits // x.dtype.bits
        if x.rank == 0 or x.shape[-1] != k:
            raise Unsupported(f"Bitcast from {x.dtype} to {target} needs a last dimension of "
                              f"{k}, got shape {list(x.shape)}")
        out = None
        for i in range(k):
            piece = m.convert(m.reshape(m.slice(u, [0] * (x.rank - 1) + [i], x.shape[:-1] + (1,)),
                                        x.shape[:-1]), dst)
            piece = m.elementwise(Op.SHL, piece, scalar_like(m, i * x.dtype.bits, piece))
            out = piece if out is None else m.elementwise(Op.OR, out, piece)
    return m.bitcast(out, target) if target is not dst else out


@register("PopulationCount", dtypes=INTS)
def _population_count(ctx):
    """The set bits of each element (as unsigned), into uint8: the SWAR sum of bit
    fields (pairs, nibbles, bytes), then a multiply that adds the byte counts into the
    top byte.  Narrow types are widened (zero-extended) to 32 bits first."""
    m, x = ctx.m, ctx.inputs[0]
    u = m.bitcast(x, dt.BY_NAME[f"u{x.dtype.bits}"]) if x.dtype.is_signed else x
    wide = dt.U64 if u.dtype.bits == 64 else dt.U32
    u = m.convert(u, wide) if u.dtype is not wide else u
    bits = wide.bits

    def c(pattern: int):        # the byte pattern repeated across the word
        return scalar_like(m, int.from_bytes(bytes([pattern]) * (bits // 8), "little"), u)

    def op(kind, a, b):
        return m.elementwise(kind, a, b)
    pairs = op(Op.SUB, u, op(Op.AND, op(Op.SHR_LOGICAL, u, scalar_like(m, 1, u)), c(0x55)))
    nibbles = op(Op.ADD, op(Op.AND, pairs, c(0x33)),
                 op(Op.AND, op(Op.SHR_LOGICAL, pairs, scalar_like(m, 2, u)), c(0x33)))
    nbytes = op(Op.AND, op(Op.ADD, nibbles, op(Op.SHR_LOGICAL, nibbles, scalar_like(m, 4, u))),
                c(0x0F))
    total = op(Op.SHR_LOGICAL, op(Op.MUL, nbytes, c(0x01)), scalar_like(m, bits - 8, u))
    return m.convert(total, dt.U8)
