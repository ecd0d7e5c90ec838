"""ArgMax/ArgMin code, a part of ``emitter.KernelEmitter`` (its base class).

TF's kernel (Eigen's ArgMaxPairReducer) starts from (index 0, the dtype's lowest
finite value) -- highest for ArgMin -- and takes an element only when it is
strictly better, in index order: ties keep the first index, NaN never wins, and
an element equal to the start value (-inf, or the lowest finite value itself)
does not either, so a row of NaN and -inf gives 0.  Every path here computes
exactly that.

A serial compare-and-select per element runs at ~4 cycles an element (the running
best is a dependency chain), so the CPU's paths are shaped for LLVM's vectoriser:

* along the reduced dim (``arg_range``: a row's argmax, or a chunk of a long
  one): blocks of ``ARG_BLOCK`` elements.  A block's extreme is a plain max/min
  reduction (vectorised; the elements also go to a stack buffer); only when it
  beats the best so far -- rare, after the first few blocks of data in no order --
  is the buffer searched for the block's first index of that extreme;
* across the outputs (``_arg_column_row``: axis 0, a middle axis): each reduced
  row updates a block of contiguous outputs' (best, index) pairs in stack
  buffers, elementwise (a compare and two selects a lane);
* split kernels (few outputs, many elements) keep each chunk's pair in scratch,
  values then indices, and ``_arg_combine_row`` takes chunks in order with the
  same strict rule, so the first chunk holding the extreme wins.

A GPU thread keeps the one-element-at-a-time loop (a stack buffer would be local
memory).
"""
from __future__ import annotations

import math as _math

import ml_dtypes
from llvmlite import ir

from tfjit import dtypes as dt
from tfjit.codegen.llvm_types import (I32, I64, const, for_range, i64, intrinsic, no_unroll,
                                      value_type)
from tfjit.ir.module import Instr
from tfjit.passes.kernels import FLAT_BLOCK

ARG_BLOCK = 256     # elements whose extreme is found before it is compared with the best


def arg_start(kind: str, d: dt.DType):
    """The value TF's ArgMax (ArgMin) starts from: the lowest (highest) finite value."""
    info = ml_dtypes.finfo(d.numpy()) if d.is_float else ml_dtypes.iinfo(d.numpy())
    value = info.min if kind == "max" else info.max
    return float(value) if d.is_float else int(value)


