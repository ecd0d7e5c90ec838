"""Reductions whose reduced dims lie on both sides of the kept ones, in two stages.

Group normalisation reduces a [B, H, W, C] activation over H, W and the channels of
each group: ``reduce(transpose(reshape(x, [B, H, W, G, C/G]), [0, 3, 1, 2, 4]))``.
In x's memory the reduced dims H and W lie before the kept group dim and C/G after
it, so each of the B * G outputs reads runs of C/G elements C apart, one kernel row
per output: neither a row reduction (contiguous reduced elements) nor a column one
(contiguous outputs).  ``TwoStageReductions`` splits it:

    stage 1  reduce over the reduced dims before the innermost kept dim (H, W): a
             column reduction whose outputs, [B, C] here, are contiguous in x;
    stage 2  reduce the rest (C/G, now trailing) of that small result, row by row;

then reorders the result where the kept dims' order asks for it.  Stage 1 reads x
itself where no x dim is split between reduced-first and kept (the reshape
applied to its [B, C] result instead, which moves no data).  Sums and products are
reassociated (each output's terms added in another order, as any blocking of a
sum does); max, min, and and or are exact.
"""
from __future__ import annotations

from tfjit.ir.indexing import split_owners
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.passes.simplify import substitute

KINDS = ("sum", "prod", "max", "min", "maxnum", "and", "or")


class TwoStageReductions:
    """A reduction of a transpose whose reduced dims (in memory order) lie before and
    after its innermost kept dim becomes two (module docstring)."""
    name = "two-stage-reductions"

    def run(self, m: Module) -> bool:
        return any([self._run(c) for c in m.computations() + [m]])

    def _run(self, c: Module) -> bool:
        if not any(i.op is Op.REDUCE and i.operands[0].op is Op.TRANSPOSE for i in c.instrs):
            return False
        return substitute(c, _split)


def _split(r: Instr) -> list | None:
    """The instructions replacing reduction r (the last one its value), or None."""
    if r.op is not Op.REDUCE or r.attrs["kind"] not in KINDS:
        return None
    t = r.operands[0]
    if t.op is not Op.TRANSPOSE:
        return None
    y, p, n = t.operands[0], t.attrs["perm"], r.attrs["ndims"]
    kept, reduced = p[:len(p) - n], p[len(p) - n:]
    if not kept:
        return None
    inner = max(kept)
    first = tuple(sorted(d for d in reduced if d < inner))     # stage 1
    last = tuple(sorted(d for d in reduced if d > inner))      # stage 2
    if not first or not last:
        return None
    made = []

    def add(i: Instr) -> Instr:
        i.source = r.source
        made.append(i)
        return i
    rest = tuple(d for d in range(y.rank) if d not in first)   # kept and stage 2, y order
    x, groups = (y.operands[0], split_owners(y.operands[0].shape, y.shape)) if y.op is Op.RESHAPE else (y, None)
    whole = groups is not None and any(groups[d] is not None for d in first) and all(
        groups[d] is None or all(groups[d] != groups[e] for e in rest) for d in first)
    if whole:       # stage 1 on x: its reduced dims are whole x dims
        xf = tuple(sorted({groups[d] for d in first} - {None}))
        xr = tuple(d for d in range(x.rank) if d not in xf)
        t1 = add(Instr(Op.TRANSPOSE, x.dtype, tuple(x.shape[d] for d in xr + xf), (x,),
                       {"perm": xr + xf}, name=f"{r.name}.stage1.t"))
        s1 = add(Instr(Op.REDUCE, r.dtype, tuple(x.shape[d] for d in xr), (t1,),
                       {**r.attrs, "ndims": len(xf)}, name=f"{r.name}.stage1"))
        s1 = add(Instr(Op.RESHAPE, r.dtype, tuple(y.shape[d] for d in rest), (s1,),
                       name=f"{r.name}.stage1.r"))
    else:
        t1 = add(Instr(Op.TRANSPOSE, y.dtype, tuple(y.shape[d] for d in rest + first), (y,),
                       {"perm": rest + first}, name=f"{r.name}.stage1.t"))
        s1 = add(Instr(Op.REDUCE, r.dtype, tuple(y.shape[d] for d in rest), (t1,),
                       {**r.attrs, "ndims": len(first)}, name=f"{r.name}.stage1"))
    at_y = tuple(sorted(kept))                  # stage 2's result: kept dims in y order
    s2 = add(Instr(Op.REDUCE, r.dtype, tuple(y.shape[d] for d in at_y), (s1,),
                   {**r.attrs, "ndims": len(last)}, name=f"{r.name}.stage2"))
    order = tuple(at_y.index(d) for d in kept)
    if order != tuple(range(len(kept))):
        add(Instr(Op.TRANSPOSE, r.dtype, r.shape, (s2,), {"perm": order}, name=f"{r.name}.t"))
    return made
