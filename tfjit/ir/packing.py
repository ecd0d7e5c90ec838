"""Where the parts of a runtime-library call with several results (QR, the log-determinant,
LU, the spectral decompositions) lie in its one flat result: each part starts at a
multiple of 16 elements, so all are 64-byte aligned, as TF's kernels need their tensors
to be (runtime/linalg.h computes the same offsets)."""
from __future__ import annotations

from tfjit.ir.ops import Op


def qr_parts(shape: tuple, full_matrices: bool) -> tuple:
    """((start, size), (start, size)) of Q [B, M, K] and R [B, K, N] in a ``qr`` result for
    x of ``shape`` [B, M, N], K = M when ``full_matrices`` else min(M, N).  R starts at a
    multiple of 16 elements, so both parts are 64-byte aligned, as TF's kernels need their
    tensors to be (runtime/linalg.h says the same)."""
    b, rows, cols = shape
    k = rows if full_matrices else min(rows, cols)
    q_size = b * rows * k
    return (0, q_size), (-(-q_size // 16) * 16, b * k * cols)


def log_determinant_parts(batch: int) -> tuple:
    """((start, size), (start, size)) of the signs and the log |det|s in a
    ``log-determinant`` result of ``batch`` matrices; the logs start at a multiple of 16
    elements (64-byte aligned, as ``qr_parts``; runtime/linalg.h says the same)."""
    return (0, batch), (-(-batch // 16) * 16, batch)


def lu_parts(batch: int, rows: int) -> tuple:
    """((start, size), (start, size)) of the factors [B, M, M] and the permutations [B, M]
    in an ``lu`` result, the second 64-byte aligned (as ``qr_parts``; runtime/linalg.h)."""
    size = batch * rows * rows
    return (0, size), (-(-size // 16) * 16, batch * rows)


def spectral_parts(op: Op, shape: tuple, attrs: dict) -> list:
    """[(start, size), ...] of the parts of a ``spectral`` result of x [B, M, N] (ops.py:
    the eigenvalues, then the eigenvectors; the singular values, then U and V; the values
    only without compute_v/compute_uv), each starting at a multiple of 16 elements
    (64-byte aligned, as ``qr_parts``; runtime/linalg.h says the same)."""
    b, rows, cols = shape
    k = min(rows, cols)
    sizes = [b * k]
    if op is Op.SELF_ADJOINT_EIG and attrs["compute_v"]:
        sizes.append(b * rows * rows)
    elif op is Op.SVD and attrs["compute_uv"]:
        full = attrs["full_matrices"]
        sizes += [b * rows * (rows if full else k), b * cols * (cols if full else k)]
    parts, start = [], 0
    for size in sizes:
        parts.append((start, size))
        start = -(-(start + size) // 16) * 16
    return parts
