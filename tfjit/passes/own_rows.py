"""The rows of the kernels that scatter, scan and top-k instructions root
(``fusion.OWN_KERNEL``), and the block of outputs a column-reduction row takes.

Kept apart from fusion.py, which decides which kernel each instruction is in;
the fusion pass (``Fusion.rows``), buffer assignment (top-k scratch) and codegen
(codegen/own_kernels.py) all read these shapes.
"""
from __future__ import annotations

import math

from tfjit.ir.module import Instr

COLUMN_BLOCK = 512              # outputs per row of a column-reduction kernel (and scan/scatter)
SCATTER_SEGMENT_BLOCKS = 8      # segment ranges of a large scatter (each row reads every id)
SCATTER_PARALLEL_MIN = 1 << 15  # elements (result + data) from which a scatter splits segments
TOPK_CHUNKS = 64                # rows of a top-k kernel: chunks of vectors, one scratch area each
TOPK_HEAP_MAX_K = 16            # larger k, over half the vector: merge-sort it instead of a heap


def scan_geometry(root: Instr) -> tuple:
    """(outer, n, inner) of a scan: the dims before, along and after the scanned one."""
    d = root.attrs["dim"]
    return math.prod(root.shape[:d]), root.shape[d], math.prod(root.shape[d + 1:])


def scatter_blocks(root: Instr) -> tuple:
    """(scatters, segment ranges, column blocks) of a scatter kernel's rows.

    The scatters side by side of rank-3 data are independent, and so are column
    blocks (``COLUMN_BLOCK`` wide).  Segment ranges are too, but each row reads every
    id: r ranges cost (r - 1) * N extra id reads against N * C adds, so a scatter
    splits into at most C / 32 ranges, and only when large and not already split into
    ``SCATTER_SEGMENT_BLOCKS`` scatters.  (Measured, one thread, f32 1M x 1 -> 1000
    segments: 8 ranges took 33 ms, one 1 ms; 8192 x 128 -> 50000: 11 ms, TF 48 ms.
    2 cores, 65536 x 64 -> 1024, ids compacted per row: 2 ranges 0.31 ms, 4 0.39,
    8 0.57; each row's pass over the ids costs more than its share of the adds.)"""
    segments, columns = root.shape[-2:]
    scatters = math.prod(root.shape[:-2])
    n = root.operands[1].shape[0]
    blocks = max(1, math.ceil(columns / COLUMN_BLOCK))
    ranges = 1
    if scatters < SCATTER_SEGMENT_BLOCKS and root.size + scatters * n * columns >= SCATTER_PARALLEL_MIN:
        ranges = max(1, min(segments, SCATTER_SEGMENT_BLOCKS, columns // 32))
    return scatters, ranges, blocks


def topk_merges(root: Instr) -> bool:
    """Does this top-k merge-sort whole vectors (O(n log n), branch-free) rather than
    keep a heap of the k best (O(n) for small k, O(n log k) worst case)?  Measured on
    f32 [512000/n, n]: the heap wins up to k ~ n/2 (n = 1000, k = 256: 17 vs 23 ms),
    the merge sort beyond (k = n = 1000: 23 vs 31 ms; TF's std::sort: 34 ms)."""
    n, k = root.operands[0].shape[-1], root.attrs["k"]
    return k > TOPK_HEAP_MAX_K and 2 * k > n


def own_kernel_rows(f) -> int:
    """How many rows the scan, scatter or top-k kernel ``f`` (a ``fusion.Fusion``) runs."""
    root = f.roots[0]
    if f.kind == "scan":
        outer, n, inner = scan_geometry(root)
        return outer * math.ceil(inner / COLUMN_BLOCK) if root.size else 0
    if f.kind == "scatter":      # ids are checked even when the result is empty
        return math.prod(scatter_blocks(root)) if root.size or root.operands[1].size else 0
    return min(math.prod(root.shape[:-1]), TOPK_CHUNKS) if root.size else 0
