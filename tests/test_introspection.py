"""Introspection: per-pass and .dot dumps, lower().compile() with cost_analysis,
tfjit-run-module --reference=tf, bug reports, and file-name sanitising."""
import dataclasses
import itertools
import os
import re
import shlex

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from tfjit import config
from tfjit.api import bug_report, dump
from tfjit.api.run_module import main as run_module

S = tf.TensorSpec
_DUMP_FLAGS = ("tfjit_dump_to", "tfjit_dump_pass_re", "tfjit_dump_ir_as_dot", "tfjit_bug_report",
               "tfjit_clustering_debug")


@pytest.fixture()
def flags(monkeypatch):
    """Restores the dump flags and restarts the module counter at 0."""
    monkeypatch.setattr(dump, "_counter", itertools.count())
    saved = {k: getattr(config.flags(), k) for k in _DUMP_FLAGS}
    try:
        yield config.set_flags
    finally:
        config.set_flags(**saved)


_fresh = itertools.count(7001)   # the compile cache is per process: new constants, new clusters


def _three_outputs_fn():
    k = next(_fresh)

    def three_outputs(x, y, i):
        return tf.reduce_sum(tf.tanh(x + y) * x, axis=1), i % 7 + i * k, tf.maximum(x, y)
    return three_outputs


def _args(rng):
    return [tf.constant(rng.standard_normal((8, 16), dtype=np.float32)),
            tf.constant(rng.standard_normal((8, 16), dtype=np.float32)),
            tf.constant(rng.integers(-50, 50, 5, dtype=np.int32))]


def _files(directory, prefix="module_0000."):
    return sorted(n[len(prefix):] for n in os.listdir(directory) if n.startswith(prefix))


# -- 1. per-pass dumps and .dot --------------------------------------------------------------

def test_pass_dumps_follow_the_regex(tmp_path, flags, rng):
    flags(tfjit_dump_to=str(tmp_path), tfjit_dump_pass_re="fusion|buffer", tfjit_dump_ir_as_dot=True)
    f = tfjit.function(_three_outputs_fn())
    f(*_args(rng))
    compiled = f.compiled(*_args(rng))
    name = dump.safe_name(compiled.name)
    assert _files(tmp_path) == [f"{name}.{s}" for s in (
        "0017.fusion.txt", "0018.buffer-assignment.txt", "after_optimizations.dot",
        "after_optimizations.txt", "before_optimizations.txt", "cluster.pbtxt", "ir-no-opt.ll",
        "ir-with-opt.ll", "s")]
    read = lambda s: (tmp_path / f"module_0000.{name}.{s}").read_text()
    fusion_text = read("0017.fusion.txt")
    assert fusion_text.startswith(compiled.module_after)          # the IR after the pass ...
    assert dump.kernels_section(compiled) in fusion_text          # ... and the kernels it made
    plan_text = read("0018.buffer-assignment.txt")
    assert plan_text.startswith(compiled.module_after)
    n_in, n_out = len(compiled.signature), 3
    assert f"// buffer plan: {n_in} input(s), {n_out} output(s), 0 temp(s)" in plan_text
    for k, o in enumerate(re.search(r"ROOT \((.*)\)", compiled.module_after).group(1).split(", ")):
        assert re.search(rf"// slot {n_in + k}: output {k} <- {re.escape(o)} ", plan_text)
    assert read("after_optimizations.dot") == dump.ir_dot(compiled)


