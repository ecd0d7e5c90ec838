"""Lowerings of TF's image resizing: ResizeNearestNeighbor, ResizeBilinear and their
gradients (Keras's UpSampling2D and tf.image.resize; TF's CPU kernels' arithmetic).

The source rows and columns of every output pixel depend on the sizes only, so
they are computed here, in float32 as TF's kernels compute them (resize scale,
``align_corners``, ``half_pixel_centers``), and the resize is gathers of rows and
columns with constant indices (plus, for bilinear, the lerps with constant
weights, in TF's order).  A gradient is the transpose: each axis's contributions
summed into their source rows in output order (constant gathers, ``_sum_into``), rows
then columns.
"""
from __future__ import annotations

import math

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.lower.registry import FLOATS, NUMERIC, Unsupported, register

SUM_TERMS_MAX = 32      # a gradient's terms per source row summed as gathers (_sum_into)


def _scale(in_size: int, out_size: int, align: bool) -> np.float32:
    """TF's CalculateResizeScale, in float."""
    if align and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def nearest_map(in_size: int, out_size: int, align: bool, half: bool) -> np.ndarray:
    """The source index of each output index (TF's resize_nearest_neighbor_op.cc)."""
    s = _scale(in_size, out_size, align)
    i = np.arange(out_size, dtype=np.float32)
    v = (i + np.float32(0.5)) * s if half else i * s
    idx = np.where(v >= 0, np.floor(v + np.float32(0.5)), np.ceil(v - np.float32(0.5))) if align \
        else np.floor(v)                                 # roundf: half away from zero
    idx = np.minimum(idx.astype(np.int64), in_size - 1)
    return np.maximum(idx, 0) if half else idx


def bilinear_map(in_size: int, out_size: int, align: bool, half: bool):
    """(lower, upper, lerp) per output index (TF's compute_interpolation_weights)."""
    s = _scale(in_size, out_size, align)
    i = np.arange(out_size, dtype=np.float32)
    v = (i + np.float32(0.5)) * s - np.float32(0.5) if half else i * s
    floor = np.floor(v)
    lower = np.maximum(floor, 0).astype(np.int64)
    upper = np.minimum(np.ceil(v), in_size - 1).astype(np.int64)
    return lower, upper, (v - floor).astype(np.float32)


def _attrs(ctx, images_rank: int, size_input: int = 1):
    if images_rank != 4:
        raise Unsupported(f"{ctx.node.op}: input must be 4-dimensional")
    align, half = bool(ctx.attr("align_corners")), bool(ctx.attr("half_pixel_centers"))
    if align and half:
        raise Unsupported(f"{ctx.node.op}: If half_pixel_centers is True, align_corners must be False.")
    size = ctx.const_ints(size_input, f"{ctx.node.op}'s size")
    if len(size) != 2 or min(size) <= 0:
        raise Unsupported(f"{ctx.node.op}: size must be 2 positive values, got {size}")
    return size, align, half


def _gather(m: Module, x: Instr, axis: int, idx: np.ndarray) -> Instr:
    return m.gather(x, m.constant(idx.astype(np.int32), dt.I32), axis)


def _weights(m: Module, w: np.ndarray, shape: tuple, axis: int) -> Instr:
    return m.broadcast(m.constant(w, dt.F32), shape, (axis,))


def _sum_into(m: Module, parts: list, axis: int, size: int) -> Instr:
    """out[..., i, ...] = 0 + the x[..., k, ...] with ids[k] == i, for each (x, ids) of
    ``parts`` in turn, k ascending.

    The ids are constants, so the k's each i receives are known here: term j of every
    i is one gather of x with constant indices (masked to 0 where i has fewer than
    j + 1 terms), and the sum a loop kernel over the result, vectorised along the
    channels.  An IR scatter (a row per k, added in order) spent 13.7 ms on each
    axis of a [16, 112, 112, 64] nearest 2x upsampling's gradient, where TF's kernel
    takes 5 for both.  Past ``SUM_TERMS_MAX`` terms per i (a large downscale's
    gradient) the scatter stays: the gathers' code grows with the terms."""
    terms = []
    for x, ids in parts:
        order = np.argsort(ids, kind="stable")          # each i's k's, ascending
        counts = np.bincount(ids, minlength=size)
        starts = np.cumsum(counts) - counts
        terms += [(x, order[np.minimum(starts + j, len(ids) - 1)], counts > j)
                  for j in range(int(counts.max(initial=0)))]
    if len(terms) > SUM_TERMS_MAX:
        return _scatter_into(m, parts, axis, size)
    x0 = parts[0][0]
    shape = x0.shape[:axis] + (size,) + x0.shape[axis + 1:]
    zero = m.broadcast(m.scalar(0, x0.dtype), shape, ())
    total = zero
    for x, src, has in terms:
        term = _gather(m, x, axis, src)
        if not has.all():
            term = m.elementwise(Op.SELECT, m.broadcast(m.constant(has, dt.PRED), shape, (axis,)),
                                 term, zero)
        total = m.elementwise(Op.ADD, total, term)
    return total



