"""Cheap values copied per reader, so that no kernel writes them out at full size.

Fusion materialises a value whose readers sit in several kernels: one kernel
writes it, the others read it back.  For a value that is cheaper to compute than
to load, that is the wrong trade:

* a broadcast is an index mapping of a small operand, yet was written at full
  size and read back: the Keras CNN's train step wrote its batch-norm scale, a
  [32] vector, as [128, 26, 26, 32] (11 MB) and read it in two kernels; the
  encoder block's backward did the same with a layernorm's [8, 128, 1] rsqrt;
* a short chain of cheap arithmetic over one full-size value in memory, such as
  ``relu(conv + bias)`` (read by five kernels of a batch-norm's forward and
  backward) or ``x - mean``: written once and read n times it costs n + 2 passes
  over memory, recomputed by each reader n passes.

``CopyPerReader`` gives every reader after the first a copy of its own (the whole
chain, down to its leaves); each copy then fuses into its reader's kernel, and the
leaves are what the kernels read.  What is copied: a value read by two or more
instructions, none of which needs it as a dense buffer (library calls, control
flow, dynamic-update-slice, and data movement they read in place), not an output,
whose chain is at most ``MAX_CHAIN`` cheap elementwise instructions (``CHEAP``: no
transcendental, no division) or transposes (sum, max and min over axis 0 of ``x * 2``
read one transpose of it: written transposed by a kernel of its own, then read by
three, where each reduction can read ``x`` along its columns), and non-cheap
broadcasts (a broadcast of a parameter or constant is recomputed wherever read
already) whose inner instructions nothing else reads, and reads at
most one full-size value: with two, n copies would read 2n buffers where the
value costs n + 3 passes.  Where the readers end up in one kernel anyway, the
copies are the same arithmetic done twice in registers.

A while loop's state is the one dense reader that gets copies too: a broadcast (or a
constant of one value) that starts several carried values (CSE makes one zeros of
every stack a recurrent layer saves its activations in) becomes one per carried value,
so each is written straight into its state buffer.  Shared, one state took the buffer over and the
loop's entry copied it into the others: 7 x 12.6 MB a ConvLSTM2D(64) train step,
where each broadcast's kernel only writes.
"""
from __future__ import annotations

import dataclasses
import itertools

from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Kind, Op
from tfjit.passes.kernels import is_cheap

CHEAP = {Op.ADD, Op.SUB, Op.MUL, Op.FMA, Op.NEG, Op.ABS, Op.MAX, Op.MIN, Op.SELECT, Op.CONVERT,
         Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.AND, Op.OR, Op.NOT}
MAX_CHAIN = 4           # cheap elementwise instructions per copied chain
_DENSE_READERS = (Kind.LIBRARY, Kind.CONTROL, Kind.UPDATE)


class CopyPerReader:
    """A cheap value read by several instructions becomes one copy per reader
    (module docstring)."""
    name = "copy-per-reader"

    def run(self, m: Module) -> bool:
        return any([self._run(c) for c in m.computations() + [m]])

    def _run(self, c: Module) -> bool:
        changed = _own_loop_inits(c)
        users, outputs, out = c.users(), set(c.outputs), []
        names = {i.name for i in c.instrs}
        for i in c.instrs:
            out.append(i)
            readers = users[i]
            if len(readers) < 2 or i in outputs or any(_dense(u, users) for u in readers):
                continue
            chain = _chain(i, users)
            if chain is None:
                continue
            for k, u in enumerate(list(readers[1:]), 1):
                made: dict = {}
                for x in chain:             # operands first; ``users`` kept current
                    name = _fresh_name(x, names, k)
                    made[x] = y = dataclasses.replace(
                        x, name=name, attrs=dict(x.attrs),
                        operands=tuple(made.get(o, o) for o in x.operands))
                    users[y] = []
                    for o in dict.fromkeys(y.operands):
                        users[o].append(y)
                    out.append(y)
                u.operands = tuple(made[i] if o is i else o for o in u.operands)
                users[i].remove(u)
                users[made[i]].append(u)
            changed = True
        c.instrs = out
        return changed


def _dense(u: Instr, users: dict) -> bool:
    """Whether reader u needs its operand as a buffer in memory: a library call, control
    flow or an update, or data movement one of those reads (a dot reads a reshape of
    the softmax's probabilities in place)."""
    if u.op.kind in _DENSE_READERS:
        return True
    return u.op.kind is Kind.MOVEMENT and any(_dense(w, users) for w in users[u])


def _chain(v: Instr, users: dict) -> list | None:
    """v and the instructions below it that a copy must repeat, operands first, or
    None where v is not cheap to recompute (module docstring)."""
    if is_cheap(v):
        return None              # recomputed wherever read already
    chain, full = [], set()

    def visit(i: Instr, depth: int = 0) -> bool:
        if i in chain or (i is not v and (i.op is Op.CONSTANT or is_cheap(i))):
            return True          # already taken, or recomputed wherever read
        if i.op is Op.BROADCAST:
            if i.operands[0].size >= i.size:
                full.add(i.operands[0])
        elif i.op in CHEAP or i.op is Op.TRANSPOSE:   # (no deeper than MAX_CHAIN: add_n
            # of 2000 is a chain); a transpose is an index mapping its readers apply
            if depth >= MAX_CHAIN or not all(visit(o, depth + 1) for o in i.operands):
                return False
        elif i is v:
            return False
        else:                    # a leaf: read from memory by every copy
            if i.size >= v.size:
                full.add(i)
            return True
        chain.append(i)
        return True
    if not visit(v) or len(full) > 1 or sum(x.op is not Op.BROADCAST for x in chain) > MAX_CHAIN:
        return None
    inside = set(chain)
    if any(not set(users[x]) <= inside for x in chain if x is not v):
        return None              # read outside the chain: it stays, and so would its reads
    return chain


def _fresh_name(x: Instr, names: set, first: int = 1) -> str:
    """A name for a copy of x: x's with the first free suffix from ``first`` (kept in
    ``names``)."""
    name = next(f"{x.name}.{n}" for n in itertools.count(first) if f"{x.name}.{n}" not in names)
    names.add(name)
    return name


def _splat(x: Instr) -> bool:
    """A broadcast, or a constant of one value (small stacks' zeros are folded)."""
    if x.op is Op.CONSTANT:
        flat = x.value.reshape(-1)
        return flat.size > 1 and bool((flat == flat[0]).all())
    return x.op is Op.BROADCAST


def _own_loop_inits(c: Module) -> bool:
    """Each carried value of a while that a broadcast (or a constant of one value)
    starts, and does not start alone, gets one of its own (module docstring)."""
    users, names, changed = c.users(), {i.name for i in c.instrs}, False
    out = []
    for w in c.instrs:
        if w.op is Op.WHILE:
            operands = list(w.operands)
            for k, x in enumerate(w.operands):
                last = x not in w.operands[k + 1:]
                if not _splat(x) or (last and users[x] == [w]):
                    continue         # (the last position keeps x where nothing else reads it)
                name = _fresh_name(x, names)
                operands[k] = dataclasses.replace(x, name=name, attrs=dict(x.attrs))
                out.append(operands[k])
                if last:
                    users[x].remove(w)
                changed = True
            w.operands = tuple(operands)
        out.append(w)
    c.instrs = out
    return changed
