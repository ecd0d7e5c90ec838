"""Where the parts of a runtime-library call with several results (QR, the log-determinant,
LU, the spectral decompositions) lie in its one flat result: each part starts at a
multiple of 16 elements, so all are 64-byte aligned, as TF's kernels need their tensors
to be (runtime/linalg.h computes the same offsets); and the result shape of an FFT call.
"""
from __future__ import annotations

import math

from tfjit.ir.ops import FFT_TYPES, Op


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


def fft_shape(shape: tuple, fft_type: int, fft_length: tuple) -> tuple | None:
    """The result shape of Module.fft on x of ``shape``, or None where the call is invalid."""
    r, n = len(fft_length), fft_length
    kind = FFT_TYPES[fft_type] if 0 <= fft_type < len(FFT_TYPES) else None
    complex_in = kind in ("fft", "ifft", "irfft")
    if kind is None or not 1 <= r <= 3 or len(shape) != 1 + r + complex_in \
            or (complex_in and shape[-1] != 2) or min(n, default=0) < 0:
        return None
    dims = tuple(shape[1:len(shape) - complex_in])
    if kind in ("fft", "ifft"):
        if dims != n:
            return None
        out = dims
    else:
        least = n[:-1] + ((n[-1] // 2 + 1) if kind == "irfft" else n[-1],)
        if any(d < m for d, m in zip(dims, least) if d):
            return None
        out = n[:-1] + (n[-1] // 2 + 1 if kind == "rfft" and n[-1] != 0 else n[-1],)
    result = (shape[0],) + out + ((2,) if kind != "irfft" else ())
    return None if math.prod(shape) == 0 and math.prod(result) != 0 else result
