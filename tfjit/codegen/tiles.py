"""CPU loop kernels whose result is a transpose of an operand, iterated in tiles.

A loop kernel's row is one run of its result's last dim.  Where the result is a
transpose that moves the operand's last dim (``x^T`` of a matrix, NHWC -> NCHW), each
such row reads one element from each of thousands of operand rows: a cache line per
element, and at a power-of-two row length all those lines fall into a few cache sets.
``transpose(x)`` of [4096, 4096] f32 took 104.8 ms that way, against TF graph mode's
20.5 and XLA's 27.3 (2026-12-06, Sapphire Rapids, 2 cores).

Here a kernel row is instead a block of ``TILE_ROWS`` consecutive results along the
result dim ``q`` that is the operand's last dim, walked in tiles of ``TILE_COLUMNS``
along the last dim: a tile reads ``TILE_COLUMNS`` operand lines of ``TILE_ROWS``
elements, each line serving ``TILE_ROWS`` results while it is in L1, and writes
``TILE_ROWS`` runs of ``TILE_COLUMNS`` results.  A whole tile of a transpose of a
value in memory is loaded as ``TILE_COLUMNS`` vectors and transposed in registers
(``TiledRows._stage``); other tiles gather (two gathers per 16 f32 on AVX-512, which
left [4096, 4096] at 0.8x TF's speed; staged, 1.1-1.2x).  Only the iteration order
changes: every result element is computed as before, from the same values, so results
are bit-identical to the untiled kernel's.

The GPU keeps its row-per-thread loops (codegen/lanes.py); this is the CPU's.
"""
from __future__ import annotations

import math

from llvmlite import ir

from tfjit.codegen.llvm_types import for_range, i64, storage_type, value_type
from tfjit.ir.indexing import ZERO, operand_index
from tfjit.ir.ops import Op
from tfjit.passes.kernel_order import recomputed

TILE_ROWS = 16        # results of a block along q: 64 bytes of an f32 operand's row
TILE_COLUMNS = TILE_ROWS   # along the last dim (operand lines a tile holds): square, to
                           # transpose a tile in registers
LINE = 64             # bytes
NEAR_LINES = 128      # operand lines a row may read and still find in L1 for the next row


def transpose_tile(f, reads) -> int | None:
    """The result dim ``q`` to block ``f`` along, or None where its rows are read well.

    A loop kernel qualifies when one of its values has the kernel's shape and is a
    transpose moving its operand's last dim to ``q`` (so that value's row reads the
    operand across rows), with operand rows of at least a cache line (narrower ones
    already share lines between neighbouring results) and a last dim of more than
    one result.  No hoisted reductions (their row-at-a-time passes need whole rows).
    ``reads``: the values ``f`` loads from memory (a transpose of one is staged).
    The thresholds were measured on Sapphire Rapids (2026-12-06); either order computes
    the same bits, so a threshold that is off for another CPU costs time only."""
    if f.kind != "loop" or f.flat or f.hoisted or len(f.shape) < 2 or f.shape[-1] < 2:
        return None
    last = len(f.shape) - 1
    for i in computed(f):
        if i.op is not Op.TRANSPOSE or tuple(i.shape) != tuple(f.shape):
            continue
        perm = list(i.attrs["perm"])
        if perm[-1] == last:
            continue
        q = perm.index(last)
        if f.shape[q] * i.dtype.itemsize < LINE:
            continue
        # Unstaged, a tile gathers its elements one by one. Where q is the row dim next
        # to the last, consecutive rows read the same operand lines; a row of a few
        # dozen of them keeps those in L1, and the plain row loop was faster than
        # gathering (NCHW -> NHWC of [16, 64, 56, 56]: 0.7 ms against 1.3). Staged
        # tiles won there too ([8, 64, 128, 128] swapping its last two dims: 2.1 ms
        # against 4.0 untiled).
        if not _stageable(i, reads) and q == last - 1 and TILE_COLUMNS < f.shape[-1] <= NEAR_LINES:
            continue
        return q
    return None


def _stageable(t, reads) -> bool:
    """Whether transpose ``t``'s tiles can be loaded as vectors and transposed in
    registers: its operand is in memory, and held in registers as it is stored (not a
    half, whose registers hold f32, nor a bool, held as one bit)."""
    return _buffer(t.operands[0], reads) is not None and storage_type(t.dtype) == value_type(t.dtype)


def _buffer(x, reads):
    """The value in memory whose bytes ``x`` is: ``x``, or what a row-major reshape
    reads (passes/collapse.py reads collapsed parameters that way); None if neither."""
    while x not in reads and x.op is Op.RESHAPE:
        x = x.operands[0]
    return x if x in reads else None


def computed(f) -> list:
    """What ``f`` computes per element: its instructions, and the cheap values it
    recomputes from their operands (passes/fusion.py ``recomputed``)."""
    return list(f.instrs) + recomputed(f)


def tile_blocks(f, q: int) -> list:
    """The kernel's row space: the result's row dims with ``q`` in blocks of TILE_ROWS."""
    blocks = list(f.shape[:-1])
    blocks[q] = math.ceil(blocks[q] / TILE_ROWS)
    return blocks


