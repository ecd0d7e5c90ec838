"""Matrix decompositions and solvers: Qr, MatrixTriangularSolve, MatrixSolve, Cholesky,
MatrixInverse, MatrixDeterminant, LogMatrixDeterminant, Lu, MatrixSolveLs,
SelfAdjointEigV2, Svd.

``tf.linalg.qr`` becomes one IR ``qr``, a runtime-library call (as MatMul's dot is):
under the launch op it runs TF's own Qr kernel, in the host runner and in AOT
objects Eigen's HouseholderQR, which is what TF's kernel runs (runtime/linalg.cc).
A Householder loop in IR would be a long chain of dependent rank-1 updates with
reductions between them, which fusion cannot make faster than Eigen's blocked
code; and it could not follow Eigen's blocking, so it would match TF only within
tolerance, where the call matches it bit for bit under the launch op.  The solvers
are calls for the same reasons (substitution and pivoted LU are row-by-row dependent
chains), each TF's kernel's own algorithm: Eigen's triangular solve, PartialPivLU, LLT.
TF's gradients of these ops are made of these ops, MatMul and MatrixBandPart, so
``tape.gradient`` through them compiles too.  SelfAdjointEigV2 and Svd are calls of
Eigen's SelfAdjointEigenSolver and BDCSVD (iterative QR sweeps and divide and conquer,
with data-dependent iteration counts), so their vectors' signs are TF's under the
launch op.
"""
from __future__ import annotations

import math

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.packing import log_determinant_parts, lu_parts, qr_parts, spectral_parts
from tfjit.ir.ops import Op
from tfjit.lower.registry import Unsupported, broadcast_shapes, broadcast_to, register


@register("Qr", dtypes=(dt.F32, dt.F64))
def _qr(ctx):
    """(q [..., M, K], r [..., K, N]), K = M if full_matrices else min(M, N), sliced out of
    the call's packed result (slices fuse into their readers)."""
    m, (x,) = ctx.m, ctx.inputs
    if x.rank < 2:
        raise Unsupported(f"Qr needs a matrix, got rank {x.rank}")
    batch, (rows, cols) = x.shape[:-2], x.shape[-2:]
    if 0 in x.shape:
        raise Unsupported(f"Qr of an empty matrix batch {list(x.shape)} is not compiled")
    full = bool(ctx.attr("full_matrices", False))
    k = rows if full else min(rows, cols)
    shape = (math.prod(batch), rows, cols)
    packed = m.qr(m.reshape(x, shape), full)
    q, r = ((m.slice(packed, (start,), (size,))) for start, size in qr_parts(shape, full))
    return m.reshape(q, batch + (rows, k)), m.reshape(r, batch + (k, cols))


# -- the dense solvers: one runtime-library call each (TF's kernel under the launch op,
# linalg.cc's Eigen code in the host runner and AOT objects), on [B, M, M] matrices.

def _square(ctx, x):
    """x's batch dims and M, for a [..., M, M] input of node ``ctx.node``."""
    if x.rank < 2 or x.shape[-1] != x.shape[-2]:
        raise Unsupported(f"{ctx.node.op} needs square matrices [..., M, M], got {list(x.shape)}")
    return x.shape[:-2], x.shape[-1]


def _filled(m, value, shape, dtype):
    return m.broadcast(m.scalar(value, dtype), shape, ())


def _solve(ctx, op, batch_dims, a, b, **flags):
    """op(a) x = b for a [..., M, M], b [..., M, N] of the batch dims ``batch_dims``."""
    m, rows, cols = ctx.m, a.shape[-1], b.shape[-1]
    out_shape = batch_dims + (rows, cols)
    if 0 in out_shape:
        return _filled(m, 0.0, out_shape, a.dtype)
    batch = math.prod(batch_dims)
    x = m.matrix_op(op, m.reshape(a, (batch, rows, rows)), m.reshape(b, (batch, rows, cols)), **flags)
    return m.reshape(x, out_shape)


@register("MatrixTriangularSolve", "BatchMatrixTriangularSolve", dtypes=(dt.F32, dt.F64))
def _triangular_solve(ctx):
    """TF's V2 op: a [..., M, M] and b [..., M, N] broadcast their batch dims (a broadcast
    operand is copied out to the full batch before the call)."""
    a, b = ctx.inputs
    _, rows = _square(ctx, a)
    if b.rank < 2 or b.shape[-2] != rows:
        raise Unsupported(f"{ctx.node.op}: the right-hand sides {list(b.shape)} do not have "
                          f"the {rows} rows of the matrices {list(a.shape)}")
    batch_dims = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = broadcast_to(ctx.m, a, batch_dims + a.shape[-2:])
    b = broadcast_to(ctx.m, b, batch_dims + b.shape[-2:])
    return _solve(ctx, Op.TRIANGULAR_SOLVE, batch_dims, a, b,
                  lower=bool(ctx.attr("lower", True)), adjoint=bool(ctx.attr("adjoint", False)))


