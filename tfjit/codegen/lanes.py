"""Rows shared by threads: on a GPU, a warp or a block takes a row together.

A GPU kernel that gives each thread a whole row (a softmax row, a reduction's
output) has neighbouring threads read addresses a row apart: every load of a
warp touches 32 cache lines, and a [8192, 8192] softmax ran in 20.9 ms on an
H200 where JAX took 0.17 (tools/gpu_check.py, 2026-12-04).  So where a row is
long, a group of threads takes it together (``KernelEmitter(warp=WARP)``;
``sharing`` says which rows and how):

* a warp, for rows of at least ``WARP`` elements: the innermost loop of a
  reduction, and a row's output loop, start at the thread's lane and step by the
  group, so a warp's loads are one contiguous run;
* a **held** row (one dim, ``GROUP_MIN`` to ``HELD_MAX * GROUP_MAX`` elements:
  softmax, layernorm, a last-axis reduction): part of a warp, a warp or a block of
  ``threads`` (a power of two) takes it, each thread at most ``HELD_MAX`` elements at
  fixed positions,
  unrolled, so the values the row's passes (max, sum, outputs) compute stay in
  registers and the row is read from memory once, where the warp form read a
  softmax row three times (0.35 ms for the [8192, 8192] softmax);
* a reduction's partial results are combined by a butterfly of ``shfl.sync.bfly``
  in each warp, then, in a block, through shared memory in warp order
  (``allreduce``): every thread ends with the row's result, so a softmax's max
  and sum are known to all before the output pass; a single output is stored by
  the group's first thread.

The combination order is fixed by the thread's place in its group, not by the
launch shape, so results stay deterministic, as the CPU's are; they may differ
from the CPU's in the last bits of a float sum, as any reordering does.

Threads take part only where control flow is the same for their whole group
(``uniform``): a reduction met inside a row's shared output loop is computed by
each thread alone, since a shuffle or a barrier there would wait for threads
that took another path.  The kernel entries (codegen/nvptx.py) give each group
a row in a grid-stride loop; a block-shared entry declares its block size
(``.reqntid``) and the launch uses exactly that (``block``), a warp-shared one
any whole number of warps (runtime/cuda.py, cuda_driver.h).
"""
from __future__ import annotations

import contextlib
import math

from llvmlite import ir

from tfjit.codegen.llvm_types import F32, I64, for_range, i64
from tfjit.ir.ops import Op
from tfjit.passes.kernels import FLAT_BLOCK
from tfjit.runtime import abi

WARP = 32
GROUP_MAX = 512          # threads that share a held row: a block (registers: 128 per thread)
GROUP_MIN = 8            # threads that share a held row: part of a warp (_row)
HELD_MAX = 16            # elements of a held row per thread
FLAT_VECTOR = 4          # elements per thread of an elementwise kernel (flat_elements)
TILE_COLUMNS = 32        # outputs across a column reduction's tile (tile_rows)
_FULL = ir.Constant(ir.IntType(32), 0xFFFFFFFF)
I32 = ir.IntType(32)


def sharing(f, body: str) -> tuple:
    """(threads per row, elements each holds) for rows of ``body`` ("reduce", "partial",
    "combine", "loop", "tile": a column reduction's, ``tile_rows``) of fusion ``f``:
    (1, 0) where a row stays a thread's.

    A row shares its warp where the loop its lanes would split is at least a warp
    long.  A row of at most ``HELD_MAX * GROUP_MAX`` elements along one dim (a softmax
    or layernorm row, a last-axis reduction) is held: a group of ``threads`` (a power of
    two, a block where more than a warp) takes it, each thread ``held`` of its elements
    at fixed positions, so every pass over the row (max, sum, output) reuses the same
    registers and the row is read from memory once."""
    if body == "tile":
        return GROUP_MAX, 0
    if body == "loop":
        if f.flat or not f.shape or len(f.shape) <= f.outer:
            return 1, 0
        return _row(f.shape[-1], True)
    if f.roots[0].op is not Op.REDUCE or f.column:
        return 1, 0
    reduced = f.shape[f.outer:]
    if not reduced:
        return 1, 0
    if body == "combine":          # a block where there are many partial results: one
        # warp took 88 us to add the seed's 65536 (a tenth of the whole sum's time)
        if f.split < WARP:
            return 1, 0
        return min(GROUP_MAX, max(WARP, _power_of_two(math.ceil(f.split / HELD_MAX)))), 0
    if body == "partial":
        inner = reduced[-1] if len(reduced) > 1 else min(FLAT_BLOCK, reduced[0])
        return (WARP, 0) if inner >= WARP else (1, 0)
    return _row(reduced[-1], len(reduced) == 1)


