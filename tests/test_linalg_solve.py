"""The dense solvers (lower/decompositions.py): MatrixTriangularSolve, MatrixSolve,
Cholesky, MatrixInverse, MatrixDeterminant and LogMatrixDeterminant, one runtime-library
call each, against TF's executor.  Under the launch op the call runs TF's own kernel,
so results (inf/NaN of singular inputs included) are TF's bits; the host runner runs
runtime/linalg.cc's Eigen code and the interpreter numpy's LAPACK, both within
tolerance.  Also the gradients TF registers for them and for Qr, compiled whole."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

DTYPES = {"f32": np.float32, "f64": np.float64}
# the host runner's and interpreter's tolerance, relative to the matrix size (well
# conditioned inputs: diagonally dominant or a x a^T + m I)
HOST_TOL = {"f32": 2e-5, "f64": 1e-12}


def _matrix(rng, shape, kind, dtype):
    """A [..., M, M] input: "general" diagonally dominant, "spd" symmetric positive
    definite (NaN above the diagonal: "spd-upper-nan"), "singular" with a zero row, "not-pd" indefinite,
    "zero-diagonal" with a zero on the diagonal (triangular solves: inf/NaN)."""
    m = shape[-1]
    x = rng.uniform(-1, 1, shape)
    if m == 0:
        return x.astype(dtype)
    if kind.startswith("spd"):
        x = x @ np.swapaxes(x, -1, -2) + m * np.eye(m)
        if kind == "spd-upper-nan":         # Cholesky reads the lower triangle only
            x[..., np.triu_indices(m, 1)[0], np.triu_indices(m, 1)[1]] = np.nan
    elif kind in ("general", "zero-diagonal"):
        x = x + (m + 1) * np.eye(m) * np.sign(rng.uniform(-1, 1, shape[:-1]))[..., None]
        if kind == "zero-diagonal":
            x[..., m // 2, m // 2] = 0.0
    elif kind == "singular":                # any LU meets an exact zero pivot
        x[..., -1, :] = 0.0
    elif kind == "not-pd":
        x = x @ np.swapaxes(x, -1, -2) - m * np.eye(m)
    return x.astype(dtype)


def _rhs(rng, shape, dtype):
    return rng.uniform(-2, 2, shape).astype(dtype)


# name -> the TF function of (a, b); b is None for the one-operand ops
FNS = {
    "triangular_solve": lambda a, b, lower, adjoint: tf.linalg.triangular_solve(a, b, lower=lower,
                                                                                adjoint=adjoint),
    "solve": lambda a, b, lower, adjoint: tf.linalg.solve(a, b, adjoint=adjoint),
    "cholesky": lambda a, b, lower, adjoint: tf.linalg.cholesky(a),
    "inv": lambda a, b, lower, adjoint: tf.linalg.inv(a, adjoint=adjoint),
    "det": lambda a, b, lower, adjoint: tf.linalg.det(a),
    "slogdet": lambda a, b, lower, adjoint: tf.linalg.slogdet(a),
}

# (op, a's shape, b's shape or None, a's kind, lower, adjoint)
CASES = [
    ("triangular_solve", (1, 1), (1, 1), "general", True, False),
    ("triangular_solve", (5, 5), (5, 3), "general", True, False),
    ("triangular_solve", (5, 5), (5, 3), "general", False, True),
    ("triangular_solve", (2, 3, 4, 4), (2, 3, 4, 2), "general", True, True),
    ("triangular_solve", (3, 1, 4, 4), (2, 4, 1), "general", False, False),   # batch broadcast
    ("triangular_solve", (4, 4), (2, 4, 2), "general", True, False),          # one matrix, 2 rhs
    ("triangular_solve", (4, 4), (4, 2), "zero-diagonal", True, False),       # inf/NaN, no error
    ("triangular_solve", (0, 0), (0, 2), "general", True, False),
    ("solve", (1, 1), (1, 1), "general", False, False),
    ("solve", (5, 5), (5, 2), "general", False, False),
    ("solve", (2, 4, 4), (2, 4, 3), "general", False, True),
    ("solve", (3, 3), (3, 0), "general", False, False),
    ("cholesky", (1, 1), None, "spd", False, False),
    ("cholesky", (2, 3, 5, 5), None, "spd", False, False),
    ("cholesky", (3, 4, 4), None, "spd-upper-nan", False, False),
    ("cholesky", (3, 0, 0), None, "spd", False, False),
    ("inv", (1, 1), None, "general", False, False),
    ("inv", (4, 4), None, "general", False, False),
    ("inv", (3, 5, 5), None, "general", False, True),
    ("det", (1, 1), None, "general", False, False),
    ("det", (2, 4, 4), None, "general", False, False),
    ("det", (3, 4, 4), None, "singular", False, False),
    ("det", (3, 0, 0), None, "general", False, False),
    ("slogdet", (3, 4, 4), None, "general", False, False),
    ("slogdet", (2, 4, 4), None, "singular", False, False),
    ("slogdet", (2, 0, 0), None, "general", False, False),
]
IDS = [f"{op}-{'x'.join(map(str, a))}-{kind}{'-upper' if op == 'triangular_solve' and not lower else ''}"
       f"{'-adjoint' if adjoint else ''}" for op, a, _, kind, lower, adjoint in CASES]


def _inputs(case, dtype):
    op, a_shape, b_shape, kind, _, _ = case
    rng = np.random.default_rng(len(a_shape) * 31 + sum(a_shape) + len(kind))
    a = _matrix(rng, a_shape, kind, DTYPES[dtype])
    return a, None if b_shape is None else _rhs(rng, b_shape, DTYPES[dtype])


@pytest.fixture(scope="module")
def fns():
    """(tfjit function, tf.function) per (op, lower, adjoint), shared by the tests."""
    out = {}
    for op, _, b, _, lower, adjoint in CASES:
        key = (op, lower, adjoint)
        if key not in out:
            def fn(*args, op=op, lower=lower, adjoint=adjoint):
                return FNS[op](args[0], args[1] if len(args) > 1 else None, lower, adjoint)
            out[key] = (tfjit.function(fn, jit_compile=True), tf.function(fn))
    return out


def _args(a, b):
    return [tf.constant(a)] + ([] if b is None else [tf.constant(b)])


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_solver_is_tfs(fns, case, dtype):
    """Under the launch op the call runs TF's own kernel: the same bits, inf and NaN."""
    jit, ref = fns[case[0], case[4], case[5]]
    args = _args(*_inputs(case, dtype))
    got, want = tf.nest.flatten(jit(*args)), tf.nest.flatten(ref(*args))
    for g, w in zip(got, want):
        assert_matches(g.numpy(), w.numpy(), rtol=0, atol=0)
    if 0 not in case[1] + (case[2] or ()):
        kinds = [k.kind for k in jit.compiled(*args).fusions]
        assert "library" in kinds, kinds


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_cholesky_of_a_matrix_that_is_not_positive_definite_is_nan(fns, dtype):
    """TF's kernel fills the lower triangle with NaN (a warning, no error); the rest of
    TF's output is left as allocated, tfjit's holds zeros."""
    jit, ref = fns["cholesky", False, False]
    a = tf.constant(_matrix(np.random.default_rng(5), (2, 4, 4), "not-pd", DTYPES[dtype]))
    got, want = jit(a).numpy(), ref(a).numpy()
    lower = np.tril(np.ones((4, 4), bool))
    assert np.isnan(want[:, lower]).all() and np.isnan(got[:, lower]).all()
    assert (got[:, ~lower] == 0).all()


