"""Matrix decompositions: Qr.

``tf.linalg.qr`` becomes one IR ``qr``, a runtime-library call (as MatMul's dot is):
under the launch op it runs TF's own Qr kernel, in the host runner and in AOT
objects Eigen's HouseholderQR, which is what TF's kernel runs (runtime/linalg.cc).
A Householder loop in IR would be a long chain of dependent rank-1 updates with
reductions between them, which fusion cannot make faster than Eigen's blocked
code; and it could not follow Eigen's blocking, so it would match TF only within
tolerance, where the call matches it bit for bit under the launch op.
"""
from __future__ import annotations

import math

from tfjit import dtypes as dt
from tfjit.ir.module import qr_parts
from tfjit.lower.registry import Unsupported, register


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
