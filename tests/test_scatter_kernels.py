"""Scatter kernels: segment sums along a middle dim, and rows that own a range of
the segments.

* Done where the values lie (passes/transposes.py ``ScatterBetweenTransposes``): TF's
  gradient of a gather along axis k > 0 transposes the incoming gradient, sums
  segments of its rows and transposes back; tfjit runs it as scatters side by side of
  the untransposed values (a rank-3 ``scatter``).
* A row that owns a range of the segments (codegen/own_kernels.py ``_compacted``)
  collects its ids chunk by chunk before adding their rows: ids past a chunk, dropped
  (negative) ones, and an id out of range far into the ids (TF's error, its position).

Every result is compared with TF's executor bit for bit (segment sums add in input
order, as TF's CPU kernel does).  Shapes cover one scatter, fewer scatters than the
segment-range split (``own_rows.SCATTER_SEGMENT_BLOCKS``), many, a prime number of
columns, one column, several column blocks, and ids that are dropped (negative).
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit.ir import interp, ops
from tfjit.ir.text import parse_module
from tfjit.passes.own_rows import scatter_blocks
from tfjit.passes.transposes import ScatterBetweenTransposes


def _gather_gradient(axis: int):
    def grad(x, i, g):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.gather(x, i, axis=axis)
        return tf.convert_to_tensor(tape.gradient(y, x, g))
    return grad


def _segments_between_transposes(kind: str, segments: int):
    """The pattern written by hand: segment ``kind`` over dim 1 of rank-3 data."""
    op = {"sum": tf.math.unsorted_segment_sum, "max": tf.math.unsorted_segment_max,
          "prod": tf.math.unsorted_segment_prod}[kind]

    def f(x, i):
        return tf.transpose(op(tf.transpose(x, [1, 0, 2]), i, segments), [1, 0, 2])
    return f


def _instrs(compiled) -> list:
    return parse_module(compiled.module_after).instrs


def _scatters(compiled) -> list:
    return [i for i in _instrs(compiled) if i.op is ops.Op.SCATTER]


# (id, params shape, axis, ids shape, dtype)
GATHER_GRADIENTS = [
    ("axis1-rank3", (64, 96, 128), 1, (50,), np.float32),
    ("axis1-one-scatter", (1, 40, 17), 1, (33,), np.float32),
    ("axis1-few-scatters-prime-columns", (3, 700, 37), 1, (3000,), np.float32),
    ("axis1-one-column", (9, 30, 1), 1, (12,), np.float64),
    ("axis2-rank4-column-blocks", (2, 3, 50, 700), 2, (4, 5), np.float32),
    ("last-axis", (6, 5, 40), 2, (70,), np.float32),
    ("axis1-2d-ids", (8, 20, 6), 1, (3, 7), np.float64),
]


@pytest.mark.parametrize("pshape, axis, ishape, dtype", [g[1:] for g in GATHER_GRADIENTS],
                         ids=[g[0] for g in GATHER_GRADIENTS])
def test_gather_gradient_along_a_middle_axis(pshape, axis, ishape, dtype):
    rng = np.random.default_rng(sum(pshape) + axis)
    x = tf.constant(rng.standard_normal(pshape).astype(dtype))
    i = tf.constant(rng.integers(0, pshape[axis], ishape).astype(np.int32))
    gshape = pshape[:axis] + ishape + pshape[axis + 1:]
    g = tf.constant(rng.standard_normal(gshape).astype(dtype))
    fn = _gather_gradient(axis)
    jit = tfjit.function(fn, jit_compile=True)
    assert_matches(jit(x, i, g).numpy(), tf.function(fn)(x, i, g).numpy(), rtol=0, atol=0)
    compiled = jit.compiled(x, i, g)
    (s,) = _scatters(compiled)
    if axis < len(pshape) - 1:      # along the last axis there is no dim after it to keep
        assert s.rank == 3, compiled.module_after
        assert not any(i.op is ops.Op.TRANSPOSE for i in _instrs(compiled)), compiled.module_after
        assert len(compiled.fusions) == 1, compiled.module_after


@pytest.mark.parametrize("kind", ["sum", "max", "prod"])
def test_segments_between_transposes_drop_negative_ids(kind):
    rng = np.random.default_rng(7)
    x = tf.constant(rng.standard_normal((5, 300, 24)).astype(np.float32))
    i = tf.constant(rng.integers(-3, 40, (300,)).astype(np.int64))
    f = _segments_between_transposes(kind, 40)
    jit = tfjit.function(f, jit_compile=True)
    assert_matches(jit(x, i).numpy(), tf.function(f)(x, i).numpy(), rtol=0, atol=0)
    (s,) = _scatters(jit.compiled(x, i))
    assert s.rank == 3 and s.attrs["kind"] == kind


def _raises_tfs_error(f, x, good, bad, want: str, node: str):
    """TF's executor raises ``want`` for ``bad`` ids; tfjit the same text after "scatter
    {{node <node>}}: ", and runs on with ``good``.  The compiled function."""
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        tf.function(f)(x, bad)
    found = re.search(r"segment_ids\[\d+\] = -?\d+ is out of range \[0, \d+\)", e.value.message)
    assert found.group(0) == want, e.value.message
    jit = tfjit.function(f, jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=re.escape(f"scatter {{{{node {node}}}}}: {want}")):
        jit(x, bad)
    assert_matches(jit(x, good).numpy(), tf.function(f)(x, good).numpy(), rtol=0, atol=0)
    return jit


