"""Transposes that cancel (passes/transposes.py): the elementwise region between a
transpose and its inverse computed in the operand's own layout.

The pass: IR text in, CancelTransposes run, the IR's values compared with the IR
interpreter's before the pass on random inputs, and its shape asserted (which
transposes are left).  End to end: softmax and log-softmax over a non-last axis,
which TF wraps in two transposes, against TF's executor, with edge sizes (one row,
one column, primes, a single element along the axis) and float32/float64/bfloat16,
NaN and infinities in the operand; and a gradient through them.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from ir_passes import run_pass, same_values
from oracle import assert_matches
from tfjit.ir.ops import Op
from tfjit.passes.transposes import CancelTransposes

MIDDLE_SOFTMAX = """module m {
  %p0 = f32[3,7,5] parameter(0)
  %transpose.0 = f32[3,5,7] transpose(%p0), perm={0,2,1}
  %reduce.1 = f32[3,5] reduce(%transpose.0), kind=maxnum, ndims=1
  %broadcast.2 = f32[3,5,7] broadcast(%reduce.1), dims={0,1}
  %subtract.3 = f32[3,5,7] subtract(%transpose.0, %broadcast.2)
  %exp.4 = f32[3,5,7] exp(%subtract.3)
  %reduce.5 = f32[3,5] reduce(%exp.4), kind=sum, ndims=1
  %broadcast.6 = f32[3,5,7] broadcast(%reduce.5), dims={0,1}
  %divide.7 = f32[3,5,7] divide(%exp.4, %broadcast.6)
  %transpose.8 = f32[3,7,5] transpose(%divide.7), perm={0,2,1}
  ROOT (%transpose.8)
}
"""


def _run_pass(text: str):
    """(module before, module after CancelTransposes and DCE, whether it changed)."""
    return run_pass(CancelTransposes(), text)


def _transposes(m) -> list:
    return [i for i in m.instrs if i.op is Op.TRANSPOSE]


def test_a_middle_axis_softmax_is_computed_in_the_operands_layout():
    before, after, changed = _run_pass(MIDDLE_SOFTMAX)
    assert changed
    same_values(before, after)
    # the reductions read their operands transposed (column reductions); nothing
    # else is transposed, and the output is the division itself
    ts = _transposes(after)
    assert len(ts) == 2 and all(all(u.op is Op.REDUCE for u in after.users()[t]) for t in ts)
    assert after.outputs[0].op is Op.DIV and after.outputs[0].shape == (3, 7, 5)


def test_a_composed_transpose_and_a_transposed_constant():
    text = """module m {
  %p0 = f32[2,3,4] parameter(0)
  %transpose.0 = f32[4,2,3] transpose(%p0), perm={2,0,1}
  %constant.1 = f32[4,2,3] constant({%s})
  %multiply.2 = f32[4,2,3] multiply(%transpose.0, %constant.1)
  %transpose.3 = f32[2,4,3] transpose(%multiply.2), perm={1,0,2}
  ROOT (%transpose.3)
}
""".replace("%s", ", ".join(f"{v}.0" for v in range(24)))
    before, after, changed = _run_pass(text)
    assert changed
    same_values(before, after)
    (t,) = _transposes(after)                    # one transpose, of the product
    assert t.operands[0].op is Op.MUL and t.attrs["perm"] == (0, 2, 1)


SOFTMAX_GRADIENT = """module m {
  %p0 = f32[2,6,4] parameter(0)
  %p1 = f32[2,6,4] parameter(1)
  %transpose.0 = f32[2,4,6] transpose(%p0), perm={0,2,1}
  %exp.1 = f32[2,4,6] exp(%transpose.0)
  %transpose.2 = f32[2,4,6] transpose(%p1), perm={0,2,1}
  %multiply.3 = f32[2,4,6] multiply(%transpose.2, %exp.1)
  %reduce.4 = f32[2,4] reduce(%multiply.3), kind=sum, ndims=1
  %reshape.5 = f32[2,4,1] reshape(%reduce.4)
  %broadcast.6 = f32[2,4,6] broadcast(%reshape.5), dims={0,1,2}
  %subtract.7 = f32[2,4,6] subtract(%transpose.2, %broadcast.6)
  %multiply.8 = f32[2,4,6] multiply(%subtract.7, %exp.1)
  %transpose.9 = f32[2,6,4] transpose(%multiply.8), perm={0,2,1}
  ROOT (%transpose.9)
}
"""


def test_a_gradients_region_takes_a_like_transposed_operand_and_a_value_outside_it():
    """g^T (a transpose by the same perm) is read as g; ``g^T - broadcast(s)``, whose
    operands are both outside the region, joins it; s's broadcast into x's layout
    needs s's dims reordered (dims {0,1,2} become {0,2,1})."""
    before, after, changed = _run_pass(SOFTMAX_GRADIENT)
    assert changed
    same_values(before, after)
    assert after.outputs[0].op is Op.MUL and after.outputs[0].shape == (2, 6, 4)
    small = [t for t in _transposes(after) if t.shape == (2, 1, 4)]    # s reordered
    assert len(small) == 1 and after.users()[small[0]][0].op is Op.BROADCAST
    assert all(u.op is Op.REDUCE for t in _transposes(after) if t not in small
               for u in after.users()[t])


