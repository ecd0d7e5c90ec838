"""The spectral decompositions (lower/decompositions.py): SelfAdjointEigV2 and Svd, one
runtime-library call each, against TF's executor.  Under the launch op the call runs
TF's own kernel, so values and vectors (their signs included) are TF's bits; the host
runner runs runtime/linalg.cc's Eigen code (the same algorithms, built apart from TF)
and the interpreter numpy's LAPACK, both compared within tolerance, the vectors up to
the sign of each (LAPACK's may differ from Eigen's).  Also TF's registered gradients,
compiled whole."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

DTYPES = {"f32": np.float32, "f64": np.float64}
HOST_TOL = {"f32": 2e-5, "f64": 1e-12}     # times M*N (well separated spectra)


def _eig(a, compute_v):
    return tf.linalg.eigh(a) if compute_v else tf.linalg.eigvalsh(a)


def _svd(a, compute_uv, full_matrices):
    return tf.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)


# (op, shape, flag: compute_v / compute_uv, full_matrices)
CASES = [
    ("eig", (1, 1), True, False),
    ("eig", (5, 5), True, False),
    ("eig", (2, 3, 4, 4), True, False),
    ("eig", (3, 6, 6), False, False),
    ("eig", (0, 0), True, False),
    ("eig", (0, 3, 3), True, False),
    ("svd", (1, 1), True, False),
    ("svd", (5, 3), True, False),
    ("svd", (3, 5), True, True),
    ("svd", (2, 4, 6, 4), True, True),
    ("svd", (3, 4, 4), True, False),
    ("svd", (2, 5, 3), False, False),
    ("svd", (2, 0, 4), True, True),            # TF: U [2, 0, 0], V the 4x4 identity
    ("svd", (2, 0, 4), True, False),
    ("svd", (0, 3, 2), True, True),
    ("svd", (3, 0), False, False),
]
IDS = [f"{op}-{'x'.join(map(str, shape))}{'' if vectors else '-values'}{'-full' if full else ''}"
       for op, shape, vectors, full in CASES]


def _input(op, shape, dtype, seed=0):
    """Uniform entries; symmetric for eig (its upper triangle is noise: Eigen reads the
    lower one) with distinct eigenvalues, as random matrices have."""
    rng = np.random.default_rng(seed + len(shape) * 7 + sum(shape))
    x = rng.uniform(-1, 1, shape)
    if op == "eig" and shape[-1]:
        lower = np.tril(x)
        x = lower + np.swapaxes(np.tril(lower, -1), -1, -2)
    return x.astype(DTYPES[dtype])


@pytest.fixture(scope="module")
def fns():
    """(tfjit function, tf.function) per (op, vectors, full), shared by the tests."""
    out = {}
    for op, _, vectors, full in CASES:
        if (op, vectors, full) not in out:
            def fn(a, op=op, vectors=vectors, full=full):
                return _eig(a, vectors) if op == "eig" else _svd(a, vectors, full)
            out[op, vectors, full] = (tfjit.function(fn, jit_compile=True), tf.function(fn))
    return out


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_decomposition_is_tfs(fns, case, dtype):
    """Under the launch op the call runs TF's own kernel: the same bits, vector signs too."""
    op, shape, vectors, full = case
    jit, ref = fns[op, vectors, full]
    x = tf.constant(_input(op, shape, dtype))
    got, want = tf.nest.flatten(jit(x)), tf.nest.flatten(ref(x))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_matches(g.numpy(), w.numpy(), rtol=0, atol=0)
    if 0 not in shape:
        kinds = [k.kind for k in jit.compiled(x).fusions]
        assert "library" in kinds, kinds


def test_raw_ops_without_vectors_give_the_empty_shape_tf_declares():
    """compute_v/compute_uv false: TF's shape function says [0] for the vector outputs
    (its kernel leaves a scalar unset there); tfjit returns that empty [0]."""
    x = tf.constant(_input("eig", (2, 3, 3), "f32"))
    e, v = tfjit.function(lambda a: tf.raw_ops.SelfAdjointEigV2(input=a, compute_v=False),
                          jit_compile=True)(x)
    assert_matches(e.numpy(), tf.linalg.eigvalsh(x).numpy(), rtol=0, atol=0)
    assert v.shape == (0,)
    s, u, v = tfjit.function(lambda a: tf.raw_ops.Svd(input=a, compute_uv=False), jit_compile=True)(x)
    assert_matches(s.numpy(), tf.linalg.svd(x, compute_uv=False).numpy(), rtol=0, atol=0)
    assert u.shape == v.shape == (0,)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_eig_of_a_non_finite_matrix_fails_the_launch_as_tf(fns, dtype):
    """Eigen's solver does not converge on NaN: TF's InvalidArgumentError, naming the
    node, is the launch's status."""
    jit, ref = fns["eig", True, False]
    x = _input("eig", (2, 3, 3), dtype)
    x[1, 2, 0] = np.nan
    message = "Self-adjoint eigen decomposition was not successful"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        ref(tf.constant(x))
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"(?s){message}.*SelfAdjointEigV2"
                                                               rf"|SelfAdjointEigV2.*{message}"):
        jit(tf.constant(x))


@pytest.mark.parametrize("fn, args", [
    (tf.linalg.eigh, [tf.ones([2, 3])]),
    (tf.linalg.svd, [tf.ones([3])]),
])
def test_bad_shapes_raise_tfs_error(fn, args):
    """TF's shape functions refuse these while tracing, for tfjit as for tf.function."""
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError)) as want:
        tf.function(fn)(*args)
    with pytest.raises(type(want.value)):
        tfjit.function(fn, jit_compile=True)(*args)


