"""The C entry points of an AOT object, generated as LLVM IR next to the kernels.

Generated in LLVM IR (not as C++ source for g++) so ``tfjit-aot`` needs no C
compiler and the artefact is one object file, as with tfcompile.  For an entry
prefix ``p`` the object exports exactly::

    int32_t     p_run_with_temps(void** args, void** results, void* temps);
    int32_t     p_run(void** args, void** results);      /* mallocs its temps */
    const char* p_error_message(int32_t status);
    int64_t     p_temp_bytes(void);

``run_with_temps`` is the launch op's loop, single-threaded: it fills the
kernels' pointer array ``[inputs..., outputs..., temps..., status]`` (see
passes/buffers.py), runs every step over all of its rows in order and stops at
the first step that sets the status word.  Kernels declare every buffer
``noalias align 64``, so the driver refuses (with a status, before any kernel
runs) NULL or misaligned pointers instead of running undefined code.  Outputs
that are plain copies of an input (``output_source``) are copied at the end.

Status codes: 0 success, 1..N the kernels' runtime messages
(``codegen.elemental.MESSAGES`` and what kernels add), then the driver's own
(``DRIVER_MESSAGES``).  The status word is the code of the launch op's TfjitStatus
(64 bytes; values kernels report with an error are not returned here).

On x86-64 the driver sets MXCSR's flush-to-zero and denormals-are-zero bits
while kernels run (and restores the caller's), as TensorFlow's threads do, so
denormal inputs give TF's results.
"""
from __future__ import annotations

import dataclasses
import re

from llvmlite import ir

from tfjit.codegen.llvm_types import I1, I8, I32, I64, PTR, VOID, i64
from tfjit.runtime import abi
from tfjit.runtime.abi import STATUS_BYTES

ALIGN = abi.ALIGN
DRIVER_MESSAGES = ("tfjit AOT: cannot allocate memory for temporary buffers",
                   "tfjit AOT: an argument, result or temp buffer pointer is NULL",
                   "tfjit AOT: an argument, result or temp buffer is not 64-byte aligned")
_MXCSR_FTZ_DAZ = 0x8040


@dataclasses.dataclass
class Layout:
    """What the header needs to know about the driver."""
    temp_bytes: int              # size of the temp arena (0: none)
    temp_offsets: list           # per temp buffer, its offset in the arena
    messages: list               # status code k -> messages[k] (0: "no error")
    oom_status: int
    null_status: int
    misaligned_status: int


