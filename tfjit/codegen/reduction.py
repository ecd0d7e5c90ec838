"""The rows of reduction kernels, a part of ``emitter.KernelEmitter`` (its base class).

A reduce kernel's row computes one output (``_reduce_row``: the reduction is
emitted as loops by ``value``), or for a split reduction one chunk of one output
(``_partial_row``) whose partial results a second phase adds (``_combine_row``).
A column kernel's row (``_column_row``) accumulates a block of contiguous outputs
over the reduced dims, which are the outer loops (batch-norm statistics: 32
channels over N*H*W), and may be split the same way.
"""
from __future__ import annotations

import math as _math

import numpy as np
from llvmlite import ir

from tfjit import dtypes as dt
from tfjit.codegen import lanes
from tfjit.codegen.llvm_types import I8, const, for_range, i64, intrinsic, no_unroll, no_vectorize, value_type
from tfjit.ir.module import Instr
from tfjit.ir.ops import EXPENSIVE, Kind, Op
from tfjit.passes.kernels import FLAT_BLOCK, reductions, row_names

SHORT_ROW = 8          # rows this short are vectorised across rows (across_rows); longer
LOOP_ROW_MAX = 256     # float-sum rows, up to this long, keep their loop (_vectorise_whole)
ACROSS_ROW_BYTES = 32  # ... when a row of each input they read is at most this long
_IDENTITY = {"sum": 0, "prod": 1, "and": True, "or": False}