@pytest.mark.parametrize("op, message", [("inv", "Input is not invertible"),
                                         ("solve", "Input matrix is not invertible")])
def test_singular_matrix_fails_the_launch_as_tf(fns, op, message):
    """TF's InvalidArgumentError, naming the node, returned as the launch's status."""
    jit, ref = fns[op, False, False]
    a = _matrix(np.random.default_rng(1), (2, 3, 3), "singular", np.float32)
    a[0] = np.eye(3)                        # the second matrix fails
    args = _args(a, _rhs(np.random.default_rng(2), (2, 3, 1), np.float32) if op == "solve" else None)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        ref(*args)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"(?s){message}.*Matrix(Inverse|Solve)|Matrix(Inverse|Solve).*{message}"):
        jit(*args)


@pytest.mark.parametrize("fn, args", [
    (tf.linalg.inv, [tf.ones([2, 3])]),
    (tf.linalg.cholesky, [tf.ones([3, 2])]),
    (tf.linalg.solve, [tf.eye(3), tf.ones([2, 1])]),
    (tf.linalg.triangular_solve, [tf.eye(3), tf.ones([2, 1])]),
    (lambda a, b: tf.linalg.triangular_solve(a, b), [tf.eye(3, batch_shape=[2]), tf.ones([3, 3, 1])]),
])
def test_bad_shapes_raise_tfs_error(fn, args):
    """Non-square matrices and mismatched right-hand sides: TF's shape functions refuse
    them while tracing, for tfjit as for tf.function (same exception type)."""
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError)) as want:
        tf.function(fn)(*args)
    with pytest.raises(type(want.value)):
        tfjit.function(fn, jit_compile=True)(*args)