def test_every_pass_is_dumped_in_order(tmp_path, flags, rng):
    flags(tfjit_dump_to=str(tmp_path), tfjit_dump_pass_re=".")
    c = float(next(_fresh))
    f = tfjit.function(lambda x: x * c + x * c)                    # CSE has work to do
    x = tf.constant(rng.standard_normal((4, 4), dtype=np.float32))
    f(x)
    name = dump.safe_name(f.compiled(x).name)
    passes = [n for n in _files(tmp_path) if re.match(r"\d{4}\.", n[len(name) + 1:])]
    assert passes == [f"{name}.{s}" for s in ("0000.cse.txt", "0001.repeats-as-broadcasts.txt",
                                             "0002.mish-factor.txt",
                                             "0003.fold-batch-into-contraction.txt",
                                             "0004.dots-as-reductions.txt",
                                             "0005.bf16-products.txt",
                                             "0006.cancel-transposes.txt",
                                             "0007.scatter-between-transposes.txt",
                                             "0008.fold-convolution-bias.txt",
                                             "0009.merge-sibling-convolutions.txt",
                                             "0010.two-stage-reductions.txt",
                                             "0011.converts-before-reshapes.txt",
                                             "0012.reshape-chains.txt", "0013.dce.txt",
                                             "0014.collapse-dims.txt", "0015.flatten-reductions.txt",
                                             "0016.copy-per-reader.txt", "0017.fusion.txt",
                                             "0018.buffer-assignment.txt", "0019.concurrency.txt")]
    cse = (tmp_path / f"module_0000.{name}.0000.cse.txt").read_text()
    dce = (tmp_path / f"module_0000.{name}.0013.dce.txt").read_text()
    assert cse.startswith("// after pass cse: changed\n")
    assert dce.startswith("// after pass dce: changed\n")    # CSE left the duplicate dead
    assert dce.count(" multiply(") == 1 and cse.count(" multiply(") == 2


def test_no_pass_dumps_without_dump_dir_or_with_a_bad_regex(tmp_path, flags, rng, caplog):
    flags(tfjit_dump_pass_re=".*")
    assert dump.pass_hook() is None                                # dumping is off
    flags(tfjit_dump_to=str(tmp_path), tfjit_dump_pass_re="([")
    assert dump.pass_hook() is None and "not a valid regex" in caplog.text
    c = np.float32(next(_fresh))
    f = tfjit.function(lambda x: x - c)
    x = tf.constant(rng.standard_normal(7, dtype=np.float32))
    np.testing.assert_array_equal(f(x).numpy(), x.numpy() - c)
    assert not [n for n in _files(tmp_path) if ".000" in n]
    assert not any(n.endswith(".dot") for n in _files(tmp_path))   # dot only when asked


def test_cluster_graph_is_the_compiled_cluster(tmp_path, flags, rng):
    from google.protobuf import text_format
    from tensorflow.core.framework import graph_pb2
    flags(tfjit_dump_to=str(tmp_path))
    f = tfjit.function(_three_outputs_fn())
    f(*_args(rng))
    compiled = f.compiled(*_args(rng))
    text = (tmp_path / f"module_0000.{dump.safe_name(compiled.name)}.cluster.pbtxt").read_text()
    assert "# signature: (f32[8,16], f32[8,16], i32[5])" in text
    gd, want = graph_pb2.GraphDef(), graph_pb2.GraphDef()
    text_format.Parse(text, gd)
    want.ParseFromString(compiled.cluster_def)
    assert gd == want


# -- 2. lower().compile(), as_text, cost_analysis --------------------------------------------

def _kernels(cost):
    return [(k["kind"], k["flops"], k["transcendentals"], k["bytes read"], k["bytes written"])
            for k in cost["kernels"]]


