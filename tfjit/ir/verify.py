"""The IR verifier: structural invariants every pass must keep.

``pipeline.optimize`` runs it after each pass when ``Options.verify`` is on
(``--tfjit_verify_ir``; the tests always turn it on), so a pass that breaks the
module fails at that pass, naming it and the instruction, instead of showing up
as a numeric mismatch three stages later.  Builders (``ir/module.py``) already
check each instruction's shapes and types as it is added; this checks what a
pass can break afterwards by rewiring operands or dropping instructions:

* module: parameters numbered in order and listed; each instruction once, with
  as many operands as its op takes (a rewrite that changes an op in place keeps its
  old operands otherwise, and the dump no longer parses); every operand defined
  earlier in the same computation (topological, no reads of a caller's values); outputs defined; elementwise operands of the result's shape;
  constants holding a value of their shape; while/conditional calls whose
  computations take as many parameters as they are handed;
* fusions: every root computed inside its kernel and written by one kernel only;
  every value a kernel reads from outside it a parameter, a tuple element, an
  earlier kernel's root or a cheap value it recomputes (``fusion.is_cheap``);
  every non-parameter output some kernel's root;
* buffer plan: every root has a slot; temps are aligned and inside the arena.
"""
from __future__ import annotations

from tfjit.ir.module import Module
from tfjit.ir.ops import Kind, Op


class VerifyError(AssertionError):
    """The IR broke an invariant; the message names the pass, computation and value."""


def module(m: Module, after: str = "") -> None:
    """Checks ``m`` and every computation it calls."""
    for c in m.computations() + [m]:
        _computation(c, after)


def _fail(after: str, c: Module, what: str) -> None:
    where = f" after {after}" if after else ""
    raise VerifyError(f"IR verifier{where}: computation {c.name}: {what}")


def _computation(c: Module, after: str) -> None:
    position = {}
    for k, i in enumerate(c.instrs):
        if i in position:
            _fail(after, c, f"{i.name} is listed twice")
        position[i] = k
    for k, p in enumerate(c.params):
        if p.op is not Op.PARAMETER or p.index != k:
            _fail(after, c, f"parameter {k} is {p.name} (index {p.index})")
        if p not in position:
            _fail(after, c, f"parameter {p.name} is not among the instructions")
    listed = set(c.params)
    for i in c.instrs:
        if i.op is Op.PARAMETER and i not in listed:
            _fail(after, c, f"{i.name} is a parameter the computation does not list")
        for o in i.operands:
            if position.get(o, len(c.instrs)) >= position[i]:
                _fail(after, c, f"{i.name} ({i.op.spelling}) reads {o.name}, which is not "
                      "defined before it in this computation")
        _instr(c, i, after)
    for o in c.outputs:
        if o not in position:
            _fail(after, c, f"output {o.name} is not among the instructions")


def _instr(c: Module, i, after: str) -> None:
    if i.op.arity >= 0 and len(i.operands) != i.op.arity:
        _fail(after, c, f"{i.name} ({i.op.spelling}) has {len(i.operands)} operands, not "
              f"{i.op.arity}")
    if i.op is Op.CONSTANT and (i.value is None or tuple(i.value.shape) != tuple(i.shape)):
        _fail(after, c, f"constant {i.name} holds no value of shape {list(i.shape)}")
    if i.op.kind is Kind.ELEMENTWISE:
        for o in i.operands:
            if tuple(o.shape) != tuple(i.shape):
                _fail(after, c, f"elementwise {i.name} ({i.op.spelling}) of shape {list(i.shape)} "
                      f"reads {o.name} of shape {list(o.shape)}")
    if i.op is Op.WHILE:
        for called in i.called:
            if len(called.params) != len(i.operands):
                _fail(after, c, f"{i.name} hands {len(i.operands)} values to {called.name}, "
                      f"which takes {len(called.params)}")
    if i.op is Op.CONDITIONAL:
        for called in i.called:
            if len(called.params) != len(i.operands) - 1:
                _fail(after, c, f"{i.name} hands {len(i.operands) - 1} values to branch "
                      f"{called.name}, which takes {len(called.params)}")
    if i.op is Op.GET_TUPLE_ELEMENT:
        t = i.operands[0]
        if not 0 <= i.attrs.get("index", -1) < len(t.results):
            _fail(after, c, f"{i.name} reads element {i.attrs.get('index')} of {t.name}, "
                  f"which has {len(t.results)}")