def _round_up(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _cstring(module: ir.Module, name: str, text: str) -> ir.GlobalVariable:
    data = bytearray(text.encode("utf-8") + b"\0")
    ty = ir.ArrayType(I8, len(data))
    g = ir.GlobalVariable(module, ty, name=name)
    g.global_constant = True
    g.linkage = "internal"
    g.unnamed_addr = True
    g.initializer = ir.Constant(ty, data)
    return g


def internalize(module: ir.Module) -> None:
    """Hides every defined function: only the driver's entry points are exported."""
    for fn in module.functions:
        if not fn.is_declaration:
            fn.linkage = "internal"


def emit(module: ir.Module, prefix: str, steps: list, plan, output_bytes: list,
         kernel_messages: list, x86: bool) -> Layout:
    """Adds the entry points to ``module`` (whose kernels are ``steps``' symbols)."""
    messages = ["no error"] + list(kernel_messages) + list(DRIVER_MESSAGES)
    base = len(kernel_messages)
    layout = Layout(0, [], messages, base + 1, base + 2, base + 3)
    layout.temp_offsets = list(plan.temp_offsets)     # temps with disjoint lifetimes overlap
    layout.temp_bytes = _round_up(plan.arena_bytes) if plan.temp_bytes else 0
    _emit_run_with_temps(module, prefix, steps, plan, output_bytes, layout, x86)
    _emit_run(module, prefix, layout)
    _emit_error_message(module, prefix, messages)
    fn = ir.Function(module, ir.FunctionType(I64, []), name=f"{prefix}_temp_bytes")
    ir.IRBuilder(fn.append_basic_block("entry")).ret(i64(layout.temp_bytes))
    return layout


def _emit_run_with_temps(module, prefix, steps, plan, output_bytes, layout, x86) -> None:
    fn = ir.Function(module, ir.FunctionType(I32, [PTR, PTR, PTR]), name=f"{prefix}_run_with_temps")
    args, results, temps = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    n_in, n_out = plan.num_inputs, plan.num_outputs
    bufs = b.bitcast(b.alloca(PTR, size=i64(plan.device_slot + 1), name="bufs"), PTR)
    status_slot = b.alloca(I32, size=i64(STATUS_BYTES // 4), name="status")   # a TfjitStatus
    status_slot.align = ALIGN            # kernels see it as a noalias align-64 buffer too
    status = b.bitcast(status_slot, PTR)
    b.store(ir.Constant(I32, 0), status)

    def slot(k):
        return b.gep(bufs, [i64(k)], source_etype=PTR)

    def fail(cond, code: int, label: str):
        bad = b.append_basic_block(label)
        ok = b.append_basic_block(label + ".ok")
        b.cbranch(cond, bad, ok)
        b.position_at_end(bad)
        b.ret(ir.Constant(I32, code))
        b.position_at_end(ok)

    null = ir.Constant(PTR, None)
    for array, count, label in ((args, n_in, "args"), (results, n_out, "results")):
        if count:
            fail(b.icmp_unsigned("==", array, null), layout.null_status, f"{label}.null")
    pointers = []
    for k in range(n_in):
        pointers.append((k, b.load(b.gep(args, [i64(k)], source_etype=PTR), typ=PTR)))
    for k in range(n_out):
        pointers.append((n_in + k, b.load(b.gep(results, [i64(k)], source_etype=PTR), typ=PTR)))
    if plan.temp_bytes:
        for t, offset in enumerate(layout.temp_offsets):
            pointers.append((n_in + n_out + t, b.gep(temps, [i64(offset)], source_etype=I8)))
        any_null = b.icmp_unsigned("==", temps, null)
        misaligned = _misaligned(b, temps)
    else:
        any_null, misaligned = ir.Constant(I1, 0), ir.Constant(I1, 0)
    for k, p in pointers[:n_in + n_out]:
        any_null = b.or_(any_null, b.icmp_unsigned("==", p, null))
        misaligned = b.or_(misaligned, _misaligned(b, p))
    fail(any_null, layout.null_status, "null")
    fail(misaligned, layout.misaligned_status, "misaligned")
    for k, p in pointers:
        b.store(p, slot(k))
    b.store(status, slot(plan.status_slot))
    b.store(null, slot(plan.device_slot))   # no thread pool: library calls run inline

    saved = _set_flush_denormals(b) if x86 else None
    exit_block = fn.append_basic_block("exit")
    incoming = []
    for n, (symbol, rows, _cost) in enumerate(steps):
        if rows <= 0:
            continue
        kernel = module.globals[symbol]
        b.call(kernel, [bufs, i64(0), i64(rows)])
        code = b.load(status, typ=I32)
        nxt = b.append_basic_block(f"step{n}.ok")
        incoming.append((code, b.block))
        b.cbranch(b.icmp_unsigned("!=", code, ir.Constant(I32, 0)), exit_block, nxt)
        b.position_at_end(nxt)
    for o, src in enumerate(plan.output_source):
        if src >= 0 and output_bytes[o]:
            dst = pointers[n_in + o][1]
            _memcpy(b, dst, pointers[src][1], output_bytes[o])
    incoming.append((ir.Constant(I32, 0), b.block))
    b.branch(exit_block)
    b.position_at_end(exit_block)
    result = b.phi(I32, name="result")
    for value, block in incoming:
        result.add_incoming(value, block)
    if saved is not None:
        _ldmxcsr(b, saved)
    b.ret(result)


def _misaligned(b, p):
    return b.icmp_unsigned("!=", b.and_(b.ptrtoint(p, I64), i64(ALIGN - 1)), i64(0))


def _memcpy(b, dst, src, nbytes: int) -> None:
    name = "llvm.memcpy.p0.p0.i64"
    fn = b.module.globals.get(name) or ir.Function(
        b.module, ir.FunctionType(VOID, [PTR, PTR, I64, I1]), name=name)
    b.call(fn, [dst, src, i64(nbytes), ir.Constant(I1, 0)])


def _mxcsr_call(b, which: str, slot) -> None:
    name = f"llvm.x86.sse.{which}"
    fn = b.module.globals.get(name) or ir.Function(b.module, ir.FunctionType(VOID, [PTR]), name=name)
    b.call(fn, [slot])


def _set_flush_denormals(b):
    """Saves MXCSR and sets FTZ|DAZ; returns the slot holding the caller's value."""
    saved = b.alloca(I32, name="mxcsr.saved")
    mine = b.alloca(I32, name="mxcsr.mine")
    _mxcsr_call(b, "stmxcsr", saved)
    b.store(b.or_(b.load(saved, typ=I32), ir.Constant(I32, _MXCSR_FTZ_DAZ)), mine)
    _mxcsr_call(b, "ldmxcsr", mine)
    return saved


def _ldmxcsr(b, slot) -> None:
    _mxcsr_call(b, "ldmxcsr", slot)


def _emit_run(module, prefix, layout) -> None:
    """``run``: a malloc'd, 64-byte aligned arena for the temps, freed before returning."""
    fn = ir.Function(module, ir.FunctionType(I32, [PTR, PTR]), name=f"{prefix}_run")
    args, results = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    inner = module.globals[f"{prefix}_run_with_temps"]
    if not layout.temp_bytes:
        b.ret(b.call(inner, [args, results, ir.Constant(PTR, None)]))
        return
    malloc = module.globals.get("malloc") or ir.Function(module, ir.FunctionType(PTR, [I64]), name="malloc")
    free = module.globals.get("free") or ir.Function(module, ir.FunctionType(VOID, [PTR]), name="free")
    raw = b.call(malloc, [i64(layout.temp_bytes + ALIGN - 1)])
    with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(PTR, None)), likely=False):
        b.ret(ir.Constant(I32, layout.oom_status))
    skip = b.and_(b.sub(i64(0), b.ptrtoint(raw, I64)), i64(ALIGN - 1))
    arena = b.gep(raw, [skip], source_etype=I8)
    code = b.call(inner, [args, results, arena])
    b.call(free, [raw])
    b.ret(code)


def _emit_error_message(module, prefix, messages) -> None:
    """The messages as static texts: a kernel's ``{i}`` (a value the JIT's launch op
    prints) reads as ``?`` (this C API returns no values)."""
    messages = [re.sub(r"\{[0-6]\}", "?", m) for m in messages]
    strings = [_cstring(module, f"{prefix}.message.{k}", m) for k, m in enumerate(messages)]
    table_ty = ir.ArrayType(PTR, len(strings))
    table = ir.GlobalVariable(module, table_ty, name=f"{prefix}.messages")
    table.global_constant = True
    table.linkage = "internal"
    table.initializer = ir.Constant(table_ty, [s.bitcast(PTR) for s in strings])
    unknown = _cstring(module, f"{prefix}.message.unknown", "unknown tfjit AOT status code")
    fn = ir.Function(module, ir.FunctionType(PTR, [I32]), name=f"{prefix}_error_message")
    code, = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with b.if_then(b.icmp_unsigned(">=", code, ir.Constant(I32, len(strings))), likely=False):
        b.ret(unknown.bitcast(PTR))
    index = b.zext(code, I64)
    b.ret(b.load(b.gep(table, [i64(0), index], source_etype=table_ty), typ=PTR))
