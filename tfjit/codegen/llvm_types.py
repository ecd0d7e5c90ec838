"""LLVM types and small IRBuilder helpers shared by the emitter and targets."""
from __future__ import annotations

import contextlib

from llvmlite import ir

from tfjit import dtypes as dt

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()


def storage_type(d: dt.DType) -> ir.Type:
    """How an element of ``d`` is laid out in memory (TF's layout)."""
    if d is dt.F16:
        return F16
    if d is dt.BF16:
        return I16
    if d is dt.F32:
        return F32
    if d is dt.F64:
        return F64
    return ir.IntType(8 if d is dt.PRED else d.bits)


def value_type(d: dt.DType) -> ir.Type:
    """How an element of ``d`` is held in registers (halves compute in f32)."""
    if d in (dt.F16, dt.BF16):
        return F32
    if d is dt.PRED:
        return I1
    return storage_type(d)


def const(d: dt.DType, value) -> ir.Constant:
    t = value_type(d)
    if d.is_float:
        return ir.Constant(t, float(value))
    if d is dt.PRED:
        return ir.Constant(I1, int(bool(value)))
    return ir.Constant(t, int(value) & ((1 << d.bits) - 1))


def i64(value: int) -> ir.Constant:
    return ir.Constant(I64, int(value))


def intrinsic(b: ir.IRBuilder, name: str, ret: ir.Type, args: list, suffix_types=None):
    """Calls ``llvm.<name>.<type suffixes>``, declaring it once per module."""
    suffix_types = suffix_types or [ret]
    full = "llvm." + name + "".join("." + _suffix(t) for t in suffix_types)
    fn = b.module.globals.get(full)
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(ret, [a.type for a in args]), name=full)
    return b.call(fn, args)


def _suffix(t: ir.Type) -> str:
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    return {F16: "f16", F32: "f32", F64: "f64"}[t] if t in (F16, F32, F64) else str(t)


class _LoopID(ir.values.MDValue):
    """A loop's ID node, ``distinct !{!self, hints...}``: LLVM reads loop hints only
    from a distinct node whose first operand is itself (llvmlite cannot spell one)."""

    def descr(self, buf):
        ops = ", ".join([self.get_reference()] + [o.get_reference() for o in self.operands])
        buf += (f"distinct !{{ {ops} }}", "\n")


def no_unroll(module: ir.Module, interleave: int = 0) -> ir.values.MDValue:
    """Loop metadata that keeps LLVM from unrolling a loop (fully, too); with
    ``interleave``, the vectoriser interleaves that many vector iterations."""
    hints = [module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])]
    if interleave:
        hints.append(_interleave_hint(module, interleave))
    return _LoopID(module, hints, name=str(len(module.metadata)))


def _interleave_hint(module: ir.Module, count: int):
    return module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"),
                                ir.Constant(ir.IntType(32), count)])


def no_vectorize(module: ir.Module) -> ir.values.MDValue:
    """Loop metadata that keeps LLVM from vectorising a loop (across its iterations)."""
    hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"),
                                ir.Constant(ir.IntType(1), 0)])
    return _LoopID(module, [hint], name=str(len(module.metadata)))


def unvectorised_interleave(module: ir.Module, count: int) -> ir.values.MDValue:
    """Loop metadata: no vectorising across iterations, but ``count`` of them interleaved
    (the loop vectoriser at width 1: an unroll whose copies it schedules together)."""
    width = module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.width"),
                                 ir.Constant(ir.IntType(32), 1)])
    return _LoopID(module, [width, _interleave_hint(module, count)], name=str(len(module.metadata)))


def interleave(module: ir.Module, count: int) -> ir.values.MDValue:
    """Loop metadata asking the vectoriser to interleave ``count`` vector iterations."""
    return _LoopID(module, [_interleave_hint(module, count)], name=str(len(module.metadata)))


@contextlib.contextmanager
def for_range(b: ir.IRBuilder, start, stop, name: str = "i", loop_md=None, step: int = 1):
    """``for (i = start; i < stop; i += step)``; yields the induction variable.
    ``loop_md``: the loop's ``llvm.loop`` metadata (e.g. ``no_unroll``)."""
    start = start if isinstance(start, ir.Value) else i64(start)
    stop = stop if isinstance(stop, ir.Value) else i64(stop)
    pre = b.block
    header = b.append_basic_block(f"{name}.head")
    body = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.done")
    b.branch(header)
    b.position_at_end(header)
    i = b.phi(I64, name=name)
    i.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", i, stop), body, done)
    b.position_at_end(body)
    yield i
    nxt = b.add(i, i64(step), name=f"{name}.next", flags=("nsw",))
    i.add_incoming(nxt, b.block)
    latch = b.branch(header)
    if loop_md is not None:
        latch.set_metadata("llvm.loop", loop_md)
    b.position_at_end(done)