def test_an_id_out_of_range_is_tfs_error():
    f = _segments_between_transposes("sum", 3)
    x, good, bad = tf.ones([4, 5, 2]), tf.constant([0, -1, 2, 1, 1]), tf.constant([0, -1, 2, 3, 1])
    jit = _raises_tfs_error(f, x, good, bad, "segment_ids[3] = 3 is out of range [0, 3)",
                            "UnsortedSegmentSum")
    assert _scatters(jit.compiled(x, good))[0].rank == 3


def test_a_transposed_sum_read_elsewhere_is_left_as_it_is():
    """The scatter's 2-D result is read by something besides the transpose back: the
    rewrite would leave that read, and the 2-D scatter, in place."""
    def f(x, i):
        s = tf.math.unsorted_segment_sum(tf.transpose(x, [1, 0, 2]), i, 6)
        return tf.transpose(s, [1, 0, 2]), tf.reduce_sum(s, 0)
    rng = np.random.default_rng(3)
    x = tf.constant(rng.standard_normal((4, 10, 3)).astype(np.float32))
    i = tf.constant(rng.integers(0, 6, (10,)).astype(np.int32))
    jit = tfjit.function(f, jit_compile=True)
    for got, want in zip(jit(x, i), tf.function(f)(x, i)):
        assert_matches(got.numpy(), want.numpy(), rtol=0, atol=0)
    assert [s.rank for s in _scatters(jit.compiled(x, i))] == [2]


def test_the_interpreter_and_the_text_form_take_scatters_side_by_side():
    """tfjit-run-module's reference (ir/interp.py) parses and evaluates the rank-3
    scatter the pass makes, as TF computes it."""
    f = _segments_between_transposes("sum", 7)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 11, 4)).astype(np.float32)
    i = rng.integers(-1, 7, (11,)).astype(np.int32)
    text = tfjit.function(f, jit_compile=True).experimental_get_compiler_ir(
        tf.constant(x), tf.constant(i))(stage="optimized_ir")
    module = parse_module(text)
    assert [s.shape for s in module.instrs if s.op is ops.Op.SCATTER] == [(3, 7, 4)]
    (got,) = interp.evaluate(module, [x, i])
    assert_matches(got, f(tf.constant(x), tf.constant(i)).numpy(), rtol=0, atol=0)


def test_the_pass_names_itself_and_changes_nothing_without_the_pattern():
    assert ScatterBetweenTransposes.name == "scatter-between-transposes"
    f = tf.function(lambda x, i: tf.math.unsorted_segment_sum(x, i, 4))
    jit = tfjit.function(f, jit_compile=True)
    x, i = tf.ones([5, 3]), tf.constant([0, 1, 1, 3, 0])
    assert_matches(jit(x, i).numpy(), f(x, i).numpy(), rtol=0, atol=0)
    assert [s.rank for s in _scatters(jit.compiled(x, i))] == [2]


def _ranges(compiled) -> list:
    return [scatter_blocks(f.roots[0])[1] for f in compiled.fusions if f.kind == "scatter"]


@pytest.mark.parametrize("n, columns, segments, dtype", [
    (5000, 256, 300, np.float32),       # 8 ranges, ten chunks of ids, the last partial
    (1500, 160, 97, np.float64),        # 5 ranges, a prime number of segments
    (513, 256, 2, np.int32),            # 2 ranges (as many as segments), one id past a chunk
])
def test_rows_owning_segment_ranges_add_in_tfs_order(n, columns, segments, dtype):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, columns)) * 100
    x = tf.constant(x.astype(dtype))
    i = tf.constant(rng.integers(-2, segments, (n,)).astype(np.int32))
    f = lambda x, i: tf.math.unsorted_segment_sum(x, i, segments)
    jit = tfjit.function(f, jit_compile=True)
    assert_matches(jit(x, i).numpy(), tf.function(f)(x, i).numpy(), rtol=0, atol=0)
    assert _ranges(jit.compiled(x, i))[0] > 1


def test_an_id_out_of_range_far_into_a_ranged_scatter_is_tfs_error():
    f = lambda x, i: tf.math.unsorted_segment_max(x, i, 300)
    rng = np.random.default_rng(11)
    x = tf.constant(rng.standard_normal((5000, 96)).astype(np.float32))
    ids = rng.integers(0, 300, (5000,)).astype(np.int64)
    good = tf.constant(ids)
    ids[1300] = 300
    bad = tf.constant(ids)
    jit = _raises_tfs_error(f, x, good, bad, "segment_ids[1300] = 300 is out of range [0, 300)",
                            "UnsortedSegmentMax")
    assert _ranges(jit.compiled(x, good))[0] > 1
