"""Concurrent kernels: groups of kernels that share no memory, run at the same time.

The launch op runs a cluster's kernels one after another, each split over the
intra-op threads when it is big enough (runtime/parallel.cc).  A model of many
small library calls gains nothing from that: InceptionV3's predict at batch 4 ran
26.0 ms per call with one intra-op thread and 27.7 ms with two on a 2-core
machine (scratch measurement, 2026-12-05), because a [4, 9, 9, 96] convolution
takes as long on two threads as on one.  Its modules are four branches of
convolutions that share nothing: XLA's CPU runtime runs such independent thunks
concurrently, and this pass lets the launch op do the same.

After buffer assignment, every kernel's reads and writes are known as memory:
parameters, outputs (an updated variable's output is its input's buffer when it
may be updated in place) and temps.  Kernel b depends on an earlier kernel a when
one of them writes memory the other reads or writes.  Any order that keeps every
such pair in order computes what the schedule computed.  ``schedule`` walks the
kernels as they become ready and forms *groups of tasks*: each task a chain of
kernels that depends only on kernels already run and on its own earlier kernels (a
branch of an Inception module, from its first convolution to the concatenation), no
task on another.  The launch op runs a group's tasks at once, each on one thread with
TF's library kernels held to that thread (runtime/parallel.cc ``RunGroup``), where
its intra-op pool has no more threads than the group has tasks; otherwise, and for
every kernel outside a group, one kernel at a time as before.  A group is made only
where the estimated work pays for waking a thread (``concurrent``).

Temps were placed (``buffers.place_temps``) for the old order, sharing bytes between
temps whose lifetimes did not overlap in it.  The dependencies above count each temp
as memory of its own, and the temps are placed again for the new order with every
kernel of one group at one position, so the temps one group touches never share
bytes.  The verifier (ir/verify.py ``concurrent_groups``) checks both properties on
the result: no two tasks of a group touch the same bytes where one writes them
(``group_conflicts``), and no kernel reads a temp whose bytes were taken over since
it was written (``clobbered``).

Clusters with control flow keep their top-level schedule: their drivers re-point and
swap slots between calls, which the slot-level view below does not see.  Within one
run of a while body the slots do not move, so a body is regrouped the same way
(``schedule_loops``) and its driver runs the groups (codegen/control.py).  Targets
without the launch op (AOT objects, GPU modules) run the new order one kernel at a
time, which is equally correct.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from tfjit.passes import buffers
from tfjit.passes import cost as cost_mod
from tfjit.passes import fusion as fusion_mod
from tfjit.passes import kernel_order

# Rough single-thread rates for the estimate below (ns per unit): what matters is the
# order of magnitude, to tell a kernel worth a thread (a convolution of a few hundred
# microseconds) from one that is not (a bias add of a few microseconds).
LIBRARY_FLOPS_PER_NS = 40.0     # TF's convolution and matmul kernels on one core
LOOP_FLOPS_PER_NS = 8.0         # tfjit's vectorised loops
BYTES_PER_NS = 10.0             # memory traffic of one core
TRANSCENDENTAL_FLOPS = 10       # an exp or a tanh counts as this many flops

# A group runs concurrently only when that can pay for waking a thread and joining
# it again (~10-20 us on a 2-core VM): at least MIN_GROUP_NS of estimated work, and
# the kernels besides the largest at least MIN_SHARE of the largest (otherwise the
# largest runs on one thread while the others idle, where alone it would have been
# split over all of them).  The work counted is the library calls' (convolutions,
# matmuls): tfjit's own loops and reductions split over the threads well on their
# own.  Counting them too made 60 groups of two batch-norm reductions in DenseNet121's
# train step, which ran 1.04x -> 0.94x XLA with them (tools/zoo_bench.py).
MIN_GROUP_NS = 50_000
MIN_SHARE = 0.25

# A task grows by at most this many kernels. An Inception branch is 2-9; without a bound,
# a task seeded by a train step's forward chain grew through the rest of the step at
# every try (DenseNet121's train step, 3667 kernels: 4.0 s of 4.8 in this pass).
MAX_TASK_KERNELS = 64


@dataclasses.dataclass
class Schedule:
    """The kernels in run order and how they group: ``groups`` lists, per group, its
    tasks' numbers of consecutive kernels of ``fusions`` ([1]: one kernel alone).  The
    tasks of a group may run concurrently, each task's kernels in order."""
    fusions: list
    groups: list
    estimates: dict            # kernel -> estimated ns on one thread

    def concurrent(self) -> list:
        """The groups of more than one task, as lists of tasks (lists of kernels)."""
        out, at = [], 0
        for tasks in self.groups:
            if len(tasks) > 1:
                out.append([])
                for n in tasks:
                    out[-1].append(self.fusions[at:at + n])
                    at += n
            else:
                at += tasks[0]
        return out


