"""Kernel shapes that are not loops over their result: scatter, scan and top-k.

Each is a ``KernelEmitter`` with its own row body (same ABI, same elemental
generation: the operands fused into the kernel are computed inside it at the
indices the row reads).  The fusion pass decides the rows (``fusion.own_kernel_rows``):

* scatter (segment sum): row = (segment range, column block).  The row writes
  the identity over its part of the result, then walks every id in input order
  and adds the data rows whose id falls in its range: each sum is formed in TF's
  order, so results are bit-identical.  Ids are checked in every row (negative:
  dropped; >= segments: TF's InvalidArgumentError).  O(N) id reads plus the
  row's share of N*C adds.
* scan (cumulative sum/product): row = (outer index, column block); the scanned
  dim is walked serially, the block's columns (contiguous, vectorised) carry
  their running values in a stack buffer.  O(size), parallel over rows.
* top-k: row = one vector along the last dim.  A binary min-heap of the k best
  (value, index) pairs, worst at the root, lives in the plan's scratch buffer;
  each further element is compared with the root and, when better, replaces it
  and sifts down; a final heap sort leaves the best first.  O(n + m log k) per
  row where m <= n - k elements beat the root (n log k worst case), plus
  O(k log k) to sort.  "Better" is a total order: greater value, NaN above every
  number, equal values (+0 and -0 too) by lower index, TF's tie rule.
"""
from __future__ import annotations

import math

from llvmlite import ir

from tfjit import dtypes as dt
from tfjit.codegen.emitter import KernelEmitter
from tfjit.codegen.llvm_types import I1, I8, I64, PTR, VOID, const, for_range, i64, value_type
from tfjit.passes.buffers import topk_row_bytes
from tfjit.passes.fusion import COLUMN_BLOCK, scan_geometry, scatter_blocks


def _min(b, x, n: int):
    return b.select(b.icmp_signed("<", x, i64(n)), x, i64(n))


class _OwnKernel(KernelEmitter):
    def emit(self) -> list:
        if not self.f.rows:       # nothing to compute or check: a kernel that is never called
            return [(self._function(self.name, lambda row: None), 0, 1)]
        return self._emit()

    def _to_i64(self, v, d: dt.DType):
        return self.b.sext(v, I64) if d.bits < 64 else v

    def _combine_exact(self, kind: str, d: dt.DType, acc, v):
        """acc (+|*) v in TF's element type: no reassociation, halves rounded per step."""
        b = self.b
        if d.is_float:
            r = b.fadd(acc, v) if kind == "sum" else b.fmul(acc, v)
            return self.elemental.convert(r, dt.F32, d) if d in (dt.F16, dt.BF16) else r
        return b.add(acc, v) if kind == "sum" else b.mul(acc, v)

    def _block(self, index, width: int, total: int):
        """[start, stop) of column block ``index`` of ``width`` columns out of ``total``."""
        start = self.b.mul(index, i64(width))
        return start, _min(self.b, self.b.add(start, i64(width)), total)


class ScatterEmitter(_OwnKernel):
    def _emit(self) -> list:
        root = self.f.roots[0]
        ranges, blocks = scatter_blocks(root)
        segments, columns = root.shape
        n = root.operands[1].shape[0]
        cost = n + (n * columns + segments * columns) // (ranges * blocks)
        return [(self._function(self.name, self._row), self.f.rows, max(cost, 1))]

    def _row(self, row):
        b, root = self.b, self.f.roots[0]
        data, ids = root.operands
        segments, columns = root.shape
        ranges, blocks = scatter_blocks(root)
        part = b.sdiv(row, i64(blocks))
        lo = b.sdiv(b.mul(part, i64(segments)), i64(ranges))
        hi = b.sdiv(b.mul(b.add(part, i64(1)), i64(segments)), i64(ranges))
        c_lo, c_hi = self._block(b.srem(row, i64(blocks)), COLUMN_BLOCK, columns)
        first, *others = self.plan.slots[root]
        identity = const(root.dtype, 0 if root.attrs["kind"] == "sum" else 1)
        with for_range(b, lo, hi, "s") as s, for_range(b, c_lo, c_hi, "c") as c:
            self._store(first, root, (s, c), identity)
        code = self.error_code(f"scatter {{{{node {root.source}}}}}: a segment id is out of "
                               f"range [0, {segments})")
        with for_range(b, 0, ids.shape[0], "j") as j, self._scope():
            sid = self._to_i64(self.value(ids, (j,)), ids.dtype)
            self._raise_status(code, b.icmp_signed(">=", sid, i64(segments)))
            mine = b.and_(b.icmp_signed(">=", sid, lo), b.icmp_signed("<", sid, hi))
            with b.if_then(mine), for_range(b, c_lo, c_hi, "c") as c, self._scope():
                v = self.value(data, (j, c))
                acc = self._load(first, root, (sid, c))
                self._store(first, root, (sid, c), self._combine_exact(root.attrs["kind"], root.dtype, acc, v))
        for slot in others:       # the same value is several outputs
            with for_range(b, lo, hi, "s") as s, for_range(b, c_lo, c_hi, "c") as c:
                self._store(slot, root, (s, c), self._load(first, root, (s, c)))


