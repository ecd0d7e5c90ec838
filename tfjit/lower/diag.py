"""Lowerings of TF's diagonal ops: Diag, DiagPart, and MatrixDiag, MatrixDiagPart,
MatrixSetDiag in their three versions (V1: the main diagonal; V2/V3: a band of
diagonals ``k``, with V3's ``align``).

Every one is a fixed pattern of element moves, so each becomes one gather with a
compile-time index table (numpy, from the static shapes and the constant ``k``) and
a select of the positions the pattern leaves to the padding value or to the input.
The rules and error words are those of TF's kernels (matrix_diag_op.cc, diag_op.cc).
"""
from __future__ import annotations

import math

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr
from tfjit.ir.ops import Op
from tfjit.lower import registry
from tfjit.lower.registry import LowerCtx, Unsupported, broadcast_to, register


def _move(m, src: Instr, batch: tuple, table: np.ndarray, fill: Instr) -> Instr:
    """out[..., p] = src[..., table[p]] where table[p] >= 0, else fill[..., p]: src is
    [*batch, n] and fill a scalar or [*batch, *table.shape]; the result has fill's shape."""
    shape = batch + table.shape
    fill = broadcast_to(m, fill, shape)
    flat = table.reshape(-1)
    if flat.size == 0 or not (flat >= 0).any():
        return fill
    index = m.constant(np.maximum(flat, 0).astype(np.int32), dt.I32)
    moved = m.reshape(m.gather(src, index, len(batch)), shape)
    if (flat >= 0).all():
        return moved
    keep = m.constant(table >= 0, dt.PRED)
    keep = m.broadcast(keep, shape, tuple(range(len(batch), len(shape))))
    return m.elementwise(Op.SELECT, keep, moved, fill)


# -- Diag and DiagPart (any rank) ----------------------------------------------------

@register("Diag", dtypes=registry.NUMERIC)
def _diag(ctx: LowerCtx):
    """out[i..., j...] = x[i...] where i == j, else 0; out has shape x.shape * 2."""
    m, x = ctx.m, ctx.inputs[0]
    if x.rank < 1:
        raise Unsupported(f"Input must be at least rank 1, got {x.rank}")
    n = x.size
    table = np.where(np.eye(n, dtype=bool), np.arange(n)[:, None], -1)
    out = _move(m, m.reshape(x, (n,)), (), table, m.scalar(0, x.dtype))
    return m.reshape(out, x.shape + x.shape)


@register("DiagPart", dtypes=registry.NUMERIC)
def _diag_part(ctx: LowerCtx):
    """out[i...] = x[i..., i...] for x of shape s + s."""
    m, x = ctx.m, ctx.inputs[0]
    k = x.rank // 2
    if x.rank == 0 or x.rank % 2:
        raise Unsupported(f"The rank of the tensor should be even and positive, got shape {list(x.shape)}")
    if x.shape[:k] != x.shape[k:]:
        raise Unsupported(f"Invalid shape {list(x.shape)}: dimensions {list(range(k))} and "
                          f"{list(range(k, 2 * k))} do not match")
    n = math.prod(x.shape[:k])
    if n == 0:
        return m.reshape(m.reshape(x, (0,)), x.shape[:k])
    return m.reshape(m.slice(m.reshape(x, (n * n,)), (0,), (n,), (n + 1,)), x.shape[:k])


# -- the Matrix* family --------------------------------------------------------------

_ALIGNS = ("LEFT_RIGHT", "RIGHT_LEFT", "LEFT_LEFT", "RIGHT_RIGHT")


def _band(ctx: LowerCtx, version: int, at: int) -> tuple:
    """(k0, k1): the diagonal band (V1: the main diagonal)."""
    if version == 1:
        return 0, 0
    k = ctx.const_ints(at, "the diagonal index k")
    if not 1 <= len(k) <= 2:
        raise Unsupported(f"diag_index must be a scalar or vector with at most 2 elements, got {len(k)}")
    k0, k1 = k[0], k[-1]
    if k0 > k1:
        raise Unsupported(f"lower_diag_index must not be larger than upper_diag_index: {k0} > {k1}")
    return k0, k1


def _align(ctx: LowerCtx, version: int) -> tuple:
    """(superdiagonals left-aligned, subdiagonals left-aligned); V1 and V2 pack left."""
    align = ctx.attr("align", b"LEFT_LEFT") if version == 3 else b"LEFT_LEFT"
    align = registry.text(align)
    if align not in _ALIGNS:
        raise Unsupported(f"align must be one of {', '.join(_ALIGNS)}, got {align}")
    sup, sub = align.split("_")
    return sup == "LEFT", sub == "LEFT"


def _diag_len(d: int, rows: int, cols: int) -> int:
    return min(rows + min(0, d), cols - max(0, d))


def _width(k0, k1, rows, cols) -> int:
    """TF's max_diag_len: the length of the band's longest diagonal."""
    return min(rows + min(k1, 0), cols - max(k0, 0))


def _layout(k0, k1, rows, cols, left, width) -> list:
    """[(d, its row in the packed [D, width] array, its offset there)], d = k1..k0."""
    out = []
    for j, d in enumerate(range(k1, k0 - 1, -1)):
        left_aligned = (d >= 0 and left[0]) or (d <= 0 and left[1])
        out.append((d, j, 0 if left_aligned else width - _diag_len(d, rows, cols)))
    return out


