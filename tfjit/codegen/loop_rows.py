"""How a loop kernel's rows run (``LoopRows._loop_row``, a part of codegen/emitter.py's
KernelEmitter): a flat block, a stencil's neighbours, a row and its element loop; on
the CPU, rows that take the last two dims where the last is short (``wide``), and rows
whose element loop is long enough that LLVM must not vectorise across rows
(``long_elements``).  Both are decided from the kernel alone, so kernels with one
``body_sharing.body_key`` decide alike."""
from __future__ import annotations

import math

from tfjit.codegen import lanes, segments
from tfjit.codegen.llvm_types import for_range, i64, unvectorised_interleave
from tfjit.codegen.reduction import ACROSS_ROW_BYTES, SHORT_ROW
from tfjit.passes.kernels import FLAT_BLOCK

WIDE_MIN_ROWS = 64       # rows a loop kernel keeps when its rows take two dims (``wide``)


def wide(f, gpu: bool, block: int) -> bool:
    """Does a row of this loop kernel take its last two dims?  Where the last dim is
    short (``SHORT_ROW`` elements or fewer: an image's 3 channels) and cannot be
    flattened (a resize's gathered rows and columns, a flip, a strided slice),
    each row's own work, its index unravelled and what depends on it alone, costs
    more than its elements; LLVM also vectorises the loop over the next-to-last
    dim where it may.  [32,96,96,3] (Zen 4, scratch widesweep.py): a flip along W
    1.34-1.47 -> 0.25 ms, a spatial pad 0.73-0.83 -> 0.26, x[:, ::2, ::2] of
    [32,128,128,3] 0.48-0.53 -> 0.21, a bilinear resize 40 -> 64 0.41-0.47 -> 0.34.
    Rows of the last two dims leave enough rows to split (``WIDE_MIN_ROWS``)."""
    if (gpu or f.flat or block > 1 or f.hoisted or len(f.shape) != f.outer + 1
            or f.outer < 2 or f.shape[-1] > SHORT_ROW
            or segments.row_concat(f, gpu) is not None):
        return False
    return math.prod(f.shape[:f.outer - 1]) >= WIDE_MIN_ROWS


def long_elements(f, gpu: bool, block: int, reads) -> bool:
    """Does this loop kernel's row run an element loop too long for its row loop to
    be vectorised instead?  LLVM unrolls a short element loop fully (12 or 16
    floats, 8 or 16 doubles) and then vectorised across rows, with gathers and
    scatters: ReLU(x + bias) * 2 on [262144, 16] f32 took 3.5-3.7 ms, a row at a
    time (one AVX-512 vector) 1.1-1.2; f64 [262144, 16] 8.2-8.7 -> 2.5-3.2 ms
    (AMD EPYC Zen 4).  Rows of up to ``SHORT_ROW`` elements and
    ``ACROSS_ROW_BYTES`` bytes stay vectorised across rows (shuffles of whole
    vectors: 2-8 floats measured level), as reductions' do."""
    if gpu or f.flat or block > 1 or len(f.shape) == f.outer:
        return False
    widest = max((i.dtype.itemsize for i in [*reads, *f.roots]), default=1)
    return f.shape[-1] > SHORT_ROW or f.shape[-1] * widest > ACROSS_ROW_BYTES


class LoopRows:
    """The row body of a loop kernel (mixed into codegen/emitter.py's KernelEmitter,
    whose ``wide`` and ``block`` the kernel's steps set)."""

    @property
    def full_vector_elements(self) -> bool:
        """Does a wide row's element loop fill ``ACROSS_ROW_BYTES``?  Then its column loop
        is interleaved but not vectorised, so LLVM vectorises each column's elements
        instead of unrolling them and vectorising across columns with gathers, which it
        did wherever columns are strided.  [32,H,W,8] f32 (Zen 4, scratch wide8.py, two
        runs): transposed H and W 0.59-0.63 -> 0.29-0.30 ms, x[:, ::2, ::2] of
        96x96 0.58-0.64 -> 0.24-0.25, a bilinear resize 32 -> 48 0.43-0.46 -> 0.16-0.17,
        a Conv3DTranspose + bias + ReLU 1.87 -> 1.71-1.74; a flip, a pad and a gather
        along H (contiguous columns) level within noise.  Shorter elements (3 channels)
        stay vectorised across columns."""
        widest = max((i.dtype.itemsize for i in [*self.reads, *self.f.roots]), default=1)
        return self.f.shape[-1] * widest >= ACROSS_ROW_BYTES

    def _loop_row(self, row):
        f, b = self.f, self.b
        if f.flat and self.gpu:
            per = lanes.flat_elements(f)
            first = b.mul(row, i64(per)) if per > 1 else row
            with self._scope():        # every element's loads, then every store: one access each
                idxs = [(b.add(first, i64(k)) if k else first,) for k in range(per)]
                self.aligned = first       # the first element's accesses say their alignment
                values = [[self.value(r, idx) for r in f.roots] for idx in idxs]
                for idx, vs in zip(idxs, values):
                    self._store_values(idx, vs)
                self.aligned = None
            return
        if f.flat:
            n = math.prod(f.shape)
            start = b.mul(row, i64(FLAT_BLOCK))
            stop = b.add(start, i64(FLAT_BLOCK))
            stop = b.select(b.icmp_signed("<", stop, i64(n)), stop, i64(n))
            with for_range(b, start, stop, "j", self._elements_md()) as j, self._scope():
                self._store_roots((j,))
            return
        if self.block > 1:          # neighbouring outputs in one element loop
            self._stencil_row(row)
            return
        if self.wide:               # rows of the last two dims (loop_rows.wide)
            outer = self._unravel(row, f.shape[:f.outer - 1])
            self._hoist(outer)
            across = unvectorised_interleave(self.module, 4) if self.full_vector_elements else None
            with for_range(b, 0, f.shape[f.outer - 1], "i", across) as i, self._scope():
                self._each(0, f.shape[-1], "j",
                           lambda j, valid: self._store_roots(outer + (i, j), valid),
                           self._elements_md())
            return
        outer = self._unravel(row, f.shape[:f.outer])
        self._hoist(outer)
        if len(f.shape) == f.outer:
            self._store_roots(outer)
            return
        concat = segments.row_concat(f, self.gpu)
        if concat is not None:        # an element loop per operand (codegen/segments.py)
            self._segmented_row(concat, outer)
            return
        self._each(0, f.shape[-1], "j", lambda j, valid: self._store_roots(outer + (j,), valid),
                   self._elements_md())