@pytest.mark.parametrize("fn, args, node", [
    (tf.linalg.inv, [tf.ones([2, 3])], "MatrixInverse"),
    (tf.linalg.triangular_solve, [tf.eye(3), tf.ones([2, 1])], "triangular_solve/MatrixTriangularSolve"),
    (tf.linalg.solve, [tf.eye(3, batch_shape=[2]), tf.ones([3, 3, 1])], "MatrixSolve"),
])
def test_bad_shapes_known_at_run_time_are_typed_errors_naming_op_and_node(fn, args, node):
    """Where the graph's shapes are unknown (the launch compiles lazily) TF's kernel
    raises InvalidArgumentError at run time; tfjit's refusal is the same type, naming the
    op, its node and the reason."""
    signature = [tf.TensorSpec([None] * x.shape.rank, x.dtype) for x in args]
    jit = tfjit.function(fn, jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.function(lambda *a: fn(*a), input_signature=signature)(*args)
    op = node.split("/")[-1]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"(?s){op} \({op}.*(square|rows|match).*\{{\{{node {node}\}}\}}"):
        tf.function(lambda *a: jit(*a), input_signature=signature)(*args)


def test_ir_builder_refuses_bad_operands():
    from tfjit import dtypes as dt
    from tfjit.ir.module import IRError, Module
    from tfjit.ir.ops import Op
    m = Module("bad")
    a, rect = m.parameter(dt.F32, (2, 3, 3)), m.parameter(dt.F32, (2, 3, 4))
    for op, operands in [(Op.CHOLESKY, (rect,)), (Op.MATRIX_SOLVE, (a, m.parameter(dt.F32, (2, 4, 1)))),
                         (Op.TRIANGULAR_SOLVE, (a,)), (Op.DETERMINANT, (m.parameter(dt.I32, (3, 3, 3)),)),
                         (Op.MATRIX_INVERSE, (m.parameter(dt.F32, (0, 3, 3)),))]:
        with pytest.raises(IRError, match=op.spelling):
            m.matrix_op(op, *operands)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_solvers_in_the_host_runner_and_interpreter(fns, dtype):
    """Without a launch op (the host runner; AOT objects link the same linalg.cc) the
    calls run Eigen's algorithms themselves, built apart from TF's: within tolerance; the
    interpreter (LAPACK through numpy, a substitution loop) too.  Singular inputs to
    MatrixInverse/MatrixSolve fail both, as TF's kernel does."""
    from tfjit.ir import interp, interp_linalg, text
    from tfjit.runtime import host
    for case in CASES:
        if 0 in case[1] + (case[2] or ()) or case[3] == "zero-diagonal":
            continue                        # no call / inf and NaN by rounding order
        jit, ref = fns[case[0], case[4], case[5]]
        args = _args(*_inputs(case, dtype))
        compiled = jit.compiled(*args)
        arrays = [x.numpy() for x in args]
        want = [w.numpy() for w in tf.nest.flatten(ref(*args))]
        got = host.run_compiled(compiled, arrays)
        reference = interp.evaluate(text.parse_module(compiled.module_after), arrays)
        tol = HOST_TOL[dtype] * case[1][-1] ** 2
        for g, w, i in zip(got, want, reference):
            assert_matches(g, w, rtol=tol, atol=tol, what=f"{case[0]} {case[1]} host", check_zero_sign=False)
            assert_matches(i, w, rtol=tol, atol=tol, what=f"{case[0]} {case[1]} interp", check_zero_sign=False)
    singular = _matrix(np.random.default_rng(3), (3, 3), "singular", DTYPES[dtype])
    jit, _ = fns["inv", False, False]
    compiled = jit.compiled(tf.constant(np.eye(3, dtype=singular.dtype)))
    with pytest.raises(ValueError, match="MatrixInverse"):
        host.run_compiled(compiled, [singular])
    with pytest.raises(interp_linalg.NotInvertible, match="not invertible"):
        interp.evaluate(text.parse_module(compiled.module_after), [singular])