def _pack_table(k0, k1, rows, cols, left) -> np.ndarray:
    """[D, width] (or [width] when k0 == k1): the flat [rows*cols] index each packed
    diagonal element comes from, -1 for padding."""
    width = max(_width(k0, k1, rows, cols), 0)
    table = np.full((k1 - k0 + 1, width), -1, np.int64)
    for d, j, offset in _layout(k0, k1, rows, cols, left, width):
        for t in range(max(_diag_len(d, rows, cols), 0)):
            table[j, offset + t] = (t + max(0, -d)) * cols + t + max(0, d)
    return table[0] if k0 == k1 else table


def _unpack_table(k0, k1, rows, cols, left, width) -> np.ndarray:
    """[rows, cols]: the flat index into the packed [D, width] diagonals each element
    takes, -1 off the band."""
    table = np.full((rows, cols), -1, np.int64)
    for d, j, offset in _layout(k0, k1, rows, cols, left, width):
        for t in range(max(_diag_len(d, rows, cols), 0)):
            table[t + max(0, -d), t + max(0, d)] = j * width + offset + t
    return table


def _check_band(k0, k1, rows, cols):
    if (k0 != 0 and not -rows < k0 < cols) or (k1 != 0 and not -rows < k1 < cols):
        raise Unsupported(f"The diagonal band [{k0}, {k1}] is outside a {rows}x{cols} matrix")


def _diag_part_rule(version: int):
    def rule(ctx: LowerCtx):
        m, x = ctx.m, ctx.inputs[0]
        if x.rank < 2:
            raise Unsupported(f"input must be at least 2-dim, received shape: {list(x.shape)}")
        batch, (rows, cols) = x.shape[:-2], x.shape[-2:]
        k0, k1 = _band(ctx, version, 1)
        _check_band(k0, k1, rows, cols)
        pad = m.reshape(ctx.inputs[2], ()) if version > 1 else m.scalar(0, x.dtype)
        table = _pack_table(k0, k1, rows, cols, _align(ctx, version))
        return _move(m, m.reshape(x, batch + (rows * cols,)), batch, table, pad)
    return rule


def _diag_rule(version: int):
    def rule(ctx: LowerCtx):
        m, v = ctx.m, ctx.inputs[0]
        k0, k1 = _band(ctx, version, 1)
        lead = 1 if k0 == k1 else 2
        if v.rank < lead:
            raise Unsupported(f"diagonal must be at least {lead}-dim, received shape: {list(v.shape)}")
        if lead == 2 and v.shape[-2] != k1 - k0 + 1:
            raise Unsupported(f"The number of diagonals provided in the input does not match the "
                              f"lower_diag_index and upper_diag_index range: {v.shape[-2]} vs {k1 - k0 + 1}")
        width, batch = v.shape[-1], v.shape[:-lead]
        rows, cols = width - min(k1, 0), width + max(k0, 0)   # the smallest that hold the band
        want = [ctx.const_ints(i, what)[0] if version > 1 else -1
                for i, what in ((2, "num_rows"), (3, "num_cols"))]
        if want == [-1, -1]:
            rows = cols = max(rows, cols)
        elif want[0] == -1 or want[1] == -1:
            rows, cols = (rows, want[1]) if want[0] == -1 else (want[0], cols)
        elif want[0] != rows and want[1] != cols:
            raise Unsupported(f"The number of rows or columns is not consistent with the specified "
                              f"d_lower, d_upper, and diagonal: {want} vs minimum {rows}x{cols}")
        else:
            rows, cols = want
        if rows < 0 or cols < 0:
            raise Unsupported(f"MatrixDiag: {rows}x{cols} is no matrix")
        pad = m.reshape(ctx.inputs[4], ()) if version > 1 else m.scalar(0, v.dtype)
        table = _unpack_table(k0, k1, rows, cols, _align(ctx, version), width)
        return _move(m, m.reshape(v, batch + (math.prod(v.shape[len(batch):]),)), batch, table, pad)
    return rule


def _set_diag_rule(version: int):
    def rule(ctx: LowerCtx):
        m, (x, v) = ctx.m, ctx.inputs[:2]
        if x.rank < 2:
            raise Unsupported(f"input must be at least a matrix, received shape: {list(x.shape)}")
        batch, (rows, cols) = x.shape[:-2], x.shape[-2:]
        k0, k1 = _band(ctx, version, 2)
        _check_band(k0, k1, rows, cols)
        left = _align(ctx, version)
        width = _width(k0, k1, rows, cols)
        want = batch + ((width,) if k0 == k1 else (k1 - k0 + 1, width))
        if v.shape != want:
            raise Unsupported(f"diagonal must have shape {list(want)} for input {list(x.shape)} "
                              f"and k = [{k0}, {k1}], got {list(v.shape)}")
        table = _unpack_table(k0, k1, rows, cols, left, width)
        return _move(m, m.reshape(v, batch + (math.prod(v.shape[len(batch):]),)), batch, table, x)
    return rule


for _v, _suffix in ((1, ""), (2, "V2"), (3, "V3")):
    register(f"MatrixDiagPart{_suffix}", dtypes=registry.ALL,
             const_inputs=() if _v == 1 else (1,))(_diag_part_rule(_v))
    register(f"MatrixDiag{_suffix}", dtypes=registry.ALL,
             const_inputs=() if _v == 1 else (1, 2, 3))(_diag_rule(_v))
    register(f"MatrixSetDiag{_suffix}", dtypes=registry.ALL,
             const_inputs=() if _v == 1 else (2,))(_set_diag_rule(_v))
