"""Lowerings of TF's shape and data-movement ops.

Every shape-like operand (Reshape's shape, Transpose's perm, slice bounds, ...)
must be a compile-time constant; the rules follow TF's kernels exactly,
including its index canonicalisation (StridedSlice), its -1 inference
(Reshape) and its empty-tensor behaviour.  Ops whose value follows from static
shapes alone (Shape, Size, Rank, BroadcastGradientArgs) fold to constants.
"""
from __future__ import annotations

import math

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import FOLD_MAX_ELEMENTS, Instr
from tfjit.ir.ops import Op
from tfjit.lower import registry
from tfjit.lower.registry import (InvalidArgument, LowerCtx, Unsupported, broadcast_to, register,
                                  scalar_like)

INT32_MAX = 2**31 - 1


def _axis(axis: int, rank: int, what: str) -> int:
    """``axis`` in [-rank, rank) made non-negative."""
    if not -rank <= axis < rank:
        raise Unsupported(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def _out_type(ctx: LowerCtx, default: dt.DType = dt.I32) -> dt.DType:
    t = ctx.attr("out_type")
    return t.ir if t is not None else default


def _shape_constant(ctx: LowerCtx, values, dtype: dt.DType) -> Instr:
    if dtype is dt.I32 and any(v > INT32_MAX for v in np.reshape(values, -1)):
        raise Unsupported(f"{ctx.node.op}: value {max(np.reshape(values, -1))} does not fit out_type int32")
    return ctx.m.constant(np.asarray(values, dtype=np.int64).astype(dtype.numpy()), dtype)


# -- constants and identities -------------------------------------------------

@register("Const", dtypes=registry.ALL)
def _const(ctx: LowerCtx):
    return ctx.m.constant(ctx.attr("value"), ctx.attr("dtype").ir)


@register("Identity", "StopGradient", "PreventGradient", dtypes=registry.ALL,
          opaque_types=("variant",),      # a TensorList (lower/tensor_list.py) passes through
          quantized=registry.QUANTIZED_MOVES)
@register("Snapshot", dtypes=registry.ALL, opaque_types=("variant",))  # TF's: no quantized types
def _identity(ctx: LowerCtx):
    return ctx.inputs[0]


@register("EnsureShape", dtypes=registry.ALL)
def _ensure_shape(ctx: LowerCtx):
    """tf.ensure_shape: the input, whose shape is static in every compilation, checked
    against the attr's (-1: any size) at compile time, with TF's message."""
    x, want = ctx.inputs[0], ctx.attr("shape")       # (None: unknown rank, or dim)
    if want is not None and (len(want) != x.rank or any(
            w is not None and w != n for w, n in zip(want, x.shape))):
        shown = "[" + ",".join("?" if w is None else str(w) for w in want) + "]"
        raise Unsupported(f"Shape of tensor {ctx.node.inputs[0]} {list(x.shape)} is not "
                          f"compatible with expected shape {shown}.")
    return x


@register("IdentityN", dtypes=registry.ALL, quantized=registry.QUANTIZED_MOVES)
def _identity_n(ctx: LowerCtx):
    return list(ctx.inputs)


# -- reshapes ---------------------------------------------------------------

def reshape_target(in_shape: tuple, sizes: list) -> tuple:
    """TF Reshape's output shape: one -1 is inferred, zero sizes excluded from
    the inference on both sides (so [2,0,3] -> [-1,0] gives [6,0])."""
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        raise Unsupported(f"Reshape: invalid target shape {sizes}")
    has_zero = 0 in sizes
    if -1 in sizes:
        product = math.prod(s for s in sizes if s > 0)
        known = math.prod(d for d in in_shape if d > 0 or not has_zero)
        sizes = [known // product if s == -1 else s for s in sizes]
    if math.prod(sizes) != math.prod(in_shape):
        raise Unsupported(f"Reshape: cannot reshape a tensor of shape {list(in_shape)} "
                          f"({math.prod(in_shape)} elements) into shape {sizes}")
    return tuple(sizes)


@register("Reshape", dtypes=registry.ALL, const_inputs=(1,), quantized=registry.QUANTIZED_MOVES)
def _reshape(ctx: LowerCtx):
    x = ctx.inputs[0]
    return ctx.m.reshape(x, reshape_target(x.shape, ctx.const_ints(1, "Reshape's shape")))


@register("ExpandDims", dtypes=registry.ALL, const_inputs=(1,), quantized=registry.QUANTIZED_MOVES)
def _expand_dims(ctx: LowerCtx):
    x, axes = ctx.inputs[0], ctx.const_ints(1, "ExpandDims' axis")
    if len(axes) != 1:
        raise Unsupported(f"ExpandDims: axis must be a single value, got {axes}")
    axis = _axis(axes[0], x.rank + 1, "ExpandDims axis")
    return ctx.m.reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])