def estimate_ns(f, read: set) -> float:
    """Estimated time of kernel f, which reads the buffers of ``read``, on one thread, in
    ns (order of magnitude): cost.instr_cost of its own instructions (not the cheap ones
    it recomputes, which passes/cost.py finds by a walk that cost this pass most of its
    time), and the bytes it reads and writes."""
    flops = sum(a + TRANSCENDENTAL_FLOPS * b for a, b in map(cost_mod.instr_cost, f.instrs))
    moved = sum(buffers.nbytes(v) for v in read) + sum(buffers.nbytes(r) for r in f.roots)
    rate = LIBRARY_FLOPS_PER_NS if f.kind == "library" else LOOP_FLOPS_PER_NS
    return flops / rate + moved / BYTES_PER_NS


def schedule_loops(m, fusions: list, plan) -> None:
    """Each while body's kernels regrouped as ``schedule`` does the top level's, in place
    (the while's ``called`` body and its LoopPlan's ``groups``; codegen/control.py runs
    a group through the op library's run_group).  A body's kernels run once per
    iteration on the memory the driver points them at, which does not change during a
    run of the body (double-buffered values swap pointers between runs), so slots are
    the body's memory as they are the top level's; and every temp of a module with
    control flow has bytes of its own (buffers.place_temps), so nothing is placed again.
    A ConvLSTM2D's gradient step is twelve convolutions that depend on three inputs,
    which TF's executor ran two at a time beside its other ops, and tfjit one after
    another.  Bodies that hold control flow keep their schedule."""
    for f in kernel_order.walk(fusions):
        if f.kind != "while" or len(f.called) < 2:
            continue
        body = f.called[1]
        if any(g.kind in fusion_mod.CONTROL for g in body):
            continue
        s = schedule(m, body, plan, place=False)
        if any(len(tasks) > 1 for tasks in s.groups):
            body[:] = s.fusions
            plan.control[f].groups = s.groups


def schedule(m, fusions: list, plan, place: bool = True) -> Schedule:
    """The kernels regrouped into concurrent groups of independent chains.

    Greedy, in schedule order: the kernels whose dependencies have all run seed one
    task each (when there are two or more); a kernel then joins a task when everything
    it depends on has run or is in that one task (a branch of an Inception module, say,
    from its first convolution to the concatenation that joins the branches).  The
    group runs concurrently when ``concurrent`` finds its tasks worth it; otherwise the
    ready kernels run one at a time and their users seed the next try (an InceptionV3
    module starts with one convolution, which its branches' 1x1 convolutions became;
    the branches part after it).  ``place``: place the temps again for the new order
    (not for a loop body: see ``schedule_loops``)."""
    if len(fusions) < 2 or any(f.kind in fusion_mod.CONTROL for f in fusions):
        return Schedule(list(fusions), [[1]] * len(fusions), {})
    read = {f: {v for v in buffers.read_values(f, plan.slots) if v in plan.slots} for f in fusions}
    estimates = {f: estimate_ns(f, read[f]) for f in fusions}
    deps = dependencies(m, fusions, plan, read)
    users: list = [[] for _ in fusions]
    for j, d in enumerate(deps):
        for i in d:
            users[i].append(j)
    waiting = [len(d) for d in deps]      # dependencies not yet run, per kernel
    ready = [j for j in range(len(fusions)) if not waiting[j]]
    order, groups, positions = [], [], []
    placed = [False] * len(fusions)
    while ready:
        ready.sort()
        if len(ready) == 1:
            tasks = [[ready[0]]]
        else:
            tasks = _grow_tasks(ready, deps, users, placed)
        members = sorted(j for t in tasks for j in t)
        # what concurrency gains: the library calls' time (tfjit's own loops and
        # reductions split over the threads well on their own); what it costs: those
        # loops, held to their task's one thread
        times = [sum(estimates[fusions[j]] for j in t if fusions[j].kind == "library") for t in tasks]
        loops = [sum(estimates[fusions[j]] for j in t if fusions[j].kind != "library") for t in tasks]
        if len(tasks) > 1 and concurrent(times, loops):
            tasks = [t for _, t in sorted(zip(times, tasks), key=lambda p: (-p[0], p[1]))]   # largest first
            groups.append([len(t) for t in tasks])
            order += [fusions[j] for t in tasks for j in t]
            positions += [len(groups)] * len(members)
        else:       # the ready kernels alone: their users may seed a better group
            members = list(ready)
            for j in members:
                groups.append([1])
                order.append(fusions[j])
                positions.append(len(groups))
        for j in members:
            placed[j] = True
        for j in members:
            for u in users[j]:
                waiting[u] -= 1
                if not waiting[u] and not placed[u]:
                    ready.append(u)
        ready = sorted(set(j for j in ready if not placed[j]))
    if place and (order != list(fusions) or len(groups) < len(order)):
        # lifetimes by the new positions: the kernels of one group are one position, so
        # the temps they touch never share bytes (the dependencies above ignored sharing)
        buffers.place_temps(plan, order, positions, read)
    return Schedule(order, groups, estimates)

