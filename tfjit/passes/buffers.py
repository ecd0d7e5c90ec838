"""Buffer assignment: where every value that lives in memory is stored.

The launch op hands each kernel one pointer array, laid out as
``[inputs..., outputs..., temps..., status, device]`` (see runtime/launch_op.cc).  This
pass decides the slot of every parameter and kernel root, the scratch space of
split reductions and of top-k kernels (their heaps), and which outputs are plain copies of inputs (returned by the
launch op without running any code).

``slots[i]`` lists the slots of value ``i``: the first is where it is read, every
slot of a kernel root is written by its kernel, and the later slots of a
get-tuple-element are filled by copies when its while/conditional finishes.

Control flow shares the one pointer array (kernels load their pointers from it at
every call, so a driver may re-point a slot between calls):

* A called computation's parameters read their operands' slots directly (branch
  arguments, loop-invariant values: no copy, no slot of their own).
* A loop-carried value that the body changes is either updated **in place** (one
  state buffer that the body's kernel both reads and writes, when that is safe:
  see ``_carried_in_place``), or **double-buffered**: the body reads one buffer through
  a pointer slot and writes the other through a second pointer slot, and the
  driver swaps the two pointers after each iteration (no copy per iteration).
  The initial value is copied into the state, unless it is a temp that only the
  loop reads: then that temp becomes the state ("donated").
* A conditional's branches write their results straight into its result slots
  (the caller's output buffer when the result is an output); a branch that
  returns one of its arguments unchanged copies it there.
* A dynamic-update-slice writes only its window when its result shares its
  operand's buffer (the operand is a temp read by nothing else, or a loop state
  updated in place); otherwise its kernel copies the operand first.

Pointer slots are temps of 0 bytes: the driver sets them before any kernel reads them.

Temps live in one arena, and temps whose lifetimes do not overlap share its bytes
(``place_temps``), as XLA's buffer assignment reuses dead allocations: the launch
op allocates the arena for the whole launch, so without sharing a deep model's
cluster would hold all its activations at once (MobileNetV2's predict cluster:
230 MB over TF graph mode's peak), where TF's executor frees each tensor after its
last reader.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.passes import fusion as fusion_mod
from tfjit.passes import kernel_order
from tfjit.passes import iteration
from tfjit.passes.kernels import reductions
from tfjit.passes.own_rows import topk_merges
from tfjit.runtime import abi


def arg_scratch_bytes(root: Instr, split: int) -> int:
    """A split argreduce's scratch: every partial's best value (8 bytes at most), then
    every partial's index (i64), output by output, chunk by chunk."""
    return root.size * split * 16


@dataclasses.dataclass
class LoopPlan:
    """What a while's driver does besides running its condition and body."""
    pointers: list           # [(slot, from_slot)]: bufs[slot] = bufs[from_slot], before the loop
    init: list               # [(dst, src, nbytes)]: copies before the loop
    pred_slot: int           # where the condition's pred[] is read
    copies: list             # [(dst, src, nbytes)] after each body run (before the swaps)
    swaps: list              # [(slot, slot)] whose pointers are exchanged after each body run
    finals: list             # [(dst, src, nbytes)] after the loop
    modes: list              # per carried value: "invariant" | "in place" | "double-buffered"
    groups: list | None = None   # the body's concurrent groups (passes/concurrency.py)


@dataclasses.dataclass
class BranchPlan:
    """What a conditional's driver does besides running the taken branch."""
    selector_slot: int
    copies: list             # per branch: [(dst, src, nbytes)] after it ran
    finals: list             # [(dst, src, nbytes)] after either branch


@dataclasses.dataclass
class BufferPlan:
    num_inputs: int
    num_outputs: int
    slots: dict                    # instr -> slots it is written to / read from (first is the read slot)
    temp_bytes: list               # per temp slot, in order after the outputs
    scratch: dict                  # fusion -> slot of its partial results (or top-k heaps)
    output_source: list            # per output: input index it aliases, or -1
    control: dict = dataclasses.field(default_factory=dict)   # while/conditional fusion -> plan
    update_in_place: list = dataclasses.field(default_factory=list)   # per variable update
    temp_offsets: list = dataclasses.field(default_factory=list)   # per temp: offset in the arena

    @property
    def arena_bytes(self) -> int:
        """The size of the one block all temps live in."""
        return max((o + b for o, b in zip(self.temp_offsets, self.temp_bytes)), default=0)

    @property
    def status_slot(self) -> int:
        return self.num_inputs + self.num_outputs + len(self.temp_bytes)

    @property
    def device_slot(self) -> int:
        """The launch's runtime context, for runtime-library calls (runtime/runtime.h;
        null: they run their own Eigen code inline)."""
        return self.status_slot + 1


