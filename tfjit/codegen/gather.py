"""The elemental value of a gather: an operand element at an index read from memory.

``value(em, i, idx)`` is called by the kernel emitter (``KernelEmitter._compute``)
for a ``gather`` instruction at result index ``idx``.  The index is itself an
elemental value of the indices operand (so a computed index fuses too).  TF's
CPU kernel raises InvalidArgumentError for an index outside [0, n); the code
reports that through the kernel status and loads from a clamped index (0), so
no access is ever out of bounds, whatever the index holds.
"""
from __future__ import annotations

from tfjit import dtypes as dt
from tfjit.codegen.llvm_types import I64, const, i64
from tfjit.ir.module import Instr
from tfjit.ir.ops import Op


def message(i: Instr) -> str:
    """The runtime error of gather ``i`` (a static text: it names the node and bound)."""
    n = i.operands[0].shape[i.attrs["axis"]]
    return f"gather {{{{node {i.source}}}}}: an index is not in [0, {n})"


def value(em, i: Instr, idx: tuple):
    """``i``'s element at ``idx``; ``em`` is the ``KernelEmitter`` emitting the kernel."""
    b = em.b
    x, indices = i.operands
    axis, batch = i.attrs["axis"], i.attrs["batch_dims"]
    q = indices.rank - batch                      # result dims that walk the indices
    raw = em.value(indices, idx[:batch] + idx[axis:axis + q])
    where = b.sext(raw, I64) if indices.dtype is dt.I32 else raw
    n = x.shape[axis]
    ok = b.icmp_unsigned("<", where, i64(n))      # also false for negative indices
    if indices.op is not Op.TOP_K:                # top-k's indices are in range by construction
        em._raise_status(em.error_code(message(i)), b.not_(ok))
    if n == 0:                                    # nothing to load: every index is an error
        return const(i.dtype, 0)
    clamped = b.select(ok, where, i64(0))
    return em.value(x, idx[:axis] + (clamped,) + idx[axis + q:])
