"""codegen/llvm_target.py's pipeline: O3 with both vectorisers and full unrolling, but
without LLVM's partial and runtime unrolling (``PIPELINES``; docs/performance.md, "Where
a first call goes", has the compile times and the kernel-speed A/B behind the choice).

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
