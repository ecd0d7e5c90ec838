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
``TILE_ROWS`` runs of ``TILE_COLUMNS`` results.  Only the iteration order changes:
every result element is computed as before, from the same values, so results are
bit-identical to the untiled kernel's.

The GPU keeps its row-per-thread loops (codegen/lanes.py); this is the CPU's.
"""
from __future__ import annotations

import math

from tfjit.codegen.llvm_types import for_range, i64
from tfjit.ir.indexing import ZERO
from tfjit.ir.ops import Op
from tfjit.passes.fusion import is_cheap

TILE_ROWS = 16        # results of a block along q: 64 bytes of an f32 operand's row
TILE_COLUMNS = 16     # results of a tile along the last dim (operand lines it holds)
LINE = 64             # bytes
NEAR_LINES = 128      # operand lines a row may read and still find in L1 for the next row


def transpose_tile(f) -> int | None:
    """The result dim ``q`` to block ``f`` along, or None where its rows are read well.

    A loop kernel qualifies when one of its values has the kernel's shape and is a
    transpose moving its operand's last dim to ``q`` (so that value's row reads the
    operand across rows), with operand rows of at least a cache line (narrower ones
    already share lines between neighbouring results) and a last dim of more than
    one result.  No hoisted reductions (their row-at-a-time passes need whole rows).
    The thresholds were measured on Sapphire Rapids (2026-12-06); either order computes
    the same bits, so a threshold that is off for another CPU costs time only."""
    if f.kind != "loop" or f.flat or f.hoisted or len(f.shape) < 2 or f.shape[-1] < 2:
        return None
    last = len(f.shape) - 1
    for i in _computed(f):
        if i.op is not Op.TRANSPOSE or tuple(i.shape) != tuple(f.shape):
            continue
        perm = list(i.attrs["perm"])
        if perm[-1] == last:
            continue
        q = perm.index(last)
        if f.shape[q] * i.dtype.itemsize < LINE:
            continue
        # Where q is the row dim next to the last, consecutive rows read the same operand
        # lines; a row of a few dozen of them keeps those in L1, and the plain row loop
        # was faster (NCHW -> NHWC of [16, 64, 56, 56]: 0.7 ms against 1.3 tiled).
        # Rows shorter than a tile gain from tiles all the same (per-row loop overhead:
        # [32, 3, 224, 224] -> NHWC 1.1 ms against 2.4), and longer ones need them.
        if q == last - 1 and TILE_COLUMNS < f.shape[-1] <= NEAR_LINES:
            continue
        return q
    return None


def _computed(f) -> list:
    """What ``f`` computes per element: its instructions, and the cheap values it
    recomputes from their operands (a transpose of a parameter is not one of f's
    instructions but an index mapping into the parameter: passes/fusion.py is_cheap)."""
    inside = set(f.instrs)
    out, stack, seen = list(f.instrs), list(f.instrs), set(f.instrs)
    while stack:
        for o in stack.pop().operands:
            if o not in seen and o not in inside and o.op is not Op.PARAMETER and is_cheap(o):
                seen.add(o)
                out.append(o)
                stack.append(o)
    return out


def tile_blocks(f, q: int) -> list:
    """The kernel's row space: the result's row dims with ``q`` in blocks of TILE_ROWS."""
    blocks = list(f.shape[:-1])
    blocks[q] = math.ceil(blocks[q] / TILE_ROWS)
    return blocks


class TiledRows:
    """The emitter's tiled loop row (mixed into codegen/emitter.py's KernelEmitter)."""

    def _tiled_row(self, row):
        f, b, q = self.f, self.b, self.tile
        outer = list(self._unravel(row, tile_blocks(f, q)))
        extent, width = f.shape[q], f.shape[-1]
        first = i64(0) if outer[q] is ZERO else b.mul(outer[q], i64(TILE_ROWS))
        count = i64(TILE_ROWS)
        if extent % TILE_ROWS:      # the last block is short
            left = b.sub(i64(extent), first)
            count = b.select(b.icmp_signed("<", left, count), left, count)
        with for_range(b, 0, math.ceil(width / TILE_COLUMNS), "tile") as t:
            start = b.mul(t, i64(TILE_COLUMNS))
            stop = b.add(start, i64(TILE_COLUMNS))
            if width % TILE_COLUMNS:
                stop = b.select(b.icmp_signed("<", stop, i64(width)), stop, i64(width))
            with for_range(b, 0, count, "r") as r, self._scope():
                outer[q] = b.add(first, r)
                idx = tuple(outer)
                self._each(start, stop, "j", lambda j, valid: self._store_roots(idx + (j,), valid),
                           self._elements_md())