@pytest.mark.parametrize("fn, x, op, reason", [
    (tf.linalg.eigh, tf.ones([2, 3]), "SelfAdjointEigV2", "square"),
    (tf.linalg.svd, tf.ones([3]), "Svd", "matrices"),
])
def test_bad_shapes_known_at_run_time_are_typed_errors_naming_op_and_node(fn, x, op, reason):
    """Where the graph's shapes are unknown (the launch compiles lazily) tfjit's refusal
    is TF's InvalidArgumentError, naming the op, its node and the reason."""
    signature = [tf.TensorSpec(None, x.dtype)]
    jit = tfjit.function(fn, jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.function(lambda a: fn(a), input_signature=signature)(x)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"(?s){op} \({op}.*{reason}.*\{{\{{node [\w/]*{op}\}}\}}"):
        tf.function(lambda a: jit(a), input_signature=signature)(x)


def test_ir_builder_refuses_bad_operands():
    from tfjit import dtypes as dt
    from tfjit.ir.module import IRError, Module
    from tfjit.ir.ops import Op
    m = Module("bad")
    for op, x, flags in [(Op.SELF_ADJOINT_EIG, m.parameter(dt.F32, (2, 3, 4)), {"compute_v": True}),
                         (Op.SVD, m.parameter(dt.I32, (2, 3, 4)), {}),
                         (Op.SVD, m.parameter(dt.F32, (2, 0, 4)), {}),
                         (Op.SVD, m.parameter(dt.F32, (3, 4)), {}),
                         (Op.SVD, m.parameter(dt.F32, (1, 3, 4)), {"compute_v": True})]:
        with pytest.raises(IRError, match=op.spelling):
            m.spectral(op, x, **flags)


def _signs_aligned(vectors, reference):
    """``vectors`` [..., R, C] with each column's sign flipped to agree with the same
    column of ``reference`` (a singular/eigen vector is unique up to sign)."""
    dots = np.sum(vectors.astype(np.float64) * reference, axis=-2, keepdims=True)
    return vectors * np.where(dots < 0, -1, 1).astype(vectors.dtype)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_decompositions_in_the_host_runner_and_interpreter(fns, dtype):
    """Without a launch op (the host runner; AOT objects link the same linalg.cc) the
    calls run Eigen's solvers themselves: values within tolerance, vectors within
    tolerance once each column's sign is TF's; the interpreter (LAPACK) likewise.  Only
    the vectors of a full U/V beyond the first K columns are not unique (any basis of the
    complement): those are checked for orthonormality instead."""
    from tfjit.ir import interp, text
    from tfjit.runtime import host
    for op, shape, vectors, full in CASES:
        if 0 in shape:
            continue                        # no call
        jit, ref = fns[op, vectors, full]
        x = _input(op, shape, dtype)
        compiled = jit.compiled(tf.constant(x))
        want = [w.numpy() for w in tf.nest.flatten(ref(tf.constant(x)))]
        runs = {"host": host.run_compiled(compiled, [x]),
                "interp": interp.evaluate(text.parse_module(compiled.module_after), [x])}
        tol = HOST_TOL[dtype] * shape[-1] * shape[-2]
        k = min(shape[-2:])
        for where, got in runs.items():
            what = f"{op} {shape} {where}"
            assert_matches(got[0], want[0], rtol=tol, atol=tol, what=what, check_zero_sign=False)
            for g, w in zip(got[1:], want[1:]):
                assert g.shape == w.shape, what
                g = _signs_aligned(g, w)
                assert_matches(g[..., :k], w[..., :k], rtol=tol, atol=tol, what=what, check_zero_sign=False)
                gram = np.swapaxes(g, -1, -2) @ g
                np.testing.assert_allclose(gram, np.broadcast_to(np.eye(g.shape[-1]), gram.shape),
                                           atol=tol, err_msg=what)


# -- gradients: TF's registered gradient functions, compiled whole ----------------------

def _loss_grad(f):
    def fn(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.add_n([tf.reduce_sum(y * y) for y in tf.nest.flatten(f(x))])
        return tape.gradient(loss, x)
    return fn


def _sym(x):
    return x + tf.linalg.matrix_transpose(x)


GRADS = {
    "eigh": (lambda x: tf.linalg.eigh(_sym(x)), (2, 4, 4)),
    "eigvalsh": (lambda x: tf.linalg.eigvalsh(_sym(x)), (3, 3)),
    # the loss of the vectors alone is sign-invariant, so the gradient is well defined
    "svd": (lambda x: tf.linalg.svd(x), (2, 5, 3)),
    "svd-wide": (lambda x: tf.linalg.svd(x), (3, 4)),
    "svd-square-full": (lambda x: tf.linalg.svd(x, full_matrices=True), (4, 4)),
    "svd-values": (lambda x: tf.linalg.svd(x, compute_uv=False), (2, 4, 3)),
}


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", list(GRADS))
def test_gradient_under_jit_compile_matches_tf(name, dtype):
    """tape.gradient through the op under jit_compile=True: every op of TF's gradient
    function compiles (no fallback), and the result matches TF's executor."""
    f, shape = GRADS[name]
    x = tf.constant(np.random.default_rng(len(name)).uniform(-1, 1, shape).astype(DTYPES[dtype]))
    jit = tfjit.function(_loss_grad(f), jit_compile=True)
    got, want = jit(x), tf.function(_loss_grad(f))(x)
    rtol, atol = (1e-4, 1e-4) if dtype == "f32" else (1e-11, 1e-11)
    assert_matches(got.numpy(), want.numpy(), rtol=rtol, atol=atol, what=f"d{name}", check_zero_sign=False)
