"""CPU loop rows split at the seams of a concatenation along the last dim.

A concatenation's value at an index is elemental (emitter.py ``_concat``): each
operand is read at a clamped index and a chain of selects keeps the one whose range
holds the index.  Along the row's own dim that is a load from every operand per
element: concatenating four [8, 17, 17, 192] branches on the channel dim (Inception's
blocks) ran at 0.72x TF graph and three [1024, 1024] on dim 1 at 0.70x (2026-12-06,
Sapphire Rapids, 2 cores).  Here such a row runs as one element loop per operand, over
that operand's columns, and the concatenation at the loop's own index is that
operand's value: one load per element.  Where the concatenation is read at another
index (behind a reverse or a slice of the row), the selects remain.
"""
from __future__ import annotations

from tfjit.codegen.llvm_types import i64
from tfjit.codegen.tiles import computed
from tfjit.ir.ops import Op


def row_concat(f, gpu: bool):
    """The concatenation along the last dim that ``f``'s rows are split at, or None."""
    if gpu or not f.shape or f.kind != "loop" or f.flat:
        return None
    last = len(f.shape) - 1
    for i in computed(f):
        if i.op is Op.CONCAT and i.attrs["dim"] == last and tuple(i.shape) == tuple(f.shape) \
                and sum(1 for x in i.operands if x.shape[last]) > 1:
            return i
    return None


class ConcatSegments:
    """Mixed into codegen/emitter.py's KernelEmitter: ``segment`` is (concatenation,
    operand, the element loop's index) while a segment's elements are emitted."""

    segment = None

    def _segmented_row(self, concat, outer) -> None:
        note = f"{self.f.name}'s rows run one element loop per operand of {concat.name}"
        if note not in self.f.notes:
            self.f.notes.append(note)
        offset = 0
        for k, x in enumerate(concat.operands):
            n = x.shape[-1]
            if not n:
                continue

            def body(j, valid, k=k):
                self.segment = (concat, k, j)
                try:
                    self._store_roots(outer + (j,), valid)
                finally:
                    self.segment = None
            self._each(offset, offset + n, "j", body, self._elements_md())
            offset += n

    def segment_value(self, concat, idx):
        """The concatenation's value at ``idx`` where that is the current segment's
        loop index (its operand's, read in place), else None."""
        seg = self.segment
        if seg is None or seg[0] is not concat or idx[-1] is not seg[2]:
            return None
        k = seg[1]
        offset = sum(x.shape[-1] for x in concat.operands[:k])
        j = self.b.sub(idx[-1], i64(offset)) if offset else idx[-1]
        return self.value(concat.operands[k], idx[:-1] + (j,))
