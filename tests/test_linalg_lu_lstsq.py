"""Lu and MatrixSolveLs (lower/decompositions.py: one runtime-library call each) and tf.linalg.expm
(TF builds it in Python from MatMul, MatrixSolve, a cond and a while loop, all lowered)
against TF's executor.  Under the launch op Lu and MatrixSolveLs run TF's own kernels
(the same bits; their refusals are the launch's InvalidArgumentError); the host runner
runs runtime/linalg.cc's Eigen code and the interpreter numpy's, within tolerance (the
permutations exactly)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

DTYPES = {"f32": np.float32, "f64": np.float64}
HOST_TOL = {"f32": 1e-4, "f64": 1e-11}


def _solve_ls(a, b, l2, fast):
    return tf.raw_ops.MatrixSolveLs(matrix=a, rhs=b, l2_regularizer=l2, fast=fast)


# (a's shape, b's shape, l2, fast, kind of a)
CASES = [
    ((1, 1), (1, 1), 0.0, True, "general"),
    ((6, 3), (6, 2), 0.0, True, "general"),              # overdetermined: normal equations
    ((3, 6), (3, 2), 0.0, True, "general"),              # underdetermined: the second kind
    ((2, 3, 5, 4), (2, 3, 5, 1), 0.5, True, "general"),  # regularised, batched
    ((4, 4), (4, 3), 0.25, True, "general"),
    ((6, 3), (6, 2), 0.0, False, "general"),             # complete orthogonal decomposition
    ((2, 3, 5), (2, 3, 2), 0.0, False, "general"),
    ((5, 3), (5, 2), 0.0, False, "rank-deficient"),      # the minimum-norm solution
    ((0, 4, 3), (0, 4, 2), 0.0, True, "general"),
    ((4, 3), (4, 0), 0.0, True, "general"),
]
IDS = [f"{'x'.join(map(str, a))}-{'x'.join(map(str, b))}-l2={l2}{'' if fast else '-cod'}-{kind}"
       for a, b, l2, fast, kind in CASES]


def _inputs(case, dtype):
    a_shape, b_shape, l2, _, kind = case
    rng = np.random.default_rng(sum(a_shape) * 13 + len(b_shape) + int(l2 * 8))
    a = rng.uniform(-1, 1, a_shape)
    if kind == "rank-deficient":
        a[..., -1] = a[..., 0]              # two equal columns
    return a.astype(DTYPES[dtype]), rng.uniform(-1, 1, b_shape).astype(DTYPES[dtype]), np.float64(l2)


@pytest.fixture(scope="module")
def fns():
    out = {}
    for fast in (True, False):
        def fn(a, b, l2, fast=fast):
            return _solve_ls(a, b, l2, fast)
        out[fast] = (tfjit.function(fn, jit_compile=True), tf.function(fn))
    return out


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_solve_ls_is_tfs(fns, case, dtype):
    jit, ref = fns[case[3]]
    args = [tf.constant(x) for x in _inputs(case, dtype)]
    assert_matches(jit(*args).numpy(), ref(*args).numpy(), rtol=0, atol=0)
    if 0 not in case[0] + case[1]:
        assert "library" in [k.kind for k in jit.compiled(*args).fusions]


def test_solve_ls_of_empty_matrices_is_zeros():
    """M = 0 (or N = 0): TF's kernel returns its output as allocated; tfjit's is zeros."""
    fn = tfjit.function(lambda a, b: _solve_ls(a, b, tf.constant(0.0, tf.float64), True), jit_compile=True)
    got = fn(tf.zeros([2, 0, 3]), tf.zeros([2, 0, 2])).numpy()
    assert got.shape == (2, 3, 2) and (got == 0).all()


@pytest.mark.parametrize("a, l2, message", [
    (np.zeros((4, 3), np.float32), 0.0, "rank deficient or ill-conditioned"),
    (np.eye(4, 3, dtype=np.float32), -1.0, "l2_regularizer must be >= 0"),
])
def test_refused_inputs_fail_the_launch_as_tf(fns, a, l2, message):
    """TF's InvalidArgumentError, naming the node, is the launch's status."""
    jit, ref = fns[True]
    args = [tf.constant(a), tf.ones([4, 2]), tf.constant(l2, tf.float64)]
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        ref(*args)
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"(?s){message}.*MatrixSolveLs"
                                                               rf"|MatrixSolveLs.*{message}"):
        jit(*args)


def test_bad_shapes_known_at_run_time_are_typed_errors_naming_op_and_node():
    """Mismatched rows with unknown static shapes: TF's kernel and tfjit's refusal are
    InvalidArgumentErrors; tfjit's names the op, its node and the reason."""
    args = [tf.ones([4, 3]), tf.ones([5, 2]), tf.constant(0.0, tf.float64)]
    signature = [tf.TensorSpec(None, x.dtype) for x in args]
    fn = lambda a, b, l2: _solve_ls(a, b, l2, True)
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.function(fn, input_signature=signature)(*args)
    jit = tfjit.function(fn, jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"(?s)MatrixSolveLs \(MatrixSolveLs.*do not match.*\{\{node MatrixSolveLs\}\}"):
        tf.function(lambda *a: jit(*a), input_signature=signature)(*args)


