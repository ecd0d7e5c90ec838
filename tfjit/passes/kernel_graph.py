"""The graph of kernels (who reads whose roots), for merging kernels without cycles.

Sibling merging (passes/fusion.py) asks, for thousands of kernel pairs, whether one
kernel depends on the other, and merges kernels as it goes.  A walk over all
producers per question made that quadratic in the kernels; here every kernel has
a level above the kernels it reads, kept so through merges, and a walk for "a
depends on t" never goes below t's level (siblings sit at nearby levels).
``reads_any`` answers the same question while fusion still builds its kernels
(extra roots), from the instructions' owners.
"""
from __future__ import annotations

from tfjit.ir.module import IRError


class KernelGraph:
    """The kernel graph (who reads whose roots) with a level per kernel, every kernel
    above the kernels it reads, kept so through merges: "a depends on t" is then a
    walk over a's producers that never goes below t's level."""

    def __init__(self, fusions: list, rd: dict, owner: dict):
        """``rd``: the buffers each kernel reads (``kernel_order.reads``); ``owner``: the
        kernel of each instruction."""
        self.producers = {f: {owner[r] for r in rd[f] if r in owner} - {f} for f in fusions}
        self.consumers = {f: set() for f in fusions}
        for f, ps in self.producers.items():
            for p in ps:
                self.consumers[p].add(f)
        self.level: dict = {}
        entered = set()              # kernels whose producers are on the stack above them
        for f in fusions:            # iterative: chains of thousands of kernels
            stack = [f]
            while stack:
                g = stack[-1]
                if g in self.level:
                    stack.pop()
                    continue
                todo = [p for p in self.producers[g] if p not in self.level]
                if todo:
                    if any(p in entered for p in todo):     # p waits below for g: a cycle
                        raise IRError(f"internal error: kernel {g.name} and the kernels it reads "
                                      "read each other's results (a cycle in fusion's kernels)")
                    entered.add(g)
                    stack += todo
                    continue
                self.level[g] = 1 + max((self.level[p] for p in self.producers[g]), default=0)
                stack.pop()

    def depends(self, a, t) -> bool:
        """Does kernel a (transitively) read what kernel t writes?"""
        floor = self.level[t]
        if self.level[a] <= floor:
            return False
        stack, seen = [a], {a}
        while stack:
            for p in self.producers[stack.pop()]:
                if p is t:
                    return True
                if p not in seen and self.level[p] > floor:
                    seen.add(p)
                    stack.append(p)
        return False

    def merge(self, x, y) -> None:
        """y's instructions now belong to x (siblings, or y a producer of x that x takes
        in: the edge between them disappears)."""
        for p in self.producers.pop(y):
            self.consumers[p].discard(y)
            self.consumers[p].add(x)
            self.producers[x].add(p)
        for c in self.consumers.pop(y):
            self.producers[c].discard(y)
            self.producers[c].add(x)
            self.consumers[x].add(c)
        self.producers[x].discard(x)
        self.consumers[x].discard(x)
        self.level[x] = max(self.level[x], self.level.pop(y))
        stack = [x]
        while stack:                 # lift x's consumers above it, and theirs above them
            f = stack.pop()
            for c in self.consumers[f]:
                if self.level[c] <= self.level[f]:
                    self.level[c] = self.level[f] + 1
                    stack.append(c)


def reads_any(f, others: set, owner: dict, limit: int = 4096) -> bool:
    """Does kernel f read, through other kernels, a root of one of ``others``, by the
    ``owner`` (instruction -> kernel) of a fusion still being built?  Past ``limit``
    instructions: assumed so.  Fusion asks it before it makes a value an extra root
    of f (which the others then read: a cycle if f reads them)."""
    stack, seen = list(f.instrs), set(f.instrs)
    while stack:
        for o in stack.pop().operands:
            g = owner.get(o)
            if g is None or o in seen:
                continue
            if g in others:
                return True
            # o itself too: a reshape a library call reads in place is owned, not an instr
            new = [x for x in (o, *g.instrs) if x not in seen]
            seen.update(new)
            stack.extend(new)
            if len(seen) > limit:
                return True
    return False
