"""Kernels that are the same code share one body, found before or after emitting it.

A CPU kernel is a wrapper, which loads its buffers' pointers from the launch's
array (its slots), and a ``.body`` that runs its rows on them.  A model's repeated
blocks (ConvNeXt's eighteen, ResNet's sixteen) make kernels that differ only in
their buffers: their bodies are the same code, and LLVM needs to optimise and
generate it once.  Two ways to find them, both here:

- **after emitting** (``share_body``): a body whose text equals an earlier one's
  (its name aside) is dropped and its wrapper calls the earlier one.  Always right,
  but every body is built by llvmlite's Python IR builder and printed first: a
  ConvNeXtTiny forward spent 7 of its 18 s of first call so, on 18 copies of four
  bodies of ~8500 instructions each.
- **before emitting** (``body_key``): a key of everything the body's code depends
  on (the instructions it computes, with their shapes, attributes and constants;
  the kernel's iteration choices; which of its arguments each read and result
  lives in).  A later kernel with the same key gets only its wrapper, calling the
  body its key's first kernel calls.  A body is registered under its key only when
  it names nothing of its own beyond its functions (no constant table, no first use
  of a math helper) and reports no error (an error's text names its TF node).

With ``Target.verify_sharing`` (``--tfjit_verify_ir``, which the test suite turns on)
every body is emitted anyway
and a key's kernels must have got bodies of the same text: a key that misses
something a body depends on fails the tests that compile such kernels, not a user's
numbers.
"""
from __future__ import annotations

import hashlib
import re

import numpy as np
from llvmlite import ir

from tfjit.ir.module import Instr
from tfjit.ir.ops import Op
from tfjit.passes.fusion import Fusion, KernelKind, is_cheap
from tfjit.passes.kernel_order import reads

KEYED = (KernelKind.LOOP, KernelKind.REDUCE)     # emitter.KernelEmitter's kinds


class SharingError(AssertionError):
    """Two kernels with one key emitted different bodies (a bug in body_key)."""


def share_body(module: ir.Module, symbol: str, bodies: dict) -> None:
    """Makes kernel ``symbol`` call an earlier kernel's body when its own is the same text
    (its name aside), and drops its own.  A shared body is not inlined (``noinline``):
    inlined, LLVM would optimise a copy per caller again; the cost is one call per shard
    of rows.  Equal text is the test, so a body that names anything of its own (a
    constant table, a helper function) is never shared this way."""
    body = module.globals.get(symbol + ".body")
    if not isinstance(body, ir.Function):
        return
    key = _loop_ids_by_hints(module, str(body).replace(f'@"{body.name}"', "@body", 1))
    first = bodies.setdefault(key, body)
    if first is body:
        return
    wrapper = module.globals[symbol]
    for block in wrapper.blocks:
        for instr in block.instructions:
            if isinstance(instr, ir.CallInstr) and instr.callee is body:
                instr.replace_callee(first)
    del module.globals[body.name]
    mark_shared(first)


def _loop_ids_by_hints(module: ir.Module, text: str) -> str:
    """``text`` with each loop's ID (``!llvm.loop !N``) spelled as its hints.  A loop ID
    is a distinct node numbered in module order (llvm_types.no_unroll, no_vectorize),
    so equal bodies name different ones; their hint nodes are shared, one per kind."""
    ids = {md.name: md for md in module.metadata}

    def hints(m):
        md = ids.get(m.group(1))
        return m.group(0) if md is None else "!llvm.loop {" + ", ".join(
            o.get_reference() for o in md.operands) + "}"
    return re.sub(r"!llvm\.loop !(\d+)", hints, text)


def mark_shared(body: ir.Function) -> None:
    body.attributes.discard("alwaysinline")
    body.attributes.add("noinline")


def first_difference(module: ir.Module, a: dict, b: dict) -> str:
    """Where two kernels' bodies ({suffix: body}) first differ, for SharingError."""
    for suffix in sorted(set(a) | set(b)):
        x, y = a.get(suffix), b.get(suffix)
        if x is None or y is None:
            return f"no {suffix or 'main'} body in one of them"
        lines = zip(_loop_ids_by_hints(module, str(x).replace(x.name, "@body")).splitlines(),
                    _loop_ids_by_hints(module, str(y).replace(y.name, "@body")).splitlines())
        for k, (p, q) in enumerate(lines):
            if p != q:
                return f"{suffix or 'main'} body line {k}: {p.strip()!r} vs {q.strip()!r}"
    return "the same text, other functions"


def called_body(module: ir.Module, symbol: str) -> ir.Function | None:
    """The body wrapper ``symbol`` calls (after ``share_body``, maybe another kernel's)."""
    for block in module.globals[symbol].blocks:
        for instr in block.instructions:
            if isinstance(instr, ir.CallInstr) and isinstance(instr.callee, ir.Function):
                return instr.callee
    return None


def body_key(f: Fusion, plan) -> tuple:
    """What the body of loop or reduce kernel ``f`` is made of, as a hashable value.

    The instructions the body computes (``f.instrs`` and the cheap ones outside that it
    recomputes, as ``kernel_order.reads`` walks them) are numbered in a canonical depth-first
    order and described by op, type, attributes and constant values, with operands as
    numbers; each value it loads instead (``reads``) by type and the positions of its
    slots among the body's arguments (the sorted slots, see ``KernelEmitter._function``),
    as are the roots, the status word and the scratch area."""
    loaded = reads(f)
    inside = set(f.instrs)
    slots = sorted({s for i in loaded | set(f.roots) for s in plan.slots[i]}
                   | {plan.status_slot} | ({plan.scratch[f]} if f in plan.scratch else set()))
    rank = {s: k for k, s in enumerate(slots)}
    number: dict = {}
    nodes: list = []

    def visit(i: Instr) -> int:
        if i in number:
            return number[i]
        if i in loaded:
            desc = ("read", i.dtype.name, i.shape, tuple(rank[s] for s in plan.slots[i]))
        else:
            if i not in inside and not is_cheap(i):       # kernel_order.reads' rule, checked
                raise SharingError(f"{i!r} is neither computed nor read by {f.name}")
            operands = tuple(visit(o) for o in i.operands)
            desc = ("in" if i in inside else "cheap", i.op.spelling, i.dtype.name, i.shape,
                    tuple((d.name, s) for d, s in i.results), operands, _value(i.attrs),
                    _value(i.value) if i.op is Op.CONSTANT else None, i.index)
        number[i] = len(nodes)
        nodes.append(desc)
        return number[i]

    for i in f.instrs:
        visit(i)
    return (f.kind.value, f.shape, f.outer, f.flat, f.split, f.column, f.column_block,
            f.column_rows, f.elementwise_at, tuple(nodes), tuple(visit(r) for r in f.roots),
            tuple(visit(h) for h in f.hoisted),
            tuple(rank[s] for r in f.roots for s in plan.slots[r]), rank[plan.status_slot],
            rank[plan.scratch[f]] if f in plan.scratch else None)


def _value(v):
    """A hashable, exact stand-in for an attribute or constant value."""
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.dtype.name, v.shape,
                hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest())
    if isinstance(v, dict):
        return tuple(sorted((k, _value(x)) for k, x in v.items()))
    if isinstance(v, (tuple, list)):
        return (type(v).__name__,) + tuple(_value(x) for x in v)
    if isinstance(v, Instr):
        raise SharingError(f"an attribute names instruction {v!r}")
    if isinstance(v, float):
        return ("float", v.hex() if v == v else "nan")
    return (type(v).__name__, repr(v))