@register("MatrixSolve", "BatchMatrixSolve", dtypes=(dt.F32, dt.F64))
def _matrix_solve(ctx):
    """The same batch dims on both sides (TF's MatrixSolve does not broadcast)."""
    a, b = ctx.inputs
    batch_dims, rows = _square(ctx, a)
    if b.rank != a.rank or b.shape[:-1] != a.shape[:-1]:
        raise Unsupported(f"{ctx.node.op}: the right-hand sides {list(b.shape)} do not match "
                          f"the matrices {list(a.shape)} (the same batch dims and {rows} rows)")
    return _solve(ctx, Op.MATRIX_SOLVE, batch_dims, a, b, adjoint=bool(ctx.attr("adjoint", False)))


def _of_matrix(ctx, op, **flags):
    """(batch dims, the call's result) for a [..., M, M]; None for the result when there
    are no matrices or they are empty (the caller fills TF's result in)."""
    (x,) = ctx.inputs
    batch_dims, rows = _square(ctx, x)
    if 0 in x.shape:
        return batch_dims, None
    batch = math.prod(batch_dims)
    return batch_dims, ctx.m.matrix_op(op, ctx.m.reshape(x, (batch, rows, rows)), **flags)


@register("Cholesky", "BatchCholesky", dtypes=(dt.F32, dt.F64))
def _cholesky(ctx):
    """TF's kernel: the lower factor; NaN in the lower triangle of a matrix that is not
    positive definite (no error)."""
    _, out = _of_matrix(ctx, Op.CHOLESKY)
    return ctx.inputs[0] if out is None else ctx.m.reshape(out, ctx.inputs[0].shape)


@register("MatrixInverse", "BatchMatrixInverse", dtypes=(dt.F32, dt.F64))
def _matrix_inverse(ctx):
    """A singular matrix fails the launch with TF's "Input is not invertible."."""
    _, out = _of_matrix(ctx, Op.MATRIX_INVERSE, adjoint=bool(ctx.attr("adjoint", False)))
    return ctx.inputs[0] if out is None else ctx.m.reshape(out, ctx.inputs[0].shape)


@register("MatrixDeterminant", "BatchMatrixDeterminant", dtypes=(dt.F32, dt.F64))
def _determinant(ctx):
    """sign * exp(log |det|) from a pivoted LU, as TF's kernel; an empty matrix's is 1."""
    batch_dims, out = _of_matrix(ctx, Op.DETERMINANT)
    if out is None:
        return _filled(ctx.m, 1.0, batch_dims, ctx.inputs[0].dtype)
    return ctx.m.reshape(out, batch_dims)


@register("LogMatrixDeterminant", dtypes=(dt.F32, dt.F64))
def _log_determinant(ctx):
    """(sign, log |det|), sliced out of the call's packed result; an empty matrix's is
    (1, 0); a singular one's (0, -inf), as TF's kernel."""
    m, dtype = ctx.m, ctx.inputs[0].dtype
    batch_dims, packed = _of_matrix(ctx, Op.LOG_DETERMINANT)
    if packed is None:
        return _filled(m, 1.0, batch_dims, dtype), _filled(m, 0.0, batch_dims, dtype)
    parts = log_determinant_parts(math.prod(batch_dims))
    return tuple(m.reshape(m.slice(packed, (start,), (size,)), batch_dims) for start, size in parts)


@register("Lu", dtypes=(dt.F32, dt.F64))
def _lu(ctx):
    """(lu [..., M, M], p [..., M] of output_idx_type) from Eigen's PartialPivLU, as TF's
    kernel (an exact zero pivot fails the launch: "Input is not invertible.").  The call
    packs the permutation as exact integers of the input's dtype; it is converted here."""
    (x,) = ctx.inputs
    batch_dims, rows = _square(ctx, x)
    index_type = ctx.attr("output_idx_type")
    index = dt.I32 if index_type is None else index_type.ir
    if index not in (dt.I32, dt.I64):
        raise Unsupported(f"Lu with output_idx_type {index.name}")
    m = ctx.m
    if 0 in x.shape:
        return x, _filled(m, 0, batch_dims + (rows,), index)
    batch = math.prod(batch_dims)
    packed = m.lu(m.reshape(x, (batch, rows, rows)))
    factors, perm = (m.slice(packed, (start,), (size,)) for start, size in lu_parts(batch, rows))
    return m.reshape(factors, x.shape), m.reshape(m.convert(perm, index), batch_dims + (rows,))


