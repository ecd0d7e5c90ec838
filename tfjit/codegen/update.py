"""The kernel of a dynamic-update-slice: writes its window, in place when it can.

One row: compute the (clamped) start indices in the kernel, copy the operand
into every result buffer that is not the operand's own buffer (buffer
assignment shares the buffer when nothing else reads the operand, e.g. a
TensorList updated in a loop), then store the update into the window.  So an
update in place costs the window, not the whole tensor.

An update in place has nothing to copy first, so its window is split into rows along
its first dim of more than one element, which the launch (or a loop's driver) shares
among its threads like any kernel's: a ConvLSTM2D(64) train step saves eight 2 MB
windows a step, each one row on one thread before.
"""
from __future__ import annotations

from tfjit.codegen import library
from tfjit.codegen.emitter import KernelEmitter
from tfjit.codegen.llvm_types import for_range, i64
from llvmlite import ir


class UpdateEmitter(KernelEmitter):
    def emit(self) -> list:
        dus = self.f.roots[0]
        update = dus.operands[1]
        source = self.plan.slots[dus.operands[0]][0]
        split = next((d for d, n in enumerate(update.shape) if n > 1), None)
        if self.gpu or any(s != source for s in self.plan.slots[dus]):
            split = None         # (the copy comes first: one row)
        if split is None:
            return [(self._function(self.name, self._update_row), 1, max(update.size, 1))]
        rows = update.shape[split]
        return [(self._function(self.name, lambda row: self._update_row(row, split)), rows,
                 max(update.size // rows, 1))]

    def _update_row(self, row, split: int | None = None):
        """The window (``split`` None), or its slice ``row`` along dim ``split``."""
        b = self.b
        dus = self.f.roots[0]
        x, update, starts = dus.operands[0], dus.operands[1], dus.operands[2:]
        origin = self.clamped_starts(x, starts, update.shape)
        source = self.plan.slots[x][0]
        nbytes = x.size * x.dtype.itemsize
        for slot in self.plan.slots[dus]:
            if slot != source and nbytes:
                b.call(library._memcpy(self.module),
                       [self.ptrs[slot], self.ptrs[source], i64(nbytes), ir.Constant(ir.IntType(1), 0)])

        def nest(d, idx):
            if d == split:
                nest(d + 1, idx + (row,))
                return
            if d == update.rank:
                with self._scope():
                    v = self.value(update, idx)
                    at = tuple(b.add(o, j) for o, j in zip(origin, idx))
                    for slot in self.plan.slots[dus]:
                        self._store(slot, dus, at, v)
                return
            with for_range(b, 0, update.shape[d], f"u{d}") as j:
                nest(d + 1, idx + (j,))

        if update.size:
            nest(0, ())