def nbytes(i: Instr) -> int:
    return i.size * i.dtype.itemsize


def assign(m: Module, fusions: list) -> BufferPlan:
    n_in, n_out = len(m.params), len(m.outputs)
    slots = {p: [p.index] for p in m.params}
    output_source = [-1] * n_out
    views = fusion_mod.output_views(m)    # the reshaped value's kernel writes the output
    for k, o in enumerate(m.outputs):
        if o.op is Op.PARAMETER:
            output_source[k] = o.index
        else:
            slots.setdefault(views.get(o, o), []).append(n_in + k)
    plan = BufferPlan(n_in, n_out, slots, [], {}, output_source)
    _Assigner(plan).place(m, fusions)
    place_temps(plan, fusions)
    kernels = _Kernels(fusions)
    plan.update_in_place = [_variable_in_place(m, kernels, k, m.outputs[n_out - len(m.updates) + u])
                            for u, k in enumerate(m.updates)]
    return plan


class _Kernels:
    """Where each value is written and read, by kernel position in the schedule, computed
    once: asked per updated variable, a walk of every kernel's reads made NASNetMobile's
    train step (3000 updates, 5000 kernels) take minutes."""

    def __init__(self, fusions: list):
        self.fusions = fusions
        self.writer: dict = {}       # value -> position of the first kernel with it as a root
        self.readers: dict = {}      # value -> positions of the kernels that read it
        for n, f in enumerate(fusions):
            for r in f.roots:
                self.writer.setdefault(r, n)
            for x in kernel_order.reads(f):
                self.readers.setdefault(x, []).append(n)


