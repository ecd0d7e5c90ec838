"""The interpreter's runtime-library ops (interp.py): the same contractions as the
runtime library's, summed in a different order, and LAPACK's Householder QR (numpy's)
where the runtime runs Eigen's, with the same sign conventions; LAPACK's LU and
Cholesky and a substitution loop for the dense solvers, LAPACK's symmetric eigensolver and
SVD (whose vectors' signs may differ from Eigen's: compare them up to sign), numpy's
pocketfft where TF runs DUCC's FFT; so a compiled result matches
these within float tolerance, not bit for bit."""
from __future__ import annotations

import numpy as np

from tfjit.ir.library_calls import conv3d_shapes
from tfjit.ir.packing import log_determinant_parts, lu_parts, qr_parts, spectral_parts
from tfjit.ir.ops import FFT_TYPES, Op


def _in_f32_if_half(fn):
    """A bf16 product or convolution is summed in f32 and rounded once, as TF's bf16
    kernels (and the runtime: passes/dots.py Bf16Products)."""
    def wrapped(*args):
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        if not arrays or arrays[0].dtype.itemsize != 2:
            return fn(*args)
        half = arrays[0].dtype
        widened = [a.astype(np.float32) if isinstance(a, np.ndarray) else a for a in args]
        return np.asarray(fn(*widened)).astype(half)
    return wrapped


@_in_f32_if_half
def dot(lhs, rhs, transpose_lhs, transpose_rhs):
    a = np.swapaxes(lhs, -1, -2) if transpose_lhs else lhs
    b = np.swapaxes(rhs, -1, -2) if transpose_rhs else rhs
    return np.matmul(a, b)


@_in_f32_if_half
def conv(x, w, strides, dilations, padding):
    """NHWC x HWIO, explicit padding: a sum over the filter taps of strided views."""
    n, h, wd, c = x.shape
    kh, kw, _, o = w.shape
    (sh, sw), (dh, dw), (top, bottom, left, right) = strides, dilations, padding
    xp = np.zeros((n, h + top + bottom, wd + left + right, c), x.dtype)
    xp[:, top:top + h, left:left + wd] = x
    ho = (xp.shape[1] - (kh - 1) * dh - 1) // sh + 1
    wo = (xp.shape[2] - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, ho, wo, o), x.dtype)
    for i in range(kh):
        for j in range(kw):
            window = xp[:, i * dh:i * dh + (ho - 1) * sh + 1:sh, j * dw:j * dw + (wo - 1) * sw + 1:sw]
            out += np.tensordot(window, w[i, j], axes=([3], [0])).astype(x.dtype)
    return out


@_in_f32_if_half
def conv_backprop(instr, a, g):
    """The convolution gradients (``Op.CONV_BACKPROPS``): for each filter tap, the
    strided window of the padded input it meets, as in ``conv``."""
    op, (sh, sw), (top, bottom, left, right) = instr.op, instr.attrs["strides"], instr.attrs["padding"]
    of_input = op in (Op.CONV_BACKPROP_INPUT, Op.DEPTHWISE_BACKPROP_INPUT)
    depthwise = op in (Op.DEPTHWISE_BACKPROP_INPUT, Op.DEPTHWISE_BACKPROP_FILTER)
    (n, h, wd, c), (kh, kw, _, k) = (instr.shape, a.shape) if of_input else (a.shape, instr.shape)
    _, ho, wo, _ = g.shape
    if depthwise:
        g = g.reshape(n, ho, wo, c, k)
    padded = (n, h + top + bottom, wd + left + right, c)
    if of_input:
        dxp = np.zeros(padded, g.dtype)
    else:
        xp = np.zeros(padded, a.dtype)
        xp[:, top:top + h, left:left + wd] = a
        dw = np.zeros(instr.shape, a.dtype)
    for i in range(kh):
        for j in range(kw):
            window = (slice(None), slice(i, i + (ho - 1) * sh + 1, sh), slice(j, j + (wo - 1) * sw + 1, sw))
            if of_input and depthwise:
                dxp[window] += (g * a[i, j]).sum(-1, dtype=g.dtype)
            elif of_input:
                dxp[window] += np.tensordot(g, a[i, j], axes=([3], [1])).astype(g.dtype)
            elif depthwise:
                dw[i, j] = (xp[window][..., None] * g).sum((0, 1, 2), dtype=g.dtype)
            else:
                dw[i, j] = np.tensordot(xp[window], g, axes=([0, 1, 2], [0, 1, 2])).astype(g.dtype)
    return dxp[:, top:top + h, left:left + wd] if of_input else dw