class ArgReductionRows:
    """ArgMax/ArgMin values and kernel rows; the emitter provides ``b``, ``f``, ``plan``,
    ``ptrs``, ``value``, ``gpu``, ``interleave_count`` and its scope, buffer and index helpers."""

    def _better(self, kind: str, d: dt.DType, v, best):
        """Is ``v`` strictly better than ``best`` (false for a NaN ``v``)?"""
        b = self.b
        pred = ">" if kind == "max" else "<"
        if d.is_float:
            return b.fcmp_ordered(pred, v, best)
        return b.icmp_signed(pred, v, best) if d.is_signed else b.icmp_unsigned(pred, v, best)

    def _extreme(self, kind: str, d: dt.DType, acc, v):
        """max/min for a block's extreme, NaN ignored, so it is a value of the block or
        the start value; ±0 may come out either way (they tie).  A NaN becomes the start
        value first, so the compare can say "no NaN, zeros' signs do not matter" (nnan,
        nsz): LLVM then vectorises it as a plain max.  (llvm.maxnum vectorised without
        those flags lost the last element of a 9-element block: LLVM 22's NaN-checking
        max reduction.)"""
        b = self.b
        pred = ">" if kind == "max" else "<"
        if d.is_float:
            v = b.select(b.fcmp_unordered("uno", v, v), const(d, arg_start(kind, d)), v)
            return b.select(b.fcmp_ordered(pred, v, acc, flags=("nnan", "nsz")), v, acc,
                            flags=("nnan", "nsz"))
        name = ("s" if d.is_signed else "u") + kind
        return intrinsic(b, name, acc.type, [acc, v])

    def _argreduce(self, i: Instr, idx):
        """The value of argreduce ``i`` at output index ``idx`` (a whole row)."""
        best, where = self.arg_range(i, idx, i64(0), i64(i.operands[0].shape[-1]))
        return self.elemental.convert(where, dt.I64, i.dtype)

    def arg_range(self, i: Instr, idx, start, stop):
        """(best value, its first index) of ``i``'s operand at ``idx + (j,)`` for j in
        [start, stop), from TF's start pair; the index is 0 when nothing beats it."""
        b, x, kind = self.b, i.operands[0], i.attrs["kind"]
        t = value_type(x.dtype)
        best = self._alloca(t, const(x.dtype, arg_start(kind, x.dtype)))
        where = self._alloca(I64, i64(0))
        if self.gpu:
            with for_range(b, start, stop, "a") as j, self._scope():
                v = self.value(x, idx + (j,))
                cur = b.load(best, typ=t)
                better = self._better(kind, x.dtype, v, cur)
                b.store(b.select(better, v, cur), best)
                b.store(b.select(better, j, b.load(where, typ=I64)), where)
            return b.load(best, typ=t), b.load(where, typ=I64)
        # An operand read as stored is read again by the search (the block, 1 KB, is still
        # in L1); a computed one is kept in a stack buffer rather than computed twice.  (The
        # buffer for a plain read made LLVM copy each block with a call to memcpy, and the
        # last-axis argmax of [8192, 2048] took twice the CPU time of its max.)
        reread = x in self.reads
        buf = None if reread else self._entry_alloca(t, ARG_BLOCK)
        top = self._entry_alloca(t)
        found = self._entry_alloca(I64)
        blocks = b.sdiv(b.add(b.sub(stop, start), i64(ARG_BLOCK - 1)), i64(ARG_BLOCK))
        with for_range(b, 0, blocks, "blk", no_unroll(self.module)) as k:
            lo = b.add(start, b.mul(k, i64(ARG_BLOCK)))
            count = b.sub(stop, lo)
            count = b.select(b.icmp_signed("<", count, i64(ARG_BLOCK)), count, i64(ARG_BLOCK))
            b.store(const(x.dtype, arg_start(kind, x.dtype)), top)
            with for_range(b, 0, count, "e", no_unroll(self.module)) as e, self._scope():
                v = self.value(x, idx + (b.add(lo, e),))
                if buf is not None:
                    b.store(v, b.gep(buf, [e], source_etype=t))
                b.store(self._extreme(kind, x.dtype, b.load(top, typ=t), v), top)
            m = b.load(top, typ=t)
            with b.if_then(self._better(kind, x.dtype, m, b.load(best, typ=t)), likely=False):
                b.store(m, best)
                # the block's first element equal to m: the least index of a hit (a min
                # reduction, which LLVM vectorises); m is one of the block's values
                b.store(count, found)
                with for_range(b, 0, count, "s", no_unroll(self.module)) as e, self._scope():
                    v = self.value(x, idx + (b.add(lo, e),)) if reread else \
                        b.load(b.gep(buf, [e], source_etype=t), typ=t)
                    hit = b.fcmp_ordered("==", v, m) if x.dtype.is_float else \
                        b.icmp_unsigned("==", v, m)
                    first = b.select(hit, e, count)
                    b.store(intrinsic(b, "smin", I64, [b.load(found, typ=I64), first]), found)
                b.store(b.add(lo, b.load(found, typ=I64)), where)
        return b.load(best, typ=t), b.load(where, typ=I64)

    # -- kernel rows ----------------------------------------------------------------
    def _arg_partial_row(self, row):
        """Chunk ``row % split`` (FLAT_BLOCK elements) of output ``row // split``."""
        f, b = self.f, self.b
        root = f.roots[0]
        n = root.operands[0].shape[-1]
        out_idx = self._unravel(b.sdiv(row, i64(f.split)), root.shape)
        start = b.mul(b.srem(row, i64(f.split)), i64(FLAT_BLOCK))
        stop = b.add(start, i64(FLAT_BLOCK))
        stop = b.select(b.icmp_signed("<", stop, i64(n)), stop, i64(n))
        best, where = self.arg_range(root, out_idx, start, stop)
        self._store_partial(row, best, where)

    def _store_partial(self, at, best, where):
        values, indices = self._partials(best.type)
        b = self.b
        b.store(best, b.gep(values, [at], source_etype=best.type))
        b.store(where, b.gep(indices, [at], source_etype=I64))

    def _partials(self, t):
        """The scratch's value and index arrays (``buffers.arg_scratch_bytes``)."""
        f, b = self.f, self.b
        base = self.ptrs[self.plan.scratch[f]]
        n = f.roots[0].size * f.split
        return base, b.gep(base, [i64(8 * n)], source_etype=ir.IntType(8))

    def _arg_combine_row(self, row):
        """Output ``row`` from its chunks' pairs, in chunk order (the first best wins)."""
        f, b = self.f, self.b
        root = f.roots[0]
        x, kind = root.operands[0], root.attrs["kind"]
        t = value_type(x.dtype)
        values, indices = self._partials(t)
        best = self._alloca(t, const(x.dtype, arg_start(kind, x.dtype)))
        where = self._alloca(I64, i64(0))
        base = b.mul(row, i64(f.split))
        with for_range(b, 0, f.split, "c") as c:
            at = b.add(base, c)
            v = b.load(b.gep(values, [at], source_etype=t), typ=t)
            cur = b.load(best, typ=t)
            better = self._better(kind, x.dtype, v, cur)
            b.store(b.select(better, v, cur), best)
            w = b.load(b.gep(indices, [at], source_etype=I64), typ=I64)
            b.store(b.select(better, w, b.load(where, typ=I64)), where)
        out = self.elemental.convert(b.load(where, typ=I64), dt.I64, root.dtype)
        for slot in self.plan.slots[root]:
            self._store(slot, root, self._unravel(row, root.shape), out)

    def _arg_column_row(self, row):
        """A block of contiguous outputs, each reduced row updating their (best, index)
        pairs; a split kernel's row takes a chunk of the reduced rows and writes its
        pairs to the scratch for ``_arg_combine_row``."""
        f, b = self.f, self.b
        root = f.roots[0]
        x, kind = root.operands[0], root.attrs["kind"]
        t = value_type(x.dtype)
        n = x.shape[-1]
        it = I32 if n < 2 ** 31 else I64      # narrow indices: more lanes a vector
        width = f.column_block
        out_shape = root.shape
        chunk, prefix, first, start, stop = self._column_block_bounds(row, out_shape)
        best = self._entry_alloca(t, width)
        where = self._entry_alloca(it, width)

        def at(buf, typ, o):
            return b.gep(buf, [b.sub(o, start)], source_etype=typ)

        with for_range(b, start, stop, "o") as o:
            b.store(const(x.dtype, arg_start(kind, x.dtype)), at(best, t, o))
            b.store(ir.Constant(it, 0), at(where, it, o))
        per = _math.ceil(n / f.split)
        lo = b.mul(chunk, i64(per))
        hi = b.add(lo, i64(per))
        hi = b.select(b.icmp_signed("<", hi, i64(n)), hi, i64(n))
        # the outputs' loop stays a loop (see reduction._column_row), vectorised across
        # outputs and interleaved as there: axis-0 argmax of exp(x)*0.5+x on [8192, 2048]
        # 3.8-4.1 -> 3.4 ms (scratch)
        across = no_unroll(self.module, self.interleave_count)
        with for_range(b, lo, hi, "r") as r, self._scope():
            rt = r if it is I64 else b.trunc(r, it)
            with for_range(b, start, stop, "o", across) as o, self._scope():
                v = self.value(x, prefix + (o, r))
                cur = b.load(at(best, t, o), typ=t)
                better = self._better(kind, x.dtype, v, cur)
                b.store(b.select(better, v, cur), at(best, t, o))
                b.store(b.select(better, rt, b.load(at(where, it, o), typ=it)), at(where, it, o))

        def index(o):
            w = b.load(at(where, it, o), typ=it)
            return w if it is I64 else b.zext(w, I64)
        if f.split == 1:
            with for_range(b, start, stop, "o") as o:
                out = self.elemental.convert(index(o), dt.I64, root.dtype)
                for s in self.plan.slots[root]:
                    self._store(s, root, prefix + (o,), out)
            return
        with for_range(b, start, stop, "o") as o:
            self._store_partial(b.add(b.mul(b.add(first, o), i64(f.split)), chunk),
                                b.load(at(best, t, o), typ=t), index(o))
