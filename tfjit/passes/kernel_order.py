"""The order a computation's kernels run in, and what each reads from memory.

Kept apart from fusion.py, which decides which kernel each instruction is in: the
buffer assignment, the concurrency groups, codegen and the verifier read a kernel's
inputs (``reads``) and walk kernels (``walk``) too.  ``schedule`` puts producers
first, otherwise program order; in a loop body it lets a value be updated in place.
"""
from __future__ import annotations

from tfjit.ir.ops import Op
from tfjit.passes.kernels import CONTROL, Fusion, is_cheap
from tfjit.passes.library_operands import start_leaves


def walk(fusions: list):
    """Every kernel of ``fusions``, those of called computations included."""
    for f in fusions:
        yield f
        for called in f.called:
            yield from walk(called)


def reads(f: Fusion) -> set:
    """Instructions outside f whose memory f reads (params or other kernels' roots)."""
    if f.kind == "library":
        out = set()
        for o in f.roots[0].operands:
            while o in f.aliases:          # a window's start is read where the call runs
                if o.op is Op.DYNAMIC_SLICE:
                    out.update(*(start_leaves(s) for s in o.operands[1:]))
                o = f.aliases[o]
            out.add(o)
        return out
    if f.kind in CONTROL:
        return set(f.instrs[0].operands)
    return _behind(f)[1]


def recomputed(f: Fusion) -> list:
    """The cheap values f recomputes from its instructions' operands wherever it reads
    them (a transpose of a parameter: an index mapping, not one of f's instructions)."""
    return _behind(f)[0]


def _behind(f: Fusion) -> tuple:
    """(cheap values recomputed, values read from memory) below f's instructions."""
    inside = set(f.instrs)
    cheap, out, stack, seen = [], set(), list(f.instrs), set()
    while stack:
        i = stack.pop()
        for o in i.operands:
            if o in inside or o in seen:
                continue
            seen.add(o)
            if o.op is Op.PARAMETER or not is_cheap(o):
                out.add(o)
            else:
                cheap.append(o)
                stack.append(o)
    return cheap, out


def schedule(fusions: list, order: dict, overwrites: dict | None = None) -> list:
    """Producers first; otherwise in program order.  In a loop body (``overwrites``:
    kernel -> the parameters whose next value it writes), a kernel that writes a next
    value waits, where dependencies allow, until every other reader of the current
    value has run, so the value can be updated in place (passes/buffers.py).  Taken in
    program order, ConvLSTM2D's step wrote its next h before saving the current one
    into its stack, and h then needed two buffers and a copy back every step."""
    owner = {r: f for f in fusions for r in f.roots}
    if overwrites:
        return _schedule_body(fusions, order, owner, overwrites)
    done, out = set(), []

    def visit(f):
        if f in done:
            return
        done.add(f)
        for r in sorted(reads(f), key=order.get):
            if r in owner:
                visit(owner[r])
        out.append(f)

    for f in sorted(fusions, key=lambda f: min(order[r] for r in f.roots or f.instrs)):
        visit(f)
    return out


def _schedule_body(fusions: list, order: dict, owner: dict, overwrites: dict) -> list:
    """``schedule`` for a loop body: the first ready kernel in program order that
    overwrites no value another kernel still has to read, else the first ready one."""
    read = {f: reads(f) for f in fusions}
    producers = {f: {owner[r] for r in read[f] if r in owner} - {f} for f in fusions}
    readers: dict = {}
    for f in fusions:
        for p in read[f]:
            readers.setdefault(p, set()).add(f)
    pending = sorted(fusions, key=lambda f: min(order[r] for r in f.roots or f.instrs))
    done, out = set(), []
    while pending:
        ready = [f for f in pending if producers[f] <= done]
        safe = (f for f in ready if all(readers.get(p, set()) <= done | {f} for p in overwrites.get(f, ())))
        f = next(safe, ready[0])
        pending.remove(f)
        done.add(f)
        out.append(f)
    return out
