"""Auto mode's size bound (issue 16): a cluster with more kernels after fusion than
``--tfjit_auto_max_kernels`` runs in TensorFlow, said once with the reason, before
any LLVM work; must-compile ignores the bound.  The bound is lowered to 1 here so a
two-kernel function is past it; results are compared with TensorFlow's."""
from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit import config, pipeline
from tfjit.api import autojit
from tfjit.api.function import Function
from tfjit.api.service import SERVICE


@pytest.fixture
def bound_of_one():
    saved = dataclasses.replace(config.flags())
    config.set_flags(tfjit_auto_max_kernels=1)
    yield
    for f in dataclasses.fields(saved):
        setattr(config.flags(), f.name, getattr(saved, f.name))
    autojit.activate()       # as the flags were


def fn(x):     # two kernels at least: a matmul (a library call) and what follows it
    h = tf.matmul(x, x, transpose_b=True)
    return tf.tanh(h * 3.0 + 1.0) - h, tf.reduce_sum(x * x, axis=1)


X = tf.constant(np.random.default_rng(4).standard_normal((16, 8), dtype=np.float32))


def assert_like_tf(got):
    for g, w in zip(got, fn(X)):
        assert_matches(g.numpy(), w.numpy())


def test_auto_clustering_runs_a_cluster_past_the_bound_in_tensorflow(bound_of_one, caplog):
    config.set_flags(tfjit_auto_jit=2, tfjit_cpu_global_jit=True)
    autojit.activate()
    before = sum(SERVICE.fallbacks.values())
    compiled = []
    real = pipeline.emit
    f = tf.function(fn)
    with caplog.at_level(logging.WARNING, logger="tfjit"):
        try:
            pipeline.emit = lambda *a, **k: compiled.append(a) or real(*a, **k)
            for _ in range(3):
                assert_like_tf(f(X))
        finally:
            pipeline.emit = real
    lines = [r.getMessage() for r in caplog.records if "runs in TensorFlow" in r.getMessage()]
    assert len(lines) == 1, lines                                   # said once
    assert "kernels after fusion, more than the 1 that auto mode compiles" in lines[0]
    assert "--tfjit_auto_max_kernels" in lines[0]
    assert not compiled                                             # refused before LLVM IR
    # decided once: the launch op remembers the fallback for this signature
    assert sum(SERVICE.fallbacks.values()) - before == 1


def test_a_function_that_may_fall_back_runs_in_tensorflow_past_the_bound(bound_of_one):
    said = []
    f = Function(fn, fall_back=said.append)      # what Keras's jit_compile="auto" makes
    assert_like_tf(f(X))
    assert len(said) == 1 and "kernels after fusion" in said[0], said
    assert f.experimental_get_compile_count() == 0


def test_must_compile_ignores_the_bound(bound_of_one):
    f = tfjit.function(fn, jit_compile=True)
    assert_like_tf(f(X))
    assert f.compiled(X).num_kernels >= 2
