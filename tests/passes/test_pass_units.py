"""Pass-level tests: IR text in, one pass (or the pipeline up to it), assertions on
what it produced -- instruction counts, kernel kinds and notes, buffer slots -- with
the verifier checking each result, as XLA's pass tests parse HLO text and run one
pass.  No TensorFlow: a pass bug shows up here, at the pass, not as a numeric
mismatch three stages later."""
from __future__ import annotations

import pytest

from tfjit import pipeline
from tfjit.ir import verify
from tfjit.ir.ops import Op
from tfjit.ir.parse import parse_module
from tfjit.passes import buffers, fusion
from tfjit.passes.kernels import FLAT_BLOCK
from tfjit.passes.simplify import CSE, DCE

DENSE = """module dense {
  %p0 = f32[4,8] parameter(0)
  %p1 = f32[8,3] parameter(1)
  %p2 = f32[3] parameter(2)
  %dot.3 = f32[4,3] dot(%p0, %p1), transpose_lhs=0, transpose_rhs=0
  %broadcast.4 = f32[4,3] broadcast(%p2), dims={1}
  %add.5 = f32[4,3] add(%dot.3, %broadcast.4)
  %constant.6 = f32[] constant(0.0)
  %broadcast.7 = f32[4,3] broadcast(%constant.6), dims={}
  %maximum.8 = f32[4,3] maximum(%add.5, %broadcast.7)
  %broadcast.9 = f32[4,3] broadcast(%p2), dims={1}
  %add.10 = f32[4,3] add(%dot.3, %broadcast.9)
  %exp.11 = f32[4,8] exp(%p0)
  %reduce.12 = f32[4] reduce(%maximum.8), kind=sum, ndims=1
  ROOT (%maximum.8, %reduce.12, %add.10)
}
"""

SOFTMAX = """module softmax {
  %p0 = f32[4,8] parameter(0)
  %reduce.0 = f32[4] reduce(%p0), kind=maxnum, ndims=1
  %broadcast.1 = f32[4,8] broadcast(%reduce.0), dims={0}
  %subtract.2 = f32[4,8] subtract(%p0, %broadcast.1)
  %exp.3 = f32[4,8] exp(%subtract.2)
  %reduce.4 = f32[4] reduce(%exp.3), kind=sum, ndims=1
  %broadcast.5 = f32[4,8] broadcast(%reduce.4), dims={0}
  %divide.6 = f32[4,8] divide(%exp.3, %broadcast.5)
  ROOT (%divide.6)
}
"""


def ops(m) -> list:
    return [i.op for i in m.instrs]


def test_cse_merges_the_repeated_bias_add_and_dce_drops_the_dead_exp():
    m = parse_module(DENSE)
    assert CSE().run(m) is True
    verify.module(m, "cse")
    assert m.outputs[2] is m.outputs[0].operands[0]          # add.10 is now add.5
    assert DCE().run(m) is True
    verify.module(m, "dce")
    assert Op.EXP not in ops(m)
    assert ops(m).count(Op.ADD) == 1 and ops(m).count(Op.BROADCAST) == 2
    assert CSE().run(m) is False and DCE().run(m) is False   # a fixed point


def test_fusion_puts_the_dot_in_a_library_kernel_and_the_epilogue_in_one_loop():
    o = pipeline.optimize(parse_module(DENSE), pipeline.Options(verify=True))
    kinds = [f.kind for f in o.fusions]
    assert kinds.count("library") == 1, kinds
    (lib,) = [f for f in o.fusions if f.kind == "library"]
    assert lib.roots[0].op is Op.DOT
    rest = [f for f in o.fusions if f.kind != "library"]
    # bias add, relu and the row sum read the dot's result once, in kernels after it
    assert all(o.fusions.index(f) > o.fusions.index(lib) for f in rest)
    assert {r.op for f in rest for r in f.roots} <= {Op.MAX, Op.ADD, Op.REDUCE}


def test_softmax_is_one_loop_kernel_hoisting_both_reductions():
    o = pipeline.optimize(parse_module(SOFTMAX), pipeline.Options(verify=True))
    (f,) = o.fusions
    assert f.kind == "loop"
    assert [h.attrs["kind"] for h in f.hoisted] == ["maxnum", "sum"]
    assert not o.plan.temp_bytes                    # nothing goes through memory