# -- gradients: TF's registered gradient functions, compiled whole ----------------------

def _loss_grad(f):
    def fn(*args):
        with tf.GradientTape() as tape:
            tape.watch(args)
            loss = tf.add_n([tf.reduce_sum(y * y) for y in tf.nest.flatten(f(*args))])
        return tape.gradient(loss, args)
    return fn


def _t(x):
    return tf.linalg.matrix_transpose(x)


# name -> (function, input shapes, the kind of matrix for input 0)
GRADS = {
    "qr": (lambda x: tf.linalg.qr(x), [(2, 5, 3)], "general"),
    "qr-full-square": (lambda x: tf.linalg.qr(x, full_matrices=True), [(4, 4)], "general"),
    "qr-wide": (lambda x: tf.linalg.qr(x), [(3, 5)], "general"),
    "triangular_solve": (lambda a, b: tf.linalg.triangular_solve(a, b), [(2, 4, 4), (2, 4, 3)], "general"),
    "triangular_solve-upper-adjoint": (lambda a, b: tf.linalg.triangular_solve(a, b, lower=False, adjoint=True),
                                       [(4, 4), (4, 2)], "general"),
    "cholesky": (lambda a: tf.linalg.cholesky(a @ _t(a) + 4.0 * tf.eye(4, dtype=a.dtype)), [(2, 4, 4)],
                 "general"),
    "inv": (lambda a: tf.linalg.inv(a), [(2, 4, 4)], "general"),
    "solve": (lambda a, b: tf.linalg.solve(a, b, adjoint=True), [(3, 3), (3, 2)], "general"),
    "det": (lambda a: tf.linalg.det(a), [(2, 3, 3)], "general"),
    "slogdet": (lambda a: tf.linalg.slogdet(a)[1], [(2, 3, 3)], "general"),
}


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", list(GRADS))
def test_gradient_under_jit_compile_matches_tf(name, dtype):
    """tape.gradient through the op under jit_compile=True: TF's gradient function's ops
    (the solvers, MatMul, MatrixBandPart, ...) all compile, and match TF's executor."""
    f, shapes, kind = GRADS[name]
    rng = np.random.default_rng(len(name))
    args = [tf.constant(_matrix(rng, shapes[0], kind, DTYPES[dtype]) if shapes[0][-1] == shapes[0][-2]
                        else _rhs(rng, shapes[0], DTYPES[dtype]))]
    args += [tf.constant(_rhs(rng, s, DTYPES[dtype])) for s in shapes[1:]]
    got = tfjit.function(_loss_grad(f), jit_compile=True)(*args)
    want = tf.function(_loss_grad(f))(*args)
    rtol, atol = (1e-5, 1e-5) if dtype == "f32" else (1e-12, 1e-12)
    for g, w in zip(got, want):
        assert_matches(g.numpy(), w.numpy(), rtol=rtol, atol=atol, what=f"d{name}", check_zero_sign=False)