class ScanEmitter(_OwnKernel):
    def _emit(self) -> list:
        outer, n, inner = scan_geometry(self.f.roots[0])
        cost = n * min(inner, COLUMN_BLOCK) * max(len(self.f.instrs), 1)
        return [(self._function(self.name, self._row), self.f.rows, max(cost, 1))]

    def _row(self, row):
        b, root = self.b, self.f.roots[0]
        a, x = root.attrs, root.operands[0]
        d = a["dim"]
        outer, n, inner = scan_geometry(root)
        width = min(inner, COLUMN_BLOCK)      # > 0: a kernel with rows has a non-empty result
        blocks = math.ceil(inner / width)
        prefix = self._unravel(b.sdiv(row, i64(blocks)), root.shape[:d])
        c_lo, c_hi = self._block(b.srem(row, i64(blocks)), width, inner)
        t = value_type(root.dtype)
        acc = self._entry_alloca(t, width)

        def running(c):
            return b.gep(acc, [b.sub(c, c_lo)], source_etype=t)

        identity = const(root.dtype, 0 if a["kind"] == "sum" else 1)
        with for_range(b, c_lo, c_hi, "c") as c:
            b.store(identity, running(c))
        with for_range(b, 0, n, "k") as k, self._scope():
            at = b.sub(i64(n - 1), k) if a["reverse"] else k
            with for_range(b, c_lo, c_hi, "c") as c, self._scope():
                idx = prefix + (at,) + self._unravel(c, root.shape[d + 1:])
                before = b.load(running(c), typ=t)
                after = self._combine_exact(a["kind"], root.dtype, before, self.value(x, idx))
                b.store(after, running(c))
                for slot in self.plan.slots[root]:
                    self._store(slot, root, idx, before if a["exclusive"] else after)