def _scaled_by_a_sum(shape: str, reduced: str, ndims: int, dims: str) -> str:
    """x * sum(y): y [reduced] summed over its last ``ndims`` dims, broadcast to x."""
    out = "f32[]" if ndims == len(reduced.split(",")) else f"f32[{reduced.split(',')[0]}]"
    return f"""module scaled {{
  %p0 = f32[{shape}] parameter(0)
  %p1 = f32[{reduced}] parameter(1)
  %reduce.0 = {out} reduce(%p1), kind=sum, ndims={ndims}
  %broadcast.1 = f32[{shape}] broadcast(%reduce.0), dims={{{dims}}}
  %multiply.2 = f32[{shape}] multiply(%p0, %broadcast.1)
  ROOT (%multiply.2)
}}
"""


@pytest.mark.parametrize("shape,reduced,ndims,dims,hoisted", [
    # a whole-tensor statistic read by every row: each row would sum all 256 x 64 again
    ("256,64", "256,64", 2, "", False),
    # one output per row (a row statistic of the kernel's own rows): hoisted
    ("256,64", "256,64", 1, "0", True),
    # a scalar of a vector no longer than a row: recomputed per row, cheaply
    ("256,64", "64", 1, "", True),
    # ... and of one longer than a row
    ("256,64", "65", 1, "", False),
    # a statistic per batch read by the batch's rows ([4, 64, 32]: 64 rows per output)
    ("4,64,32", "4,2048", 1, "0", False),
])
def test_a_reduction_is_hoisted_only_where_rows_do_not_recompute_it_at_length(
        shape, reduced, ndims, dims, hoisted):
    m = parse_module(_scaled_by_a_sum(shape, reduced, ndims, dims))
    fusions = fusion.fuse(m)        # the policy alone (collapse-dims would make [4, 2048])
    verify.fusions(m, fusions)
    loop = next(f for f in fusions if f.kind == "loop")
    assert bool(loop.hoisted) == hoisted, [f.notes for f in fusions]
    if not hoisted:
        (red,) = [f for f in fusions if f.kind == "reduce"]
        assert "would be recomputed by" in red.notes[0], red.notes


def test_collapsed_rows_each_compute_their_own_statistic():
    """[4, 64, 32] * sum(y [4, 2048], 1)[:, None, None]: collapse-dims makes the kernel
    [4, 2048], one output per row, and the sum is hoisted into it."""
    o = pipeline.optimize(parse_module(_scaled_by_a_sum("4,64,32", "4,2048", 1, "0")),
                          pipeline.Options(verify=True))
    (loop,) = o.fusions
    assert loop.shape == (4, 2048) and loop.hoisted


def test_buffer_assignment_slots_and_aligned_temps():
    o = pipeline.optimize(parse_module(DENSE), pipeline.Options(verify=True))
    plan = o.plan
    assert (plan.num_inputs, plan.num_outputs) == (3, 3)
    m = o.module
    for k, out in enumerate(m.outputs):              # outputs are written to slots 3, 4, 5
        assert 3 + k in plan.slots[out]
    (lib,) = [f for f in o.fusions if f.kind == "library"]
    dot = lib.roots[0]
    temp = plan.slots[dot][0]                        # the dot's result is a temp (not an output)
    assert temp >= plan.num_inputs + plan.num_outputs
    k = temp - plan.num_inputs - plan.num_outputs
    assert plan.temp_bytes[k] == 4 * 3 * 4
    assert all(off % buffers.ALIGN == 0 for off in plan.temp_offsets)
    assert plan.status_slot == plan.num_inputs + plan.num_outputs + len(plan.temp_bytes)


def test_after_pass_sees_every_step_of_the_pipeline_in_order():
    seen = []
    pipeline.optimize(parse_module(DENSE), pipeline.Options(verify=True),
                      after_pass=lambda seq, name, m, result: seen.append((seq, name)))
    assert [name for _, name in seen] == [s.name for s in pipeline.PIPELINE]
    assert [name for _, name in seen] == ["cse", "repeats-as-broadcasts", "mish-factor",
                                      "fold-batch-into-contraction", "dots-as-reductions", "bf16-products",
                                      "cancel-transposes", "scatter-between-transposes",
                                      "fold-convolution-bias", "merge-sibling-convolutions",
                                      "two-stage-reductions", "converts-before-reshapes",
                                      "reshape-chains",
                                      "dce", "collapse-dims",
                                      "flatten-reductions", "copy-per-reader", "fusion", "buffer-assignment",
                                      "concurrency"]