@register("Squeeze", dtypes=registry.ALL, quantized=registry.QUANTIZED_MOVES)
def _squeeze(ctx: LowerCtx):
    x = ctx.inputs[0]
    dims = {_axis(d, x.rank, "Squeeze dim") for d in ctx.attr("squeeze_dims", ())}
    for d in dims:
        if x.shape[d] != 1:
            raise Unsupported(f"Squeeze: cannot squeeze dim {d} of size {x.shape[d]} (shape {list(x.shape)})")
    keep = [s for d, s in enumerate(x.shape) if (d not in dims if dims else s != 1)]
    return ctx.m.reshape(x, keep)


@register("Transpose", "ConjugateTranspose", dtypes=registry.ALL, const_inputs=(1,))
def _transpose(ctx: LowerCtx):
    """ConjugateTranspose of a real tensor (its only dtypes here) is its Transpose."""
    x, perm = ctx.inputs[0], ctx.const_ints(1, "Transpose's perm")
    if sorted(perm) != list(range(x.rank)):
        raise Unsupported(f"{ctx.node.op}: {perm} is not a permutation of rank {x.rank}")
    return ctx.m.transpose(x, perm)


# -- broadcasts ---------------------------------------------------------------

def _broadcast_to_shape(ctx: LowerCtx, x: Instr, shape: list) -> Instr:
    aligned = (1,) * (len(shape) - x.rank) + x.shape
    if len(shape) < x.rank or any(s != t and s != 1 for s, t in zip(aligned, shape)):
        raise Unsupported(f"{ctx.node.op}: cannot broadcast shape {list(x.shape)} to {list(shape)}")
    return broadcast_to(ctx.m, x, tuple(shape))


@register("BroadcastTo", dtypes=registry.ALL, const_inputs=(1,))
def _broadcast_to(ctx: LowerCtx):
    return _broadcast_to_shape(ctx, ctx.inputs[0], ctx.const_ints(1, "BroadcastTo's shape"))


@register("Fill", dtypes=registry.ALL, const_inputs=(0,))
def _fill(ctx: LowerCtx):
    dims, value = ctx.const_ints(0, "Fill's dims"), ctx.inputs[1]
    if value.size != 1 or any(d < 0 for d in dims):
        raise Unsupported(f"Fill: needs a scalar value and non-negative dims, got {dims}")
    return _broadcast_to_shape(ctx, ctx.m.reshape(value, ()), dims)


@register("ZerosLike", dtypes=registry.ALL)
def _zeros_like(ctx: LowerCtx):
    return scalar_like(ctx.m, 0, ctx.inputs[0])


@register("OnesLike", dtypes=registry.ALL)
def _ones_like(ctx: LowerCtx):
    return scalar_like(ctx.m, 1, ctx.inputs[0])


@register("Tile", dtypes=registry.ALL, const_inputs=(1,))
def _tile(ctx: LowerCtx):
    x, multiples = ctx.inputs[0], ctx.const_ints(1, "Tile's multiples")
    if len(multiples) != x.rank or any(k < 0 for k in multiples):
        raise Unsupported(f"Tile: multiples {multiples} invalid for shape {list(x.shape)}")
    interleaved = [n for pair in zip(multiples, x.shape) for n in pair]
    spread = ctx.m.broadcast(x, interleaved, range(1, 2 * x.rank, 2))
    return ctx.m.reshape(spread, [k * s for k, s in zip(multiples, x.shape)])


# -- padding, slicing, joining -----------------------------------------------

