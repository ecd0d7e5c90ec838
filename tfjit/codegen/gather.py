"""The elemental value of a gather: an operand element at an index read from memory.

``value(em, i, idx)`` is called by the kernel emitter (``KernelEmitter._compute``)
for a ``gather`` instruction at result index ``idx``.  The index is itself an
elemental value of the indices operand (so a computed index fuses too).  TF's
CPU kernel raises InvalidArgumentError for an index outside [0, n); the code
reports that through the kernel status, with TF's message (the index's position
and value travel as status details), and loads from a clamped index (0), so no
access is ever out of bounds, whatever the index holds.
"""
from __future__ import annotations

from tfjit import dtypes as dt
from tfjit.codegen.llvm_types import I64, const, i64
from tfjit.ir.module import Instr
from tfjit.ir.ops import Op


MAX_RANK = 6     # indices of higher rank print their position as [...]


def message(i: Instr) -> str:
    """TF's error text for gather ``i``, naming the node: detail 0 is the bad index,
    details 1.. its position in the indices (as TF's SliceDebugString prints it)."""
    n, rank = i.operands[0].shape[i.attrs["axis"]], i.operands[1].rank
    position = "[...]" if rank > MAX_RANK else \
        "[" + ",".join(f"{{{k + 1}}}" for k in range(rank)) + "]" if rank else ""
    return f"gather {{{{node {i.source}}}}}: indices{position} = {{0}} is not in [0, {n})"


def value(em, i: Instr, idx: tuple):
    """``i``'s element at ``idx``; ``em`` is the ``KernelEmitter`` emitting the kernel."""
    b = em.b
    x, indices = i.operands
    axis, batch = i.attrs["axis"], i.attrs["batch_dims"]
    q = indices.rank - batch                      # result dims that walk the indices
    position = idx[:batch] + idx[axis:axis + q]
    raw = em.value(indices, position)
    where = b.sext(raw, I64) if indices.dtype is dt.I32 else raw
    n = x.shape[axis]
    ok = b.icmp_unsigned("<", where, i64(n))      # also false for negative indices
    if indices.op is not Op.TOP_K:                # top-k's indices are in range by construction
        details = (where,) + (position if indices.rank <= MAX_RANK else ())
        em._raise_status(em.error_code(message(i)), b.not_(ok), details)
    if n == 0:                                    # nothing to load: every index is an error
        return const(i.dtype, 0)
    clamped = b.select(ok, where, i64(0))
    return em.value(x, idx[:axis] + (clamped,) + idx[axis + q:])
