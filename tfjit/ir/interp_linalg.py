"""The interpreter's runtime-library ops (interp.py): the same contractions as the
runtime library's, summed in a different order, and LAPACK's Householder QR (numpy's)
where the runtime runs Eigen's, with the same sign conventions; so a compiled result
matches these within float tolerance, not bit for bit."""
from __future__ import annotations

import numpy as np

from tfjit.ir.module import qr_parts
from tfjit.ir.ops import Op

def dot(lhs, rhs, transpose_lhs, transpose_rhs):
    a = np.swapaxes(lhs, -1, -2) if transpose_lhs else lhs
    b = np.swapaxes(rhs, -1, -2) if transpose_rhs else rhs
    return np.matmul(a, b)


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


def qr(instr, x):
    """Op.QR: Q [B, M, K] and R [B, K, N] in one flat result (module.qr_parts; the gap
    between them is zeros)."""
    full = bool(instr.attrs["full_matrices"])
    q, r = np.linalg.qr(x, mode="complete" if full else "reduced")
    out = np.zeros(instr.shape, x.dtype)
    for part, (start, size) in zip((q, r), qr_parts(x.shape, full)):
        out[start:start + size] = part.reshape(-1)
    return out
