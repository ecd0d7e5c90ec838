"""Split and SplitV: static slices along one axis (Keras's LSTM/GRU cells split their gates)."""
from __future__ import annotations

from tfjit.lower import registry
from tfjit.lower.registry import Unsupported, register


def _pieces(ctx, x, axis: int, sizes: list) -> list:
    if not -x.rank <= axis < x.rank:
        raise Unsupported(f"{ctx.node.op}: axis {axis} is out of range for rank {x.rank}")
    axis %= x.rank
    outs, start = [], 0
    for n in sizes:
        starts = [start if d == axis else 0 for d in range(x.rank)]
        shape = [n if d == axis else s for d, s in enumerate(x.shape)]
        outs.append(ctx.m.slice(x, starts, shape))
        start += n
    return outs


@register("Split", dtypes=registry.ALL, const_inputs=(0,))
def _split(ctx):
    axis, x = ctx.const_ints(0, "Split's axis")[0], ctx.inputs[1]
    num = int(ctx.attr("num_split"))
    dim = x.shape[axis % x.rank] if x.rank else 0
    if num <= 0 or x.rank == 0 or dim % num:
        raise Unsupported(f"Split: dimension {axis} of size {dim} does not split into {num} parts")
    return _pieces(ctx, x, axis, [dim // num] * num)


@register("SplitV", dtypes=registry.ALL, const_inputs=(1, 2))
def _split_v(ctx):
    x, sizes = ctx.inputs[0], ctx.const_ints(1, "SplitV's size_splits")
    axis = ctx.const_ints(2, "SplitV's axis")[0]
    if x.rank == 0 or not -x.rank <= axis < x.rank:
        raise Unsupported(f"SplitV: axis {axis} is out of range for rank {x.rank}")
    dim = x.shape[axis % x.rank]
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        raise Unsupported(f"SplitV: invalid size_splits {sizes}")
    if -1 in sizes:
        sizes[sizes.index(-1)] = dim - sum(s for s in sizes if s >= 0)
    if sum(sizes) != dim or min(sizes, default=0) < 0:
        raise Unsupported(f"SplitV: size_splits {sizes} do not add up to dimension {axis} ({dim})")
    return _pieces(ctx, x, axis, sizes)