@register("Pad", "PadV2", dtypes=registry.ALL, const_inputs=(1,), quantized=registry.QUANTIZED_8_32)
def _pad(ctx: LowerCtx):
    x = ctx.inputs[0]
    paddings = np.asarray(ctx.const(1, f"{ctx.node.op}'s paddings")).astype(np.int64)
    if paddings.shape != (x.rank, 2) or (paddings < 0).any():
        raise Unsupported(f"{ctx.node.op}: paddings {paddings.tolist()} invalid for rank {x.rank}")
    if len(ctx.inputs) > 2:
        if ctx.inputs[2].size != 1:
            raise Unsupported("PadV2: constant_values must be a scalar")
        value = ctx.m.reshape(ctx.inputs[2], ())
    else:
        value = ctx.m.scalar(0, x.dtype)
    return ctx.m.pad(x, value, paddings[:, 0].tolist(), paddings[:, 1].tolist())


@register("Slice", dtypes=registry.ALL, const_inputs=(1, 2), quantized=registry.QUANTIZED_8_32)
def _slice(ctx: LowerCtx):
    x = ctx.inputs[0]
    begin, size = ctx.const_ints(1, "Slice's begin"), ctx.const_ints(2, "Slice's size")
    if len(begin) != x.rank or len(size) != x.rank:
        raise Unsupported(f"Slice: begin {begin} / size {size} do not match rank {x.rank}")
    size = [n - b if s == -1 else s for b, s, n in zip(begin, size, x.shape)]
    for d, (b, s, n) in enumerate(zip(begin, size, x.shape)):
        if not (0 <= b <= n and 0 <= s <= n - b):
            raise Unsupported(f"Slice: dim {d}: begin {b} size {s} out of bounds for size {n}")
    return ctx.m.slice(x, [b if s else 0 for b, s in zip(begin, size)], size)