def _scatter_into(m: Module, parts: list, axis: int, size: int) -> Instr:
    """``_sum_into`` as one IR scatter of the parts side by side along ``axis``."""
    x = parts[0][0] if len(parts) == 1 else m.concat([p for p, _ in parts], axis)
    ids = np.concatenate([i for _, i in parts])
    perm = (axis,) + tuple(d for d in range(x.rank) if d != axis)
    moved = m.transpose(x, perm)
    rest = moved.shape[1:]
    flat = m.reshape(moved, (moved.shape[0], math.prod(rest)))
    out = m.scatter(flat, m.constant(ids.astype(np.int32), dt.I32), "sum", size)
    back = tuple(np.argsort(perm))
    return m.transpose(m.reshape(out, (size,) + rest), back)


@register("ResizeNearestNeighbor", dtypes=NUMERIC, const_inputs=(1,))
def _resize_nearest(ctx):
    m, x = ctx.m, ctx.inputs[0]
    (oh, ow), align, half = _attrs(ctx, x.rank)
    _, h, w, _ = x.shape
    rows = _gather(m, x, 1, nearest_map(h, oh, align, half))
    return _gather(m, rows, 2, nearest_map(w, ow, align, half))


@register("ResizeNearestNeighborGrad", dtypes=NUMERIC, const_inputs=(1,))
def _resize_nearest_grad(ctx):
    m, g = ctx.m, ctx.inputs[0]
    (h, w), align, half = _attrs(ctx, g.rank)
    _, oh, ow, _ = g.shape
    rows = _sum_into(m, [(g, nearest_map(h, oh, align, half))], 1, h)
    return _sum_into(m, [(rows, nearest_map(w, ow, align, half))], 2, w)


@register("ResizeBilinear", dtypes=NUMERIC, const_inputs=(1,))   # (its output is f32 whatever)
def _resize_bilinear(ctx):
    """top = tl + (tr - tl) * x_lerp; bottom likewise; out = top + (bottom - top) * y_lerp."""
    m, x = ctx.m, ctx.inputs[0]
    (oh, ow), align, half = _attrs(ctx, x.rank)
    n, h, w, c = x.shape
    if x.dtype is not dt.F32:
        x = m.convert(x, dt.F32)
    y0, y1, ly = bilinear_map(h, oh, align, half)
    x0, x1, lx = bilinear_map(w, ow, align, half)
    out = (n, oh, ow, c)
    top, bottom = _gather(m, x, 1, y0), _gather(m, x, 1, y1)
    wx, wy = _weights(m, lx, out, 2), _weights(m, ly, out, 1)

    def lerp(a, b, t):
        return m.elementwise(Op.ADD, a, m.elementwise(Op.MUL, m.elementwise(Op.SUB, b, a), t))
    upper = lerp(_gather(m, top, 2, x0), _gather(m, top, 2, x1), wx)
    lower = lerp(_gather(m, bottom, 2, x0), _gather(m, bottom, 2, x1), wx)
    return lerp(upper, lower, wy)


@register("ResizeBilinearGrad", dtypes=FLOATS, type_attr="T")
def _resize_bilinear_grad(ctx):
    """d image: each output's gradient times (1 - lerp) into the lower source row and
    times lerp into the upper, rows then columns, in the original image's type."""
    m, g, image = ctx.m, ctx.inputs[0], ctx.inputs[1]
    if g.rank != 4 or image.rank != 4:
        raise Unsupported(f"{ctx.node.op}: input_grad and original_image must be 4-dimensional")
    align, half = bool(ctx.attr("align_corners")), bool(ctx.attr("half_pixel_centers"))
    if align and half:
        raise Unsupported(f"{ctx.node.op}: If half_pixel_centers is True, align_corners must be False.")
    _, h, w, _ = image.shape
    _, oh, ow, _ = g.shape
    if g.dtype is not dt.F32:
        g = m.convert(g, dt.F32)

    def spread(x, axis, in_size, out_size):
        lo, hi, t = bilinear_map(in_size, out_size, align, half)
        low = m.elementwise(Op.MUL, x, _weights(m, np.float32(1) - t, x.shape, axis))
        high = m.elementwise(Op.MUL, x, _weights(m, t, x.shape, axis))
        return _sum_into(m, [(low, lo), (high, hi)], axis, in_size)
    dx = spread(spread(g, 1, h, oh), 2, w, ow)
    return dx if image.dtype is dt.F32 else m.convert(dx, image.dtype)
