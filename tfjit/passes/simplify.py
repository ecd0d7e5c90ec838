"""Simplification passes: common-subexpression elimination and dead-code removal.

Constant folding happens while lowering (``Module.folder``), because lowering
needs folded values (a Reshape's shape computed from Shape/Pack ops).  Each
pass here is ``run(module) -> bool`` (changed or not) and simplifies the module
and every computation it calls (loop bodies, branches) alike.
"""
from __future__ import annotations

from tfjit.ir.module import Module
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