# -- the verifier catches what a broken pass would leave -------------------------------

def test_verifier_refuses_a_use_before_its_definition():
    m = parse_module(SOFTMAX)
    m.instrs[2], m.instrs[3] = m.instrs[3], m.instrs[2]   # subtract before its broadcast
    with pytest.raises(verify.VerifyError, match="subtract.2 .* reads broadcast.1, which is not "
                                                 "defined before it"):
        verify.module(m, "a broken pass")


def test_verifier_refuses_an_elementwise_operand_of_another_shape():
    m = parse_module(SOFTMAX)
    sub = m.instrs[3]
    sub.operands = (sub.operands[0], m.instrs[1])           # f32[4] into an f32[4,8] subtract
    with pytest.raises(verify.VerifyError, match="elementwise subtract.2 .* reads reduce.0 of shape"):
        verify.module(m, "a broken pass")


def test_verifier_refuses_an_output_no_kernel_writes():
    m = parse_module(DENSE)
    CSE().run(m), DCE().run(m)
    kernels = fusion.fuse(m)
    dropped = [f for f in kernels if any(r in m.outputs for r in f.roots) and f.kind != "library"]
    with pytest.raises(verify.VerifyError, match="is not written by any kernel|which no earlier kernel"):
        verify.fusions(m, [f for f in kernels if f is not dropped[-1]], "a broken fusion")


def test_verifier_refuses_a_misaligned_temp():
    o = pipeline.optimize(parse_module(DENSE), pipeline.Options(verify=True))
    o.plan.temp_offsets[0] += 4
    with pytest.raises(verify.VerifyError, match="is not 64-byte aligned"):
        verify.buffer_plan(o.module, o.fusions, o.plan, buffers.ALIGN)


def test_every_kernel_kind_has_one_emitter():
    from tfjit.codegen.llvm_cpu import EMITTERS
    from tfjit.passes.fusion import KernelKind
    assert set(EMITTERS) == set(KernelKind)
    o = pipeline.optimize(parse_module(DENSE), pipeline.Options(verify=True))
    assert all(isinstance(f.kind, KernelKind) for f in o.fusions)


def test_flatten_reductions_reads_a_buffer_reduced_over_several_dims_as_one():
    from tfjit.passes.simplify import FlattenReductions
    m = parse_module("""module r {
  %p0 = f32[4,6,8] parameter(0)
  %reduce.1 = f32[4] reduce(%p0), kind=sum, ndims=2
  %exp.2 = f32[4,6,8] exp(%p0)
  %reduce.3 = f32[] reduce(%exp.2), kind=max, ndims=3
  %abs.4 = f32[4,6,8] abs(%p0)
  %reduce.5 = f32[4] reduce(%abs.4), kind=sum, ndims=2
  ROOT (%reduce.1, %reduce.3, %reduce.5, %abs.4)
}
""")
    assert FlattenReductions().run(m) is True
    verify.module(m, "flatten-reductions")
    direct, of_expr, shared, _ = m.outputs
    assert direct.attrs["ndims"] == 1 and direct.operands[0].op is Op.RESHAPE
    assert direct.operands[0].shape == (4, 48) and direct.operands[0].operands[0] is m.params[0]
    # an expression only the reduction reads: rebuilt over a reshape of its leaf
    flat_exp = of_expr.operands[0]
    assert of_expr.attrs["ndims"] == 1 and flat_exp.op is Op.EXP and flat_exp.shape == (192,)
    assert flat_exp.operands[0].op is Op.RESHAPE and flat_exp.operands[0].operands[0] is m.params[0]
    assert not any(i.op is Op.EXP and i.shape == (4, 6, 8) for i in m.instrs)   # the old one is gone
    # an expression that is also an output: kept (rebuilding it would compute it twice)
    assert shared.attrs["ndims"] == 2 and shared.operands[0].op is Op.ABS
    assert FlattenReductions().run(m) is False


SPECIAL_LOOP = """module special {
  %p0 = f64[65536] parameter(0)
  %igamma.1 = f64[65536] igamma(%p0, %p0)
  %constant.2 = f64[] constant(2.0)
  %broadcast.3 = f64[65536] broadcast(%constant.2), dims={}
  %multiply.4 = f64[65536] multiply(%igamma.1, %broadcast.3)
  ROOT (%multiply.4)
}
"""