def _grow_tasks(ready: list, deps: list, users: list, placed: list) -> list:
    """One task per ready kernel, each grown by the kernels that depend only on kernels
    already run and on that task's kernels; tasks as sorted lists of kernel positions."""
    task_of = {j: k for k, j in enumerate(ready)}
    tasks = [[j] for j in ready]
    work = list(ready)
    while work:
        for u in users[work.pop()]:
            if placed[u] or u in task_of:
                continue
            owners = set()
            for d in deps[u]:
                if not placed[d]:
                    owners.add(task_of.get(d, -1))
            if len(owners) == 1 and -1 not in owners and len(tasks[min(owners)]) < MAX_TASK_KERNELS:
                k = owners.pop()
                task_of[u] = k
                tasks[k].append(u)
                work.append(u)
    return [sorted(t) for t in tasks]


def concurrent(times: list, loops: list | None = None) -> bool:
    """Are tasks with these estimated times of their library calls (and of their own
    loop and reduction kernels, ``loops``) worth running concurrently?  Besides enough
    balanced library work, the group's longest task, loops included, must take no longer
    than the tasks one kernel at a time with the loops split over two threads: Keras's
    Attention beside AdditiveAttention (three small batched products against a 1M-tanh
    reduction) ran 0.74 ms as a group, 0.57 one kernel at a time."""
    if len(times) < 2:
        return False
    total, largest = sum(times), max(times)
    if total < MIN_GROUP_NS or total - largest < MIN_SHARE * largest:
        return False
    loops = loops or [0.0] * len(times)
    return max(t + u for t, u in zip(times, loops)) <= total + sum(loops) / 2


def dependencies(m, fusions: list, plan, read: dict | None = None) -> list:
    """Per kernel (by position), the earlier kernels it must follow: those that write
    memory it reads or writes, or read memory it writes.  Temps count as memory of their
    own, not as the arena bytes they share with others: ``schedule`` places the temps
    again for the new order."""
    reads, writes = _accesses(m, fusions, plan, read)
    aliases: dict = {}
    last_writer: dict = {}         # memory -> the last kernel that wrote it
    readers: dict = {}             # memory -> kernels that read it since
    deps = []
    for j in range(len(fusions)):
        d = set()
        for r in reads[j]:
            for a in aliases.get(r, (r,)):
                if a in last_writer:
                    d.add(last_writer[a])
        for w in writes[j]:
            for a in aliases.get(w, (w,)):
                if a in last_writer:
                    d.add(last_writer[a])
                d.update(readers.get(a, ()))
        for r in reads[j]:
            readers.setdefault(r, []).append(j)
        for w in writes[j]:
            last_writer[w] = j
            readers[w] = []
        d.discard(j)
        deps.append(d)
    return deps