def _row(n: int, may_hold: bool) -> tuple:
    if n < GROUP_MIN or (n < WARP and not may_hold):
        return 1, 0
    if not may_hold or n > HELD_MAX * GROUP_MAX:
        return WARP, 0
    # a held row's group: at least GROUP_MIN threads, so each of a warp's loads reads
    # whole 32-byte sectors of a row (f32); rows of [2^21, 64] summed by whole warps,
    # 2 elements a thread, ran at 75% of the copy bandwidth and 0.86x JAX (2026-12-04)
    threads = max(GROUP_MIN, _power_of_two(math.ceil(n / HELD_MAX)))
    return threads, math.ceil(n / threads)


def _power_of_two(n: int) -> int:
    """The least power of two at least ``n``."""
    return 1 << (n - 1).bit_length()


def tiled(f) -> bool:
    """Does column reduction ``f`` run in tiles on a GPU (``tile_rows``)?  Every one that
    reduces something: a thread per block of outputs (the CPU's row) left 16 threads to
    sum [8192, 8192] over axis 0, 156 ms on an H200 where JAX took 0.09."""
    root = f.roots[0]
    return root.operands[0].rank > f.outer


def tile_rows(f) -> int:
    """A tiled column reduction's rows: its outer outputs times its tiles of
    ``TILE_COLUMNS`` outputs along the last output dim, times its chunks.  A block takes
    a tile: ``TILE_COLUMNS`` threads across the tile's outputs (a warp reads 128
    contiguous bytes) by ``GROUP_MAX / TILE_COLUMNS`` across the reduced rows, whose
    partial results ``tile_combine`` adds (ReductionRows._column_tile_row)."""
    out = f.roots[0].shape
    return math.prod(out[:-1]) * math.ceil(out[-1] / TILE_COLUMNS) * f.split


def flat_elements(f) -> int:
    """Consecutive elements a GPU thread takes in a purely elementwise kernel: 4 where
    they divide the array, so LLVM's load/store vectoriser makes each thread's loads
    and stores one 16-byte access (f32); one element per thread left a [2^14, 2^14]
    10-op chain at 83% of the copy bandwidth on an H200 (tools/gpu_check.py, 2026-12-04)."""
    return FLAT_VECTOR if math.prod(f.shape) % FLAT_VECTOR == 0 else 1


def rank(b: ir.IRBuilder, threads: int):
    """This thread's place among the ``threads`` that share its row (i64): its lane (in
    its part of the warp), or for a block its thread index (the launch gives such an
    entry blocks of exactly ``threads``)."""
    if threads <= WARP:
        lane = lane_id(b)
        return lane if threads == WARP else b.and_(lane, ir.Constant(I64, threads - 1))
    return b.and_(_sreg(b, "tid.x"), ir.Constant(I64, threads - 1))


def elements(b: ir.IRBuilder, me, threads: int, n: int, held: int) -> list:
    """[(index, valid)] of the ``held`` elements of a row of ``n`` this thread takes:
    ``me + k * threads``, clamped into the row where past its end (``valid`` then says
    so; None where every one is inside)."""
    out = []
    for k in range(held):
        j = b.add(me, ir.Constant(I64, k * threads))
        if n % threads == 0:
            out.append((j, None))
            continue
        valid = b.icmp_unsigned("<", j, ir.Constant(I64, n))
        out.append((b.select(valid, j, ir.Constant(I64, n - 1)), valid))
    return out


def _sreg(b: ir.IRBuilder, name: str):
    full = f"llvm.nvvm.read.ptx.sreg.{name}"
    fn = b.module.globals.get(full) or ir.Function(b.module, ir.FunctionType(I32, []), name=full)
    return b.zext(b.call(fn, []), I64)


def lane_id(b: ir.IRBuilder):
    """This thread's lane in its warp (i64)."""
    return _sreg(b, "laneid")