def _transposition(b, rows: list) -> list:
    """``rows`` (n vectors of n elements, n a power of two) transposed in registers:
    log2(n) butterfly stages, each swapping the off-diagonal s x s blocks of every
    2s x 2s block (two-source shuffles: one vpermt2ps each on AVX-512)."""
    n = len(rows)
    rows, mask = list(rows), ir.VectorType(ir.IntType(32), n)
    s = n // 2
    while s:
        low = ir.Constant(mask, [k if not k & s else n + k - s for k in range(n)])
        high = ir.Constant(mask, [k + s if not k & s else n + k for k in range(n)])
        for i in range(n):
            if not i & s:
                rows[i], rows[i + s] = (b.shuffle_vector(rows[i], rows[i + s], low),
                                        b.shuffle_vector(rows[i], rows[i + s], high))
        s //= 2
    return rows


class TiledRows:
    """The emitter's tiled loop row (mixed into codegen/emitter.py's KernelEmitter).

    A whole tile of a transpose read from memory (``_staged``) is loaded as TILE_COLUMNS
    vectors of TILE_ROWS operand elements, transposed in registers and kept in a stack
    buffer that the tile's element loops read contiguously (the emitter's row cache);
    the element loops otherwise gather one element per operand row (a ragged tile at
    the edges, and halves, whose registers hold f32 but memory 16 bits)."""

    def _staged(self) -> list:
        """The transposes of this kernel to stage per tile."""
        last = len(self.f.shape) - 1
        return [t for t in computed(self.f)
                if t.op is Op.TRANSPOSE and tuple(t.shape) == tuple(self.f.shape)
                and list(t.attrs["perm"]).index(last) == self.tile and _stageable(t, self.reads)]

    def _tiled_row(self, row):
        f, b, q = self.f, self.b, self.tile
        outer = list(self._unravel(row, tile_blocks(f, q)))
        extent, width = f.shape[q], f.shape[-1]
        first = i64(0) if outer[q] is ZERO else b.mul(outer[q], i64(TILE_ROWS))
        count = i64(TILE_ROWS)
        if extent % TILE_ROWS:      # the last block is short
            left = b.sub(i64(extent), first)
            count = b.select(b.icmp_signed("<", left, count), left, count)
        staged = self._staged()
        with for_range(b, 0, math.ceil(width / TILE_COLUMNS), "tile") as t:
            start = b.mul(t, i64(TILE_COLUMNS))
            stop = b.add(start, i64(TILE_COLUMNS))
            if width % TILE_COLUMNS:
                stop = b.select(b.icmp_signed("<", stop, i64(width)), stop, i64(width))
            if not staged:
                self._tile(outer, first, count, start, stop, {})
            else:
                whole = b.and_(b.icmp_signed("==", count, i64(TILE_ROWS)),
                               b.icmp_signed("==", b.sub(stop, start), i64(TILE_COLUMNS)))
                with b.if_else(whole) as (then, otherwise):
                    with then, self._scope():
                        buffers = {x: self._stage(x, outer, first, start) for x in staged}
                        self._tile(outer, first, i64(TILE_ROWS), start, stop, buffers)
                    with otherwise, self._scope():
                        self._tile(outer, first, count, start, stop, {})

    def _tile(self, outer, first, count, start, stop, buffers):
        """Rows [first, first + count) along q of the tile's columns [start, stop);
        ``buffers``: {staged transpose: its tile, transposed}."""
        b, q = self.b, self.tile
        outer = list(outer)
        with for_range(b, 0, count, "r") as r, self._scope():
            outer[q] = b.add(first, r)
            idx = tuple(outer)
            key = self._index_keys(idx)
            for x, buf in buffers.items():      # row r of the tile, at the columns' index
                self.row_cache[x] = (b.gep(buf, [b.sub(b.mul(r, i64(TILE_COLUMNS)), start)],
                                           source_etype=value_type(x.dtype)), key)
            self._each(start, stop, "j", lambda j, valid: self._store_roots(idx + (j,), valid),
                       self._elements_md())
            for x in buffers:
                del self.row_cache[x]

    def _stage(self, t, outer, first, start):
        """The tile of transpose ``t`` at rows ``first``.. and columns ``start``..,
        loaded from its operand's rows and transposed: a stack buffer of
        TILE_ROWS x TILE_COLUMNS values, row-major."""
        b, x = self.b, t.operands[0]
        perm = list(t.attrs["perm"])
        origin = list(outer)
        origin[self.tile] = first
        at = operand_index(t, 0, tuple(origin) + (start,))
        base = self._linear(at, x.shape)
        stride = math.prod(x.shape[perm[-1] + 1:])      # between the operand's rows
        st = storage_type(x.dtype)
        vec = ir.VectorType(st, TILE_ROWS)
        ptr = self.ptrs[self.plan.slots[_buffer(x, self.reads)][0]]
        rows = [b.load(b.gep(ptr, [b.add(base, i64(k * stride))], source_etype=st), typ=vec,
                       align=x.dtype.itemsize) for k in range(TILE_COLUMNS)]
        buf = self._entry_alloca(st, TILE_ROWS * TILE_COLUMNS)
        vectors = b.bitcast(buf, vec.as_pointer())
        for k, v in enumerate(_transposition(b, rows)):
            b.store(v, b.gep(vectors, [i64(k)], source_etype=vec), align=x.dtype.itemsize)
        return buf