def _accesses(m, fusions: list, plan, read: dict | None = None) -> tuple:
    """Per kernel, the memory it reads and the memory it writes: ("in", k) for input k
    (and an update written in place into variable input k), ("out", o) for output o,
    ("temp", t) for temp t."""
    n_in, n_out = plan.num_inputs, plan.num_outputs
    counts = len(set(m.output_rows.values()))           # row counts: the last outputs
    first_update = n_out - counts - len(m.updates)      # variable updates: just before

    def memory(slot: int):
        if slot < n_in:
            return ("in", slot)
        if slot < n_in + n_out:
            o = slot - n_in
            if first_update <= o < first_update + len(m.updates):
                return ("in", m.updates[o - first_update])   # maybe the variable's own buffer
            return ("out", o)
        return ("temp", slot - n_in - n_out)

    reads, writes = [], []
    for f in fusions:
        values = read[f] if read is not None else buffers.read_values(f, plan.slots)
        r = {memory(plan.slots[v][0]) for v in values if v in plan.slots}
        w = {memory(s) for root in f.roots for s in plan.slots.get(root, ())}
        if f in plan.scratch:
            w.add(memory(plan.scratch[f]))
        reads.append(r)
        writes.append(w)
    return reads, writes


def _aliases(plan) -> dict:
    """("temp", t) -> every temp whose arena bytes overlap t's (itself included), for the
    temps that share bytes with another."""
    sizes = np.asarray(plan.temp_bytes, dtype=np.int64)
    offsets = np.asarray(plan.temp_offsets, dtype=np.int64)
    live = np.nonzero(sizes > 0)[0]
    order = live[np.argsort(offsets[live], kind="stable")]
    out: dict = {}
    active: list = []          # temps seen so far whose bytes reach past the current offset
    for t in order:
        start = offsets[t]
        active = [u for u in active if offsets[u] + sizes[u] > start]
        for u in active:
            out.setdefault(("temp", int(u)), [("temp", int(u))]).append(("temp", int(t)))
            out.setdefault(("temp", int(t)), [("temp", int(t))]).append(("temp", int(u)))
        active.append(t)
    return out


def step_marks(groups: list, per_kernel: list) -> list:
    """The launch op's (group, task) per step (abi.h's TfjitStep) for ``groups`` (per
    group, its tasks' numbers of kernels) of kernels with ``per_kernel`` steps each.  A
    group whose steps belong to fewer than two tasks is no group."""
    marks, at = [], 0
    for tasks in groups:
        steps = []
        for n in tasks:
            steps.append(sum(per_kernel[at:at + n]))
            at += n
        if sum(1 for c in steps if c) < 2:
            marks += [(0, 0)] * sum(steps)
            continue
        start = len(marks)
        for c in steps:
            for k in range(c):
                marks.append((sum(steps) if len(marks) == start else 0, c if k == 0 else 0))
    return marks


def group_conflicts(m, fusions: list, groups: list, plan) -> list:
    """(kernel, kernel, memory) for every two kernels of different tasks of one group
    where one writes memory (arena bytes included) that the other reads or writes: what
    the launch op must never run at once."""
    reads, writes = _accesses(m, fusions, plan)
    aliases = _aliases(plan)

    def cover(mem: set) -> set:
        return {a for x in mem for a in aliases.get(x, (x,))}

    out, at = [], 0
    for tasks in groups:
        task_of = []
        for k, n in enumerate(tasks):
            task_of += [k] * n
        for a in range(len(task_of)):
            wa = cover(writes[at + a])
            for b in range(a + 1, len(task_of)):
                if task_of[a] == task_of[b]:
                    continue
                clash = (wa & (reads[at + b] | writes[at + b])) | (cover(writes[at + b]) & reads[at + a])
                if clash:
                    out.append((fusions[at + a], fusions[at + b], min(clash)))
        at += len(task_of)
    return out


def clobbered(m, fusions: list, plan) -> list:
    """(reader, memory, writer) wherever kernel ``reader`` reads a temp whose arena bytes
    kernel ``writer`` overwrote after the temp was last written: a placement of temps
    that does not fit the run order."""
    reads, writes = _accesses(m, fusions, plan)
    aliases = _aliases(plan)
    spoiled: dict = {}          # temp -> the kernel that overwrote its bytes since
    out = []
    for j in range(len(fusions)):
        for r in reads[j]:
            if r in spoiled and r not in writes[j]:
                out.append((fusions[j], r, fusions[spoiled[r]]))
        for w in writes[j]:
            spoiled.pop(w, None)
            for a in aliases.get(w, ()):
                if a != w:
                    spoiled[a] = j
    return out