class _Assigner:
    def __init__(self, plan: BufferPlan):
        self.plan = plan
        self.slots = plan.slots

    def temp(self, size: int) -> int:
        p = self.plan
        p.temp_bytes.append(max(int(size), 1))
        return p.num_inputs + p.num_outputs + len(p.temp_bytes) - 1

    def pointer(self) -> int:
        """A slot that a driver points at some buffer before use (nothing allocated)."""
        p = self.plan
        p.temp_bytes.append(0)
        return p.num_inputs + p.num_outputs + len(p.temp_bytes) - 1

    def is_temp(self, slot: int) -> bool:
        p = self.plan
        return slot >= p.num_inputs + p.num_outputs and p.temp_bytes[slot - p.num_inputs - p.num_outputs] > 0

    def donatable(self, x: Instr, user: Instr, m: Module, users: dict) -> bool:
        """May ``user`` take over ``x``'s buffer (x is a temp that nothing else reads)?"""
        return (not fusion_mod.in_memory(x) and x not in m.outputs and users[x] == [user]
                and user.operands.count(x) == 1 and len(self.slots.get(x, ())) == 1
                and self.is_temp(self.slots[x][0]))

    def place(self, m: Module, fusions: list) -> None:
        users = m.users()
        last_read = {} if any(f.kind in fusion_mod.CONTROL for f in fusions) else {
            x: n for n, f in enumerate(fusions) for x in kernel_order.reads(f)
            if x.op is not Op.PARAMETER}   # (a loop body's parameter may be the caller's
        # temp, read again by the next iteration)
        for f in fusions:       # an updated output: its operand's kernel writes the output buffer
            if f.kind == "update":
                dus = f.roots[0]
                x = dus.operands[0]
                if dus in self.slots and x not in self.slots and not fusion_mod.in_memory(x) \
                        and x not in m.outputs and users[x] == [dus] and dus.operands.count(x) == 1:
                    self.slots[x] = [self.slots[dus][0]]
        for position, f in enumerate(fusions):
            if f.kind == "while":
                self.place_while(f, m, users)
            elif f.kind == "conditional":
                self.place_conditional(f)
            else:
                if f.kind == "update":
                    dus = f.roots[0]
                    x = dus.operands[0]
                    if dus not in self.slots and self.donatable(x, dus, m, users):
                        self.slots[dus] = [self.slots[x][0]]
                        f.notes.append(f"{dus!r} updates {x!r}'s buffer in place")
                x = self.overwritable(f, position, last_read, m) if f.kind == "loop" else None
                if x is not None:
                    self.slots[f.roots[0]] = [self.slots[x][0]]
                    f.notes.append(f"{f.roots[0]!r} is written over {x!r}, read at the same "
                                   f"index and dead after {f.name}")
                for r in f.roots:
                    if r not in self.slots:
                        self.slots[r] = [self.temp(nbytes(r))]
                if f.split > 1 and f.roots[0].op is Op.ARGREDUCE:
                    self.plan.scratch[f] = self.temp(arg_scratch_bytes(f.roots[0], f.split))
                elif f.split > 1:       # each reduction's partials, one after another
                    sums = reductions(f)
                    widest = max(max(r.dtype.itemsize, 1) for r in sums)
                    self.plan.scratch[f] = self.temp(sums[0].size * f.split * widest * len(sums))
                if f.kind == "sort" and f.rows:
                    self.plan.scratch[f] = self.temp(f.rows * topk_row_bytes(f.roots[0]))

    def overwritable(self, f, position: int, last_read: dict, m: Module) -> Instr | None:
        """A temp that loop kernel f may write its one result over: one of the same bytes
        that f reads only at the index it writes (through a reshape that keeps its
        bytes, or none) and that no later kernel reads.  Each thread then reads an
        element before it writes it and no other element, and the kernel gets the one
        slot as one pointer (codegen/emitter.py passes a kernel each slot once, so no
        noalias argument aliases another).  A bias and ReLU after a convolution call
        then stay in the bytes the call just wrote, as TF's BiasAdd and Relu work in
        their input's buffer: on [32,64,64,16] after a transposed convolution 153-187
        us into a buffer of their own, 113-115 us over the call's output; on
        [32,32,32,32] 96-126 -> 58-68 us (docs/performance.md, "Rows of 16 floats").
        Not among kernels that hold control flow (their drivers re-point slots between
        calls), nor over a parameter (in a loop body or branch it reads its operand's
        slot, which outlives the body's run).  ``position``: f's place in the schedule."""
        root = f.roots[0]
        if len(f.roots) > 1 or root in self.slots or root in m.outputs or not last_read:
            return None
        index = f.elementwise_at or iteration.row_names(root.rank)
        for v, idxs in iteration.symbolic_reads(f).items():
            x = v.operands[0] if v.op is Op.RESHAPE and v not in self.slots else v
            slots = self.slots.get(x, ())
            if (idxs == {index} and v.shape == root.shape and len(slots) == 1   # (so as many
                    and self.is_temp(slots[0]) and x not in m.outputs          # elements)
                    and x.dtype.itemsize == root.dtype.itemsize
                    and last_read.get(x) == position):
                return x
        return None

    # -- while ----------------------------------------------------------------------
    def place_while(self, f, m: Module, users: dict) -> None:
        w = f.instrs[0]
        cond, body = w.called
        cond_fusions, body_fusions = f.called
        elements = {g.attrs["index"]: g for g in f.roots}
        lp = LoopPlan([], [], -1, [], [], [], [])
        passed_on = []           # (dst, carried index) copied after each body run
        for k, x in enumerate(w.operands):
            p, cp, out = body.params[k], cond.params[k], body.outputs[k]
            src = self.slots[x][0]
            if out is p:
                lp.modes.append("invariant")
                state = src
            else:
                donated = self.donatable(x, w, m, users)
                first = src if donated else self.temp(nbytes(x))
                if not donated:
                    lp.init.append((first, src, nbytes(x)))
                why = _carried_in_place(k, body, body_fusions)
                if why is None:
                    lp.modes.append("in place")
                    state = first
                    self.slots.setdefault(out, []).append(state)
                else:
                    lp.modes.append("double-buffered")
                    state, nxt = self.pointer(), self.pointer()
                    lp.pointers += [(state, first), (nxt, self.temp(nbytes(x)))]
                    lp.swaps.append((state, nxt))
                    if out in body.params:       # the body passes another carried value on
                        passed_on.append((nxt, body.params.index(out), nbytes(x)))
                    else:
                        self.slots.setdefault(out, []).append(nxt)
                    f.notes.append(f"carried value {k} of {w!r} is double-buffered: {why}")
            self.slots[p] = [state]
            self.slots[cp] = [state]
            if k in elements:
                self.slots.setdefault(elements[k], []).insert(0, state)
        lp.copies = [(d, self.slots[body.params[j]][0], n) for d, j, n in passed_on]
        pred = cond.outputs[0]
        self.place(cond, cond_fusions)
        if pred not in self.slots:        # cannot be: an output is a param or a kernel root
            raise AssertionError(f"condition {cond.name} has no buffer for its result")
        lp.pred_slot = self.slots[pred][0]
        self.place(body, body_fusions)
        lp.finals = [(d, self.slots[g][0], nbytes(g)) for g in f.roots for d in self.slots[g][1:]]
        f.notes.append(f"{w!r} carries " + ", ".join(f"{k}: {mode}" for k, mode in enumerate(lp.modes)))
        self.plan.control[f] = lp

    # -- conditional --------------------------------------------------------------------
    def place_conditional(self, f) -> None:
        c = f.instrs[0]
        selector, args = c.operands[0], c.operands[1:]
        elements = {g.attrs["index"]: g for g in f.roots}
        results = []
        for r, (dtype, shape) in enumerate(c.results):
            g = elements.get(r)
            if g is not None and self.slots.get(g):
                results.append(self.slots[g][0])      # e.g. an output buffer: written directly
            else:
                size = dtype.itemsize
                for d in shape:
                    size *= d
                results.append(self.temp(size))
                if g is not None:
                    self.slots[g] = [results[-1]]
        bp = BranchPlan(self.slots[selector][0], [], [])
        for branch, fusions in zip(c.called, f.called):
            for p, x in zip(branch.params, args):
                self.slots[p] = [self.slots[x][0]]
            copies = []
            for r, out in enumerate(branch.outputs):
                if out.op is Op.PARAMETER:
                    copies.append((results[r], self.slots[out][0], nbytes(out)))
                else:
                    self.slots.setdefault(out, []).append(results[r])
            self.place(branch, fusions)
            bp.copies.append(copies)
        bp.finals = [(d, self.slots[g][0], nbytes(g)) for g in f.roots for d in self.slots[g][1:]]
        self.plan.control[f] = bp


