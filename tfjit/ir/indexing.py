"""Index mappings: which operand element an instruction reads for a result index.

Shared by the fusion policy (which runs them on symbolic names to decide what
can be hoisted) and by the code generator (which runs them on LLVM values).
Only mappings that *rearrange* index entries live here; mappings that need
arithmetic (slice offsets, padding, concatenation, general reshapes) return
None and are emitted by codegen directly.
"""
from __future__ import annotations

from tfjit.ir.module import Instr
from tfjit.ir.ops import Kind, Op


class _Zero:
    """The constant index 0 (an operand dimension of size 1)."""

    def __repr__(self) -> str:
        return "0"


ZERO = _Zero()


def _unit_dim_reshape(src: tuple, dst: tuple) -> bool:
    return [d for d in src if d != 1] == [d for d in dst if d != 1]


def operand_index(instr: Instr, k: int, idx: tuple):
    """The index into operand ``k`` read at result index ``idx``, or None."""
    op = instr.op
    operand = instr.operands[k]
    if op.kind is Kind.ELEMENTWISE:
        return idx
    if op is Op.BROADCAST:
        dims = instr.attrs["dims"]
        return tuple(ZERO if operand.shape[d] == 1 else idx[dims[d]] for d in range(operand.rank))
    if op is Op.TRANSPOSE:
        out = [None] * operand.rank
        for i, p in enumerate(instr.attrs["perm"]):
            out[p] = idx[i]
        return tuple(out)
    if op is Op.RESHAPE and _unit_dim_reshape(operand.shape, instr.shape):
        kept = iter([v for v, d in zip(idx, instr.shape) if d != 1])
        return tuple(ZERO if d == 1 else next(kept) for d in operand.shape)
    return None