def _shuffle_i32(b: ir.IRBuilder, v, distance: int):
    name = "llvm.nvvm.shfl.sync.bfly.i32"
    fn = b.module.globals.get(name) or ir.Function(
        b.module, ir.FunctionType(I32, [I32, I32, I32, I32]), name=name)
    return b.call(fn, [_FULL, v, ir.Constant(I32, distance), ir.Constant(I32, WARP - 1)])


def _shuffle(b: ir.IRBuilder, v, distance: int):
    """``v`` of the lane ``distance`` away in the butterfly, for every scalar type a
    reduction holds (i1 to i64, f32, f64): its bits, in 32-bit words (shfl moves 32)."""
    t = v.type
    bits = t.width if isinstance(t, ir.IntType) else (32 if t == F32 else 64)
    x = v if isinstance(t, ir.IntType) else b.bitcast(v, ir.IntType(bits))
    if bits <= 32:
        y = _shuffle_i32(b, b.zext(x, I32) if bits < 32 else x, distance)
        y = b.trunc(y, ir.IntType(bits)) if bits < 32 else y
    else:
        lo = _shuffle_i32(b, b.trunc(x, I32), distance)
        hi = _shuffle_i32(b, b.trunc(b.lshr(x, ir.Constant(I64, 32)), I32), distance)
        y = b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), ir.Constant(I64, 32)))
    return y if isinstance(t, ir.IntType) else b.bitcast(y, t)


def _warp_allreduce(b: ir.IRBuilder, combine, v, width: int = WARP):
    """``combine`` of ``v`` over each ``width`` lanes of the warp, in every lane (a
    butterfly: at each distance, a lane combines its value with its partner's, the lower
    lane's first, so both partners compute the same value; every lane of the warp takes
    part, each part of ``width`` lanes among itself)."""
    lane = lane_id(b)
    distance = width // 2
    while distance:
        other = _shuffle(b, v, distance)
        low = b.icmp_unsigned("==", b.and_(lane, ir.Constant(I64, distance)), ir.Constant(I64, 0))
        v = combine(b.select(low, v, other), b.select(low, other, v))
        distance //= 2
    return v