# (function, specs, kernels as (kind, flops, transcendentals, bytes read, bytes written)),
# counted by hand from the IR each one lowers to.
COST_CASES = [
    # one reduce kernel: multiply 280 + add 280 + sum 280-8; reads 2*280*4, writes 8*4
    (lambda x, y: tf.reduce_sum(x * 3.0 + y, axis=1), [S((8, 35)), S((8, 35))],
     [("reduce", 832, 0, 2240, 32)]),
    # tanh is transcendental (28); multiply and subtract are flops (56)
    (lambda x: tf.tanh(x) - x * 0.5, [S((4, 7))], [("loop", 56, 28, 112, 112)]),
    # softmax, one kernel with two hoisted row reductions: max 36-4, subtract 36, exp 36 (t),
    # sum 36-4, 1/sum 4, multiply 36
    (tf.nn.softmax, [S((4, 9))], [("loop", 140, 36, 144, 144)]),
    # f64: exp materialised (an output), then a column sum over it: 24-6 flops, 8-byte elements
    (lambda x: (tf.reduce_sum(tf.exp(x), axis=0), tf.exp(x)), [S((4, 6), tf.float64)],
     [("loop", 0, 24, 192, 192), ("reduce", 18, 0, 192, 48)]),
    # an output that is an input costs nothing; the i32->i8 convert is recomputed (15 flops)
    (lambda x, y: (x, tf.cast(x, tf.int8) + y, tf.reduce_max(tf.cast(x, tf.int8) + y, axis=1)),
     [S((3, 5), tf.int32), S((3, 5), tf.int8)],
     [("loop", 30, 0, 60 + 15, 15), ("reduce", 12, 0, 15, 3)]),
    # a split reduction writes one partial per FLAT_BLOCK (4096) elements and reads them
    # back: 2 * 16 * 4 bytes more
    (lambda x: tf.reduce_sum(tf.exp(x)), [S((256, 256))],
     [("reduce", 65535, 65536, 65536 * 4 + 64, 4 + 64)]),
]


@pytest.mark.parametrize("fn, specs, kernels", COST_CASES)
def test_cost_analysis_matches_hand_counts(fn, specs, kernels):
    cost = tfjit.function(fn).lower(*specs).compile().cost_analysis()
    assert _kernels(cost) == kernels
    assert cost["flops"] == sum(k[1] for k in kernels)
    assert cost["transcendentals"] == sum(k[2] for k in kernels)
    assert cost["bytes accessed"] == sum(k[3] + k[4] for k in kernels)
    assert all(k["bytes accessed"] == k["bytes read"] + k["bytes written"] for k in cost["kernels"])


def test_lower_compile_as_text_and_call(rng):
    calls = []

    def body(x, y):
        calls.append(1)
        return tf.reduce_sum(x * 3.0 + y, axis=1)

    f = tfjit.function(body)
    lowered = f.lower(S((8, 37)), S((8, 37)))
    assert len(calls) == 1                                        # traced, not run
    x = tf.constant(rng.standard_normal((8, 37), dtype=np.float32))
    compiled = f.compiled(x, x)
    assert f.experimental_get_compile_count() == 1                # the tensors reuse it
    assert lowered.as_text() == compiled.module_before
    staged = lowered.compile()
    assert staged.as_text() == compiled.module_after + "\n" + dump.kernels_section(compiled)
    assert "// kernel fusion.0: kind=reduce" in staged.as_text()
    assert lowered.cost_analysis() == staged.cost_analysis()
    np.testing.assert_array_equal(staged(x, x).numpy(), f(x, x).numpy())
    assert tfjit.function(body).lower(x, x).as_text() == lowered.as_text()   # tensors too


def test_lower_errors():
    with pytest.raises(ValueError, match="jit_compile=True"):
        tfjit.function(lambda x: x, jit_compile=None).lower(S((2,)))
    with pytest.raises(ValueError, match="lower: all arguments must be TensorSpecs"):
        tfjit.function(lambda x, y: x + y).lower(S((2,)), tf.ones(2))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Unique"):
        tfjit.function(lambda x: tf.unique(x)[0]).lower(S((4,), tf.int32))


# -- 3. tfjit-run-module --reference=tf ------------------------------------------------------

@pytest.fixture()
def dumped_module(tmp_path, flags, rng):
    flags(tfjit_dump_to=str(tmp_path))
    f = tfjit.function(_three_outputs_fn())
    f(*_args(rng))
    return str(tmp_path / f"module_0000.{dump.safe_name(f.compiled(*_args(rng)).name)}"
                          ".before_optimizations.txt")


def test_reference_tf_passes_on_a_correct_module(dumped_module, capsys):
    assert run_module([dumped_module, "--reference=tf", "--iterations", "3"]) == 0
    out = capsys.readouterr().out
    assert "reference: TensorFlow" in out and "0/3 runs miscompared" in out
    after = dumped_module.replace("before_optimizations", "after_optimizations")
    assert run_module([after, "--reference=tf", "--use_large_float_range", "--seed", "3"]) == 0


