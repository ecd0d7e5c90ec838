"""Stencil loop kernels computed a few outputs at a time along their last row dim.

A depthwise convolution (lower/conv.py) or a pool (lower/pooling.py) is a loop kernel
over [N, H, W, C] whose value sums or compares k x k strided slices of one input: the
output at column w reads input columns w * s + d for every tap d.  Row by row, each
output loads its k * k input vectors and the k * k filter vectors anew: a 5x5
depthwise convolution of 32 channels held 50 filter vectors across the row loop,
spilled most of them, and ran at 0.5x TF's oneDNN kernel (which keeps a few outputs
along W in registers).  Computing ``BLOCK`` neighbouring columns in one row of the
kernel, inside one channel loop, lets LLVM load each shared input column and each
filter vector once for all of them (the addresses are equal after its
reassociation, so its value numbering merges the loads).

A kernel qualifies when it reads one value through at least ``MIN_TAPS`` slices at
different offsets along the kernel's last row dim (the taps of a window), has an
element dim, and no hoisted reductions (their passes need whole rows).  The block is
the largest of ``BLOCKS`` that divides that dim, so no output falls outside it; none
divides (a prime width): rows as before.  Either way each output is the same
expression, so the same value (bit for bit, but for which NaN an add of two NaNs
passes on, which LLVM may commute).
"""
from __future__ import annotations

from tfjit.codegen.llvm_types import i64, no_unroll
from tfjit.ir.ops import Op
from tfjit.passes.kernel_order import recomputed

BLOCKS = (4, 3, 2)
MIN_TAPS = 3


def block_of(f) -> int:
    """Neighbouring outputs along dim ``f.outer - 1`` that one row of ``f`` computes."""
    if f.kind != "loop" or f.flat or f.hoisted or not 1 <= f.outer < len(f.shape):
        return 1
    dim = f.outer - 1
    starts: dict = {}
    for i in list(f.instrs) + recomputed(f):       # a slice of a parameter is recomputed
        if i.op is Op.SLICE and i.rank == len(f.shape):
            starts.setdefault(i.operands[0], set()).add(tuple(i.attrs["starts"])[dim])
    if not any(len(s) >= MIN_TAPS for s in starts.values()):
        return 1
    width = f.shape[dim]
    block = next((u for u in BLOCKS if width % u == 0 and width > u), 1)
    note = (f"{f.name} reads a window's taps: {block} neighbouring outputs along dim {dim} "
            "per row, sharing their loads (codegen/stencil.py)")
    if block > 1 and note not in f.notes:
        f.notes.append(note)
    return block


class StencilRows:
    """Mixed into the kernel emitter (codegen/emitter.py), which sets ``block``."""

    def _stencil_row(self, row) -> None:
        """Row ``row`` of a blocked kernel: ``self.block`` neighbouring outputs, each
        stored in turn inside one element loop (stored after all of them, the 5x5
        convolution's longer-lived values made it 1.5x slower)."""
        f, b = self.f, self.b
        outer = self._unravel(row, f.shape[:f.outer - 1] + (f.shape[f.outer - 1] // self.block,))
        first = b.mul(outer[-1], i64(self.block))
        pixels = [outer[:-1] + (b.add(first, i64(u)) if u else first,) for u in range(self.block)]
        self._each(0, f.shape[-1], "j", lambda j, valid: [
            self._store_roots(p + (j,), valid) for p in pixels], element_loop(self.module))


def element_loop(module):
    """The element loop's metadata: one vector per iteration, never unrolled, so the
    filter vectors of one channel block (25 for 5x5) are live at a time, not those of
    the whole row (50 for 32 channels, which spilled)."""
    return no_unroll(module, 1)