@pytest.mark.parametrize("op, cycles", [("igamma(%p0, %p0)", 1000), ("lgamma(%p0)", 100),
                                        ("bessel-i0e(%p0)", 50), ("add(%p0, %p0)", 1)])
def test_a_special_function_weighs_a_kernels_cost_per_row(op, cycles):
    """The launch op shards a step by rows x cost per row (estimated cycles): a special
    function counted as one instruction left 64K igammas on one of TF's threads."""
    from tfjit.codegen import llvm_cpu
    from tfjit.codegen.target import Target
    from tfjit.passes import cost
    o = pipeline.optimize(parse_module(SPECIAL_LOOP.replace("igamma(%p0, %p0)", op)),
                          pipeline.Options(verify=True))
    (f,) = o.fusions
    assert cost.element_cycles(f.instrs) == cycles + 1           # and the multiply
    target = Target("test", "x86_64-unknown-linux-gnu", "", runtime_calls=True)
    _, steps = llvm_cpu.emit_module("special", o.fusions, o.plan, [], target)
    ((_, rows, per_row),) = steps
    assert rows == 65536 // FLAT_BLOCK and per_row == FLAT_BLOCK * (cycles + 1)


SILU_GLU = """module silu_glu {
  %p0 = f32[6,8] parameter(0)
  %p1 = f32[8,6] parameter(1)
  %p2 = f32[6,8] parameter(2)
  %dot.3 = f32[6,6] dot(%p0, %p1), transpose_lhs=0, transpose_rhs=0
  %logistic.4 = f32[6,6] logistic(%dot.3)
  %multiply.5 = f32[6,6] multiply(%dot.3, %logistic.4)
  %exp.6 = f32[6,6] exp(%multiply.5)
  %dot.7 = f32[6,8] dot(%exp.6, %p2), transpose_lhs=0, transpose_rhs=0
  %reduce.8 = f32[6] reduce(%dot.7), kind=sum, ndims=1
  %broadcast.9 = f32[6,6] broadcast(%reduce.8), dims={0}
  %multiply.10 = f32[6,6] multiply(%broadcast.9, %logistic.4)
  %add.11 = f32[6,6] add(%multiply.10, %multiply.5)
  ROOT (%dot.7, %add.11)
}
"""


def test_a_value_read_by_two_kernels_is_an_extra_root_of_its_forward_consumer():
    """silu(x) before a GEMM, also read after it (a backward): the chain joins the
    kernel that feeds the GEMM as extra roots instead of one kernel per value."""
    o = pipeline.optimize(parse_module(SILU_GLU), pipeline.Options(verify=True))
    (home,) = [f for f in o.fusions if any(r.op is Op.EXP for r in f.roots)]
    assert {r.op for r in home.roots} == {Op.EXP, Op.MUL, Op.LOGISTIC}, home.roots
    assert sum("is also a root of" in n for n in home.notes) == 2
    # no kernel of its own for the logistic or the product
    assert all(len(f.roots) > 1 or f.roots[0].op not in (Op.LOGISTIC, Op.MUL)
               for f in o.fusions if f.kind == "loop")
    later = [f for f in o.fusions if o.fusions.index(f) > o.fusions.index(home)]
    assert any(Op.ADD in {r.op for r in f.roots} for f in later)


def test_an_extra_root_needs_the_consumers_own_index():
    """A consumer that reads the value at other indices (a transpose) is no home for it:
    the logistic keeps a kernel of its own."""
    text = SILU_GLU.replace("%exp.6 = f32[6,6] exp(%multiply.5)",
                            "%transpose.20 = f32[6,6] transpose(%logistic.4), perm={1,0}\n"
                            "  %exp.6 = f32[6,6] add(%dot.3, %transpose.20)")
    o = pipeline.optimize(parse_module(text), pipeline.Options(verify=True))
    (own,) = [f for f in o.fusions if any(r.op is Op.LOGISTIC for r in f.roots)]
    assert [r.op for r in own.roots] == [Op.LOGISTIC]


