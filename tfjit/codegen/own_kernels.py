"""Kernel shapes that are not loops over their result: scatter, scan and top-k.

Each is a ``KernelEmitter`` with its own row body (same ABI, same elemental
generation: the operands fused into the kernel are computed inside it at the
indices the row reads).  The fusion pass decides the rows (``own_rows.own_kernel_rows``):

* scatter (segment sum): row = (scatter, segment range, column block), the scatter
  being the leading index of rank-3 data's scatters side by side.  The row writes
  the identity over its part of the result, then walks every id in input order
  and adds the data rows whose id falls in its range: each sum is formed in TF's
  order, so results are bit-identical.  Ids are checked in every row (negative:
  dropped; >= segments: TF's InvalidArgumentError).  O(N) id reads plus the
  row's share of N*C adds.
* scan (cumulative sum/product): row = (outer index, column block); the scanned
  dim is walked serially, the block's columns (contiguous, vectorised) carry
  their running values in a stack buffer.  O(size), parallel over rows.
* top-k: row = a chunk of the vectors along the last dim, done one after
  another in the chunk's area of the plan's scratch buffer.  Each element is one
  unsigned key (``TopKEmitter.key``): larger means ranked first, a total order
  (greater value, NaN above every number, equal values, +0 and -0 too, by lower
  index: TF's tie rule), so any correct sort gives TF's order.  Up to k ~ n/2
  (``own_rows.topk_merges``) a binary min-heap of the k best keys, worst at the
  root: each further element is compared with the root and, when better,
  replaces it and sifts down; a heap sort leaves the best first: O(n + m log k)
  per vector where m <= n - k elements beat the root (n log k worst case) plus
  O(k log k).  For larger k a bottom-up merge sort of the whole vector,
  branch-free on the data, between two arrays of n keys: O(n log n).
"""
from __future__ import annotations

import math

from llvmlite import ir

from tfjit import dtypes as dt
from tfjit.codegen.emitter import KernelEmitter
from tfjit.codegen.gather import MAX_RANK
from tfjit.codegen.llvm_types import I8, I64, PTR, VOID, const, for_range, i64, intrinsic, value_type
from tfjit.ir.module import scatter_identity
from tfjit.ir.ops import Op
from tfjit.passes.buffers import topk_key_bytes, topk_row_bytes
from tfjit.passes.own_rows import COLUMN_BLOCK, scan_geometry, scatter_blocks, topk_merges


ID_CHUNK = 512      # ids a segment-range row of a scatter compacts at a time (on its stack)


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
        """acc (+|*) v in TF's element type: no reassociation, halves rounded per step;
        max/min as TF's CPU kernel (Eigen's cwiseMax(v, acc)): acc where it is strictly
        greater (less), else v -- so ties and NaNs on either side give v."""
        b = self.b
        if kind == "assign":
            return v
        if kind == "logsumexp":
            return self._log_add_exp(d, acc, v)
        if kind in ("max", "min", "max_acc", "min_acc"):
            # max/min: acc where strictly greater (less), else v; the _acc kinds (the
            # variable updates' cwiseMax(acc, v)): v where strictly greater (less), else acc
            op = ">" if kind.startswith("max") else "<"
            a, c = (acc, v) if kind in ("max", "min") else (v, acc)
            wins = b.fcmp_ordered(op, a, c) if d.is_float else \
                b.icmp_signed(op, a, c) if d.is_signed else b.icmp_unsigned(op, a, c)
            return b.select(wins, a, c)
        if d.is_float:
            r = {"sum": b.fadd, "prod": b.fmul, "sub": b.fsub, "div": b.fdiv}[kind](acc, v)
            return self.elemental.convert(r, dt.F32, d) if d in (dt.F16, dt.BF16) else r
        return {"sum": b.add, "prod": b.mul, "sub": b.sub}[kind](acc, v)

    def _log_add_exp(self, d: dt.DType, acc, v):
        """max + log1p(exp(min - max)), or max where it is -inf, with TF's max and min
        (and so its NaN handling: ir/interp.py ``_log_add_exp``)."""
        b, t = self.b, acc.type
        hi = b.select(b.fcmp_ordered("<", acc, v), v, acc)
        lo = b.select(b.fcmp_ordered("<", v, acc), v, acc)
        step = b.fadd(hi, self.math(b, "log1p", [self.math(b, "exp", [b.fsub(lo, hi)])]))
        r = b.select(b.fcmp_ordered("==", hi, ir.Constant(t, -math.inf)), hi, step)
        return self.elemental.convert(r, dt.F32, d) if d in (dt.F16, dt.BF16) else r

    def _block(self, index, width: int, total: int):
        """[start, stop) of column block ``index`` of ``width`` columns out of ``total``."""
        start = self.b.mul(index, i64(width))
        return start, _min(self.b, self.b.add(start, i64(width)), total)