def _plant_add_is_sub(monkeypatch, interp_too: bool):
    from tfjit.codegen.elemental import Elemental
    from tfjit.ir import interp
    from tfjit.ir.ops import Op
    original = Elemental._float

    def add_is_sub(self, op, d, args):
        return original(self, Op.SUB if op is Op.ADD else op, d, args)

    monkeypatch.setattr(Elemental, "_float", add_is_sub)
    if interp_too:      # the same misreading: float adds only, as Elemental._float
        add, sub = interp._EVAL[Op.ADD], interp._EVAL[Op.SUB]
        monkeypatch.setitem(interp._EVAL, Op.ADD, lambda instr, vals: (
            sub if instr.dtype.name in ("f16", "bf16", "f32", "f64") else add)(instr, vals))


def test_reference_tf_detects_a_planted_miscompile(dumped_module, monkeypatch, capsys):
    _plant_add_is_sub(monkeypatch, interp_too=False)
    assert run_module([dumped_module, "--reference=tf"]) == 1
    out = capsys.readouterr().out
    assert "1/1 runs miscompared" in out and "output 0" in out


def test_reference_tf_catches_what_the_interpreter_shares(dumped_module, monkeypatch, capsys):
    """A misreading of an op in both tfjit paths (codegen and interpreter) passes against
    the interpreter; only TF itself catches it."""
    _plant_add_is_sub(monkeypatch, interp_too=True)
    assert run_module([dumped_module]) == 0
    assert run_module([dumped_module, "--reference=tf"]) == 1
    assert "1/1 runs miscompared" in capsys.readouterr().out


def test_reference_tf_input_errors(dumped_module, tmp_path, capsys):
    loose = tmp_path / "loose.txt"
    loose.write_text(open(dumped_module).read())
    assert run_module([str(loose), "--reference=tf"]) == 2         # no dump name, no graph
    assert "--tf_graph" in capsys.readouterr().out
    graph = dumped_module.replace("before_optimizations.txt", "cluster.pbtxt")
    assert run_module([str(loose), "--reference=tf", "--tf_graph", graph]) == 0
    os.rename(graph, graph + ".gone")
    assert run_module([dumped_module, "--reference=tf"]) == 2
    assert "no TF cluster graph" in capsys.readouterr().out
    bad = tmp_path / "bad.pbtxt"
    bad.write_text("node { name: 'x' op: 'Placeholder' }\n")
    assert run_module([dumped_module, "--reference=tf", "--tf_graph", str(bad)]) == 2
    assert "no placeholder _arg_0" in capsys.readouterr().out


# -- 4. bug reports ----------------------------------------------------------------------

def test_bug_report_readme_reruns_every_module(tmp_path, flags, rng, monkeypatch, capsys):
    report = tmp_path / "report"
    flags(tfjit_bug_report=str(report))
    c = float(next(_fresh))
    f, g = tfjit.function(_three_outputs_fn()), tfjit.function(lambda x: tf.exp(x) * c)
    f(*_args(rng))
    g(tf.constant(rng.standard_normal(6, dtype=np.float32)))
    readme = (report / "README.md").read_text()
    modules = sorted(n for n in os.listdir(report / "modules") if n.endswith(".before_optimizations.txt"))
    assert [m[:11] for m in modules] == ["module_0000", "module_0001"]
    import llvmlite
    for needle in (f"TensorFlow {tf.__version__}", f"llvmlite {llvmlite.__version__}",
                   f"tfjit {tfjit.__version__}", "CPU: ", f"--tfjit_bug_report={report}",
                   "None were written"):
        assert needle in readme
    commands = [line.split("#")[0] for line in readme.splitlines()
                if line.startswith("python3 -m tfjit.api.run_module ")]
    assert len(commands) == 3 * len(modules)                       # interp, large range, TF
    assert sum("--reference=tf" in c for c in commands) == len(modules)
    monkeypatch.chdir(report)
    for c in commands:
        assert run_module(shlex.split(c)[3:]) == 0, c
    assert capsys.readouterr().out.count("0/5 runs miscompared") == len(commands)