def test_a_cycle_among_kernels_is_an_error_not_a_hang():
    """Kernels that read each other's roots (a fusion bug) make KernelGraph raise; its
    level walk would otherwise push the cycle's kernels forever."""
    from tfjit.ir.module import IRError
    from tfjit.passes.kernel_graph import KernelGraph

    class Kernel:
        def __init__(self, name):
            self.name = name
    a, b, c = (Kernel(n) for n in "abc")
    owner = {"ra": a, "rb": b, "rc": c}
    KernelGraph([a, b, c], {a: {"rb"}, b: {"rc"}, c: set()}, owner)       # a chain: fine
    with pytest.raises(IRError, match="cycle"):
        KernelGraph([a, b, c], {a: {"rb"}, b: {"rc"}, c: {"ra"}}, owner)


THROUGH_IN_PLACE_RESHAPE = """module through_reshape {
  %p0 = f32[4,6] parameter(0)
  %p1 = f32[4,6] parameter(1)
  %exp.2 = f32[4,6] exp(%p0)
  %reduce.3 = f32[4] reduce(%exp.2), kind=sum, ndims=1
  %broadcast.4 = f32[4,6] broadcast(%reduce.3), dims={0}
  %divide.5 = f32[4,6] divide(%p0, %broadcast.4)
  %reshape.6 = f32[6,4] reshape(%divide.5)
  %dot.7 = f32[6,6] dot(%reshape.6, %p1), transpose_lhs=0, transpose_rhs=0
  %slice.9 = f32[4,6] slice(%dot.7), starts={0,0}, limits={4,6}, strides={1,1}
  %multiply.10 = f32[4,6] multiply(%exp.2, %slice.9)
  ROOT (%multiply.10)
}
"""


def test_no_extra_root_where_the_home_reads_the_other_reader_through_a_library_call():
    """exp(x) is read by a softmax-like kernel that feeds a GEMM (through a reshape the
    call reads in place) and by the GEMM's consumer: the consumer depends on the other
    reader, so exp(x) may not be its root (a cycle; the walk must see the reshape)."""
    o = pipeline.optimize(parse_module(THROUGH_IN_PLACE_RESHAPE), pipeline.Options(verify=True))
    (last,) = [f for f in o.fusions if any(r.op is Op.MUL for r in f.roots)]
    assert [r.op for r in last.roots] == [Op.MUL]


CHAIN_INTO_A_CALL = """module chain {
  %p0 = f32[4,6,8] parameter(0)
  %p1 = f32[1,1,8,5] parameter(1)
  %add.0 = f32[4,6,8] add(%p0, %p0)
  %transpose.4 = f32[6,4,8] transpose(%add.0), perm={1,0,2}
  %reshape.1 = f32[24,8] reshape(%transpose.4)
  %reshape.2 = f32[2,12,1,8] reshape(%reshape.1)
  %convolution.3 = f32[2,12,1,5] convolution(%reshape.2, %p1), dilations={1,1}, padding={0,0,0,0}, strides={1,1}
  ROOT (%convolution.3)
}
"""


def test_a_library_call_reads_a_chain_of_reshapes_of_a_kernels_value_in_place():
    # Conv1D with a dilation (Keras) lowers to such a chain: the verifier followed one
    # reshape and refused a partition the runtime reads correctly
    m = parse_module(CHAIN_INTO_A_CALL)
    kernels = fusion.fuse(m)
    assert [f.kind for f in kernels] == ["loop", "library"]
    assert sum("read in place" in n for n in kernels[1].notes) == 2, kernels[1].notes
    verify.fusions(m, kernels)


WIDENED_FLATTEN = """module flatten {
  %p0 = bf16[4,6,6,8] parameter(0)
  %p1 = f32[288,10] parameter(1)
  %constant.0 = f32[] constant(1.5)
  %broadcast.1 = f32[4,6,6,8] broadcast(%constant.0), dims={}
  %convert.2 = f32[4,6,6,8] convert(%p0)
  %multiply.3 = f32[4,6,6,8] multiply(%convert.2, %broadcast.1)
  %convert.4 = bf16[4,6,6,8] convert(%multiply.3)
  %reshape.5 = bf16[4,288] reshape(%convert.4)
  %convert.6 = f32[4,288] convert(%reshape.5)
  %dot.7 = f32[4,10] dot(%convert.6, %p1), transpose_lhs=0, transpose_rhs=0
  ROOT (%dot.7)
}
"""


