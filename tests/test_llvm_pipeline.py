"""codegen/llvm_target.py's pipeline: O3 with both vectorisers and full unrolling, but
without LLVM's partial and runtime unrolling and without loop strength reduction
(``PIPELINES``; docs/performance.md, "Where a first call goes", has the compile times and
the kernel-speed A/B behind the choice).

LLVM's options (partial unrolling, -disable-lsr) are process-wide: a pipeline that does
not ask for one (the NVPTX path's "o3") must get LLVM's own setting back.

A loop LLVM cannot vectorise (a recurrence) over a run-time trip count is what runtime
unrolling copies (into ``.epil``/``.prol`` remainder loops) on CPUs whose target asks for
it; tfjit's default pipeline must leave it alone on every CPU, while a loop of a small
constant trip count (a pooling window) is still unrolled fully.
"""
from __future__ import annotations

import llvmlite.binding as llvm
import pytest
from llvmlite import ir

from tfjit.codegen import llvm_target


def _loop_module(trip_count=None) -> str:
    """``f(x, n)``: x = x * x + 0.5, n times (``trip_count`` times when given), returned."""
    f64 = ir.DoubleType()
    i64 = ir.IntType(64)
    mod = ir.Module(name="loop")
    mod.triple = llvm.get_process_triple()
    fn = ir.Function(mod, ir.FunctionType(f64, [f64, i64]), "f")
    entry, body, done = fn.append_basic_block("entry"), fn.append_basic_block("body"), \
        fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    n = fn.args[1] if trip_count is None else ir.Constant(i64, trip_count)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), body, done)
    b.position_at_end(body)
    i = b.phi(i64)
    x = b.phi(f64)
    nx = b.fadd(b.fmul(x, x), ir.Constant(f64, 0.5))
    ni = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(ir.Constant(i64, 0), entry)
    i.add_incoming(ni, body)
    x.add_incoming(fn.args[0], entry)
    x.add_incoming(nx, body)
    b.cbranch(b.icmp_signed("<", ni, n), body, done)
    b.position_at_end(done)
    out = b.phi(f64)
    out.add_incoming(fn.args[0], entry)
    out.add_incoming(nx, body)
    b.ret(out)
    return str(mod)


def _optimised(text: str, pipeline: str = "default") -> str:
    mod = llvm.parse_assembly(text)
    with llvm_target.LOCK:
        llvm_target.optimise(mod, llvm_target.target_machine(), pipeline)
    return str(mod)


def test_default_pipeline_does_not_runtime_unroll():
    text = _optimised(_loop_module())
    assert ".epil" not in text and ".prol" not in text, text
    assert text.count("fmul") == 1, text      # the body once


def test_small_constant_loops_are_still_unrolled_fully():
    text = _optimised(_loop_module(trip_count=4))
    assert "br " not in text.split("define")[1].split("}")[0].replace("ret", ""), text
    assert text.count("fmul") == 4, text


@pytest.mark.parametrize("pipeline", sorted(llvm_target.PIPELINES))
def test_every_pipeline_runs_and_the_default_is_restored(pipeline):
    """tools/llvm_ab.py switches pipelines in one process: the partial-unrolling option
    is process-wide, and a later default run must be the default again."""
    _optimised(_loop_module(), pipeline)
    text = _optimised(_loop_module())
    assert ".epil" not in text and ".prol" not in text


def _strided_module() -> str:
    """``f(a, b, c, n, s)``: c[5i] = a[s*i] + b[s*i + 3] for i < n: addresses that loop
    strength reduction turns from a multiply per iteration into pointer increments."""
    f32, i64 = ir.FloatType(), ir.IntType(64)
    mod = ir.Module(name="strided")
    mod.triple = llvm.get_process_triple()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [f32.as_pointer()] * 3 + [i64] * 2),
                     "f")
    a, b_, c, n, stride = fn.args
    entry, body, done = (fn.append_basic_block(x) for x in ("entry", "body", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), body, done)
    b.position_at_end(body)
    i = b.phi(i64)
    j = b.mul(i, stride)
    x = b.load(b.gep(a, [j]))
    y = b.load(b.gep(b_, [b.add(j, ir.Constant(i64, 3))]))
    b.store(b.fadd(x, y), b.gep(c, [b.mul(i, ir.Constant(i64, 5))]))
    ni = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(ir.Constant(i64, 0), entry)
    i.add_incoming(ni, body)
    b.cbranch(b.icmp_signed("<", ni, n), body, done)
    b.position_at_end(done)
    b.ret_void()
    return str(mod)


def _assembly(pipeline: str) -> str:
    tm = llvm_target.target_machine()
    with llvm_target.LOCK:
        mod = llvm.parse_assembly(_strided_module())
        llvm_target.optimise(mod, tm, pipeline)
        return tm.emit_assembly(mod)


def test_default_pipeline_skips_loop_strength_reduction_and_others_get_it_back():
    with_lsr = _assembly("o3-nopartial")
    assert _assembly("default") != with_lsr      # -disable-lsr reached code generation
    assert _assembly("o3-nopartial") == with_lsr  # and a pipeline without it has LSR again
    assert _assembly("o3") != _assembly("default")


def test_use_options_restores_the_default_for_assembly_of_optimised_code():
    """``MachineCode.asm`` and the server's "asm" request generate code from optimised IR
    after whatever pipeline ran last (a PTX request's "o3")."""
    default = _assembly("default")
    mod_text = _strided_module()
    tm = llvm_target.target_machine()
    with llvm_target.LOCK:
        mod = llvm.parse_assembly(mod_text)
        llvm_target.optimise(mod, tm)
        optimised = str(mod)
        llvm_target.optimise(llvm.parse_assembly(mod_text), tm, "o3")
        llvm_target.use_options()
        again = tm.emit_assembly(llvm.parse_assembly(optimised))
    assert again == default


def test_the_target_machine_generates_code_at_the_default_pipelines_level():
    assert llvm_target.codegen_level() == llvm_target.PIPELINES["default"].codegen
    assert all(0 <= p.codegen <= 3 for p in llvm_target.PIPELINES.values())
    assert all(o in llvm_target.OPTIONS for p in llvm_target.PIPELINES.values()
               for o, _ in p.options)