class ScatterEmitter(_OwnKernel):
    def _emit(self) -> list:
        root = self.f.roots[0]
        _, ranges, blocks = scatter_blocks(root)
        segments, columns = root.shape[-2:]
        n = root.operands[1].shape[0]
        cost = n + (n * columns + segments * columns) // (ranges * blocks)
        return [(self._function(self.name, self._row), self.f.rows, max(cost, 1))]

    def _row(self, row):
        b, root = self.b, self.f.roots[0]
        data, ids = root.operands[:2]
        init = root.operands[2] if len(root.operands) > 2 else None
        by_index = root.attrs.get("bounds") == "index"
        segments, columns = root.shape[-2:]
        _, ranges, blocks = scatter_blocks(root)
        # rank 3: the row's scatter of those side by side is the leading index
        at = (b.sdiv(row, i64(ranges * blocks)),) if root.rank == 3 else ()
        row = b.srem(row, i64(ranges * blocks)) if at else row
        part = b.sdiv(row, i64(blocks))
        lo = b.sdiv(b.mul(part, i64(segments)), i64(ranges))
        hi = b.sdiv(b.mul(b.add(part, i64(1)), i64(segments)), i64(ranges))
        c_lo, c_hi = self._block(b.srem(row, i64(blocks)), COLUMN_BLOCK, columns)
        first, *others = self.plan.slots[root]
        identity = const(root.dtype, scatter_identity(root.attrs["kind"], root.dtype))
        with for_range(b, lo, hi, "s") as s, for_range(b, c_lo, c_hi, "c") as c, self._scope():
            self._store(first, root, at + (s, c),
                        identity if init is None else self.value(init, at + (s, c)))
        shape = root.attrs.get("index_shape", ())
        if by_index:      # TF's words for indices, the position as the indices were shaped
            where = "[...]" if len(shape) > MAX_RANK else \
                "[" + ",".join(f"{{{k + 1}}}" for k in range(len(shape))) + "]" if shape else ""
            words = f"indices{where} = {{0}} is not in [0, {segments})"
        else:
            words = f"segment_ids[{{1}}] = {{0}} is out of range [0, {segments})"   # flat
        code = self.error_code(f"scatter {{{{node {root.source}}}}}: {words}")
        zero = self.error_code(f"scatter {{{{node {root.source}}}}}: updates must not contain 0")
        def checked(j):
            """ids[j] as i64, raising TF's error where it is out of range; and whether
            it falls in this row's segments."""
            sid = self._to_i64(self.value(ids, (j,)), ids.dtype)
            # unsigned compare: a negative id is out of range too, when ids are indices
            out = b.icmp_unsigned(">=", sid, i64(segments)) if by_index else \
                b.icmp_signed(">=", sid, i64(segments))
            position = ((j,) if not by_index else self._unravel(j, shape) if len(shape) <= MAX_RANK
                        else ())
            self._raise_status(code, out, (sid,) + tuple(position))
            return sid, b.and_(b.icmp_signed(">=", sid, lo), b.icmp_signed("<", sid, hi))

        def add(j, sid):
            with for_range(b, c_lo, c_hi, "c") as c, self._scope():
                v = self.value(data, at + (j, c))
                if root.attrs["kind"] == "div":      # TF's ResourceScatterDiv refuses it
                    self._raise_status(zero, self.elemental._compare(Op.EQ, root.dtype, v,
                                                                     const(root.dtype, 0)))
                acc = self._load(first, root, at + (sid, c))
                self._store(first, root, at + (sid, c),
                            self._combine_exact(root.attrs["kind"], root.dtype, acc, v))

        n = ids.shape[0]
        if ranges == 1:     # (nearly) every id is the row's: a branch the CPU predicts
            with for_range(b, 0, n, "j") as j, self._scope():
                sid, mine = checked(j)
                with b.if_then(mine):
                    add(j, sid)
        else:
            self._compacted(n, checked, add)
        for slot in others:       # the same value is several outputs
            with for_range(b, lo, hi, "s") as s, for_range(b, c_lo, c_hi, "c") as c:
                self._store(slot, root, at + (s, c), self._load(first, root, at + (s, c)))

    def _compacted(self, n: int, checked, add) -> None:
        """Walks the ids ``ID_CHUNK`` at a time: first, without a branch, the positions
        (and ids) of the row's own ids are written one after another on the stack, then
        their rows added in that order.  With r segment ranges a row owns about 1 in r
        ids, a branch the CPU cannot predict: 65536 x 64 -> 1024 in 8 ranges took
        1.3 ms as one loop with a branch, more than XLA's serial 1.0-1.2."""
        b = self.b
        js, sids = self._entry_alloca(I64, ID_CHUNK), self._entry_alloca(I64, ID_CHUNK)
        with for_range(b, 0, -(-n // ID_CHUNK), "chunk") as k:
            start = b.mul(k, i64(ID_CHUNK))
            count = self._alloca(I64, i64(0))
            with for_range(b, start, _min(b, b.add(start, i64(ID_CHUNK)), n), "j") as j, self._scope():
                sid, mine = checked(j)
                held = b.load(count)
                b.store(j, b.gep(js, [held], source_etype=I64))
                b.store(sid, b.gep(sids, [held], source_etype=I64))
                b.store(b.add(held, b.zext(mine, I64)), count)
            with for_range(b, 0, b.load(count), "q") as q, self._scope():
                add(b.load(b.gep(js, [q], source_etype=I64)), b.load(b.gep(sids, [q], source_etype=I64)))


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

        identity = const(root.dtype, {"sum": 0, "prod": 1, "logsumexp": -math.inf}[a["kind"]])
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
    """Rows are chunks of vectors (``own_rows.TOPK_CHUNKS``), each with its own scratch
    area (``buffers.topk_row_bytes``) reused vector after vector.  Elements are
    ranked by one unsigned key (``key``), so every comparison is one instruction."""

    def _emit(self) -> list:
        root = self.f.roots[0]
        n, k = root.operands[0].shape[-1], root.attrs["k"]
        self.kt = ir.IntType(8 * topk_key_bytes(root.operands[0]))
        vectors = math.prod(root.shape[:-1])
        if topk_merges(root):
            self.merge = self._merge_function(self.name + ".merge")
            work = n * (1 + max(len(self.f.instrs), 1)) + n * (n - 1).bit_length() * 2
        else:
            self.sift = self._sift_function(self.name + ".sift")
            work = (n + k) * (1 + max(len(self.f.instrs), 1)) + 4 * k * max(k.bit_length(), 1)
        return [(self._function(self.name, self._row), self.f.rows, work * -(-vectors // self.f.rows))]

    def key(self, v, j):
        """(value, index) -> an unsigned integer that is larger exactly when the pair
        ranks before: the value's bits made monotonic (NaN above +inf; -0, +0 and, as
        TF's comparisons under DAZ see them, denormals all equal to +0) in the high
        half, the complemented index in the low half (equal values: lower index first)."""
        b, d = self.b, self.f.roots[0].operands[0].dtype
        half = self.kt.width // 2
        ht = ir.IntType(half)
        if d.is_float:            # f16/bf16 are f32 in registers: the bits are `half` wide
            t = v.type
            tiny = ir.Constant(t, 2.2250738585072014e-308 if t == ir.DoubleType() else 1.1754943508222875e-38)
            v = b.select(b.fcmp_ordered("<", intrinsic(b, "fabs", t, [v]), tiny), ir.Constant(t, 0.0), v)
            bits = b.bitcast(v, ht)
            mono = b.select(b.icmp_signed("<", bits, ir.Constant(ht, 0)), b.not_(bits),
                            b.or_(bits, ir.Constant(ht, 1 << (half - 1))))
            mono = b.select(b.fcmp_unordered("uno", v, v), ir.Constant(ht, (1 << half) - 1), mono)
        elif d.is_signed:
            mono = b.xor(b.sext(v, ht) if d.bits < half else v, ir.Constant(ht, 1 << (half - 1)))
        else:
            mono = b.zext(v, ht) if d.bits < half else v
        low = b.sub(ir.Constant(ht, (1 << half) - 1), b.trunc(j, ht) if half < 64 else j)
        return b.or_(b.shl(b.zext(mono, self.kt), ir.Constant(self.kt, half)), b.zext(low, self.kt))

    def index_of(self, key, dtype: dt.DType):
        b, half = self.b, self.kt.width // 2
        j = b.sub(ir.Constant(ir.IntType(half), (1 << half) - 1), b.trunc(key, ir.IntType(half)))
        return b.trunc(j, value_type(dtype)) if dtype.bits < half else b.zext(j, value_type(dtype)) \
            if dtype.bits > half else j

    def _row(self, chunk):
        b, root = self.b, self.f.roots[0]
        x = root.operands[0]
        vectors = math.prod(x.shape[:-1])
        begin = b.sdiv(b.mul(chunk, i64(vectors)), i64(self.f.rows))
        end = b.sdiv(b.mul(b.add(chunk, i64(1)), i64(vectors)), i64(self.f.rows))
        base = b.gep(self.ptrs[self.plan.scratch[self.f]], [b.mul(chunk, i64(topk_row_bytes(root)))],
                     source_etype=I8)
        with for_range(b, begin, end, "vector") as v, self._scope():
            outer = self._unravel(v, x.shape[:-1])
            keys = self._merge_sort(outer, base) if topk_merges(root) else self._heap(outer, base)
            with for_range(b, 0, root.attrs["k"], "out") as o:
                j = self.index_of(b.load(b.gep(keys, [o], source_etype=self.kt), typ=self.kt), root.dtype)
                for s in self.plan.slots[root]:
                    self._store(s, root, outer + (o,), j)

    def _fill(self, outer, keys, count: int) -> None:
        b, x = self.b, self.f.roots[0].operands[0]
        with for_range(b, 0, count, "fill") as j, self._scope():
            b.store(self.key(self.value(x, outer + (j,)), j), b.gep(keys, [j], source_etype=self.kt))

    def _heap(self, outer, keys):
        """The k best keys in a min-heap (worst at the root), then heap-sorted best first."""
        b, root = self.b, self.f.roots[0]
        x = root.operands[0]
        n, k = x.shape[-1], root.attrs["k"]
        self._fill(outer, keys, k)
        with for_range(b, 0, k // 2, "heapify") as h:
            b.call(self.sift, [keys, b.sub(i64(k // 2 - 1), h), i64(k)])
        with for_range(b, k, n, "j") as j, self._scope():
            key = self.key(self.value(x, outer + (j,)), j)
            with b.if_then(b.icmp_unsigned(">", key, b.load(keys, typ=self.kt))):
                b.store(key, keys)
                b.call(self.sift, [keys, i64(0), i64(k)])
        with for_range(b, 1, k, "sort") as e:      # heap sort: the worst left goes last
            last = b.sub(i64(k), e)
            first, end = keys, b.gep(keys, [last], source_etype=self.kt)
            u, w = b.load(first, typ=self.kt), b.load(end, typ=self.kt)
            b.store(w, first)
            b.store(u, end)
            b.call(self.sift, [keys, i64(0), last])
        return keys

    def _merge_sort(self, outer, base):
        """Bottom-up merge sort of the whole vector's keys between two arrays; returns
        the sorted one."""
        b, n = self.b, self.f.roots[0].operands[0].shape[-1]
        areas = (base, b.gep(base, [i64(n)], source_etype=self.kt))
        self._fill(outer, areas[0], n)
        passes = (n - 1).bit_length()
        with for_range(b, 0, passes, "pass") as p:
            even = b.icmp_signed("==", b.and_(p, i64(1)), i64(0))
            src, dst = b.select(even, *areas), b.select(even, areas[1], areas[0])
            width = b.shl(i64(1), p)
            pair = b.shl(width, i64(1))
            with for_range(b, 0, b.sdiv(b.add(i64(n - 1), pair), pair), "run") as r:
                lo = b.mul(r, pair)
                mid = _min(b, b.add(lo, width), n)
                b.call(self.merge, [src, dst, lo, mid, _min(b, b.add(mid, width), n)])
        return areas[passes % 2]

    def _merge_function(self, symbol: str) -> ir.Function:
        """``merge(src, dst, lo, mid, hi)``: sorted runs src[lo:mid] and src[mid:hi] into
        dst[lo:hi], without branches on the data.  A run that is used up reads as key 0,
        below every real key (whose low half is never 0), so the other run wins."""
        kt = self.kt
        fn = ir.Function(self.module, ir.FunctionType(VOID, [PTR, PTR] + [I64] * 3), name=symbol)
        fn.linkage = "internal"
        src, dst, lo, mid, hi = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        head, body, done = (fn.append_basic_block(s) for s in ("head", "body", "done"))
        entry = b.block
        b.branch(head)
        b.position_at_end(head)
        o, i, j = b.phi(I64), b.phi(I64), b.phi(I64)
        for phi, init in ((o, lo), (i, lo), (j, mid)):
            phi.add_incoming(init, entry)
        b.cbranch(b.icmp_signed("<", o, hi), body, done)
        b.position_at_end(body)

        def head_of(k, stop):       # the run's next key, or 0 once it is used up
            live = b.icmp_signed("<", k, stop)
            clamped = b.select(live, k, b.sub(stop, i64(1)))
            key = b.load(b.gep(src, [clamped], source_etype=kt), typ=kt)
            return b.select(live, key, ir.Constant(kt, 0))

        left, right = head_of(i, mid), head_of(j, hi)
        take = b.icmp_unsigned(">", right, left)
        b.store(b.select(take, right, left), b.gep(dst, [o], source_etype=kt))
        step = b.zext(take, I64)
        o.add_incoming(b.add(o, i64(1)), body)
        i.add_incoming(b.add(i, b.sub(i64(1), step)), body)
        j.add_incoming(b.add(j, step), body)
        b.branch(head)
        b.position_at_end(done)
        b.ret_void()
        return fn

    def _sift_function(self, symbol: str) -> ir.Function:
        """``sift(keys, s, size)``: restores the min-heap (worst at the root) below s."""
        kt = self.kt
        fn = ir.Function(self.module, ir.FunctionType(VOID, [PTR, I64, I64]), name=symbol)
        fn.linkage = "internal"
        keys, start, size = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        head, step, done = (fn.append_basic_block(s) for s in ("head", "step", "done"))
        entry = b.block
        b.branch(head)
        b.position_at_end(head)
        s = b.phi(I64)
        s.add_incoming(start, entry)

        def at(j):
            return b.load(b.gep(keys, [j], source_etype=kt), typ=kt)

        left = b.add(b.mul(s, i64(2)), i64(1))
        with b.if_then(b.icmp_signed(">=", left, size)):
            b.ret_void()
        right = b.add(left, i64(1))
        right = b.select(b.icmp_signed("<", right, size), right, left)   # never reads past size
        child = b.select(b.icmp_unsigned("<", at(right), at(left)), right, left)   # the worse child
        parent, worse = at(s), at(child)
        b.cbranch(b.icmp_unsigned(">", parent, worse), step, done)
        b.position_at_end(step)
        b.store(worse, b.gep(keys, [s], source_etype=kt))
        b.store(parent, b.gep(keys, [child], source_etype=kt))
        s.add_incoming(child, step)
        b.branch(head)
        b.position_at_end(done)
        b.ret_void()
        return fn
