"""Lowerings of TF's block and layout movement: SpaceToBatch(ND), BatchToSpace(ND), Roll,
ExtractImagePatches, DataFormatVecPermute and DataFormatDimMap.

Each is data movement on shapes known at compile time (block shapes, paddings, crops,
shifts and axes are constant inputs): pads, reshapes, transposes, slices and concats,
which fusion turns into index arithmetic.  The layouts are TF's kernels' own
(tensorflow/core/kernels/spacetobatch_functor.h, roll_op.cc, extract_image_patches_op.h,
data_format_ops.h).
"""
from __future__ import annotations

import math

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.ops import Op
from tfjit.lower import registry
from tfjit.lower.registry import LowerCtx, Unsupported, register, scalar_like


def _pairs(ctx: LowerCtx, i: int, what: str, m: int) -> list:
    values = ctx.const_ints(i, what)
    if len(values) != 2 * m:
        raise Unsupported(f"{ctx.node.op}: {what} must be [{m}, 2], got {len(values)} values")
    return [(values[2 * k], values[2 * k + 1]) for k in range(m)]


def space_to_batch(ctx: LowerCtx, x, block: list, paddings: list):
    """Zero-pads the M block dimensions (1..M), then moves each block offset into the
    batch: out[(b_0..b_{M-1}) * N + n, i_1, ..., i_M, rest] = padded[n, i_1*B_1 + b_1, ...]."""
    m, n_blocks = ctx.m, len(block)
    if x.rank < 1 + n_blocks or any(b < 1 for b in block) or any(p < 0 for pr in paddings for p in pr):
        raise Unsupported(f"{ctx.node.op}: block_shape {block} and paddings {paddings} for input "
                          f"{list(x.shape)}")
    rest = x.shape[1 + n_blocks:]
    low, high = [0] + [p[0] for p in paddings], [0] + [p[1] for p in paddings]
    padded = m.pad(x, m.scalar(0, x.dtype), low + [0] * len(rest), high + [0] * len(rest))
    spatial = padded.shape[1:1 + n_blocks]
    if any(s % b for s, b in zip(spatial, block)):
        raise Unsupported(f"{ctx.node.op}: padded spatial shape {list(spatial)} is not divisible "
                          f"by block_shape {block}")
    batch = x.shape[0]
    split = [batch] + [v for s, b in zip(spatial, block) for v in (s // b, b)] + list(rest)
    y = m.reshape(padded, split)
    perm = ([2 + 2 * k for k in range(n_blocks)] + [0] + [1 + 2 * k for k in range(n_blocks)]
            + list(range(1 + 2 * n_blocks, len(split))))
    y = m.transpose(y, perm)
    return m.reshape(y, [batch * math.prod(block)] + [s // b for s, b in zip(spatial, block)]
                     + list(rest))


def batch_to_space(ctx: LowerCtx, x, block: list, crops: list):
    """SpaceToBatch's inverse, then the crops: out[n, i_1*B_1 + b_1 - crop_1, ...] =
    in[(b_0..b_{M-1}) * N + n, i_1, ...]."""
    m, n_blocks = ctx.m, len(block)
    total = math.prod(block)
    if (x.rank < 1 + n_blocks or any(b < 1 for b in block) or x.shape[0] % total
            or any(c < 0 for pr in crops for c in pr)):
        raise Unsupported(f"{ctx.node.op}: block_shape {block} and crops {crops} for input "
                          f"{list(x.shape)}")
    batch, spatial, rest = x.shape[0] // total, x.shape[1:1 + n_blocks], x.shape[1 + n_blocks:]
    y = m.reshape(x, list(block) + [batch] + list(x.shape[1:]))
    perm = ([n_blocks] + [v for k in range(n_blocks) for v in (n_blocks + 1 + k, k)]
            + list(range(2 * n_blocks + 1, y.rank)))
    y = m.transpose(y, perm)
    full = [s * b for s, b in zip(spatial, block)]
    y = m.reshape(y, [batch] + full + list(rest))
    sizes = [f - c[0] - c[1] for f, c in zip(full, crops)]
    if any(s < 0 for s in sizes):
        raise Unsupported(f"{ctx.node.op}: crops {crops} are larger than the shape {full}")
    return m.slice(y, [0] + [c[0] for c in crops] + [0] * len(rest),
                   [batch] + sizes + list(rest))


@register("SpaceToBatchND", dtypes=registry.ALL, const_inputs=(1, 2))
def _space_to_batch_nd(ctx: LowerCtx):
    block = ctx.const_ints(1, "SpaceToBatchND's block_shape")
    return space_to_batch(ctx, ctx.inputs[0], block, _pairs(ctx, 2, "paddings", len(block)))


@register("BatchToSpaceND", dtypes=registry.ALL, const_inputs=(1, 2))
def _batch_to_space_nd(ctx: LowerCtx):
    block = ctx.const_ints(1, "BatchToSpaceND's block_shape")
    return batch_to_space(ctx, ctx.inputs[0], block, _pairs(ctx, 2, "crops", len(block)))


def _square_block(ctx: LowerCtx) -> list:
    """The old 4-D NHWC ops' one block size for both spatial dimensions, as [b, b]."""
    b = int(ctx.attr("block_size", 0))
    if ctx.inputs[0].rank != 4 or b < 2:
        raise Unsupported(f"{ctx.node.op}: a 4-D input and block_size >= 2, got "
                          f"{list(ctx.inputs[0].shape)} and {b}")
    return [b, b]


@register("SpaceToBatch", dtypes=registry.ALL, const_inputs=(1,))
def _space_to_batch(ctx: LowerCtx):
    return space_to_batch(ctx, ctx.inputs[0], _square_block(ctx), _pairs(ctx, 1, "paddings", 2))


@register("BatchToSpace", dtypes=registry.ALL, const_inputs=(1,))
def _batch_to_space(ctx: LowerCtx):
    return batch_to_space(ctx, ctx.inputs[0], _square_block(ctx), _pairs(ctx, 1, "crops", 2))


@register("Roll", dtypes=registry.ALL, const_inputs=(1, 2))
def _roll(ctx: LowerCtx):
    """out[..., (i + shift) mod n, ...] = in[..., i, ...] per named axis; shifts of one
    axis named twice add up (TF's kernel sums them)."""
    m, x = ctx.m, ctx.inputs[0]
    shifts, axes = ctx.const_ints(1, "Roll's shift"), ctx.const_ints(2, "Roll's axis")
    if len(shifts) != len(axes):
        raise Unsupported(f"Roll: shift and axis differ in length ({len(shifts)} vs {len(axes)})")
    total = [0] * x.rank
    for s, a in zip(shifts, axes):
        if not -x.rank <= a < x.rank:
            raise Unsupported(f"Roll: axis {a} is out of range for rank {x.rank}")
        total[a % x.rank] += s
    for d, s in enumerate(total):
        n = x.shape[d]
        if n == 0 or s % n == 0:
            continue
        s %= n
        starts, head, tail = [0] * x.rank, list(x.shape), list(x.shape)
        head[d] = s
        tail[d] = n - s
        last = m.slice(x, starts[:d] + [n - s] + starts[d + 1:], head)
        first = m.slice(x, starts, tail)
        x = m.concat([last, first], d)
    return x


def _window(n: int, k: int, stride: int, rate: int, padding: str) -> tuple:
    """(output size, padding before, padding after) of one dimension, as TF's
    GetWindowedOutputSize with the dilated window."""
    k = (k - 1) * rate + 1
    if padding == "VALID":
        out = max(-(-(n - k + 1) // stride), 0)
        return out, 0, 0
    out = -(-n // stride)
    total = max((out - 1) * stride + k - n, 0)
    return out, total // 2, total - total // 2


@register("ExtractImagePatches", dtypes=registry.ALL)
def _extract_image_patches(ctx: LowerCtx):
    """out[n, y, x, (i*kw + j)*C + c] = padded[n, y*sr + i*rr, x*sc + j*rc, c]: one strided
    slice of the zero-padded image per window tap, concatenated along the depth."""
    m, x = ctx.m, ctx.inputs[0]
    ksize, strides, rates = (list(ctx.attr(a, ())) for a in ("ksizes", "strides", "rates"))
    padding = ctx.attr("padding", b"VALID")
    padding = registry.text(padding)
    if (x.rank != 4 or len(ksize) != 4 or len(strides) != 4 or len(rates) != 4
            or ksize[0] != 1 or ksize[3] != 1 or strides[0] != 1 or strides[3] != 1
            or rates[0] != 1 or rates[3] != 1 or padding not in ("SAME", "VALID")
            or min(ksize + strides + rates) < 1):
        raise Unsupported(f"ExtractImagePatches: ksizes {ksize}, strides {strides}, rates {rates}, "
                          f"padding {padding} for input {list(x.shape)}")
    n, h, w, c = x.shape
    (oh, ph0, ph1), (ow, pw0, pw1) = (_window(s, k, st, r, padding) for s, k, st, r in
                                      ((h, ksize[1], strides[1], rates[1]),
                                       (w, ksize[2], strides[2], rates[2])))
    padded = m.pad(x, m.scalar(0, x.dtype), (0, ph0, pw0, 0), (0, ph1, pw1, 0))
    taps = [m.slice(padded, (0, i * rates[1], j * rates[2], 0), (n, oh, ow, c),
                    (1, strides[1], strides[2], 1))
            for i in range(ksize[1]) for j in range(ksize[2])]
    if not oh or not ow or not n or not c:
        return m.constant(np.zeros((n, oh, ow, c * len(taps)), x.dtype.numpy()), x.dtype)
    return m.concat(taps, 3) if len(taps) > 1 else taps[0]


def _formats(ctx: LowerCtx) -> tuple:
    src, dst = (ctx.attr(k, b"NHWC") for k in ("src_format", "dst_format"))
    src, dst = registry.text(src), registry.text(dst)
    if sorted(src) != sorted(dst) or len(set(src)) != len(src):
        raise Unsupported(f"{ctx.node.op}: {src} -> {dst} is not a permutation")
    return src, dst


@register("DataFormatVecPermute", dtypes=(dt.I32, dt.I64))
def _data_format_vec_permute(ctx: LowerCtx):
    """out[i] = x[src.index(dst[i])] (rows of a [n, 2] x); a vector of the spatial sizes
    only (2 of NHWC's 4) permutes by the formats without N and C."""
    m, x = ctx.m, ctx.inputs[0]
    src, dst = _formats(ctx)
    n = x.shape[0] if x.rank else 0
    if n != len(src):
        src, dst = (f.replace("N", "").replace("C", "") for f in (src, dst))
    if x.rank not in (1, 2) or n != len(src) or (x.rank == 2 and x.shape[1] != 2):
        raise Unsupported(f"DataFormatVecPermute: input of shape {list(x.shape)} for {src} -> {dst}")
    rows = [m.slice(x, [src.index(c)] + [0] * (x.rank - 1), [1] + list(x.shape[1:])) for c in dst]
    return m.concat(rows, 0)


@register("DataFormatDimMap", dtypes=(dt.I32, dt.I64))
def _data_format_dim_map(ctx: LowerCtx):
    """y = dst.index(src[x mod n]) for x in [-n, n), n the formats' length."""
    m, x = ctx.m, ctx.inputs[0]
    src, dst = _formats(ctx)
    table = [dst.index(c) for c in src]
    y = scalar_like(m, 0, x)
    for k in range(len(src) - 1, -1, -1):
        hit = m.elementwise(Op.OR, m.elementwise(Op.EQ, x, scalar_like(m, k, x)),
                            m.elementwise(Op.EQ, x, scalar_like(m, k - len(src), x)))
        y = m.elementwise(Op.SELECT, hit, scalar_like(m, table[k], x), y)
    return y
