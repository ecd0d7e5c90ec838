"""Simplification passes: common-subexpression elimination, dead-code removal, and
reductions over several dims of a buffer read as one dim.

Constant folding happens while lowering (``Module.folder``), because lowering
needs folded values (a Reshape's shape computed from Shape/Pack ops).  Each
pass here is ``run(module) -> bool`` (changed or not) and simplifies the module
and every computation it calls (loop bodies, branches) alike.
"""
from __future__ import annotations

import math

from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op


class CSE:
    """Replaces an instruction by an identical earlier one (same op, operands, attrs)."""
    name = "cse"

    def run(self, m: Module) -> bool:
        return any([self._run(c) for c in m.computations() + [m]])

    def _run(self, m: Module) -> bool:
        seen, replace = {}, {}
        for i in m.instrs:
            i.operands = tuple(replace.get(o, o) for o in i.operands)
            if i.op is Op.PARAMETER:
                continue
            value = (i.value.dtype.str, i.value.tobytes()) if i.op is Op.CONSTANT else None
            key = (i.op, i.dtype, i.shape, tuple(id(o) for o in i.operands),
                   tuple(sorted(i.attrs.items())), value)
            if key in seen:
                replace[i] = seen[key]
            else:
                seen[key] = i
        m.outputs = [replace.get(o, o) for o in m.outputs]
        return bool(replace)


class DCE:
    """Drops instructions no output depends on (parameters always stay)."""
    name = "dce"

    def run(self, m: Module) -> bool:
        changed = False
        for c in m.computations() + [m]:
            before = len(c.instrs)
            c.renumber()
            changed |= len(c.instrs) != before
        return changed


class FlattenReductions:
    """A reduction over two or more trailing dims of a value in memory (a parameter, a
    loop's result) reads them as one dim: ``reduce(reshape(x, lead + (n,)), ndims=1)``,
    a row-major reshape that moves no data.  Its kernel then takes the 1-D path, chunks of
    contiguous elements, instead of one loop per reduced dim: reduce_sum of a [65536, 64]
    parameter took 2.6 ms that way and takes 1.3 ms flat (XLA: 2.0).  Only values in
    memory: the reshape of an expression would cost its kernel an index division."""
    name = "flatten-reductions"

    def run(self, m: Module) -> bool:
        changed = False
        for c in m.computations() + [m]:
            out = []
            for i in c.instrs:
                x = i.operands[0] if i.op is Op.REDUCE else None
                n = i.attrs.get("ndims", 0) if x is not None else 0
                if n >= 2 and x.op in (Op.PARAMETER, Op.GET_TUPLE_ELEMENT):
                    lead = x.shape[:x.rank - n]
                    flat = Instr(Op.RESHAPE, x.dtype, lead + (math.prod(x.shape[x.rank - n:]),),
                                 (x,), name=f"{i.name}.flat", source=i.source)
                    out.append(flat)
                    i.operands, i.attrs = (flat,), {**i.attrs, "ndims": 1}
                    changed = True
                out.append(i)
            c.instrs = out
        return changed