def allreduce(b: ir.IRBuilder, combine, v, threads: int = WARP, me=None):
    """``combine`` of ``v`` over the ``threads`` sharing a row, in every one of them: the
    warp's butterfly, then, for a block, each warp's result through shared memory,
    combined in warp order by every thread (the block's threads all come here, since
    its row and its path are the same for all)."""
    v = _warp_allreduce(b, combine, v, min(threads, WARP))
    if threads <= WARP:
        return v
    first_lane = b.icmp_unsigned("==", lane_id(b), ir.Constant(I64, 0))
    return _exchange(b, combine, v, _shared(b), b.lshr(me, ir.Constant(I64, 5)),
                     lambda: [ir.Constant(I64, w) for w in range(threads // WARP)], first_lane)


def tile_combine(b: ir.IRBuilder, combine, v, me, threads: int):
    """Each column's total over a tile's row-lanes (``tile_rows``), in every thread of the
    column: the block's partial results through shared memory, combined in row-lane
    order (deterministic)."""
    def reads():
        column = b.and_(me, ir.Constant(I64, TILE_COLUMNS - 1))
        for k in range(threads // TILE_COLUMNS):
            yield b.add(column, ir.Constant(I64, k * TILE_COLUMNS))
    return _exchange(b, combine, v, _shared(b, "tfjit.tiles.shared", GROUP_MAX), me, reads)


def _exchange(b: ir.IRBuilder, combine, v, slots, write_at, read_ats, writer=None):
    """Writes ``v`` to shared slot ``write_at`` (where ``writer`` holds, if given), waits
    for the block, and returns ``combine`` of the slots ``read_ats()`` yields (emitted
    after the barrier, one by one) in that order; a second barrier keeps the next exchange from writing
    before every thread has read."""
    st = ir.IntType(8) if v.type == ir.IntType(1) else v.type       # (no i1 in memory)
    with contextlib.nullcontext() if writer is None else b.if_then(writer):
        b.store(b.zext(v, st) if st != v.type else v,
                b.gep(slots, [write_at], source_etype=st))
    _barrier(b)
    total = None
    for at in read_ats():
        part = b.load(b.gep(slots, [at], source_etype=st), typ=st)
        part = b.trunc(part, v.type) if st != v.type else part
        total = part if total is None else combine(total, part)
    _barrier(b)
    return total


def _shared(b: ir.IRBuilder, name: str = "tfjit.rows.shared", words: int = GROUP_MAX // WARP):
    """The module's shared-memory slots ``name``, ``words`` of 8 bytes (``allreduce``: one
    per warp of a block; ``tile_combine``: one per thread)."""
    g = b.module.globals.get(name)
    if g is None:
        t = ir.ArrayType(I64, words)
        g = ir.GlobalVariable(b.module, t, name, addrspace=3)
        g.linkage = "internal"
        g.align = 8
        g.initializer = ir.Constant(t, ir.Undefined)
    return b.addrspacecast(g, ir.PointerType())


def _barrier(b: ir.IRBuilder) -> None:
    name = "llvm.nvvm.barrier0"
    fn = b.module.globals.get(name) or ir.Function(
        b.module, ir.FunctionType(ir.VoidType(), []), name=name)
    b.call(fn, [])


def mark(module: ir.Module, symbol: str, threads: int) -> None:
    """Records that ``threads`` share each row of kernel function (or entry) ``symbol``:
    its entry and launch count threads, ``threads`` per row."""
    module.__dict__.setdefault("tfjit_shared_rows", {})[symbol] = threads


def threads(module: ir.Module, symbol: str) -> int:
    """The threads that share each row of ``symbol`` (1: a row per thread)."""
    return module.__dict__.get("tfjit_shared_rows", {}).get(symbol, 1)


def block(module: ir.Module, entry: str) -> int:
    """The exact block size entry ``entry`` needs (a row per block), or 0: any whole warps."""
    n = threads(module, entry)
    return n if n > WARP else 0


class SharedRows:
    """The emitter's part for rows that threads share (a base class of
    ``emitter.KernelEmitter``, which provides ``b``, ``f``, ``rank``, ``group``,
    ``elements``, ``uniform``, ``aligned`` and its memo scopes)."""

    def _each(self, start, stop, name: str, body, loop_md=None, hold: bool = True) -> None:
        """``body(i, valid)`` for this thread's share of ``[start, stop)``: a loop (with a
        memo scope per step), or where it holds the row's elements, this is the whole
        row and ``hold`` (the caller is in no loop of its own), those elements, unrolled
        and in the row's scope, so the row's later passes find their values (``valid``:
        None, or whether a clamped element is real)."""
        if hold and self.elements is not None and self.uniform and isinstance(start, int) and \
                isinstance(stop, int) and (start, stop) == (0, self.f.shape[-1]):
            self.uniform = False
            try:
                for j, valid in self.elements:
                    body(j, valid)
            finally:
                self.uniform = True
            return
        with self._lane_range(start, stop, name, loop_md) as i, self._scope():
            body(i, None)

    @contextlib.contextmanager
    def _lane_range(self, start, stop, name: str, loop_md=None):
        """``for_range``, or where threads share this row, this thread's share of it
        (start + rank, by steps of the group), with ``uniform`` off inside; yields the index."""
        if self.rank is None or not self.uniform:
            with for_range(self.b, start, stop, name, loop_md) as i:
                yield i
            return
        first = self.b.add(start if isinstance(start, ir.Value) else i64(start), self.rank)
        self.uniform = False
        try:
            with for_range(self.b, first, stop, name, None, self.group) as i:
                yield i
        finally:
            self.uniform = True

    def _lane_zero(self):
        """A context in which only the first of the threads sharing a row runs (its stores)."""
        if self.rank is None:
            return contextlib.nullcontext()
        return self.b.if_then(self.b.icmp_unsigned("==", self.rank, i64(0)))

    def _alignment(self, i, idx):
        """The alignment an access at ``idx`` may claim: a GPU thread's first of its
        ``lanes.flat_elements`` elements is that many elements aligned (buffers are
        abi.ALIGN-aligned), which LLVM cannot see through the grid-stride loop; else
        None (the element's own)."""
        if self.aligned is None or len(idx) != 1 or idx[0] is not self.aligned:
            return None
        return min(abi.ALIGN, max(i.dtype.itemsize, 1) * FLAT_VECTOR)
