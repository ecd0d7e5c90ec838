"""A cluster's LLVM module in parts compiled side by side (codegen/ir_split.py).

The split is checked as text (every definition in exactly one part, call-closed
groups kept together, modules it must not split left whole) and end to end: a
multi-kernel function compiled in two servers at once, its merged object
loaded, its results TF's, its assembly printed part by part, and the merged
object stored in and loaded from the persistent cache.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit import config, pipeline
from tfjit.codegen import ir_split, library, llvm_cpu, llvm_target, objcache
from tfjit.runtime import diskcache

HEAD = ['; ModuleID = "m"', 'target triple = "x86_64-unknown-linux-gnu"', "", ]
DECLARE = ["declare float @expf(float)"]


def _define(name, calls=(), linkage=""):
    body = "".join(f'  call void @"{c}"()\n' for c in calls)
    return f'define {linkage}void @"{name}"()\n{{\nentry:\n{body}  ret void\n}}'


def _module(*functions, globals_=()):
    return "\n".join(HEAD + list(globals_) + DECLARE + list(functions) + ["!0 = !{}"])


def _definitions(text):
    return re.findall(r'^define [^@]*@"([^"]+)"', text, re.M)


def test_every_definition_is_in_one_part_and_call_groups_stay_together():
    text = _module(_define("k0", ["k0.body"]), _define("k0.body", linkage="internal "),
                   _define("k1", ["shared"]), _define("k2", ["shared"]),
                   _define("shared", linkage="internal "), _define("k3"), _define("k4"))
    parts = ir_split.split(text, 3, 1)
    assert len(parts) == 3
    names = [_definitions(p) for p in parts]
    assert sorted(sum(names, [])) == sorted(_definitions(text))
    for group in (["k0", "k0.body"], ["k1", "k2", "shared"]):
        assert sum(all(n in part for n in group) for part in names) == 1, names
    for p in parts:                        # each part is a module LLVM accepts as it is
        assert p.startswith('; ModuleID') and "declare float @expf" in p and "!0 = !{}" in p
        llvm_target.binding().parse_assembly(p).verify()


@pytest.mark.parametrize("case", ["small", "one group", "exported global", "weak linkage",
                                  "one process"])
def test_modules_left_whole(case):
    functions = [_define(f"k{i}") for i in range(4)]
    globals_ = ()
    parts, size = 2, 1
    if case == "small":
        size = 10 ** 6
    elif case == "one group":
        functions = [_define("k0", ["k1"]), _define("k1", ["k2"]), _define("k2")]
    elif case == "exported global":
        globals_ = ["@table = global [2 x float] [float 1.0, float 2.0]"]
    elif case == "weak linkage":
        functions.append(_define("w", linkage="weak "))
    else:
        parts = 1
    assert ir_split.split(_module(*functions, globals_=globals_), parts, size) is None


def test_internal_constants_are_copied_into_every_part():
    table = '@"table" = internal constant [2 x float] [float 1.0, float 2.0]'
    parts = ir_split.split(_module(_define("a"), _define("b"), globals_=[table]), 2, 1)
    assert len(parts) == 2 and all(table in p for p in parts)


def _fn(a, w1, w2):
    # library calls (matmuls) between elementwise and reduction kernels: several kernels,
    # two of them with the same body (the bias + relu of each layer)
    h = tf.nn.relu(tf.matmul(a, w1) + 1.0)
    g = tf.nn.relu(tf.matmul(h, w2) + 1.0)
    return tf.reduce_sum(tf.tanh(g) * 2.0, axis=1), tf.reduce_max(h, axis=0)


def _inputs():
    rng = np.random.default_rng(11)
    return [tf.constant(rng.standard_normal(s, dtype=np.float32))
            for s in [(33, 17), (17, 17), (17, 17)]]


@pytest.fixture
def split_everything(monkeypatch):
    """Two compile servers, and every module split however small."""
    monkeypatch.setattr(config.flags(), "tfjit_compile_processes", 2)
    monkeypatch.setattr(llvm_cpu, "SPLIT_BYTES", 1)


def test_a_split_module_compiles_in_two_servers_and_gives_tfs_results(split_everything):
    xs = _inputs()
    f = tfjit.function(_fn, jit_compile=True)
    for got, want in zip(f(*xs), tf.function(_fn)(*xs)):
        assert_matches(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    code = f.compiled(*xs).code
    assert code.optimized_ir.count("; ModuleID") == 2        # compiled as two parts
    assert len(llvm_cpu.servers(pipeline.jit_compiler())) == 2
    assert all(c.pid is not None for c in llvm_cpu.servers(pipeline.jit_compiler()))
    asm = code.asm()
    for symbol in code.addresses:
        assert f"{symbol}:" in asm or f'"{symbol}":' in asm, symbol


def test_a_split_modules_object_goes_through_the_persistent_cache(split_everything, tmp_path):
    f = tfjit.function(_fn, jit_compile=True)
    xs = _inputs()
    compiled = f.compiled(*xs)
    module, symbols = compiled.code.llvm_ir, list(compiled.code.addresses)
    cache = diskcache.DiskCache(str(tmp_path))
    compiler = pipeline.jit_compiler()
    llmod = _TextModule(module)
    first = objcache.compile_module(llmod, symbols, compiler, cache=cache,
                                    runtime=library.runtime_symbols())
    assert not first.from_cache and cache.stats.writes == 1
    again = objcache.compile_module(llmod, symbols, compiler, cache=cache,
                                    runtime=library.runtime_symbols())
    assert again.from_cache and again.optimized_ir == first.optimized_ir
    assert set(again.addresses) == set(symbols)


class _TextModule:
    """What objcache needs of an llvmlite ir.Module: its text."""

    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text

