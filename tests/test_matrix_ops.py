"""Matrix ops outside the dot/convolution family, against TF's kernels:
TridiagonalMatMul (elementwise with shifted reads, lower/linalg.py)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

DTYPES = {"f32": np.float32, "f64": np.float64}


def _diagonals(rng, batch, m, n, dtype):
    """superdiag, maindiag, subdiag [..., 1, M] and rhs [..., M, N]; the entries TF's kernel
    ignores (subdiag[0], superdiag[M-1]) are NaN and inf, and some products are -0.0."""
    def draw(shape):
        x = rng.uniform(-2, 2, shape).astype(dtype)
        x.reshape(-1)[::5] = -0.0
        return x
    sup, main, sub = (draw(batch + (1, m)) for _ in range(3))
    sup[..., 0, -1], sub[..., 0, 0] = np.inf, np.nan
    rhs = draw(batch + (m, n))
    if rhs.size > 3:
        rhs.reshape(-1)[3] = np.inf
    return [tf.constant(v) for v in (sup, main, sub, rhs)]


def _tridiagonal(sup, main, sub, rhs):
    return tf.raw_ops.TridiagonalMatMul(superdiag=sup, maindiag=main, subdiag=sub, rhs=rhs)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("batch, m, n", [((), 1, 3), ((), 2, 4), ((), 3, 1), ((), 9, 5),
                                         ((2,), 2, 3), ((2, 3), 6, 4), ((4,), 1, 1)])
def test_tridiagonal_matmul_is_tfs(batch, m, n, dtype):
    args = _diagonals(np.random.default_rng(m * 10 + n), batch, m, n, DTYPES[dtype])

    def fn(sup, main, sub, rhs):
        y = _tridiagonal(sup, main, sub, rhs)
        return y, y * 2 - rhs                   # and fused with a neighbour
    for got, want in zip(tfjit.function(fn, jit_compile=True)(*args), fn(*args)):
        assert_matches(got.numpy(), want.numpy(), rtol=0, atol=0)   # TF's products and sums


def test_tridiagonal_matmul_compact_and_sequence_forms_are_tfs():
    rng = np.random.default_rng(5)
    diags = tf.constant(rng.uniform(-1, 1, (3, 3, 7)).astype(np.float32))
    rhs = tf.constant(rng.uniform(-1, 1, (3, 7, 2)).astype(np.float32))

    def fn(diags, rhs):
        seq = (diags[:, 0], diags[:, 1], diags[:, 2])
        return (tf.linalg.tridiagonal_matmul(diags, rhs),
                tf.linalg.tridiagonal_matmul(seq, rhs, diagonals_format="sequence"))
    for got, want in zip(tfjit.function(fn, jit_compile=True)(diags, rhs), fn(diags, rhs)):
        assert_matches(got.numpy(), want.numpy(), rtol=0, atol=0)


def test_complex_tridiagonal_matmul_is_refused_naming_the_op():
    c = tf.complex(tf.ones([1, 3]), tf.ones([1, 3]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"TridiagonalMatMul.*complex64"):
        tfjit.function(_tridiagonal, jit_compile=True)(c, c, c, tf.complex(tf.ones([3, 2]),
                                                                            tf.ones([3, 2])))