def strided_slice_spec(shape: tuple, begin, end, strides, begin_mask: int, end_mask: int,
                       ellipsis_mask: int, new_axis_mask: int, shrink_axis_mask: int):
    """TF's StridedSlice canonicalisation (ValidateStridedSliceOp).

    Returns ``(starts, sizes, steps, final_shape)``: the slice of the input, one
    entry per input dim, and the output shape after new axes and shrinks."""
    if not len(begin) == len(end) == len(strides):
        raise Unsupported("StridedSlice: begin, end and strides differ in length")
    if ellipsis_mask & (ellipsis_mask - 1):
        raise Unsupported("StridedSlice: more than one ellipsis")
    sparse = len(begin)
    if not ellipsis_mask & ((1 << sparse) - 1):
        ellipsis_mask, sparse = 1 << sparse, sparse + 1       # an implicit trailing ellipsis
    after_ellipsis = bin(new_axis_mask & ~((ellipsis_mask << 1) - 1) & ((1 << sparse) - 1)).count("1")
    # Dense spec: one entry per input dim, ``final`` lists output dims as
    # input dim indices, "new" (a new axis of size 1) or "shrink" (dropped).
    rank = len(shape)
    dense, final = [], []
    for i in range(sparse):
        bit = 1 << i
        if ellipsis_mask & bit:
            stop = min(rank - (sparse - i) + 1 + after_ellipsis, rank)
            while len(dense) < stop:
                final.append(len(dense))
                dense.append((0, 0, 1, True, True, False))
        elif new_axis_mask & bit:
            final.append("new")
        else:
            if len(dense) == rank:
                raise Unsupported(f"StridedSlice: index {i} out of range for input rank {rank}")
            shrink = bool(shrink_axis_mask & bit)
            final.append("shrink" if shrink else len(dense))
            dense.append((begin[i], end[i], strides[i], bool(begin_mask & bit), bool(end_mask & bit), shrink))
    starts, sizes, steps = [], [], []
    for d, (b, e, s, b_masked, e_masked, shrink) in enumerate(dense):
        n = shape[d]
        if s == 0:
            raise Unsupported(f"StridedSlice: strides[{d}] must be non-zero")
        if shrink:
            if s <= 0:
                raise Unsupported("StridedSlice: only stride 1 allowed on non-range indexing")
            b = b + n if b < 0 else b
            if not 0 <= b < n:
                raise Unsupported(f"StridedSlice: index {b} of dimension {d} out of bounds (size {n})")
            starts.append(b), sizes.append(1), steps.append(1)
            continue
        lo, hi = (0, n) if s > 0 else (-1, n - 1)

        def canonical(x, masked, is_end):
            if masked:
                return (hi if is_end else lo) if s > 0 else (lo if is_end else hi)
            return min(max(x + n if x < 0 else x, lo), hi)
        b, e = canonical(b, b_masked, False), canonical(e, e_masked, True)
        length = e - b
        size = 0 if length == 0 or (length < 0) != (s < 0) else -(-length // s)     # ceil
        starts.append(b if size else 0), sizes.append(size), steps.append(s if size else 1)
    final_shape = [1 if f == "new" else sizes[f] for f in final if f != "shrink"]
    return starts, sizes, steps, final_shape


def _strided_slice_const_inputs(node, value_of) -> tuple:
    """Strides always; begin and end too, unless the slice is one ``_indexed_slice``
    takes at run time (then a begin fed at run time compiles once, not per value):
    every dim up to the strides' length is an index (shrink, stride 1) or a full ':'."""
    strides = value_of(3)
    masks = {k: int(node.attrs.get(k, 0)) for k in ("begin_mask", "end_mask", "ellipsis_mask",
                                                    "new_axis_mask", "shrink_axis_mask")}
    if strides is None or masks["ellipsis_mask"] or masks["new_axis_mask"]:
        return (1, 2, 3)
    full = masks["begin_mask"] & masks["end_mask"]
    for d, s in enumerate(np.asarray(strides).reshape(-1).tolist()):
        if s != 1 or not (masks["shrink_axis_mask"] | full) & (1 << d):
            return (1, 2, 3)
    return (3,)


@register("StridedSlice", dtypes=registry.ALL, const_inputs=_strided_slice_const_inputs,
          quantized=registry.QUANTIZED_8_32)
def _strided_slice(ctx: LowerCtx):
    x = ctx.inputs[0]
    if ctx.inputs[1].op is not Op.CONSTANT and ctx.inputs[3].op is Op.CONSTANT:
        return _indexed_slice(ctx)
    ints = [ctx.const_ints(i, f"StridedSlice's {what}") for i, what in ((1, "begin"), (2, "end"), (3, "strides"))]
    masks = [int(ctx.attr(k, 0)) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                           "shrink_axis_mask")]
    starts, sizes, steps, final_shape = strided_slice_spec(x.shape, *ints, *masks)
    return ctx.m.reshape(ctx.m.slice(x, starts, sizes, steps), final_shape)


def _indexed_slice(ctx: LowerCtx):
    """``x[i]``, ``x[i, :, j]``: StridedSlice with run-time indices, as loops read a step.

    Each index given is either a run-time index of a dim that is dropped (shrink
    axis, stride 1) or a full ``:`` (both masks set, stride 1); the window then has
    a static shape, and becomes a dynamic-slice.  A negative index counts from the
    end, as in TF; an index out of range is clamped (TF raises an error)."""
    x, begin = ctx.inputs[0], ctx.inputs[1]
    strides = ctx.const_ints(3, "StridedSlice's strides")
    masks = {k: int(ctx.attr(k, 0)) for k in ("begin_mask", "end_mask", "ellipsis_mask",
                                              "new_axis_mask", "shrink_axis_mask")}
    if masks["ellipsis_mask"] or masks["new_axis_mask"] or len(strides) > x.rank:
        raise Unsupported("StridedSlice with run-time bounds: only indices and full ':' dims")
    m, starts, sizes, keep = ctx.m, [], [], []
    for d, n in enumerate(x.shape):
        bit = 1 << d
        if d < len(strides) and masks["shrink_axis_mask"] & bit and strides[d] == 1:
            i = m.reshape(m.slice(begin, [d], [1]), ())
            starts.append(m.elementwise(Op.SELECT, m.elementwise(Op.LT, i, m.scalar(0, i.dtype)),
                                        m.elementwise(Op.ADD, i, m.scalar(n, i.dtype)), i))
            sizes.append(1)
        elif d >= len(strides) or (masks["begin_mask"] & masks["end_mask"] & bit and strides[d] == 1):
            starts.append(m.scalar(0, begin.dtype))
            sizes.append(n)
            keep.append(n)
        else:
            raise Unsupported(f"StridedSlice's begin (input 1) must be a compile-time constant "
                              f"(dim {d} is neither an index nor ':')")
    return m.reshape(m.dynamic_slice(x, starts, sizes), keep)


