"""Lowerings of the data-movement ops that gradients emit: StridedSliceGrad,
MirrorPad and MirrorPadGrad, and the shape helpers ConcatOffset and
InvertPermutation (which fold to constants).

With static shapes every one of them is a movement op: StridedSliceGrad puts
the incoming gradient back where the slice read it (a dilation by the stride,
then padding with zeros), MirrorPad concatenates reversed slices, and
MirrorPadGrad adds the reversed border gradients onto the inside.
"""
from __future__ import annotations

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.lower import registry
from tfjit.lower.registry import LowerCtx, Unsupported, register
from tfjit.lower.shape import strided_slice_spec


def dilate(m: Module, x: Instr, factors: list) -> Instr:
    """x with ``f - 1`` zeros between neighbours along each dim (f = factors[d]):
    shape (n - 1) * f + 1.  A unit dim is appended after every dilated dim,
    padded to f, and merged back."""
    if all(f == 1 for f in factors) or x.size == 0:
        return x
    spread = []
    for n, f in zip(x.shape, factors):
        spread += [n, 1] if f > 1 else [n]
    y = m.reshape(x, spread)
    high = []
    for n, f in zip(x.shape, factors):
        high += [0, f - 1] if f > 1 else [0]
    y = m.pad(y, m.scalar(0, x.dtype), [0] * len(high), high)
    y = m.reshape(y, [n * f for n, f in zip(x.shape, factors)])
    return m.slice(y, [0] * x.rank, [(n - 1) * f + 1 if n else 0 for n, f in zip(x.shape, factors)])


@register("StridedSliceGrad", dtypes=registry.ALL, const_inputs=(0, 1, 2, 3))
def _strided_slice_grad(ctx: LowerCtx):
    """Zeros of ``shape`` with ``dy`` at the elements StridedSlice(begin, end, strides) reads."""
    m = ctx.m
    shape = tuple(ctx.const_ints(0, "StridedSliceGrad's shape"))
    ints = [ctx.const_ints(i, f"StridedSliceGrad's {what}") for i, what in ((1, "begin"), (2, "end"), (3, "strides"))]
    masks = [int(ctx.attr(k, 0)) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                           "shrink_axis_mask")]
    dy = ctx.inputs[4]
    starts, sizes, steps, final_shape = strided_slice_spec(shape, *ints, *masks)
    if list(dy.shape) != list(final_shape):
        raise Unsupported(f"StridedSliceGrad: dy shape {list(dy.shape)} is not the slice's shape {final_shape}")
    g = m.reshape(dy, sizes)
    if g.size == 0:
        return m.broadcast(m.scalar(0, dy.dtype), shape, ())
    # A negative stride reads from ``start`` downwards: reverse, then it reads upwards from ``low``.
    rev = [d for d, s in enumerate(steps) if s < 0]
    if rev:
        g = m.slice(g, [n - 1 if d in rev else 0 for d, n in enumerate(g.shape)], list(g.shape),
                    [-1 if d in rev else 1 for d in range(g.rank)])
    g = dilate(m, g, [abs(s) for s in steps])
    low = [b - (n - 1) * -s if s < 0 else b for b, n, s in zip(starts, sizes, steps)]
    high = [full - lo - n for full, lo, n in zip(shape, low, g.shape)]
    return m.pad(g, m.scalar(0, dy.dtype), low, high)


def _mirror_mode(ctx: LowerCtx) -> int:
    """How many border elements a mirror excludes: 1 for REFLECT, 0 for SYMMETRIC."""
    mode = ctx.attr("mode", b"REFLECT")
    if mode not in (b"REFLECT", b"SYMMETRIC"):
        raise Unsupported(f"{ctx.node.op}: unknown mode {mode!r}")
    return 1 if mode == b"REFLECT" else 0


def _paddings(ctx: LowerCtx, rank: int) -> np.ndarray:
    p = np.asarray(ctx.const(1, f"{ctx.node.op}'s paddings")).astype(np.int64)
    if p.shape != (rank, 2) or (p < 0).any():
        raise Unsupported(f"{ctx.node.op}: paddings {p.tolist()} invalid for rank {rank}")
    return p


def _along(x: Instr, dim: int, start: int, size: int, step: int):
    starts = [start if d == dim else 0 for d in range(x.rank)]
    sizes = [size if d == dim else n for d, n in enumerate(x.shape)]
    steps = [step if d == dim else 1 for d in range(x.rank)]
    return starts, sizes, steps