def _pairwise(combine, values: list):
    """``values`` combined as a balanced tree: independent operations first."""
    while len(values) > 1:
        values = [combine(*values[i:i + 2]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def reduce_identity(kind: str, d: dt.DType):
    if kind in _IDENTITY:
        return _IDENTITY[kind]
    if d is dt.PRED:
        return kind == "min"
    if d.is_float:
        return -np.inf if kind in ("max", "maxnum") else np.inf
    info = np.iinfo(d.numpy())
    return info.min if kind == "max" else info.max



def costly(i: Instr, inside: set) -> bool:
    """Does computing i inside the kernel involve a transcendental/division?"""
    stack, seen = [i], set()
    while stack:
        x = stack.pop()
        if x in seen or x not in inside:
            continue
        seen.add(x)
        if x.op in EXPENSIVE:
            return True
        stack.extend(x.operands)
    return False


def across_rows(f, gpu: bool, reads) -> bool:
    """May LLVM vectorise this reduce kernel's row loop, a vector of outputs at a time?

    For rows of at most ``SHORT_ROW`` elements (fully unrolled, each a few scalar
    operations) it loads a block of consecutive rows as whole vectors and transposes
    them with shuffles (an interleaved access group: element j of every row in one
    vector), so each vector op computes as many outputs as it has lanes.  Each
    output still combines its row in the same order, so results are those of the
    row-at-a-time kernel, NaN and sign of zero included.  Measured on [4M/n, n]
    (2-core AMD EPYC, AVX-512, against the row-at-a-time kernel): f32 max n = 4..7
    1.5-1.8 ms instead of 6-10, bf16 sum n = 3..7 1.1-1.6 instead of 2.4-3.2,
    int32 and f32 sums level or 1.2-1.4x.  Longer rows gather: LLVM vectorised the
    same loop with gathers for f32 rows of 12 and f64 rows of 8 (5-13 ms where a row
    at a time took 1.3-2.5), so rows past ``SHORT_ROW`` elements or
    ``ACROSS_ROW_BYTES`` of any input keep ``no_vectorize`` on the row loop.
    ArgMax/ArgMin have their own kernels (codegen/argreduce.py) and a GPU thread
    takes one row.  ``reads``: the kernel's values loaded from memory.
    """
    reduced = _math.prod(f.shape[f.outer:])
    widest = max((i.dtype.itemsize for i in reads), default=1)
    return (not gpu and f.roots[0].op is Op.REDUCE and reduced <= SHORT_ROW
            and reduced * widest <= ACROSS_ROW_BYTES)


class _ColumnAccumulator:
    """One root's accumulators in a column row: a block of ``width`` outputs from
    output ``start`` on, and for a CPU float max/min a NaN flag per output
    (``ReductionRows._flags_nans``)."""

    def __init__(self, rows, root: Instr, width: int, start):
        self.rows, self.root, self.start = rows, root, start
        self.kind = root.attrs["kind"]
        self.t = value_type(root.dtype)
        self.acc = rows._entry_alloca(self.t, width)
        self.nan = rows._entry_alloca(I8, width) if rows._flags_nans(self.kind, root.dtype) else None
        self.combine = rows._ordered_combine if self.nan is not None else rows._combine

    def _at(self, buf, o, t):
        return self.rows.b.gep(buf, [self.rows.b.sub(o, self.start)], source_etype=t)

    def reset(self, o) -> None:
        b = self.rows.b
        b.store(const(self.root.dtype, reduce_identity(self.kind, self.root.dtype)), self._at(self.acc, o, self.t))
        if self.nan is not None:
            b.store(ir.Constant(I8, 0), self._at(self.nan, o, I8))

    def add(self, o, vs: list) -> None:
        """acc[o] (+)= the values ``vs``, combined pairwise first."""
        b, d = self.rows.b, self.root.dtype
        if self.nan is not None:
            met = b.zext(self.rows._nan_flags(vs), I8)
            b.store(b.or_(b.load(self._at(self.nan, o, I8), typ=I8), met), self._at(self.nan, o, I8))
        v = _pairwise(lambda x, y: self.combine(self.kind, d, x, y), vs)
        slot = self._at(self.acc, o, self.t)
        b.store(self.combine(self.kind, d, b.load(slot, typ=self.t), v), slot)

    def result(self, o):
        b = self.rows.b
        v = b.load(self._at(self.acc, o, self.t), typ=self.t)
        if self.nan is None:
            return v
        met = b.icmp_unsigned("!=", b.load(self._at(self.nan, o, I8), typ=I8), ir.Constant(I8, 0))
        return b.select(met, ir.Constant(self.t, float("nan")), v)


class ReductionRows:
    """Row bodies of reduce kernels; the emitter provides ``b``, ``f``, ``plan``,
    ``ptrs``, ``value``, ``gpu``, ``interleave_count`` and its scope and buffer helpers."""

    def _reduce_row(self, row):
        root = self.f.roots[0]
        out_idx = self._unravel(row, root.shape)
        self._hoist(out_idx)
        v = self.value(root, out_idx)
        with self._lane_zero():
            for slot in self.plan.slots[root]:
                self._store(slot, root, out_idx, v)

    def _column_block_bounds(self, row, out_shape):
        """A column kernel's row as (chunk, prefix, base, start, stop): which of
        ``f.split`` chunks of the reduced rows it reads, its outer index (unravelled),
        the number of outputs before that index's, and the [start, stop) of its block
        of ``f.column_block`` outputs along the last dim."""
        f, b = self.f, self.b
        blocks = _math.ceil(out_shape[-1] / f.column_block)
        chunk = b.srem(row, i64(f.split))
        row = b.sdiv(row, i64(f.split))
        outer = b.sdiv(row, i64(blocks))
        prefix = self._unravel(outer, out_shape[:-1])
        base = b.mul(outer, i64(out_shape[-1]))
        start = b.mul(b.srem(row, i64(blocks)), i64(f.column_block))
        stop = b.add(start, i64(f.column_block))
        stop = b.select(b.icmp_signed("<", stop, i64(out_shape[-1])), stop, i64(out_shape[-1]))
        return chunk, prefix, base, start, stop

    def _chunk_bounds(self, chunk, first: int):
        """[lo, hi) of a split column kernel's chunk ``chunk`` of its first reduced dim,
        ``first`` long."""
        b = self.b
        per = _math.ceil(first / self.f.split)
        lo = b.mul(chunk, i64(per))
        hi = b.add(lo, i64(per))
        return lo, b.select(b.icmp_signed("<", hi, i64(first)), hi, i64(first))

    def _column_row(self, row):
        """A block of outputs along the last output dim, accumulated in a stack buffer.

        The reduced dims are the outer loops and the outputs the inner one, so
        inputs stored with the output dim innermost are read contiguously.  A split
        kernel's row also names a chunk of the first reduced dim; it writes its sums
        to the scratch buffer, output by output, for ``_combine_row``.  Sibling
        reductions (several roots of one shape) each have their accumulators, filled
        in the same loops: what they read in common is loaded once.
        """
        f, b = self.f, self.b
        out_shape = f.roots[0].shape
        width = f.column_block
        chunk, prefix, base, start, stop = self._column_block_bounds(row, out_shape)
        accs = [_ColumnAccumulator(self, root, width, start) for root in reductions(f)]
        with for_range(b, start, stop, "o") as o:
            for a in accs:
                a.reset(o)
        operand = f.roots[0].operands[0]
        lo, hi = self._chunk_bounds(chunk, operand.shape[f.outer])   # first reduced dim

        # The outputs' loop is innermost and must stay a loop: with few outputs (32
        # channels) LLVM unrolled it fully and vectorised the reduced dim instead, with
        # strided loads (5.8 ms instead of 1 ms for batch-norm statistics). It interleaves
        # as an element loop does (emitter's ``interleave_count``): [8192, 2048] over axis 0,
        # sum of exp(x)*0.5+x 2.82 -> 2.58 ms, of softplus 8.2 -> 7.1, bare sums
        # unchanged (scratch, medians of 21, two runs).
        keep = no_unroll(self.module, self.interleave_count)

        reduced = operand.rank - f.outer
        together = f.column_rows if reduced else 1

        def outputs(ridxs):
            """acc[o] (+)= the values at reduced indices ``ridxs``, for every output o."""
            with for_range(b, start, stop, "o", keep) as o, self._scope():
                for a in accs:
                    a.add(o, [self.value(a.root.operands[0], prefix + (o,) + ridx) for ridx in ridxs])
                for ridx in ridxs:
                    self._store_visited(prefix + (o,) + ridx)

        def nest(k, ridx):
            lo_k, hi_k = (lo, hi) if k == 0 else (i64(0), i64(operand.shape[f.outer + k]))
            if k < reduced - 1 or together == 1:
                with for_range(b, lo_k, hi_k, f"r{k}") as r, self._scope():
                    if k + 1 == reduced:
                        outputs([ridx + (r,)])
                    else:
                        nest(k + 1, ridx + (r,))
                return
            # The innermost reduced dim, ``together`` of its rows per pass over the
            # outputs (see Fusion.column_rows), then the rest one at a time.
            groups = b.sdiv(b.sub(hi_k, lo_k), i64(together))
            split = b.add(lo_k, b.mul(groups, i64(together)))
            with for_range(b, i64(0), groups, f"g{k}") as g, self._scope():
                r0 = b.add(lo_k, b.mul(g, i64(together)))
                outputs([ridx + (b.add(r0, i64(j)),) for j in range(together)])
            with for_range(b, split, hi_k, f"r{k}") as r, self._scope():
                outputs([ridx + (r,)])

        if reduced == 0:
            outputs([()])
        else:
            nest(0, ())

        if f.split == 1:
            with for_range(b, start, stop, "o") as o:
                for a in accs:
                    for s in self.plan.slots[a.root]:
                        self._store(s, a.root, prefix + (o,), a.result(o))
            return
        # _combine_row's llvm.maximum keeps NaNs; root k's partials follow root k-1's
        with for_range(b, start, stop, "o") as o:
            at = b.add(b.mul(b.add(base, o), i64(f.split)), chunk)
            for k, a in enumerate(accs):
                b.store(a.result(o), b.gep(self._scratch_part(k, a.root), [at], source_etype=a.t))

    def _store_visited(self, idx: tuple) -> None:
        """Writes the kernel's elementwise roots (a producer merged into a column
        reduction, ``Fusion.elementwise_at``) at the point ``idx`` (output dims, then
        reduced dims) that its loops visit."""
        names = row_names(self.f.outer) + tuple(f"r{k}" for k in range(len(idx) - self.f.outer))
        at = dict(zip(names, idx))
        for root in self.f.roots:
            if root.op.kind is not Kind.REDUCE:
                mine = tuple(at[n] for n in self.f.elementwise_at)
                for slot in self.plan.slots[root]:
                    self._store(slot, root, mine, self.value(root, mine))

    def _scratch_part(self, k: int, root: Instr):
        """Where root k of a split reduction keeps its partial results in the kernel's
        scratch (sized by passes/buffers.py): after roots 0..k-1's."""
        part = self.f.split * root.size * max(max(r.dtype.itemsize, 1) for r in reductions(self.f))
        return self.b.gep(self.ptrs[self.plan.scratch[self.f]], [i64(k * part)], source_etype=I8)

    def _column_tile_row(self, row):
        """A GPU block's tile of a column reduction (``lanes.tile_rows``): thread ``rank``
        takes output ``rank % TILE_COLUMNS`` of the tile and, of the innermost reduced dim,
        every ``threads / TILE_COLUMNS``-th index from ``rank / TILE_COLUMNS``, the outer
        reduced dims whole; ``lanes.tile_combine`` adds the row-lanes' results.  Outputs
        past the last dim's end read its last column and store nothing.  A split kernel's
        tile takes one chunk of the first reduced dim, as ``_column_row``'s rows do.
        Sibling reductions each keep an accumulator, filled in the same loops."""
        f, b = self.f, self.b
        out_shape, operand = f.roots[0].shape, f.roots[0].operands[0]
        columns = lanes.TILE_COLUMNS
        tiles = _math.ceil(out_shape[-1] / columns)
        chunk = b.srem(row, i64(f.split))
        row = b.sdiv(row, i64(f.split))
        outer = b.sdiv(row, i64(tiles))
        prefix = self._unravel(outer, out_shape[:-1])
        o = b.add(b.mul(b.srem(row, i64(tiles)), i64(columns)), b.and_(self.rank, i64(columns - 1)))
        inside = b.icmp_signed("<", o, i64(out_shape[-1]))
        column = b.select(inside, o, i64(out_shape[-1] - 1))
        lane_rows = self.group // columns
        lo, hi = self._chunk_bounds(chunk, operand.shape[f.outer])
        roots = reductions(f)
        accs = [self._alloca(value_type(r.dtype), const(r.dtype, reduce_identity(r.attrs["kind"], r.dtype)))
                for r in roots]
        reduced = operand.rank - f.outer

        def nest(k, ridx):
            lo_k, hi_k = (lo, hi) if k == 0 else (i64(0), i64(operand.shape[f.outer + k]))
            if k < reduced - 1:
                with for_range(b, lo_k, hi_k, f"r{k}") as r, self._scope():
                    nest(k + 1, ridx + (r,))
                return
            mine = b.add(lo_k, b.lshr(self.rank, i64(columns.bit_length() - 1)))
            with for_range(b, mine, hi_k, f"r{k}", None, lane_rows) as r, self._scope():
                for root, acc in zip(roots, accs):
                    v = self.value(root.operands[0], prefix + (column,) + ridx + (r,))
                    t = value_type(root.dtype)
                    b.store(self._combine(root.attrs["kind"], root.dtype, b.load(acc, typ=t), v), acc)
                if f.elementwise_at:       # (threads past the last column hold a copy of it)
                    with b.if_then(inside), self._scope():
                        self._store_visited(prefix + (column,) + ridx + (r,))

        self.uniform = False        # each thread's own loops, until the block combines
        nest(0, ())
        self.uniform = True
        totals = [lanes.tile_combine(b, lambda x, y, r=root: self._combine(r.attrs["kind"], r.dtype, x, y),
                                     b.load(acc, typ=value_type(root.dtype)), self.rank, self.group)
                  for root, acc in zip(roots, accs)]
        first_lane = b.icmp_unsigned("<", self.rank, i64(columns))
        with b.if_then(b.and_(inside, first_lane)):
            at = b.add(b.mul(b.add(b.mul(outer, i64(out_shape[-1])), o), i64(f.split)), chunk)
            for k, (root, total) in enumerate(zip(roots, totals)):
                if f.split == 1:
                    for s in self.plan.slots[root]:
                        self._store(s, root, prefix + (o,), total)
                else:
                    b.store(total, b.gep(self._scratch_part(k, root), [at], source_etype=total.type))

    def _partial_row(self, row):
        f, b = self.f, self.b
        root = f.roots[0]
        out_idx = self._unravel(b.sdiv(row, i64(f.split)), root.shape)
        chunk = b.srem(row, i64(f.split))
        reduced = f.shape[f.outer:]
        if len(reduced) > 1:        # a range of the first reduced dim (iteration.choose_iteration)
            per = -(-reduced[0] // f.split)
            lo = b.mul(chunk, i64(per))
            hi = b.add(lo, i64(per))
            hi = b.select(b.icmp_signed("<", hi, i64(reduced[0])), hi, i64(reduced[0]))
            ranges = [(chunk, None)] if per == 1 else [(lo, hi)]
            acc = self._reduce_loops(root, out_idx, ranges + [(0, n) for n in reduced[1:]])
        else:
            start = b.mul(chunk, i64(FLAT_BLOCK))
            stop = b.add(start, i64(FLAT_BLOCK))
            stop = b.select(b.icmp_signed("<", stop, i64(reduced[0])), stop, i64(reduced[0]))
            acc = self._reduce_loops(root, out_idx, [(start, stop)])
        ptr = self.ptrs[self.plan.scratch[f]]
        with self._lane_zero():
            b.store(acc, b.gep(ptr, [row], source_etype=acc.type))

    def _combine_row(self, row):
        """Output ``row`` of a split kernel: its partial results in chunk order, for each
        root (``_scratch_part``)."""
        f, b = self.f, self.b
        base = b.mul(row, i64(f.split))
        out_idx = self._unravel(row, f.roots[0].shape)
        for k, root in enumerate(reductions(f)):
            kind, t = root.attrs["kind"], value_type(root.dtype)
            acc = self._alloca(t, const(root.dtype, reduce_identity(kind, root.dtype)))
            ptr = self._scratch_part(k, root)
            with self._lane_range(0, f.split, "c") as c:
                part = b.load(b.gep(ptr, [b.add(base, c)], source_etype=t), typ=t)
                b.store(self._combine(kind, root.dtype, b.load(acc, typ=t), part), acc)
            total = b.load(acc, typ=t)
            if self.rank is not None:
                total = lanes.allreduce(b, lambda x, y: self._combine(kind, root.dtype, x, y),
                                        total, self.group, self.rank)
            with self._lane_zero():
                for slot in self.plan.slots[root]:
                    self._store(slot, root, out_idx, total)

    def _reduce_loops(self, r: Instr, out_idx: tuple, ranges: list):
        """Accumulates ``r``'s operand over ``ranges`` ([(start, stop)], stop None = fixed index)."""
        b = self.b
        t = value_type(r.dtype)
        kind = r.attrs["kind"]
        identity = const(r.dtype, reduce_identity(kind, r.dtype))
        acc = self._alloca(t, identity)
        operand = r.operands[0]
        # threads that share the row split its innermost loop (lanes.py), then combine
        shared = self.rank is not None and self.uniform and ranges and ranges[-1][1] is not None

        def element(idx, valid):
            v = self.value(operand, out_idx + idx)
            if r in self.fill:
                row = self.fill[r]
                b.store(v, b.gep(row, [idx[-1]], source_etype=v.type))
            if valid is not None:         # a held row's clamped element past its end
                v = b.select(valid, v, identity)
            b.store(self._combine(kind, r.dtype, b.load(acc, typ=t), v), acc)

        def nest(k, idx):
            if shared and k == len(ranges) - 1:      # (held only outside other loops: a
                # value kept in the row's scope must dominate the row's later passes)
                self._each(ranges[k][0], ranges[k][1], f"r{k}",
                           lambda i, valid: element(idx + (i,), valid), hold=k == 0)
                return
            if k == len(ranges):
                with self._scope():
                    element(idx, None)
                return
            start, stop = ranges[k]
            if stop is None:
                nest(k + 1, idx + (start,))
                return
            # only the innermost (contiguous) dim is vectorised: across an outer one,
            # LLVM's vectors would gather strided elements (see the row loop's reason)
            hint = no_vectorize(self.module) if k < len(ranges) - 1 else None
            if k == len(ranges) - 1 and self._vectorise_whole(r, start, stop):
                hint = no_unroll(self.module)
            with for_range(b, start, stop, f"r{k}", hint) as i:
                nest(k + 1, idx + (i,))

        nest(0, ())
        total = b.load(acc, typ=t)
        if shared:
            total = lanes.allreduce(b, lambda x, y: self._combine(kind, r.dtype, x, y), total,
                                    self.group, self.rank)
        return total

    def _vectorise_whole(self, r: Instr, start, stop) -> bool:
        """Should the innermost loop of this reduction stay a loop (``no_unroll``)?

        A float sum of a short row (more than ``SHORT_ROW`` elements, up to
        ``LOOP_ROW_MAX``, a fixed count) was fully unrolled by LLVM before its loop
        vectoriser ran, into one serial chain of scalar adds per output (64 ``vaddss``
        for a row of 64 f32, ~4 cycles each), and the SLP vectoriser does not take that
        chain back: it reorders float adds only under ``nsz``, which would lose
        TF's sign of zero.  Kept a loop, the loop vectoriser (which needs only
        ``reassoc``) adds whole vectors and reduces them once per output.
        Products, min/max and integer sums are left to unroll: their chains fold
        the identity away and the SLP vectoriser already takes them.  So are sums
        of costly values (``sum(exp(x) * 0.5 + x)`` of rows of 64: 2.04 ms unrolled,
        2.2-2.4 as a loop), whose vectorised math hides the chain.  On a GPU a
        thread's row is serial either way, and the unrolled loop is cheaper.
        Rows past ``LOOP_ROW_MAX`` are left as they were: from 128 elements LLVM
        vectorised the row itself before unrolling it (f32 [4M/n, n], n = 128, 256,
        2048: the same times either way; n = 96: 2.0 ms unrolled, 0.94-1.12 kept).
        """
        if self.gpu or r.attrs["kind"] != "sum" or not r.dtype.is_float:
            return False
        if costly(r.operands[0], set(self.f.instrs)):
            return False
        fixed = isinstance(start, int) and isinstance(stop, int)
        return fixed and SHORT_ROW < stop - start <= LOOP_ROW_MAX

    def _flags_nans(self, kind: str, d: dt.DType) -> bool:
        """Does a CPU column row's float max/min keep its NaNs apart?

        llvm.maximum (NaN-propagating, -0 below +0) expands to ~6 instructions a
        combine on x86 and made the 3-D middle-axis max of [64, 512, 256] 1.5x slower
        than its sum (1.76 against 1.2 ms with LLVM's cheaper maxnum, 0.9 for the
        sum).  A column row gives each output its own vector lane, so its combine
        can be the plain select ``v > acc ? v : acc`` (one vmaxps) while a flag per
        output records whether a NaN was met (one unordered compare per pair of
        values, an or), and the flag makes the output NaN at the end.  Ties of -0
        and +0 then keep the earlier value; TF's own reducers keep whichever zero
        their vector order meets (they differed from llvm.maximum's +0 on 71 of 132
        outputs of mixed zeros).  A GPU has NaN-propagating max instructions.
        ``reduce_sweep.py`` (2 AMD EPYC cores, old and new code alternating, 30
        rounds): the middle-axis max 1.78-1.88 -> 1.43-1.56 ms (0.92-0.96x ->
        1.04-1.11x XLA); the axis-0 max rows, already at bandwidth, unchanged."""
        return not self.gpu and kind in ("max", "min") and d.is_float

    def _nan_flags(self, vs: list):
        """i1: is any of the float values ``vs`` NaN?  (An unordered compare tests two.)"""
        b = self.b
        return _pairwise(b.or_, [b.fcmp_unordered("uno", vs[i], vs[min(i + 1, len(vs) - 1)])
                                 for i in range(0, len(vs), 2)])

    def _ordered_combine(self, kind: str, d: dt.DType, acc, v):
        """max/min of two floats as one compare and select (NaNs are flagged apart)."""
        b = self.b
        return b.select(b.fcmp_ordered(">" if kind == "max" else "<", v, acc), v, acc)

    def _combine(self, kind: str, d: dt.DType, acc, v):
        b = self.b
        if kind == "sum":
            return b.fadd(acc, v, flags=("reassoc",)) if d.is_float else b.add(acc, v)
        if kind == "prod":
            return b.fmul(acc, v, flags=("reassoc",)) if d.is_float else b.mul(acc, v)
        if kind == "and":
            return b.and_(acc, v)
        if kind == "or":
            return b.or_(acc, v)
        if kind == "maxnum":     # one vmaxps; the NaN-propagating llvm.maximum expands to ~6
            return intrinsic(b, "maxnum", acc.type, [acc, v])
        if d.is_float:
            return intrinsic(b, "maximum" if kind == "max" else "minimum", acc.type, [acc, v])
        pred = ">" if kind == "max" else "<"
        cmp = b.icmp_signed(pred, v, acc) if d.is_signed else b.icmp_unsigned(pred, v, acc)
        return b.select(cmp, v, acc)