@pytest.mark.parametrize("why,exit_line", [
    ("the region's value is an output", "ROOT (%transpose.8, %exp.4)"),
    ("no transpose is reached", "ROOT (%reduce.5)"),
])
def test_left_alone_where_the_region_does_not_end_in_reductions_and_transposes(why, exit_line):
    text = MIDDLE_SOFTMAX.replace("ROOT (%transpose.8)", exit_line)
    before, after, changed = _run_pass(text)
    assert not changed, why
    assert len(_transposes(after)) == len(_transposes(before)) - (exit_line.count("transpose.8") == 0)


def test_left_alone_where_an_operand_cannot_be_laid_out_like_the_transposed_one():
    """A second full-size parameter, read untransposed by the region, would need a
    transpose of its own."""
    text = MIDDLE_SOFTMAX.replace("%p0 = f32[3,7,5] parameter(0)",
                                  "%p0 = f32[3,7,5] parameter(0)\n  %p1 = f32[3,5,7] parameter(1)")
    text = text.replace("exp(%subtract.3)", "add(%subtract.3, %p1)")
    assert not _run_pass(text)[2]


# -- end to end, against TF's executor -------------------------------------------------

CASES = [
    ("3d-middle", (8, 64, 16), 1),
    ("matrix-axis-0", (300, 40), 0),
    ("primes", (5, 131, 7), 1),
    ("one-row", (1, 9, 33), 1),
    ("one-column", (4, 50, 1), 1),
    ("one-along-the-axis", (6, 1, 17), 1),
    ("4d-axis-2", (2, 3, 19, 8), 2),
    ("4d-nchw-channels", (2, 16, 5, 7), 1),     # perm swaps dims 1 and 3: statistics reordered
]


@pytest.mark.parametrize("shape,axis", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("fn", [tf.nn.softmax, tf.nn.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_over_a_non_last_axis_matches_tensorflow(shape, axis, dtype, fn):
    rng = np.random.default_rng(sum(shape) + axis)
    a = rng.standard_normal(shape) * 4
    flat = a.reshape(-1)
    if flat.size > 8:
        flat[1], flat[5], flat[7] = np.nan, np.inf, -np.inf
    x = tf.cast(tf.constant(a), dtype)
    f = lambda x: fn(x, axis=axis)         # noqa: E731
    jit = tfjit.function(f, jit_compile=True)
    tol = {"float32": 1e-5, "float64": 1e-12, "bfloat16": 2e-2}[dtype]
    assert_matches(jit(x).numpy(), f(x).numpy(), rtol=tol, atol=tol)


def test_the_middle_axis_softmax_has_no_transpose_kernel_and_its_gradient_matches():
    rng = np.random.default_rng(11)
    x = tf.constant(rng.standard_normal((4, 96, 24)).astype(np.float32))
    w = tf.constant(rng.standard_normal((4, 96, 24)).astype(np.float32))
    f = lambda x: tf.nn.softmax(x, axis=1)          # noqa: E731
    jit = tfjit.function(f, jit_compile=True)
    assert_matches(jit(x).numpy(), f(x).numpy(), rtol=1e-5, atol=1e-6)
    fusions = jit.compiled(x).fusions
    assert not [i for fu in fusions if fu.kind == "loop" for i in fu.instrs if i.op is Op.TRANSPOSE]

    def grad(x, w):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.nn.softmax(x, axis=1) * w)
        return tape.gradient(y, x)
    assert_matches(tfjit.function(grad, jit_compile=True)(x, w).numpy(), grad(x, w).numpy(),
                   rtol=1e-4, atol=1e-6)