def test_bug_report_lists_clustering_dumps(tmp_path, flags, monkeypatch):
    report = tmp_path / "report"
    flags(tfjit_bug_report=str(report))
    assert dump.clustering_dump_dir() == os.path.join(str(report), "clustering")
    os.makedirs(report / "clustering")
    (report / "clustering" / "before_mark_for_compilation.pbtxt").write_text("")
    bug_report.write_readme(str(report))
    assert "- `clustering/before_mark_for_compilation.pbtxt`" in (report / "README.md").read_text()

    flags(tfjit_bug_report="")
    monkeypatch.setenv("TF_DUMP_GRAPH_PREFIX", str(tmp_path / "tfdump"))
    assert dump.clustering_dump_dir() is None                      # clustering debug is off
    flags(tfjit_clustering_debug=True)
    assert dump.clustering_dump_dir() == str(tmp_path / "tfdump")
    monkeypatch.delenv("TF_DUMP_GRAPH_PREFIX")
    assert dump.clustering_dump_dir() is None


def test_flags_text_lists_the_flags_in_effect(flags):
    flags(tfjit_bug_report="/tmp/my report", tfjit_dump_ir_as_dot=True)
    text = bug_report.flags_text()
    parsed = config.parse_flags(text)
    for f in dataclasses.fields(config.Flags):
        assert getattr(parsed, f.name) == getattr(config.flags(), f.name), f.name


# -- 5. hostile names ---------------------------------------------------------------------

def test_hostile_names_stay_inside_every_dump(tmp_path, flags, rng):
    from tfjit.ir.text import parse_module
    report, dumps = tmp_path / "report", tmp_path / "dumps"
    c = float(next(_fresh))
    compiled = tfjit.function(lambda x: tf.exp(x) * c).compiled(
        tf.constant(rng.standard_normal(6, dtype=np.float32)))
    flags(tfjit_dump_to=str(dumps), tfjit_bug_report=str(report), tfjit_dump_ir_as_dot=True)
    hostile = dataclasses.replace(compiled, name="../../evil/..\\x y/")
    passes = dump.PassRecorder(re.compile("."))
    passes(7, "../../up/and/out", parse_module(compiled.module_after), True)
    assert passes.files[0][0] == "0007._.._up_and_out.txt"
    dump.maybe_dump(hostile, passes)
    written = sorted(os.listdir(dumps))
    assert len(written) == 8 and all(n.startswith("module_0000._.._evil_.._x_y_.") for n in written)
    assert "module_0000._.._evil_.._x_y_.0007._.._up_and_out.txt" in written
    assert sorted(os.listdir(report / "modules")) == written
    everything = [os.path.join(r, n) for r, _, names in os.walk(tmp_path) for n in names]
    assert len(everything) == 2 * 8 + 1                            # + README.md, nothing outside
    readme = (report / "README.md").read_text()
    assert "python3 -m tfjit.api.run_module modules/module_0000._.._evil_.._x_y_." \
           "before_optimizations.txt --iterations 5" in readme


def test_hostile_function_name_end_to_end(tmp_path, flags, rng):
    report, dumps = tmp_path / "report", tmp_path / "dumps"
    flags(tfjit_dump_to=str(dumps), tfjit_bug_report=str(report), tfjit_dump_pass_re=".",
          tfjit_dump_ir_as_dot=True)
    c = float(next(_fresh))

    def body(x):
        return x * c - 1.0
    body.__name__ = body.__qualname__ = "../../evil/x y"
    x = tf.constant(rng.standard_normal(3, dtype=np.float32))
    np.testing.assert_allclose(tfjit.function(body)(x).numpy(), x.numpy() * c - 1.0, rtol=1e-6)
    written = sorted(os.listdir(dumps))
    assert len(written) == 27 and all(n.startswith("module_0000._.._evil_x_y.") for n in written)
    assert sorted(os.listdir(report / "modules")) == written
    everything = [os.path.join(r, n) for r, _, names in os.walk(tmp_path) for n in names]
    assert len(everything) == 2 * 27 + 1