def _join(ctx: LowerCtx, xs: list, axis: int) -> Instr:
    base = xs[0]
    for x in xs:
        if x.rank != base.rank or any(a != b for d, (a, b) in enumerate(zip(x.shape, base.shape)) if d != axis):
            raise Unsupported(f"{ctx.node.op}: shapes {[list(x.shape) for x in xs]} disagree off axis {axis}")
    non_empty = [x for x in xs if x.shape[axis]]
    return ctx.m.concat(non_empty or xs[:1], axis)


@register("ConcatV2", dtypes=registry.ALL, const_inputs=(-1,), quantized=registry.QUANTIZED_MOVES)
def _concat(ctx: LowerCtx):
    xs, axis = ctx.inputs[:-1], ctx.const_ints(len(ctx.inputs) - 1, "ConcatV2's axis")
    if xs[0].rank == 0:
        raise Unsupported("ConcatV2: cannot concatenate scalars")
    return _join(ctx, xs, _axis(axis[0], xs[0].rank, "ConcatV2 axis"))


@register("Pack", dtypes=registry.ALL)
def _pack(ctx: LowerCtx):
    rank = ctx.inputs[0].rank
    axis = _axis(int(ctx.attr("axis", 0)), rank + 1, "Pack axis")
    xs = [ctx.m.reshape(x, x.shape[:axis] + (1,) + x.shape[axis:]) for x in ctx.inputs]
    return _join(ctx, xs, axis)


@register("Unpack", dtypes=registry.ALL)
def _unpack(ctx: LowerCtx):
    x = ctx.inputs[0]
    axis = _axis(int(ctx.attr("axis", 0)), x.rank, "Unpack axis")
    num = int(ctx.attr("num"))
    if x.shape[axis] != num:
        raise Unsupported(f"Unpack: num={num} but dim {axis} has size {x.shape[axis]}")
    rest = x.shape[:axis] + x.shape[axis + 1:]
    outs = []
    for i in range(num):
        starts = [i if d == axis else 0 for d in range(x.rank)]
        sizes = [1 if d == axis else n for d, n in enumerate(x.shape)]
        outs.append(ctx.m.reshape(ctx.m.slice(x, starts, sizes), rest))
    return outs


# -- values that follow from shapes ---------------------------------------------

@register("Range", dtypes=registry.ALL, const_inputs=(0, 1, 2))
def _range(ctx: LowerCtx):
    dtype = ctx.attr("Tidx").ir
    start, limit, delta = (np.asarray(ctx.const(i, f"Range's {w}")).reshape(()).astype(dtype.numpy())
                           for i, w in enumerate(("start", "limit", "delta")))
    if delta == 0:
        raise Unsupported("Range: delta must not be 0")
    if (delta > 0 and start > limit) or (delta < 0 and start < limit):
        raise Unsupported(f"Range: start={start} limit={limit} delta={delta} never reaches the limit")
    if dtype.is_int:
        size = (abs(int(limit) - int(start)) + abs(int(delta)) - 1) // abs(int(delta))
    else:
        size = int(np.ceil(np.abs((limit - start) / delta)))
    if size > FOLD_MAX_ELEMENTS:   # computed by the kernel that reads it, not by the compiler
        m = ctx.m
        iota = m.iota(dtype, (size,), 0)
        scaled = m.elementwise(Op.MUL, iota, m.broadcast(m.scalar(delta, dtype), (size,), ()))
        return m.elementwise(Op.ADD, scaled, m.broadcast(m.scalar(start, dtype), (size,), ()))
    with np.errstate(all="ignore"):       # TF computes start + i * delta in the type
        values = start + np.arange(size).astype(start.dtype) * delta
    return ctx.m.constant(values.astype(dtype.numpy()), dtype)