@register("MatrixSolveLs", "BatchMatrixSolveLs", dtypes=(dt.F32, dt.F64))
def _matrix_solve_ls(ctx):
    """x [..., N, K] of a [..., M, N], b [..., M, K] (the same batch dims) and the f64
    scalar l2 (a run-time value): TF's kernel, which fails the launch where l2 < 0 or
    (fast) the Gram matrix is not positive definite.  Where there are no matrices or
    rhs columns the result is empty; where M or N is 0 it is zeros (TF's kernel leaves
    that output as allocated)."""
    a, b, l2 = ctx.inputs
    if a.rank < 2 or b.rank != a.rank or b.shape[:-1] != a.shape[:-1] or l2.rank != 0:
        raise Unsupported(f"{ctx.node.op}: the matrices {list(a.shape)}, right-hand sides "
                          f"{list(b.shape)} and l2_regularizer {list(l2.shape)} do not match "
                          f"(the same batch dims and rows, a scalar l2)")
    m = ctx.m
    batch_dims, (rows, cols), rhs = a.shape[:-2], a.shape[-2:], b.shape[-1]
    if 0 in a.shape + b.shape:
        return _filled(m, 0.0, batch_dims + (cols, rhs), a.dtype)
    batch = math.prod(batch_dims)
    x = m.solve_ls(m.reshape(a, (batch, rows, cols)), m.reshape(b, (batch, rows, rhs)), l2,
                   bool(ctx.attr("fast", True)))
    return m.reshape(x, batch_dims + (cols, rhs))


# -- the spectral decompositions: one call each, as the solvers, on [B, M, N] matrices.

def _spectral(ctx, op, x, **flags):
    """The parts (values, then any vectors) of ``op`` of x [..., M, N] (non-empty), each
    a flat slice of the call's packed result."""
    shape = (math.prod(x.shape[:-2]),) + x.shape[-2:]
    packed = ctx.m.spectral(op, ctx.m.reshape(x, shape), **flags)
    attrs = {k: int(v) for k, v in flags.items()}
    return [ctx.m.slice(packed, (start,), (size,)) for start, size in spectral_parts(op, shape, attrs)]


def _identities(m, batch_dims, n, dtype):
    """I [..., n, n] over ``batch_dims``."""
    eye = m.constant(np.eye(n), dtype)
    return m.broadcast(eye, batch_dims + (n, n), (len(batch_dims), len(batch_dims) + 1))


@register("SelfAdjointEigV2", "BatchSelfAdjointEigV2", dtypes=(dt.F32, dt.F64))
def _self_adjoint_eig(ctx):
    """(e [..., M] ascending, v [..., M, M]) of the lower triangles, as TF's kernel (a
    NaN or inf input fails the launch with its InvalidArgumentError).  Without
    compute_v, v is the empty [0] of TF's shape function (TF's kernel leaves a scalar
    unset there)."""
    (x,) = ctx.inputs
    batch_dims, rows = _square(ctx, x)
    vectors = bool(ctx.attr("compute_v", True))
    m, dtype = ctx.m, x.dtype
    if 0 in x.shape:
        e, v = _filled(m, 0.0, batch_dims + (rows,), dtype), _filled(m, 0.0, x.shape, dtype)
    else:
        parts = _spectral(ctx, Op.SELF_ADJOINT_EIG, x, compute_v=vectors)
        e = m.reshape(parts[0], batch_dims + (rows,))
        v = m.reshape(parts[1], x.shape) if vectors else None
    return e, v if vectors else _filled(m, 0.0, (0,), dtype)


@register("Svd", "BatchSvd", dtypes=(dt.F32, dt.F64))
def _svd(ctx):
    """(s [..., K] descending, u [..., M, P], v [..., N, Q]), K = min(M, N), P = M and
    Q = N when full_matrices, else P = Q = K: Eigen's BDCSVD as TF's kernel.  Of empty
    matrices, u and v are identities where full_matrices, as TF's kernel makes them.
    Without compute_uv, u and v are the empty [0] of TF's shape function."""
    (x,) = ctx.inputs
    if x.rank < 2:
        raise Unsupported(f"{ctx.node.op} needs matrices [..., M, N], got {list(x.shape)}")
    batch_dims, (rows, cols) = x.shape[:-2], x.shape[-2:]
    k = min(rows, cols)
    vectors, full = bool(ctx.attr("compute_uv", True)), bool(ctx.attr("full_matrices", False))
    p, q = (rows, cols) if full else (k, k)
    m, dtype = ctx.m, x.dtype
    if not vectors:
        none = _filled(m, 0.0, (0,), dtype)
        s = (_filled(m, 0.0, batch_dims + (k,), dtype) if 0 in x.shape else
             m.reshape(_spectral(ctx, Op.SVD, x, compute_uv=False, full_matrices=False)[0], batch_dims + (k,)))
        return s, none, none
    if 0 in x.shape:
        if full and 0 not in batch_dims:
            return (_filled(m, 0.0, batch_dims + (0,), dtype), _identities(m, batch_dims, rows, dtype),
                    _identities(m, batch_dims, cols, dtype))
        return tuple(_filled(m, 0.0, batch_dims + shape, dtype) for shape in ((k,), (rows, p), (cols, q)))
    s, u, v = _spectral(ctx, Op.SVD, x, compute_uv=True, full_matrices=full)
    return (m.reshape(s, batch_dims + (k,)), m.reshape(u, batch_dims + (rows, p)),
            m.reshape(v, batch_dims + (cols, q)))