# -- sharing temps --------------------------------------------------------------------

ALIGN = abi.ALIGN     # bytes: every temp starts on a cache line (the kernels' loads assume it)


def place_temps(plan: BufferPlan, fusions: list, positions: list | None = None,
                read: dict | None = None) -> None:
    """Offsets of the temps in one arena (``plan.temp_offsets``): temps whose live
    ranges (first to last kernel that touches them) are disjoint may share bytes.

    Kernels run one after another (runtime/launch_op.cc runs a step's shards to the
    end before the next step), so a temp's bytes are free again once the last kernel
    that reads it has run: a temp defined by kernel j may reuse those of one whose
    last reader is before j (never j itself: a kernel may read one input while
    writing its result).  Placement is greedy by size, as TFLite's arena planner:
    the largest temps first, each at the lowest-waste gap among the temps live at
    the same time, else above them all.  (Whole buffers shared between temps, grown
    to fit, left the Keras CNN step 85 MB of temps where 64 MB are live at once;
    offsets give 66.5 MB.)  Clusters with control flow give every temp its own bytes:
    their drivers re-point and swap slots between calls, which live ranges by
    top-level kernel do not see.

    ``positions``: per kernel, when it runs (default: its index).  Kernels of one
    concurrent group (passes/concurrency.py) share a position: their temps are all live
    at once.  ``read``: per kernel, its ``read_values`` where the caller has them.
    """
    sizes = plan.temp_bytes
    first = plan.num_inputs + plan.num_outputs
    start, end = {}, {}

    def touch(slot: int, j: int) -> None:
        if slot >= first and sizes[slot - first] > 0:
            start.setdefault(slot - first, j)
            end[slot - first] = j

    if not any(f.kind in fusion_mod.CONTROL for f in fusions):
        for j, f in zip(positions or range(len(fusions)), fusions):
            for v in [*f.roots, *(read[f] if read is not None else read_values(f, plan.slots))]:
                for slot in plan.slots.get(v, ()):
                    touch(slot, j)
            if f in plan.scratch:
                touch(plan.scratch[f], j)
    offsets = [0] * len(sizes)
    # the temps placed so far: offset, end offset, first and last kernel (numpy: NASNetMobile's
    # train step has 4932 temps, each live beside ~1000 others; a loop over pairs took 40 s)
    placed = np.zeros((4, len(sizes)), dtype=np.int64)
    n = 0
    for t in sorted(range(len(sizes)), key=lambda t: (-sizes[t], start.get(t, -1), t)):
        if sizes[t] == 0:
            continue                 # a pointer slot: its driver sets it
        lo, hi = start.get(t, -1), end.get(t, len(fusions))   # untouched: live throughout
        offsets[t] = _lowest_waste_gap(placed[:, :n], lo, hi, sizes[t])
        placed[:, n] = (offsets[t], offsets[t] + sizes[t], lo, hi)
        n += 1
    plan.temp_offsets = offsets