def test_ir_builder_refuses_bad_operands():
    from tfjit import dtypes as dt
    from tfjit.ir.module import IRError, Module
    m = Module("bad")
    a, l2 = m.parameter(dt.F32, (2, 4, 3)), m.parameter(dt.F64, ())
    for operands in [(a, m.parameter(dt.F32, (2, 5, 1)), l2), (a, m.parameter(dt.F64, (2, 4, 1)), l2),
                     (a, m.parameter(dt.F32, (2, 4, 1)), m.parameter(dt.F32, ())),
                     (m.parameter(dt.F32, (2, 0, 3)), m.parameter(dt.F32, (2, 0, 1)), l2)]:
        with pytest.raises(IRError, match="matrix-solve-ls"):
            m.solve_ls(*operands, True)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_solve_ls_in_the_host_runner_and_interpreter(fns, dtype):
    """linalg.cc's Eigen code (the host runner, AOT objects) and the interpreter's numpy
    (LAPACK's least squares where TF runs Eigen's complete orthogonal decomposition):
    within tolerance; a refused input fails both."""
    from tfjit.ir import interp, interp_linalg, text
    from tfjit.runtime import host
    for case in CASES:
        if 0 in case[0] + case[1]:
            continue
        jit, ref = fns[case[3]]
        arrays = list(_inputs(case, dtype))
        compiled = jit.compiled(*[tf.constant(x) for x in arrays])
        want = ref(*[tf.constant(x) for x in arrays]).numpy()
        tol = HOST_TOL[dtype] * max(case[0][-2:]) ** 2
        for where, (got,) in {"host": host.run_compiled(compiled, arrays),
                              "interp": interp.evaluate(text.parse_module(compiled.module_after), arrays)}.items():
            assert_matches(got, want, rtol=tol, atol=tol, what=f"{case} {where}", check_zero_sign=False)
    jit, _ = fns[True]
    arrays = [np.zeros((4, 3), DTYPES[dtype]), np.ones((4, 2), DTYPES[dtype]), np.float64(0.0)]
    compiled = jit.compiled(tf.constant(np.eye(4, 3, dtype=DTYPES[dtype])), *[tf.constant(x) for x in arrays[1:]])
    with pytest.raises(ValueError, match="MatrixSolveLs"):
        host.run_compiled(compiled, arrays)
    with pytest.raises(interp_linalg.RankDeficient, match="rank deficient"):
        interp.evaluate(text.parse_module(compiled.module_after), arrays)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_solve_ls_gradient_under_jit_compile_matches_tf(dtype):
    """TF's gradient of MatrixSolveLs (fast: Cholesky, triangular solves, MatMul)."""
    def fn(a, b):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            loss = tf.reduce_sum(_solve_ls(a, b, tf.constant(0.1, tf.float64), True) ** 2)
        return tape.gradient(loss, [a, b])
    rng = np.random.default_rng(7)
    args = [tf.constant(rng.uniform(-1, 1, s).astype(DTYPES[dtype])) for s in ((2, 5, 3), (2, 5, 2))]
    rtol = 1e-4 if dtype == "f32" else 1e-11
    for g, w in zip(tfjit.function(fn, jit_compile=True)(*args), tf.function(fn)(*args)):
        assert_matches(g.numpy(), w.numpy(), rtol=rtol, atol=rtol, check_zero_sign=False)


# -- Lu: Eigen's PartialPivLU, the permutation as output_idx_type --------------------------

LU_SHAPES = [(1, 1), (5, 5), (2, 3, 4, 4), (0, 0), (2, 0, 0)]


def _lu_input(shape, dtype):
    return np.random.default_rng(sum(shape) + len(shape)).uniform(-1, 1, shape).astype(DTYPES[dtype])


@pytest.fixture(scope="module")
def lu_fns():
    out = {}
    for index in (tf.int32, tf.int64):
        def fn(a, index=index):
            return tf.linalg.lu(a, output_idx_type=index)
        out[index] = (tfjit.function(fn, jit_compile=True), tf.function(fn))
    return out


