"""Products with a vector side, or a contraction of one element, as a multiply and a
sum (passes/dots.py ``DotsAsReductions``), and reshapes of reshapes read through one
(passes/simplify.py ``ReshapeChains``).

Every shape class against TF's executor (floats within tolerance: the sum's order is
the reduction's, not the GEMM's): matrix times vector with the matrix stored either
way, vector times matrix, batched with a broadcast batch, the outer product (K = 1),
one row and one column, a prime contraction, f64, NaN and infinities, Keras's
``Dense(1)`` gradient and ``tf.image.rgb_to_grayscale``.  The IR after the passes has
no library dot for them, and a matrix product keeps its call.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from ir_passes import run_pass, same_values
from oracle import assert_matches
from tfjit.ir.ops import Op
from tfjit.ir.parse import parse_module
from tfjit.passes.dots import DotsAsReductions
from tfjit.passes.simplify import ReshapeChains


def _ops(compiled) -> list:
    return [i.op for i in parse_module(compiled.module_after).instrs]


def _check(fn, *arrays, rtol=2e-6, atol=1e-5):
    args = [tf.constant(a) for a in arrays]
    jit = tfjit.function(fn, jit_compile=True)
    for got, want in zip(tf.nest.flatten(jit(*args)), tf.nest.flatten(tf.function(fn)(*args))):
        assert_matches(got.numpy(), want.numpy(), rtol=rtol, atol=atol)
    return jit.compiled(*args)


# (id, lhs shape, rhs shape, transpose_a, transpose_b)
VECTOR_DOTS = [
    ("matrix-vector", (300, 97), (97, 1), False, False),
    ("matrix-vector-stored-transposed", (97, 300), (97, 1), True, False),
    ("vector-stored-transposed", (300, 97), (1, 97), False, True),
    ("vector-matrix", (1, 131), (131, 70), False, False),
    ("vector-matrix-both-transposed", (131, 1), (70, 131), True, True),
    ("outer-product", (50, 1), (1, 40), False, False),
    ("one-by-one", (1, 33), (33, 1), False, False),
    ("one-element", (1, 1), (1, 1), False, False),
    ("batched-vector", (6, 1, 64), (6, 64, 30), False, False),
    ("batched-broadcast-batch", (1, 20, 16), (5, 16, 1), False, False),
]


@pytest.mark.parametrize("a_shape, b_shape, ta, tb", [v[1:] for v in VECTOR_DOTS],
                         ids=[v[0] for v in VECTOR_DOTS])
def test_a_vector_product_is_a_reduction(a_shape, b_shape, ta, tb):
    rng = np.random.default_rng(len(a_shape) * 100 + a_shape[-1])
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    compiled = _check(lambda a, b: tf.matmul(a, b, transpose_a=ta, transpose_b=tb) * 2.0, a, b)
    assert Op.DOT not in _ops(compiled), compiled.module_after


def test_nan_and_infinities_reach_the_sum_as_in_tf():
    a = np.random.default_rng(1).standard_normal((40, 8))
    a[3, 2], a[7, 0], a[9, 1], a[9, 5] = np.nan, np.inf, np.inf, -np.inf
    b = np.random.default_rng(2).standard_normal((8, 1))
    _check(lambda a, b: tf.matmul(a, b), a, b)          # f64


def test_a_matrix_product_keeps_its_call():
    a = np.ones((16, 8), np.float32)
    compiled = _check(lambda a, b: tf.matmul(a, b), a, np.ones((8, 4), np.float32))
    assert Op.DOT in _ops(compiled)


def test_an_outer_product_of_zeros_has_the_gemms_positive_zero():
    """K = 1: TF's GEMM sums from +0, so -1 * 0 comes out +0; so does tfjit's product."""
    a = np.array([[-1.0], [2.0], [-0.0]], np.float32)
    b = np.array([[0.0, -3.0, 0.5]], np.float32)
    _check(lambda a, b: tf.matmul(a, b), a, b)
    # K > 1: sums of negative zeros, matrix times vector and vector times matrix
    m = np.array([[-1.0, -2.0, -0.5], [1.0, -1.0, 2.0]], np.float32)
    _check(lambda a, b: tf.matmul(a, b), m, np.zeros((3, 1), np.float32))
    _check(lambda a, b: tf.matmul(a, b), np.array([[-1.0, -2.0]], np.float32), np.zeros((2, 4), np.float32))


def test_dense_1_trains_as_tensorflow():
    """A regression head's forward, its input gradient (an outer product) and its
    weight gradient (a matrix stored transposed times a vector)."""
    rng = np.random.default_rng(3)
    x, w, g = (rng.standard_normal(s).astype(np.float32) for s in ((64, 257), (257, 1), (64, 1)))

    def grads(x, w, g):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = tf.matmul(x, w)
        return [y] + tape.gradient(y, [x, w], g)
    compiled = _check(grads, x, w, g)
    assert Op.DOT not in _ops(compiled), compiled.module_after


def test_rgb_to_grayscale_is_one_kernel():
    x = np.random.default_rng(4).random((4, 30, 31, 3), dtype=np.float32)
    compiled = _check(tf.image.rgb_to_grayscale, x)
    assert len(compiled.fusions) == 1, compiled.module_after


DOT_AND_CHAIN = """module m {
  %p0 = f32[12,3] parameter(0)
  %p1 = f32[3,1] parameter(1)
  %dot.2 = f32[12,1] dot(%p0, %p1), transpose_lhs=0, transpose_rhs=0
  %reshape.3 = f32[3,4] reshape(%dot.2)
  %reshape.4 = f32[3,4,1] reshape(%reshape.3)
  ROOT (%reshape.4)
}
"""


def test_the_passes_keep_the_values():
    before, after, changed = run_pass(DotsAsReductions(), DOT_AND_CHAIN)
    assert changed and not any(i.op is Op.DOT for i in after.instrs)
    same_values(before, after)
    chained, flat, changed = run_pass(ReshapeChains(), DOT_AND_CHAIN)
    assert changed
    (out,) = flat.outputs
    assert out.op is Op.RESHAPE and out.operands[0].op is Op.DOT
    same_values(chained, flat, exact=True)