def _lowest_waste_gap(placed, lo: int, hi: int, size: int) -> int:
    """The offset for a temp of ``size`` bytes live from kernel lo to hi: the smallest gap
    that fits between the placed temps live at the same time (in offset order; the first
    of equal gaps), else the aligned end of the highest."""
    a, b, s, e = placed
    live = (e >= lo) & (s <= hi)
    if not live.any():
        return 0
    a, b = a[live], b[live]
    order = np.lexsort((b, a))
    a, ends = a[order], -(-b[order] // ALIGN) * ALIGN
    tops = np.concatenate(([0], np.maximum.accumulate(ends)[:-1]))   # free from here
    tops = np.maximum(tops, 0)
    gaps = a - tops
    fits = gaps >= size
    if fits.any():
        return int(tops[np.argmin(np.where(fits, gaps, np.iinfo(np.int64).max))])
    return int(max(ends.max(), 0))


def read_values(f, slots: dict) -> set:
    """Values with a buffer that kernel f may read: ``kernel_order.reads(f)`` plus every cheap
    value on the way that has a buffer of its own (a superset is safe here)."""
    out = set(kernel_order.reads(f))
    if f.kind == "library":
        out.update(f.roots[0].operands)
    inside, stack, seen = set(f.instrs), list(f.instrs), set()
    while stack:
        for o in stack.pop().operands:
            if o in inside or o in seen:
                continue
            seen.add(o)
            if o in slots:
                out.add(o)
            if fusion_mod.is_cheap(o):
                stack.append(o)
    return out


def _carried_in_place(k: int, body: Module, fusions: list) -> str | None:
    """None when loop-carried value k can live in one buffer that the body updates in
    place, else why not.

    Safe when the kernel W that writes the next value is the last to read the
    current one, and reads it only where it writes it (an elementwise kernel at the
    same index) or not at all (a dynamic-update-slice of it, which writes only its
    window): then no read ever sees a value of the next iteration.
    """
    p, out = body.params[k], body.outputs[k]
    if fusion_mod.in_memory(out):
        return f"its next value {out!r} is computed by a nested control op"
    if body.outputs.count(out) != 1:
        return f"{out!r} is the next value of several carried values"
    if p in body.outputs:
        return "the body also returns it as another carried value"
    writer = next(n for n, f in enumerate(fusions) if out in f.roots)
    w = fusions[writer]
    for n, f in enumerate(fusions):
        if p not in kernel_order.reads(f):
            continue
        if f.kind in fusion_mod.CONTROL:
            return f"{f.name} (a {f.kind}) reads it"
        if n > writer:
            return f"{f.name} reads it after {w.name} wrote its next value"
    if p not in kernel_order.reads(w):
        return None
    if w.kind == "update":
        dus = w.roots[0]
        others = [i for i in w.instrs if i is not dus and p in i.operands]
        if dus.operands[0] is p and p not in dus.operands[1:] and not others:
            return None
        return f"{w.name} reads it besides updating it"
    # every root is written at the loop's index, the point it reads p at (a kernel of
    # several roots too: an LSTM gradient's cell state writes its next value beside the
    # gate gradients)
    if w.kind == "loop" and all(r.shape == out.shape for r in w.roots) and p.shape == out.shape:
        idx = tuple(f"d{d}" for d in range(out.rank))
        if iteration.symbolic_reads(w).get(p) == {idx}:
            return None
    return f"{w.name} reads it at other indices than it writes"


def _variable_in_place(m: Module, kernels: _Kernels, param: int, value) -> bool:
    """May the new value of variable ``param`` be written over its old value?

    Yes when the old value is dead once the kernel writing the new one has
    read it: no later kernel reads it, and that kernel reads it only at the
    index it writes (a flat elementwise kernel), so no thread overwrites an
    element another still needs.  The launch op still writes a fresh buffer
    when someone else holds the variable's tensor (runtime/launch_op.cc).
    """
    p = m.params[param]
    if value.shape != p.shape or value.dtype is not p.dtype:
        return False
    position = kernels.writer.get(value)
    if position is None:
        return False
    writer = kernels.fusions[position]
    for n in kernels.readers.get(p, ()):
        if n > position or (n == position and not writer.flat):
            return False
    return True


def topk_key_bytes(x) -> int:
    """Bytes of one top-k sort key (codegen/own_kernels.py): a value's monotonic bits over
    the complemented index, 32 + 32 bits, or 64 + 64 for 64-bit values."""
    return 16 if x.dtype.bits == 64 else 8


def topk_row_bytes(root) -> int:
    """Scratch of one top-k kernel row (a chunk of vectors, done one after another):
    a heap of k keys, or two arrays of n keys for a merge sort (``own_rows.topk_merges``)."""
    x = root.operands[0]
    return topk_key_bytes(x) * (2 * x.shape[-1] if topk_merges(root) else root.attrs["k"])