@pytest.mark.parametrize("index", [tf.int32, tf.int64], ids=["i32", "i64"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("shape", LU_SHAPES, ids=["x".join(map(str, s)) for s in LU_SHAPES])
def test_lu_is_tfs(lu_fns, shape, dtype, index):
    jit, ref = lu_fns[index]
    x = tf.constant(_lu_input(shape, dtype))
    for g, w in zip(jit(x), ref(x)):
        assert_matches(g.numpy(), w.numpy(), rtol=0, atol=0)
    if 0 not in shape:
        assert "library" in [k.kind for k in jit.compiled(x).fusions]


def test_lu_of_a_singular_matrix_fails_the_launch_as_tf(lu_fns):
    jit, ref = lu_fns[tf.int32]
    x = _lu_input((2, 3, 3), "f32")
    x[1, :, 0] = 0.0
    with pytest.raises(tf.errors.InvalidArgumentError, match="Input is not invertible"):
        ref(tf.constant(x))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"(?s)Input is not invertible.*\bLu\b|\bLu\b.*Input is not invertible"):
        jit(tf.constant(x))


def test_lu_of_a_non_square_matrix_known_at_run_time_is_a_typed_error_naming_op_and_node():
    fn = lambda a: tf.linalg.lu(a)
    signature = [tf.TensorSpec(None, tf.float32)]
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.function(fn, input_signature=signature)(tf.ones([2, 3]))
    jit = tfjit.function(fn, jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"(?s)Lu \(Lu.*square.*\{\{node Lu\}\}"):
        tf.function(lambda a: jit(a), input_signature=signature)(tf.ones([2, 3]))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_lu_in_the_host_runner_and_interpreter(lu_fns, dtype):
    """Eigen's blocked LU (linalg.cc) and the interpreter's unblocked loop pick the same
    pivots: the permutations exactly, the factors within tolerance; a zero pivot fails
    both."""
    from tfjit.ir import interp, interp_linalg, text
    from tfjit.runtime import host
    jit, ref = lu_fns[tf.int64]
    for shape in LU_SHAPES:
        if 0 in shape:
            continue
        x = _lu_input(shape, dtype)
        compiled = jit.compiled(tf.constant(x))
        want = [w.numpy() for w in ref(tf.constant(x))]
        for where, got in {"host": host.run_compiled(compiled, [x]),
                           "interp": interp.evaluate(text.parse_module(compiled.module_after), [x])}.items():
            tol = HOST_TOL[dtype] * shape[-1]
            assert_matches(got[0], want[0], rtol=tol, atol=tol, what=f"lu {shape} {where}", check_zero_sign=False)
            assert_matches(got[1], want[1], what=f"perm {shape} {where}")
    singular = np.zeros((3, 3), DTYPES[dtype])
    compiled = jit.compiled(tf.constant(np.eye(3, dtype=DTYPES[dtype])))
    with pytest.raises(ValueError, match="Lu"):
        host.run_compiled(compiled, [singular])
    with pytest.raises(interp_linalg.NotInvertible, match="not invertible"):
        interp.evaluate(text.parse_module(compiled.module_after), [singular])


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_lu_with_tfs_lu_solve_compiles_and_matches(dtype):
    """TF registers no gradient for Lu; tf.linalg.lu_solve (the permutation gathered,
    two triangular solves) on its result compiles, within the oracle's float tolerance.
    (lu_reconstruct does not: its InvertPermutation of a run-time permutation is not
    lowered.)"""
    def fn(a, b):
        lu, perm = tf.linalg.lu(a)
        return tf.linalg.lu_solve(lu, perm, b)
    rng = np.random.default_rng(3)
    args = [tf.constant(_lu_input((2, 4, 4), dtype)), tf.constant(rng.uniform(-1, 1, (2, 4, 2)).astype(DTYPES[dtype]))]
    assert_matches(tfjit.function(fn, jit_compile=True)(*args).numpy(), tf.function(fn)(*args).numpy(),
                   check_zero_sign=False)


# -- tf.linalg.expm: TF's Pade approximant and squarings, a graph of lowered ops ----------

@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("shape, scale", [((1, 1), 1.0), ((4, 4), 1.0), ((2, 3, 3), 1.0),
                                          ((3, 3), 8.0), ((2, 0, 0), 1.0)],
                         ids=["1x1", "4x4", "batched", "squarings", "empty"])
def test_expm_compiles_and_matches_tf(shape, scale, dtype):
    """Each norm selects one of TF's Pade approximants (a cond) and a number of
    squarings (a while loop); 8x entries need squarings.  The compiled graph runs TF's
    MatMul/MatrixSolve kernels, its elementwise arithmetic fused: within the oracle's
    float tolerance (most results are TF's bits; f32 4x4 differs by an ulp or two)."""
    x = tf.constant((np.random.default_rng(sum(shape)).uniform(-1, 1, shape) * scale).astype(DTYPES[dtype]))
    jit = tfjit.function(tf.linalg.expm, jit_compile=True)
    assert_matches(jit(x).numpy(), tf.function(tf.linalg.expm)(x).numpy())
    kinds = {k.kind for k in jit.compiled(x).fusions}
    if 0 not in shape:      # (1x1: its products are of scalars, elementwise: test_vector_dots.py)
        assert {"library", "while"} <= kinds if shape != (1, 1) else "while" in kinds