def fusions(m: Module, kernels: list, after: str = "fusion", top: bool = True) -> None:
    """Checks the kernels of ``m`` (and those of the computations control kernels call)."""
    from tfjit.passes.fusion import in_memory, is_cheap, output_views
    from tfjit.passes.library_operands import library_source
    written = {}
    for f in kernels:
        inside = set(f.instrs)
        for r in f.roots:
            if r not in inside:
                _fail(after, m, f"kernel {f.name} writes {r.name} but does not compute it")
            if r in written:
                _fail(after, m, f"{r.name} is written by kernels {written[r]} and {f.name}")
            written[r] = f.name
        for i in f.instrs:
            for o in i.operands:
                o = library_source(f, o)        # a chain of reshapes read in place
                if o not in inside and not in_memory(o) and o not in written and not is_cheap(o):
                    _fail(after, m, f"kernel {f.name} reads {o.name}, which no earlier kernel "
                          "writes and which is neither a parameter nor recomputed where read")
        if f.called:
            (control,) = [i for i in f.instrs if i.op in (Op.WHILE, Op.CONDITIONAL)]
            for callee, called in zip(control.called, f.called):
                fusions(callee, called, after, top=False)
    views = output_views(m) if top else {}
    for o in m.outputs:
        if not in_memory(o) and views.get(o, o) not in written:
            _fail(after, m, f"output {o.name} is not written by any kernel")


def buffer_plan(m: Module, kernels: list, plan, align: int, after: str = "buffer-assignment") -> None:
    """Checks that every root has a slot and every temp lies aligned inside the arena."""
    from tfjit.passes.kernel_order import walk
    for f in walk(kernels):
        for r in f.roots:
            if not plan.slots.get(r):
                _fail(after, m, f"{r.name} (a root of {f.name}) has no buffer slot")
    for k, (offset, size) in enumerate(zip(plan.temp_offsets, plan.temp_bytes)):
        if offset % align or offset + size > plan.arena_bytes or size < 0:
            _fail(after, m, f"temp {k} at offset {offset} ({size} bytes) is not {align}-byte "
                  f"aligned inside the {plan.arena_bytes}-byte arena")
    if len(plan.temp_offsets) != len(plan.temp_bytes):
        _fail(after, m, f"{len(plan.temp_bytes)} temps but {len(plan.temp_offsets)} offsets")


def concurrent_groups(m: Module, kernels: list, groups: list, plan, after: str = "concurrency") -> None:
    """Checks that the groups cover the kernels, that no two tasks of one group touch
    the same memory where one of them writes it, and that no kernel reads a temp whose
    bytes another temp took over since it was written."""
    from tfjit.passes.concurrency import clobbered, group_conflicts
    if sum(map(sum, groups)) != len(kernels) or any(n < 1 for tasks in groups for n in tasks):
        _fail(after, m, f"groups {groups} do not cover the {len(kernels)} kernels")
    for a, b, memory in group_conflicts(m, kernels, groups, plan):
        _fail(after, m, f"kernels {a.name} and {b.name} share {memory} in one concurrent group")
    for reader, memory, writer in clobbered(m, kernels, plan):
        _fail(after, m, f"{reader.name} reads {memory} after {writer.name} overwrote its bytes")
    from tfjit.passes.kernel_order import walk
    for f in walk(kernels):                  # a loop body's groups (concurrency.schedule_loops)
        body_groups = getattr(plan.control.get(f), "groups", None)
        if body_groups:
            concurrent_groups(m, f.called[1], body_groups, plan, after)