@register("MirrorPad", dtypes=registry.ALL, const_inputs=(1,))
def _mirror_pad(ctx: LowerCtx):
    m, x = ctx.m, ctx.inputs[0]
    skip = _mirror_mode(ctx)
    paddings = _paddings(ctx, x.rank)
    for d, (lo, hi) in enumerate(paddings.tolist()):
        n = x.shape[d]
        if lo > n - skip or hi > n - skip:
            raise Unsupported(f"MirrorPad: paddings must be no greater than the dimension size {n} "
                              f"{'- 1 ' if skip else ''}(dim {d}: {lo}, {hi})")
        parts = []
        if lo:
            parts.append(m.slice(x, *_along(x, d, lo - 1 + skip, lo, -1)))
        parts.append(x)
        if hi:
            parts.append(m.slice(x, *_along(x, d, n - 1 - skip, hi, -1)))
        x = m.concat(parts, d)
    return x


@register("MirrorPadGrad", half_in_f32=True, const_inputs=(1,))
def _mirror_pad_grad(ctx: LowerCtx):
    """Each border gradient is added to the element the border mirrored."""
    m, g = ctx.m, ctx.inputs[0]
    skip = _mirror_mode(ctx)
    paddings = _paddings(ctx, g.rank)
    zero = m.scalar(0, g.dtype)
    for d, (lo, hi) in enumerate(paddings.tolist()):
        n = g.shape[d] - lo - hi
        if n < 0 or lo > n - skip or hi > n - skip:
            raise Unsupported(f"MirrorPadGrad: paddings ({lo}, {hi}) invalid for dim {d} of {list(g.shape)}")
        inner = m.slice(g, *_along(g, d, lo, n, 1))
        before = [0] * g.rank
        after = [0] * g.rank
        if lo:       # dy[lo - 1 - i] mirrors x[i + skip], i < lo
            border = m.slice(g, *_along(g, d, lo - 1, lo, -1))
            before[d], after[d] = skip, n - lo - skip
            inner = m.elementwise(Op.ADD, inner, m.pad(border, zero, before, after))
        if hi:       # dy[lo + n + i] mirrors x[n - 1 - skip - i], i < hi
            border = m.slice(g, *_along(g, d, lo + n + hi - 1, hi, -1))
            before[d], after[d] = n - hi - skip, skip
            inner = m.elementwise(Op.ADD, inner, m.pad(border, zero, before, after))
        g = inner
    return g


# -- shape helpers that fold ---------------------------------------------------------------

@register("ConcatOffset", dtypes=(dt.I32, dt.I64),
          const_inputs=lambda node, value_of: range(len(node.inputs)))   # concat_dim, shapes
def _concat_offset(ctx: LowerCtx):
    """The offset of each ConcatV2 input along the concat dim (its gradient's Slice begins)."""
    axis = ctx.const_ints(0, "ConcatOffset's concat_dim")[0]
    shapes = [ctx.const_ints(i, "ConcatOffset's shape") for i in range(1, len(ctx.inputs))]
    rank = len(shapes[0])
    if not -rank <= axis < rank:
        raise Unsupported(f"ConcatOffset: concat_dim {axis} out of range for rank {rank}")
    axis %= rank
    for k, s in enumerate(shapes[1:], 1):       # TF's checks (and words)
        if len(s) != rank:
            raise Unsupported(f"ConcatOffset: input {k} should contain {rank} elements, but got {len(s)}")
        if any(s[d] != shapes[0][d] for d in range(rank) if d != axis):
            raise Unsupported(f"ConcatOffset: input {k} with shape {s} doesn't match input 0 with "
                              f"shape {shapes[0]}")
    dtype = ctx.inputs[1].dtype
    outs, offset = [], 0
    for s in shapes:
        outs.append(ctx.m.constant(np.array([offset if d == axis else 0 for d in range(rank)]), dtype))
        offset += s[axis]
    return outs


@register("InvertPermutation", dtypes=(dt.I32, dt.I64), const_inputs=(0,))
def _invert_permutation(ctx: LowerCtx):
    perm = ctx.const_ints(0, "InvertPermutation's input")
    if sorted(perm) != list(range(len(perm))):
        raise Unsupported(f"InvertPermutation: {perm} is not a permutation")
    inverse = np.argsort(np.asarray(perm, np.int64))
    return ctx.m.constant(inverse, ctx.inputs[0].dtype)