@register("ReverseV2", dtypes=registry.ALL, const_inputs=(1,))
def _reverse(ctx: LowerCtx):
    """A slice with stride -1 along each reversed axis (duplicates are TF's error)."""
    x = ctx.inputs[0]
    axes = [a + x.rank if a < 0 else a for a in ctx.const_ints(1, "ReverseV2's axis")]
    if any(not 0 <= a < x.rank for a in axes) or len(set(axes)) != len(axes):
        raise Unsupported(f"ReverseV2: invalid axes {ctx.const_ints(1, 'axis')} for rank {x.rank}")
    if x.size == 0:
        return x
    starts = [n - 1 if d in axes else 0 for d, n in enumerate(x.shape)]
    strides = [-1 if d in axes else 1 for d in range(x.rank)]
    return ctx.m.slice(x, starts, x.shape, strides)


# -- depth <-> space (NCHW: lower/layout.py transposes around these NHWC rules) ----------

def _block_size(ctx: LowerCtx) -> int:
    b = int(ctx.attr("block_size", 0))
    if b < 2:
        raise Unsupported(f"{ctx.node.op}: block_size must be at least 2, got {b}")
    fmt = ctx.attr("data_format", b"NHWC")
    if fmt not in (b"NHWC", "NHWC"):
        raise Unsupported(f"{ctx.node.op} with data_format={fmt!r}: only NHWC and NCHW")
    if ctx.inputs[0].rank != 4:
        raise Unsupported(f"{ctx.node.op}: input must be 4-D, got {list(ctx.inputs[0].shape)}")
    return b


