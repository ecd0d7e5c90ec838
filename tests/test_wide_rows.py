"""Loop kernels whose rows take their last two dims (codegen/loop_rows.py ``wide``): a
short last dim (an image's channels) that does not flatten, against TF's executor."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit.codegen.loop_rows import WIDE_MIN_ROWS

NOTE = "a row takes its last two dims"


def _x(rng, *shape):
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:5] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    return tf.constant(x)


CASES = {   # name: (function, input shape); 4 * 20 = 80 rows of [33, C] (>= WIDE_MIN_ROWS)
    "flip": (lambda x: tf.reverse(x, [2]) * 2.0, (4, 20, 33, 3)),
    "strided slice": (lambda x: x[:, ::2, ::3, :] + 1.0, (4, 40, 33, 3)),
    "spatial pad": (lambda x: tf.pad(x * 2.0, [[0, 0], [1, 2], [2, 1], [0, 0]]), (4, 20, 33, 3)),
    "transposed H and W": (lambda x: tf.transpose(x, [0, 2, 1, 3]) - 1.0, (4, 33, 20, 3)),
    "bilinear resize": (lambda x: tf.image.resize(x, [29, 37]), (4, 17, 23, 3)),
    "nearest resize": (lambda x: tf.image.resize(x, [29, 37], "nearest") * 2.0, (4, 17, 23, 3)),
    "gather along W": (lambda x: tf.gather(x, [5, 0, 32, 7, 7, 1], axis=2) * 2.0, (4, 20, 33, 4)),
    "one channel": (lambda x: tf.reverse(x, [2]) * 2.0, (4, 20, 33, 1)),
    "eight channels": (lambda x: tf.reverse(x, [2]) * 2.0, (4, 20, 33, 8)),
    "one column": (lambda x: tf.reverse(x, [1]) * 2.0, (4, 20, 1, 3)),
    "per-row scale": (lambda x: x * tf.reduce_max(x[..., :1], [2], keepdims=True), (4, 20, 33, 5)),
    # a full vector of elements per column (LoopRows.full_vector_elements)
    "transposed H and W, 8 channels": (lambda x: tf.transpose(x, [0, 2, 1, 3]) - 1.0, (4, 33, 20, 8)),
    "strided slice, 8 channels": (lambda x: x[:, ::2, ::3, :] + 1.0, (4, 40, 33, 8)),
    "bilinear resize, 8 channels": (lambda x: tf.image.resize(x, [29, 37]), (4, 17, 23, 8)),
    "f64 strided slice, 4 channels": (lambda x: tf.cast(x, tf.float64)[:, ::2, ::3, :] * 3.0,
                                      (4, 40, 33, 4)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_short_rows_match_tensorflow(rng, name):
    fn, shape = CASES[name]
    x = _x(rng, *shape)
    f = tfjit.function(fn, jit_compile=True)
    assert_matches(np.asarray(f(x)), np.asarray(tf.function(fn)(x)))


def _notes(fn, x) -> str:
    """The kernels' notes, emitting included (where the row choice is made)."""
    compiled = tfjit.function(fn, jit_compile=True).compiled(x)
    return "\n".join(n for f in compiled.fusions for n in f.notes)


def test_which_kernels_take_two_dims_per_row(rng):
    flip = CASES["flip"][0]
    assert NOTE in _notes(flip, _x(rng, 4, 20, 33, 3))
    assert NOTE not in _notes(flip, _x(rng, 4, 20, 33, 9))     # past SHORT_ROW: a row each
    few = WIDE_MIN_ROWS - 1                                   # too few rows left to split
    assert NOTE not in _notes(flip, _x(rng, 1, few, 33, 3))
    assert NOTE not in _notes(lambda x: x * 2.0 + 1.0, _x(rng, 4, 20, 33, 3))   # flat


def _wide_loop_hints(fn, x) -> bool:
    """Does the kernel's emitted LLVM IR ask for a column loop interleaved unvectorised?"""
    from tfjit import pipeline
    from tfjit.codegen import llvm_cpu
    c = tfjit.function(fn, jit_compile=True).compiled(x)
    module, _ = llvm_cpu.emit_module("rows", c.fusions, c.plan, [], pipeline.jit_target())
    return '!"llvm.loop.vectorize.width", i32 1' in str(module)


def test_full_vector_columns_are_not_vectorised_across(rng):
    """Eight f32 channels strided between columns: each column's channels are one vector
    (LLVM gathered across columns otherwise); three channels stay vectorised across."""
    fn = CASES["strided slice"][0]
    assert _wide_loop_hints(fn, _x(rng, 4, 40, 33, 8))
    assert not _wide_loop_hints(fn, _x(rng, 4, 40, 33, 3))
