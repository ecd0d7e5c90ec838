"""Matrix ops outside the dot/convolution family, against TF's kernels:
TridiagonalMatMul (elementwise with shifted reads, lower/linalg.py) and Qr (a
runtime-library call, lower/decompositions.py: TF's own kernel under the launch op,
runtime/linalg.cc's Eigen HouseholderQR in the host runner and AOT objects)."""
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


# -- Qr ---------------------------------------------------------------------------------

QR_TOL = {"f32": (1e-5, 1e-5), "f64": (1e-12, 1e-12)}     # relative to the matrix's size


def _qr_input(shape, kind, dtype):
    rng = np.random.default_rng(sum(shape) * 7 + len(kind))
    x = rng.normal(size=shape)
    if kind == "rank-deficient":            # rank 2: the other columns are combinations
        x[..., 2:] = x[..., :1] * 0.5 - x[..., 1:2] * rng.normal(size=shape[-1] - 2)
        x[..., -1] = 0.0                    # and an all-zero column (Eigen's tau = 0 path)
    return x.astype(DTYPES[dtype])


QR_CASES = [((5, 5), "square"), ((7, 3), "tall"), ((3, 7), "wide"), ((2, 3, 4, 4), "batched"),
            ((2, 6, 2), "batched tall"), ((1, 1), "1x1"), ((6, 5), "rank-deficient"),
            ((70, 60), "blocked")]      # Eigen's blocked Householder path (over 48 columns)


def _check_factors(x, q, r, full, dtype, what):
    """Q orthonormal, Q @ R == x, R upper triangular (exact zeros below the diagonal)."""
    rtol, atol = QR_TOL[dtype]
    size = max(x.shape[-2:])
    k = q.shape[-1]
    assert q.shape[-2:] == (x.shape[-2], x.shape[-2] if full else min(x.shape[-2:]))
    eye = np.broadcast_to(np.eye(k), q.shape[:-2] + (k, k))
    assert_matches(np.swapaxes(q, -1, -2) @ q, eye.astype(q.dtype), rtol=0, atol=atol * size,
                   what=f"{what}: Q^T Q", check_zero_sign=False)
    assert_matches(q @ r, x, rtol=rtol * size, atol=atol * size, what=f"{what}: Q R",
                   check_zero_sign=False)
    assert not np.tril(r, -1).any(), f"{what}: R is not upper triangular"


@pytest.fixture(scope="module")
def qr_fns():
    return {full: (tfjit.function(lambda x, full=full: tf.linalg.qr(x, full_matrices=full),
                                  jit_compile=True),
                   tf.function(lambda x, full=full: tf.linalg.qr(x, full_matrices=full)))
            for full in (False, True)}


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("shape, kind", QR_CASES, ids=[k for _, k in QR_CASES])
def test_qr_is_tfs(qr_fns, shape, kind, full, dtype):
    """Under the launch op the call runs TF's own Qr kernel: the same bits."""
    jit, ref = qr_fns[full]
    x = tf.constant(_qr_input(shape, kind, dtype))
    (q, r), (q_tf, r_tf) = jit(x), ref(x)
    assert_matches(q.numpy(), q_tf.numpy(), rtol=0, atol=0, what="Q")
    assert_matches(r.numpy(), r_tf.numpy(), rtol=0, atol=0, what="R")
    _check_factors(x.numpy(), q.numpy(), r.numpy(), full, dtype, kind)


def test_qr_fuses_with_its_neighbours(qr_fns):
    x = tf.constant(_qr_input((2, 6, 4), "tall", "f32"))

    def fn(x):
        q, r = tf.linalg.qr(x * 2.0)
        return q + 1.0, tf.abs(r)
    f = tfjit.function(fn, jit_compile=True)
    for got, want in zip(f(x), fn(x)):
        assert_matches(got.numpy(), want.numpy(), rtol=0, atol=0)
    kinds = [k.kind for k in f.compiled(x).fusions]
    assert kinds.count("library") == 1 and len(kinds) == 4, kinds   # x * 2, the call, an epilogue per output


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("full", [False, True])
def test_qr_in_the_host_runner_is_eigens(qr_fns, full, dtype):
    """Without a launch op (the host runner; AOT objects link the same linalg.cc) the call
    runs Eigen's HouseholderQR itself: TF's algorithm, built apart, so within tolerance;
    the interpreter (LAPACK's Householder QR, the same signs) too."""
    from tfjit.ir import interp, text
    from tfjit.runtime import host
    rtol, atol = QR_TOL[dtype]
    jit, ref = qr_fns[full]
    for shape, kind in QR_CASES:
        x = tf.constant(_qr_input(shape, kind, dtype))
        compiled = jit.compiled(x)
        got = host.run_compiled(compiled, [x.numpy()])
        _check_factors(x.numpy(), *got, full, dtype, f"{kind} (host)")
        want = [w.numpy() for w in ref(x)]
        reference = interp.evaluate(text.parse_module(compiled.module_after), [x.numpy()])
        if kind == "rank-deficient":    # past the rank (2), Q's columns and R's rows come
            got, want, reference = ([q[..., :2], r[..., :2, :]]   # from rounding errors
                                    for q, r in (got, want, reference))
        size = max(shape[-2:])
        for g, w, i, name in zip(got, want, reference, "QR"):
            assert_matches(g, w, rtol=rtol * size, atol=atol * size, what=f"{kind} {name}",
                           check_zero_sign=False)
            assert_matches(i, w, rtol=rtol * size * 10, atol=atol * size * 10,
                           what=f"{kind} interp {name}", check_zero_sign=False)


def test_qr_refusals_name_the_op():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Qr has no tfjit lowering for dtype half"):
        tfjit.function(tf.linalg.qr, jit_compile=True)(tf.ones([3, 3], tf.float16))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Qr of an empty matrix"):
        tfjit.function(tf.linalg.qr, jit_compile=True)(tf.ones([0, 3]))