@register("DepthToSpace", dtypes=registry.ALL)
def _depth_to_space(ctx: LowerCtx):
    """out[n, h*b + i, w*b + j, c] = in[n, h, w, (i*b + j)*C' + c]."""
    b, x = _block_size(ctx), ctx.inputs[0]
    n, h, w, c = x.shape
    if c % (b * b):
        raise Unsupported(f"DepthToSpace: depth {c} is not divisible by block_size^2 = {b * b}")
    y = ctx.m.reshape(x, (n, h, w, b, b, c // (b * b)))
    return ctx.m.reshape(ctx.m.transpose(y, (0, 1, 3, 2, 4, 5)), (n, h * b, w * b, c // (b * b)))


@register("SpaceToDepth", dtypes=registry.ALL)
def _space_to_depth(ctx: LowerCtx):
    """DepthToSpace's inverse: out[n, h, w, (i*b + j)*C + c] = in[n, h*b + i, w*b + j, c]."""
    b, x = _block_size(ctx), ctx.inputs[0]
    n, h, w, c = x.shape
    if h % b or w % b:
        raise Unsupported(f"SpaceToDepth: height {h} and width {w} must be divisible by "
                          f"block_size {b}")
    y = ctx.m.reshape(x, (n, h // b, b, w // b, b, c))
    return ctx.m.reshape(ctx.m.transpose(y, (0, 1, 3, 2, 4, 5)), (n, h // b, w // b, b * b * c))


@register("Shape", dtypes=registry.ALL)
def _shape(ctx: LowerCtx):
    return _shape_constant(ctx, list(ctx.inputs[0].shape), _out_type(ctx))


@register("ShapeN", dtypes=registry.ALL)
def _shape_n(ctx: LowerCtx):
    return [_shape_constant(ctx, list(x.shape), _out_type(ctx)) for x in ctx.inputs]


@register("Size", dtypes=registry.ALL)
def _size(ctx: LowerCtx):
    return _shape_constant(ctx, ctx.inputs[0].size, _out_type(ctx))


@register("Rank", dtypes=registry.ALL)
def _rank(ctx: LowerCtx):
    return ctx.m.scalar(ctx.inputs[0].rank, dt.I32)


def broadcast_gradient_args(s0: list, s1: list) -> tuple:
    """TF's BroadcastGradientArgs (BCastList): the dims each input was broadcast
    along; a dim that is 1 in both counts for both, unless the shapes are equal."""
    if s0 == s1:
        return [], []
    rank = max(len(s0), len(s1))
    a, b = [1] * (rank - len(s0)) + list(s0), [1] * (rank - len(s1)) + list(s1)
    r0, r1 = [], []
    for d, (x, y) in enumerate(zip(a, b)):
        if x == 1:
            r0.append(d)
        if y == 1:
            r1.append(d)
        if x != y and 1 not in (x, y):
            raise Unsupported(f"BroadcastGradientArgs: incompatible shapes {s0} and {s1}")
    return r0, r1


@register("BroadcastGradientArgs", dtypes=(dt.I32, dt.I64), const_inputs=(0, 1))
def _broadcast_gradient_args(ctx: LowerCtx):
    s0, s1 = ctx.const_ints(0, "BroadcastGradientArgs' s0"), ctx.const_ints(1, "BroadcastGradientArgs' s1")
    return [ctx.m.constant(np.asarray(r, dtype=np.int64), ctx.dtype) for r in broadcast_gradient_args(s0, s1)]


@register("BroadcastArgs", dtypes=(dt.I32, dt.I64), const_inputs=(0, 1))
def _broadcast_args(ctx: LowerCtx):
    """The broadcast of two constant shapes (numpy's rule), as a constant."""
    s0, s1 = ctx.const_ints(0, "BroadcastArgs' s0"), ctx.const_ints(1, "BroadcastArgs' s1")
    rank = max(len(s0), len(s1))
    a, b = [1] * (rank - len(s0)) + s0, [1] * (rank - len(s1)) + s1
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise InvalidArgument(f"Incompatible shapes: [{','.join(map(str, s0))}] vs. "
                              f"[{','.join(map(str, s1))}]")
    return ctx.m.constant(np.asarray([y if x == 1 else x for x, y in zip(a, b)], np.int64), ctx.dtype)


def _stitch_const_inputs(node, value_of) -> range:
    return range(len(node.inputs) // 2)        # the indices (the first half)


@register("DynamicStitch", "ParallelDynamicStitch", dtypes=registry.ALL,
          const_inputs=_stitch_const_inputs)
def _dynamic_stitch(ctx: LowerCtx):
    """merged[indices[k][j]] = data[k][j], a later (k, j) winning, a position that no index
    names zero (TF's CPU kernel).  The indices are compile-time constants (as XLA's
    CompileTimeConstantInput); the data may be run-time values: one gather from their
    concatenation (and a zero row) at the position that wins each output row.  Constant
    data fold (``math_ops.reduced_shape`` in reduction gradients)."""
    m, op, n = ctx.m, ctx.node.op, len(ctx.inputs) // 2
    indices = [np.asarray(ctx.const(k, f"{op}'s indices")).astype(np.int64) for k in range(n)]
    data = ctx.inputs[n:]
    item = data[0].shape[indices[0].ndim:]
    for k, (i, d) in enumerate(zip(indices, data)):
        if d.shape != i.shape + item:
            raise Unsupported(f"{op}: data[{k}].shape = {list(d.shape)} must be indices[{k}].shape "
                              f"= {list(i.shape)} followed by {list(item)} (data[0]'s)")
        if i.size and i.min() < 0:
            raise Unsupported(f"{op}: indices[{k}] holds {int(i.min())}, which is out of range")
    size = 1 + max((int(i.max()) for i in indices if i.size), default=-1)
    if size > np.iinfo(np.int32).max:
        raise Unsupported(f"{op}: an index of {size - 1} makes an output of more than 2**31 rows")
    source = np.full(size, -1, np.int32)        # the row of the concatenation each output reads
    rows, offset = [], 0
    for i, d in zip(indices, data):
        for j, v in enumerate(i.reshape(-1)):
            source[v] = offset + j
        rows.append(m.reshape(d, (i.size,) + item))
        offset += i.size
    if (source < 0).any():
        source[source < 0] = offset
        rows.append(m.broadcast(m.scalar(0, data[0].dtype), (1,) + item, ()))
    if size == 0:
        return m.constant(np.zeros((0,) + item, ctx.dtype.numpy()), ctx.dtype)
    table = rows[0] if len(rows) == 1 else m.concat(rows, 0)
    return m.gather(table, m.constant(source, dt.I32), 0)
