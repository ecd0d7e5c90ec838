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


def reshape_groups(src: tuple, dst: tuple) -> list:
    """[(src dims, dst dims)]: the smallest runs of dims whose sizes multiply to the
    same number, so a reshape's index maps group by group (unit dims belong to no
    group: they index 0).  [128, 26, 26, 32] -> [128, 13, 2, 13, 2, 32] gives
    ([0], [0]), ([1], [1, 2]), ([2], [3, 4]), ([3], [5]): only the split dims need
    a division, and never by the innermost dim.  An empty shape is one group."""
    if 0 in src or 0 in dst:
        return [(list(range(len(src))), list(range(len(dst))))]
    s = [k for k, n in enumerate(src) if n != 1]
    d = [k for k, n in enumerate(dst) if n != 1]
    groups, i, j = [], 0, 0
    while i < len(s) or j < len(d):
        gs, gd, ps, pd = [], [], 1, 1
        while True:
            if ps <= pd and i < len(s):
                gs.append(s[i])
                ps *= src[s[i]]
                i += 1
            elif j < len(d):
                gd.append(d[j])
                pd *= dst[d[j]]
                j += 1
            else:
                break
            if ps == pd and gs and gd:
                break
        groups.append((gs, gd))
    return groups


def split_owners(src: tuple, dst: tuple) -> list | None:
    """For a reshape src -> dst that only splits dims: per dst dim, the src dim it
    comes from (None for a unit dim); None for any other reshape (one that merges
    dims, or has a dim of 0)."""
    if 0 in src or 0 in dst:
        return None
    owner = [None] * len(dst)
    for gs, gd in reshape_groups(src, dst):
        if len(gs) != 1:
            return None
        for d in gd:
            owner[d] = gs[0]
    return owner