class TopKEmitter(_OwnKernel):
    def _emit(self) -> list:
        root = self.f.roots[0]
        n, k = root.operands[0].shape[-1], root.attrs["k"]
        self.sift = self._sift_function(self.name + ".sift")
        cost = (n + k) * (1 + max(len(self.f.instrs), 1)) + k * max(k.bit_length(), 1)
        return [(self._function(self.name, self._row), self.f.rows, cost)]

    def _row(self, row):
        b, root = self.b, self.f.roots[0]
        x = root.operands[0]
        n, k = x.shape[-1], root.attrs["k"]
        t = value_type(x.dtype)
        outer = self._unravel(row, x.shape[:-1])
        base = b.gep(self.ptrs[self.plan.scratch[self.f]], [b.mul(row, i64(topk_row_bytes(root)))],
                     source_etype=I8)
        where, vals = base, b.gep(base, [i64(8 * k)], source_etype=I8)

        def slot(ptr, etype, j):
            return b.gep(ptr, [j], source_etype=etype)

        with for_range(b, 0, k, "fill") as j, self._scope():
            b.store(self.value(x, outer + (j,)), slot(vals, t, j))
            b.store(j, slot(where, I64, j))
        with for_range(b, 0, k // 2, "heapify") as h:
            b.call(self.sift, [vals, where, b.sub(i64(k // 2 - 1), h), i64(k)])
        with for_range(b, k, n, "j") as j, self._scope():
            v = self.value(x, outer + (j,))
            worst = (b.load(vals, typ=t), b.load(where, typ=I64))
            with b.if_then(better(b, x.dtype, (v, j), worst)):
                b.store(v, vals)
                b.store(j, where)
                b.call(self.sift, [vals, where, i64(0), i64(k)])
        with for_range(b, 1, k, "sort") as e:      # heap sort: the worst left goes last
            end = b.sub(i64(k), e)
            _swap(b, t, vals, where, i64(0), end)
            b.call(self.sift, [vals, where, i64(0), end])
        with for_range(b, 0, k, "out") as o:
            j = b.load(slot(where, I64, o), typ=I64)
            j = b.trunc(j, value_type(root.dtype)) if root.dtype.bits < 64 else j
            for s in self.plan.slots[root]:
                self._store(s, root, outer + (o,), j)

    def _sift_function(self, symbol: str) -> ir.Function:
        """``sift(vals, idxs, s, size)``: restores the min-heap (worst at the root) below s."""
        x = self.f.roots[0].operands[0]
        t = value_type(x.dtype)
        fn = ir.Function(self.module, ir.FunctionType(VOID, [PTR, PTR, I64, I64]), name=symbol)
        fn.linkage = "internal"
        vals, where, start, size = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        head, step, done = (fn.append_basic_block(s) for s in ("head", "step", "done"))
        entry = b.block
        b.branch(head)
        b.position_at_end(head)
        s = b.phi(I64)
        s.add_incoming(start, entry)

        def at(j):
            return (b.load(b.gep(vals, [j], source_etype=t), typ=t),
                    b.load(b.gep(where, [j], source_etype=I64), typ=I64))

        left = b.add(b.mul(s, i64(2)), i64(1))
        with b.if_then(b.icmp_signed(">=", left, size)):
            b.ret_void()
        right = b.add(left, i64(1))
        right = b.select(b.icmp_signed("<", right, size), right, left)   # never reads past size
        child = b.select(better(b, x.dtype, at(left), at(right)), right, left)
        b.cbranch(better(b, x.dtype, at(s), at(child)), step, done)
        b.position_at_end(step)
        _swap(b, t, vals, where, s, child)
        s.add_incoming(child, step)
        b.branch(head)
        b.position_at_end(done)
        b.ret_void()
        return fn


def better(b: ir.IRBuilder, d: dt.DType, first: tuple, second: tuple):
    """Does (value, index) ``first`` rank before ``second`` in top-k's total order?"""
    (va, ia), (vb, ib) = first, second
    lower = b.icmp_signed("<", ia, ib)
    if not d.is_float:
        gt = b.icmp_signed(">", va, vb) if d.is_signed else b.icmp_unsigned(">", va, vb)
        eq = b.icmp_signed("==", va, vb)
        return b.or_(gt, b.and_(eq, lower))
    a_nan, b_nan = b.fcmp_unordered("uno", va, va), b.fcmp_unordered("uno", vb, vb)
    numbers = b.or_(b.fcmp_ordered(">", va, vb), b.and_(b.fcmp_ordered("==", va, vb), lower))
    return b.select(a_nan, b.select(b_nan, lower, ir.Constant(I1, 1)),
                    b.select(b_nan, ir.Constant(I1, 0), numbers))


def _swap(b: ir.IRBuilder, t, vals, where, i, j) -> None:
    for ptr, etype in ((vals, t), (where, I64)):
        p, q = b.gep(ptr, [i], source_etype=etype), b.gep(ptr, [j], source_etype=etype)
        u, v = b.load(p, typ=etype), b.load(q, typ=etype)
        b.store(v, p)
        b.store(u, q)


EMITTERS = {"scatter": ScatterEmitter, "scan": ScanEmitter, "sort": TopKEmitter}


def emitter_for(kind: str):
    """The emitter class of a kernel kind (``KernelEmitter`` for loops and reductions)."""
    return EMITTERS.get(kind, KernelEmitter)