@_in_f32_if_half
def conv3d(instr, a, b):
    """The 3-D convolution and its gradients (``Op.CONV3D_OPS``): for each filter tap,
    the strided window of the padded input it meets, as in ``conv``."""
    op, strides, pads = instr.op, instr.attrs["strides"], instr.attrs["padding"]
    x_shape, w_shape, _ = conv3d_shapes(instr)
    lows, dtype = pads[0::2], a.dtype
    padded = (x_shape[0], *(s + lo + hi for s, lo, hi in zip(x_shape[1:4], lows, pads[1::2])), x_shape[4])
    out = [(p - k) // s + 1 for p, k, s in zip(padded[1:4], w_shape[:3], strides)]
    inner = tuple(slice(lo, lo + s) for lo, s in zip(lows, x_shape[1:4]))
    xp = np.zeros(padded, dtype)
    if op is not Op.CONV3D_BACKPROP_INPUT:
        xp[(slice(None),) + inner] = a
    result = np.zeros(instr.shape, dtype)
    for tap in np.ndindex(*w_shape[:3]):
        window = (slice(None),) + tuple(slice(t, t + (o - 1) * s + 1, s) for t, o, s in zip(tap, out, strides))
        if op is Op.CONV3D:
            result += np.tensordot(xp[window], b[tap], axes=([4], [0])).astype(dtype)
        elif op is Op.CONV3D_BACKPROP_INPUT:
            xp[window] += np.tensordot(b, a[tap], axes=([4], [1])).astype(dtype)
        else:
            result[tap] = np.tensordot(xp[window], b, axes=([0, 1, 2, 3], [0, 1, 2, 3])).astype(dtype)
    return xp[(slice(None),) + inner] if op is Op.CONV3D_BACKPROP_INPUT else result


def qr(instr, x):
    """Op.QR: Q [B, M, K] and R [B, K, N] in one flat result (packing.qr_parts; the gap
    between them is zeros)."""
    full = bool(instr.attrs["full_matrices"])
    q, r = np.linalg.qr(x, mode="complete" if full else "reduced")
    out = np.zeros(instr.shape, x.dtype)
    for part, (start, size) in zip((q, r), qr_parts(x.shape, full)):
        out[start:start + size] = part.reshape(-1)
    return out


class NotInvertible(ValueError):
    """MATRIX_INVERSE or MATRIX_SOLVE met an exactly singular matrix (TF's kernels:
    InvalidArgumentError "Input is not invertible." / "Input matrix is not invertible.")."""


def _substitute(a, b, lower: bool):
    """a^-1 b for triangular a [B, M, M] by substitution, row after row: a zero on the
    diagonal gives inf/NaN rows, as Eigen's triangular solve (no pivot check in TF)."""
    x = np.zeros(b.shape, b.dtype)
    rows = a.shape[-1]
    for i in range(rows) if lower else range(rows - 1, -1, -1):
        done = slice(0, i) if lower else slice(i + 1, rows)
        partial = np.einsum("bk,bkn->bn", a[:, i, done], x[:, done, :])
        with np.errstate(divide="ignore", invalid="ignore"):
            x[:, i, :] = (b[:, i, :] - partial) / a[:, i, i, None]
    return x


def _log_det(a):
    """(sign, log |det|) per matrix with TF's rule for a non-finite log: sign 0, log +-inf."""
    sign, log = np.linalg.slogdet(a.astype(np.float64))
    bad = ~np.isfinite(log)
    sign = np.where(bad, 0.0, sign)
    log = np.where(bad, np.where(log > 0, np.inf, -np.inf), log)
    return sign.astype(a.dtype), log.astype(a.dtype)


def solver(instr, a, *rhs):
    """The dense solvers (``ops.SOLVER_ATTRS``), matrix by matrix as TF's kernels.  A
    CHOLESKY that fails (not positive definite) gives NaN in its lower triangle."""
    op, adjoint = instr.op, bool(instr.attrs.get("adjoint", 0))
    m = np.swapaxes(a, -1, -2) if adjoint else a
    if op is Op.TRIANGULAR_SOLVE:
        lower = bool(instr.attrs["lower"])
        tri = np.tril(a) if lower else np.triu(a)
        return _substitute(np.swapaxes(tri, -1, -2) if adjoint else tri, rhs[0], lower != adjoint)
    if op is Op.CHOLESKY:
        out = np.zeros(a.shape, a.dtype)
        for k, matrix in enumerate(a):
            try:
                out[k] = np.linalg.cholesky(matrix)
            except np.linalg.LinAlgError:
                out[k] = np.tril(np.full(matrix.shape, np.nan, a.dtype))
        return out
    if op in (Op.MATRIX_INVERSE, Op.MATRIX_SOLVE):
        try:
            return np.linalg.inv(m) if op is Op.MATRIX_INVERSE else np.linalg.solve(m, rhs[0])
        except np.linalg.LinAlgError as e:
            raise NotInvertible("Input is not invertible." if op is Op.MATRIX_INVERSE
                                else "Input matrix is not invertible.") from e
    sign, log = _log_det(a)
    if op is Op.DETERMINANT:
        return (sign * np.exp(log)).astype(a.dtype)
    out = np.zeros(instr.shape, a.dtype)
    for part, (start, size) in zip((sign, log), log_determinant_parts(a.shape[0])):
        out[start:start + size] = part
    return out


def lu(instr, a):
    """LU of a [B, M, M] as Eigen's PartialPivLU (TF's Lu kernel): at each column the
    row of the largest |pivot| (the first of equals) is swapped up; an exact zero pivot
    raises NotInvertible (TF: "Input is not invertible.")."""
    batch, rows, _ = a.shape
    factors, perms = a.copy(), np.tile(np.arange(rows, dtype=a.dtype), (batch, 1))
    for f, perm in zip(factors, perms):
        for j in range(rows):
            p = j + int(np.argmax(np.abs(f[j:, j])))
            f[[j, p]], perm[[j, p]] = f[[p, j]], perm[[p, j]]
            if f[j, j] != 0:
                f[j + 1:, j] /= f[j, j]
                f[j + 1:, j + 1:] -= np.outer(f[j + 1:, j], f[j, j + 1:])
        if not (np.abs(np.diagonal(f)).min() > 0):
            raise NotInvertible("Input is not invertible.")
    out = np.zeros(instr.shape, a.dtype)
    for part, (start, size) in zip((factors, perms), lu_parts(batch, rows)):
        out[start:start + size] = part.reshape(-1)
    return out


class RankDeficient(ValueError):
    """MATRIX_SOLVE_LS refused its input, as TF's kernel does: l2 < 0, or (fast) a
    Gram matrix that is not positive definite ("rank deficient or ill-conditioned")."""


def solve_ls(instr, a, b, l2):
    """MATRIX_SOLVE_LS as TF's kernel: fast, the regularised normal equations of the
    first (M >= N) or second kind by Cholesky; else the minimum-norm least-squares
    solution (LAPACK's, where TF's runs Eigen's complete orthogonal decomposition)."""
    l2 = float(l2)
    if l2 < 0:
        raise RankDeficient("l2_regularizer must be >= 0.")
    if not instr.attrs["fast"]:
        return np.stack([np.linalg.lstsq(x, y, rcond=None)[0] for x, y in zip(a, b)]).astype(a.dtype)
    at = np.swapaxes(a, -1, -2)
    tall = a.shape[1] >= a.shape[2]
    gram = at @ a if tall else a @ at
    gram = gram + a.dtype.type(l2) * np.eye(gram.shape[-1], dtype=a.dtype) if l2 > 0 else gram
    try:
        lower = np.linalg.cholesky(gram)
    except np.linalg.LinAlgError as e:
        raise RankDeficient("Input matrix was rank deficient or ill-conditioned.") from e
    rhs = at @ b if tall else b
    z = _substitute(np.swapaxes(lower, -1, -2), _substitute(lower, rhs, True), False)
    return (z if tall else at @ z).astype(a.dtype)


class NotConverged(ValueError):
    """SELF_ADJOINT_EIG or SVD did not converge (LAPACK's failure; a NaN or inf input),
    where TF's SelfAdjointEigV2 kernel fails with "Self-adjoint eigen decomposition was
    not successful"."""


def spectral(instr, x):
    """SELF_ADJOINT_EIG (the lower triangle, as Eigen's solver reads it) or SVD of x
    [B, M, N], packed as packing.spectral_parts says (the gaps are zeros)."""
    attrs = instr.attrs
    try:
        if instr.op is Op.SELF_ADJOINT_EIG:
            parts = np.linalg.eigh(x, UPLO="L") if attrs["compute_v"] else (np.linalg.eigvalsh(x, UPLO="L"),)
        elif attrs["compute_uv"]:
            u, s, vh = np.linalg.svd(x, full_matrices=bool(attrs["full_matrices"]))
            parts = (s, u, np.swapaxes(vh, -1, -2))
        else:
            parts = (np.linalg.svd(x, compute_uv=False),)
    except np.linalg.LinAlgError as e:
        raise NotConverged(f"{instr.op.spelling}: {e}") from e
    out = np.zeros(instr.shape, x.dtype)
    for part, (start, size) in zip(parts, spectral_parts(instr.op, x.shape, attrs)):
        out[start:start + size] = part.reshape(-1)
    return out


def fft(instr, x):
    """Op.FFT: numpy's FFT over the last len(fft_length) dims of x [B, dims...] (real
    views of complex values: module.fft); rfft/irfft crop x to fft_length as TF's kernel."""
    out = np.zeros(instr.shape, x.dtype)
    if out.size == 0:
        return out
    kind, n = FFT_TYPES[instr.attrs["fft_type"]], tuple(instr.attrs["fft_length"])
    axes = tuple(range(-len(n), 0))
    if kind != "rfft":
        x = x[..., 0] + 1j * x[..., 1]
    y = {"fft": lambda: np.fft.fftn(x, axes=axes), "ifft": lambda: np.fft.ifftn(x, axes=axes),
         "rfft": lambda: np.fft.rfftn(x, s=n, axes=axes),
         "irfft": lambda: np.fft.irfftn(x, s=n, axes=axes)}[kind]()
    if kind == "irfft":
        return y.astype(x.real.dtype)
    out[..., 0], out[..., 1] = y.real, y.imag
    return out
