"""Debug dumps (--tfjit_dump_to) and Function.experimental_get_compiler_ir."""
import itertools
import os
import re

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from tfjit import config
from tfjit.api import dump

SUFFIXES = ["before_optimizations.txt", "after_optimizations.txt", "ir-no-opt.ll",
            "ir-with-opt.ll", "s", "cluster.pbtxt"]


@pytest.fixture()
def dump_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(dump, "_counter", itertools.count())
    old = config.flags().tfjit_dump_to
    directory = tmp_path / "dumps" / "nested"          # created on first dump
    config.set_dump_dir(str(directory))
    try:
        yield directory
    finally:
        config.set_flags(tfjit_dump_to=old)


def _scaled_sum(x, y):
    return tf.reduce_sum(x * 3.0 + y, axis=1)


def _tanh_diff(x):
    return tf.tanh(x) - x * 0.5


def test_flag_parses():
    assert config.parse_flags("--tfjit_dump_to=/tmp/d").tfjit_dump_to == "/tmp/d"
    assert config.parse_flags("--tf_xla_dump_to=/tmp/e").tfjit_dump_to == "/tmp/e"
    assert config.parse_flags("").tfjit_dump_to == ""


def test_every_compiled_cluster_is_dumped(dump_dir, rng):
    x = tf.constant(rng.standard_normal((8, 33), dtype=np.float32))
    f, g = tfjit.function(_scaled_sum), tfjit.function(_tanh_diff)
    f(x, x)
    g(x)
    f(x, x)                                            # cache hit: nothing new
    names = [dump.safe_name(f.compiled(x, x).name), dump.safe_name(g.compiled(x).name)]
    expected = sorted(f"module_{n:04d}.{name}.{s}" for n, name in enumerate(names) for s in SUFFIXES)
    assert sorted(os.listdir(dump_dir)) == expected

    for n, name in enumerate(names):
        read = lambda s: (dump_dir / f"module_{n:04d}.{name}.{s}").read_text()
        assert "module" in read("before_optimizations.txt")
        after = read("after_optimizations.txt")
        assert "module" in after and "// kernel fusion.0: kind=" in after
        assert "define" in read("ir-no-opt.ll") and "define" in read("ir-with-opt.ll")
        assert re.search(r"^\s*ret", read("s"), re.M)
    compiled = f.compiled(x, x)
    after = (dump_dir / f"module_0000.{names[0]}.after_optimizations.txt").read_text()
    notes = [note for fu in compiled.fusions for note in fu.notes]
    assert notes and all(note in after for note in notes)


def test_hostile_name_stays_inside(tmp_path, monkeypatch, rng):
    monkeypatch.setattr(dump, "_counter", itertools.count(7))
    x = tf.constant(rng.standard_normal((4, 5), dtype=np.float32))
    compiled = tfjit.function(_tanh_diff).compiled(x)
    paths = dump.dump_compiled(compiled, str(tmp_path / "d"), name="../../etc/passwd")
    assert len(paths) == len(SUFFIXES)
    for p in paths:
        assert os.path.dirname(p) == os.path.realpath(tmp_path / "d")
        assert os.path.basename(p).startswith("module_0007._.._etc_passwd.")
    assert dump.safe_name("..") == "module"
    assert dump.safe_name("a" * 500) == "a" * 100
    assert dump.safe_name("x/\\y z:é") == "x__y_z__"


def test_failing_dump_does_not_break_compilation(tmp_path, rng, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    old = config.flags().tfjit_dump_to
    config.set_dump_dir(str(blocker / "sub"))
    try:
        x = tf.constant(rng.standard_normal((3, 7), dtype=np.float32))
        f = tfjit.function(lambda a: a * 7.0 - 1.0)
        np.testing.assert_allclose(f(x).numpy(), x.numpy() * 7.0 - 1.0, rtol=1e-6)
    finally:
        config.set_flags(tfjit_dump_to=old)
    assert "could not dump" in caplog.text


def test_get_compiler_ir_stages(rng):
    x = tf.constant(rng.standard_normal((8, 40), dtype=np.float32))
    f = tfjit.function(_scaled_sum)
    get = f.experimental_get_compiler_ir(x, x)
    compiled = f.compiled(x, x)
    assert get() == get("ir") == compiled.module_before
    assert get("optimized_ir") == compiled.module_after
    assert "define" in get("llvm")
    assert re.search(r"^\s*ret", get("asm"), re.M)
    dot = get("optimized_ir_dot")
    assert dot.startswith("digraph")
    assert re.search(r'subgraph "cluster_fusion\.0"', dot)
    assert "->" in dot and dot.count("{") == dot.count("}")
    with pytest.raises(ValueError, match="optimized_ir_dot"):
        get("hlo")


def test_get_compiler_ir_with_specs_compiles_without_running():
    calls = []

    def body(x, y):
        calls.append(1)                                  # runs only while tracing
        return x * y + 1.0

    f = tfjit.function(body)
    spec = tf.TensorSpec((16, 3), tf.float32)
    ir = f.experimental_get_compiler_ir(spec, spec)("optimized_ir")
    assert "f32[16,3]" in ir and len(calls) == 1
    assert f.experimental_get_compile_count() == 1
    ones = tf.ones((16, 3))
    np.testing.assert_allclose(f(ones, ones).numpy(), 2.0)
    assert f.experimental_get_compile_count() == 1       # the tensors reuse that compile
    with pytest.raises(ValueError, match="fully defined"):
        f.experimental_get_compiler_ir(tf.TensorSpec((None, 3)), spec)


def test_get_compiler_ir_errors():
    x = tf.ones((2, 2))
    with pytest.raises(ValueError, match="all arguments must be TensorSpecs or all must be tensors"):
        tfjit.function(_scaled_sum).experimental_get_compiler_ir(x, tf.TensorSpec((2, 2)))
    for mode in (False, None):
        with pytest.raises(ValueError, match="marked with 'jit_compile=True'"):
            tfjit.function(_scaled_sum, jit_compile=mode).experimental_get_compiler_ir(x, x)