def test_a_convert_read_by_a_call_moves_before_the_reshape_it_reads():
    """Keras's bf16 Flatten before an f32 Dense: the widening runs in the pool's shape,
    and the product reads its reshape in place (passes/simplify.py)."""
    import ml_dtypes
    import numpy as np
    from tfjit.ir import interp
    from tfjit.passes.simplify import ConvertsBeforeReshapes
    from tfjit.ir.text import module_str
    rng = np.random.default_rng(0)
    values = [rng.standard_normal((4, 6, 6, 8)).astype(ml_dtypes.bfloat16),
              rng.standard_normal((288, 10)).astype(np.float32)]
    m = parse_module(WIDENED_FLATTEN)
    (before,) = interp.evaluate(m, values)
    assert ConvertsBeforeReshapes().run(m)
    verify.module(m, "converts-before-reshapes")
    text = module_str(m)
    assert "f32[4,6,6,8] convert(%convert.4)" in text and "f32[4,288] reshape(" in text, text
    (after,) = interp.evaluate(parse_module(text), values)
    assert np.array_equal(before, after)
    DCE().run(m)
    kernels = fusion.fuse(m)
    assert [(f.kind, tuple(f.shape)) for f in kernels] == [("loop", (4, 6, 6, 8)), ("library", (4, 10))]
    assert any("read in place" in n for n in kernels[1].notes), kernels[1].notes
    # a convert read by anything but calls, or a reshape read twice: left alone
    assert not ConvertsBeforeReshapes().run(parse_module(WIDENED_FLATTEN.replace(
        "ROOT (%dot.7)", "%exp.8 = f32[4,288] exp(%convert.6)\n  ROOT (%dot.7, %exp.8)")))
    assert not ConvertsBeforeReshapes().run(parse_module(WIDENED_FLATTEN.replace(
        "ROOT (%dot.7)", "ROOT (%dot.7, %reshape.5)")))



def _rounded_stencil(taps: list) -> str:
    """A bf16 layer's step (x * 0.5, rounded) read by a stencil at ``taps`` (row, column)
    offsets over [2, 10, 10, 8], 8x8 outputs."""
    lines = ["module stencil {", "  %p0 = bf16[2,10,10,8] parameter(0)",
             "  %convert.0 = f32[2,10,10,8] convert(%p0)",
             "  %constant.1 = f32[] constant(0.5)",
             "  %broadcast.2 = f32[2,10,10,8] broadcast(%constant.1), dims={}",
             "  %multiply.3 = f32[2,10,10,8] multiply(%convert.0, %broadcast.2)",
             "  %convert.4 = bf16[2,10,10,8] convert(%multiply.3)",
             "  %convert.5 = f32[2,10,10,8] convert(%convert.4)"]
    total = None
    for k, (r, c) in enumerate(taps):
        lines.append(f"  %slice.{10 + k} = f32[2,8,8,8] slice(%convert.5), starts={{0,{r},{c},0}}, "
                     "strides={1,1,1,1}")
        if total is not None:
            lines.append(f"  %add.{30 + k} = f32[2,8,8,8] add({total}, %slice.{10 + k})")
        total = f"%slice.{10}" if total is None else f"%add.{30 + k}"
    return "\n".join(lines + [f"  ROOT ({total})", "}", ""])


@pytest.mark.parametrize("taps, alone", [(9, True), (2, False)])
def test_a_rounding_read_at_many_taps_gets_a_kernel_of_its_own(taps, alone):
    """A bf16 layer's rounding read by a 3x3 stencil: computed once into a bf16 buffer
    (9 x 64 / 100 = 5.8 evaluations an element), not at each tap (passes/windows.py);
    read at two taps (1.3) it stays fused."""
    m = parse_module(_rounded_stencil([(r, c) for r in range(3) for c in range(3)][:taps]))
    DCE().run(m)
    kernels = fusion.fuse(m)
    verify.fusions(m, kernels)
    rounded = [f for f in kernels if any(r.name == "convert.4" for r in f.roots)]
    assert bool(rounded) is alone, [(f.name, f.roots, f.notes) for f in kernels]
    if alone:
        assert len(kernels) == 2 and rounded[0].roots[0].dtype.name == "bf16"
        assert any("a rounding to bf16" in n and "6 times per element" in n
                   for n in rounded[0].notes), rounded[0].notes
