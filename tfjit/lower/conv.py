"""Lowerings of TF's 2-D convolutions and their gradients (NHWC, as TF's CPU kernels).

* ``Conv2D``: one IR ``convolution``, padding made explicit; under the launch op
  the runtime library runs TF's own Conv2D kernel on it (runtime/tf_kernels.cc).
* ``Conv2DBackpropInput``, ``Conv2DBackpropFilter`` and the depthwise gradients
  (``DepthwiseConv2dNativeBackpropInput/Filter``), undilated: one IR
  ``*-backprop-*`` library call each, which runs TF's own gradient kernel.
  Measured per op on the Keras CNN's and a MobileNetV2 train step's shapes
  (tf.function of the op vs tfjit, 2 shared cores, medians), TF's kernels beat
  the formulations below: Conv2DBackpropInput 0.6x -> 1.0x of TF's time on
  the CNN, Conv2DBackpropFilter 0.8x -> 1.0x, the depthwise gradients 0.04x-0.4x
  (e.g. a stride-2 DepthwiseConv2dNativeBackpropInput took 336 ms against TF's
  14 ms).
* Gradients TF's CPU kernels refuse (dilated ones; depthwise ones with unequal
  row and column strides) keep XLA's formulations:
  the input gradient is a convolution of the output gradient dilated by the
  strides (zeros between elements, built with reshape + pad + slice, so it
  fuses into the producer's kernel), with the filter flipped in space and its
  in/out channels swapped; the filter gradient contracts the filter taps'
  input windows side by side (im2col, movement only) with the output gradient
  (one ``dot``); the depthwise ones are sums of shifted slices.
* Grouped ``Conv2D`` and its gradients (input depth G times the filter's, as Keras's
  ``Conv2D(groups=G)``; TF's CPU kernels run them): one library call per group, on
  the group's slice of the channels and of the filter's outputs, the results side by
  side along the channels (``_per_group``).  TF's kernels split the same way (their
  grouped path); XLA CPU's expansion into one call with a block-diagonal filter
  does G times the work.  One group per input channel is depthwise (below).
* ``DepthwiseConv2dNative``: each output channel reads one input channel, so no
  contraction is large enough for a library call; it lowers to shifted strided
  slices times filter taps, summed -- one fused loop kernel vectorised over
  channels, 2-3x faster than TF's own kernel on MobileNetV2's shapes.  (XLA
  lowers depthwise convolution to a grouped convolution, which is 17x slower
  than TF's own kernel on CPU.)
"""
from __future__ import annotations

import dataclasses

from tfjit import dtypes as dt
from tfjit.graph.graphdef import Node
from tfjit.ir.module import Instr, IRError, Module
from tfjit.ir.ops import Op
from tfjit.lower.layout import TO_NCHW, TO_NHWC
from tfjit.lower.registry import Unsupported, register, text

_DTYPES = (dt.F16, dt.BF16, dt.F32, dt.F64)


# -- attributes -------------------------------------------------------------------------

def _spatial(ctx, name: str, default=(1, 1, 1, 1)) -> tuple:
    """(rows, cols) of a 4-element NHWC attr (strides, dilations), checked."""
    v = tuple(ctx.attr(name) or default)
    if len(v) != 4 or v[0] != 1 or v[3] != 1 or min(v) < 1:
        raise Unsupported(f"{ctx.node.op}: {name}={list(v)} (only spatial values > 0 are compiled)")
    return v[1], v[2]


def check_format(ctx, layout: str = "NHWC") -> None:
    fmt = text(ctx.attr("data_format", layout.encode()))
    if fmt != layout:
        raise Unsupported(f"{ctx.node.op} with data_format={fmt} (TF's CPU kernels take {layout})")


def padding(ctx, in_size: tuple, window: tuple, strides: tuple) -> tuple:
    """(top, bottom, left, right) for TF's padding attr: SAME, VALID or EXPLICIT (a
    (low, high) pair per dim of ``in_size``: three for Conv3D, which has no EXPLICIT)."""
    kind = text(ctx.attr("padding"))
    if kind == "VALID":
        return (0,) * (2 * len(in_size))
    if kind == "SAME":
        out = []
        for size, k, s in zip(in_size, window, strides):
            total = max((-(-size // s) - 1) * s + k - size, 0)
            out += [total // 2, total - total // 2]
        return tuple(out)
    if kind == "EXPLICIT":
        p = tuple(int(v) for v in ctx.attr("explicit_paddings") or ())
        if len(p) != 8 or p[0] or p[1] or p[6] or p[7] or min(p) < 0:
            raise Unsupported(f"{ctx.node.op}: explicit_paddings={list(p)} must pad H and W only")
        return p[2:6]
    raise Unsupported(f"{ctx.node.op}: padding={kind}")


def _window(k: int, d: int) -> int:
    return (k - 1) * d + 1


def _out_size(size: int, lo: int, hi: int, k: int, s: int, d: int) -> int:
    return (size + lo + hi - _window(k, d)) // s + 1


# -- shared IR helpers --------------------------------------------------------------------

def _zero(m: Module, like: Instr) -> Instr:
    return m.scalar(0, like.dtype)


def _crop_hw(m: Module, x: Instr, pads: tuple) -> tuple:
    """(x without the rows/columns a negative padding removes, the padding left over)."""
    n, h, w, c = x.shape
    crop = [max(-v, 0) for v in pads]
    if any(crop):
        x = m.slice(x, (0, crop[0], crop[2], 0), (n, h - crop[0] - crop[1], w - crop[2] - crop[3], c))
    return x, tuple(max(v, 0) for v in pads)


def _pad_hw(m: Module, x: Instr, pads: tuple) -> Instr:
    """Zero padding of H and W; a negative amount crops instead."""
    x, (top, bottom, left, right) = _crop_hw(m, x, pads)
    return m.pad(x, _zero(m, x), (0, top, left, 0), (0, bottom, right, 0))


def _tap(m: Module, xp: Instr, i: int, j: int, out_hw: tuple, strides: tuple, dil: tuple):
    """xp[:, i*dr + r*sr, j*dc + c*sc, :] for r, c < out_hw: one filter tap's inputs."""
    n, _, _, c = xp.shape
    return m.slice(xp, (0, i * dil[0], j * dil[1], 0), (n, *out_hw, c), (1, *strides, 1))


def _dilate_hw(m: Module, x: Instr, strides: tuple) -> Instr:
    """Zeros between x's rows and columns ((n-1)*s+1 each), as reshape + pad + slice."""
    sr, sc = strides
    if (sr, sc) == (1, 1):
        return x
    n, h, w, c = x.shape
    x = m.reshape(x, (n, h, 1, w, 1, c))
    x = m.pad(x, _zero(m, x), (0,) * 6, (0, 0, sr - 1, 0, sc - 1, 0))
    x = m.reshape(x, (n, h * sr, w * sc, c))
    return m.slice(x, (0, 0, 0, 0), (n, (h - 1) * sr + 1, (w - 1) * sc + 1, c))


def _flip_hw(m: Module, w: Instr) -> Instr:
    kh, kw = w.shape[:2]
    return m.slice(w, (kh - 1, kw - 1, 0, 0), w.shape, (-1, -1, 1, 1))


def _backprop_padding(in_size, k, s, d, lo, hi, grad_size) -> tuple:
    """Padding of the dilated gradient so a stride-1 convolution gives the input size."""
    low = _window(k, d) - 1 - lo
    high = in_size + lo - (grad_size - 1) * s - 1
    return low, high


def _sizes(ctx, i: int, what: str) -> tuple:
    v = ctx.const_ints(i, what)
    if len(v) != 4 or min(v) < 0:
        raise Unsupported(f"{ctx.node.op}: {what} {v} must be 4 non-negative sizes")
    return tuple(v)


# -- Conv2D and its gradients ---------------------------------------------------------------

def _per_channel_groups(depth: int, filter_shape) -> bool:
    """A grouped Conv2D with one group per input channel: filter [kh, kw, 1, depth * M]."""
    return len(filter_shape) == 4 and filter_shape[2] == 1 and depth > 1 \
        and filter_shape[3] % depth == 0


def _groups(ctx, depth: int, filter_shape) -> int:
    """How many groups a convolution of input ``depth`` with filter [..., Cg, O] has
    (1: ungrouped), refused where the depths do not divide as TF's kernels require."""
    cg, o = filter_shape[-2], filter_shape[-1]
    if cg < 1 or depth % cg or o % (depth // cg):
        raise Unsupported(f"{ctx.node.op}: input depth {depth} with filter "
                          f"{list(filter_shape)}: the depth must be a multiple of the filter's "
                          "input depth, and the filter's outputs of the number of groups")
    return depth // cg


def _per_group(m: Module, groups: int, operands: tuple, each) -> Instr:
    """A grouped convolution (or gradient) from ungrouped ones: each operand split into
    ``groups`` equal parts along its last dim (channels, or the filter's outputs),
    ``each(*parts)`` per group, and the groups' results side by side along their last
    dim."""
    def part(x, k):
        n = x.shape[-1] // groups
        return m.slice(x, (0,) * (x.rank - 1) + (k * n,), x.shape[:-1] + (n,))

    results = [each(*(part(x, k) for x in operands)) for k in range(groups)]
    return m.concat(results, results[0].rank - 1)


@register("Conv2D", dtypes=_DTYPES, half_in_f32=True)
def _conv2d(ctx):
    check_format(ctx)
    x, w = ctx.inputs
    if x.rank == 4 and w.rank == 4 and _per_channel_groups(x.shape[3], w.shape):
        # one group per input channel (Keras 3's depthwise layers under XLA, ConvNeXt):
        # a depthwise convolution, filter [kh, kw, 1, C*M] read as [kh, kw, C, M]
        kh, kw, _, o = w.shape
        return _depthwise_conv(ctx, x, ctx.m.reshape(w, (kh, kw, x.shape[3], o // x.shape[3])))
    if x.rank != 4 or w.rank != 4:
        raise Unsupported(f"Conv2D of {list(x.shape)} with filter {list(w.shape)}: 4-D input "
                          "and filter are compiled")
    strides, dil = _spatial(ctx, "strides"), _spatial(ctx, "dilations")
    pads = padding(ctx, x.shape[1:3], (_window(w.shape[0], dil[0]), _window(w.shape[1], dil[1])),
                   strides)
    groups = _groups(ctx, x.shape[3], w.shape)
    if groups > 1:
        return _per_group(ctx.m, groups, (x, w),
                          lambda xk, wk: ctx.m.convolution(xk, wk, strides, dil, pads))
    return ctx.m.convolution(x, w, strides, dil, pads)


@register("Conv", dtypes=_DTYPES, half_in_f32=True)
def _conv(ctx):
    """TF's generic N-D convolution (``tf.raw_ops.Conv``).  Its 2-D form with one batch
    dim and one group is Conv2D: CHANNELS_LAST as it is, CHANNELS_FIRST (whose strides
    and dilations are in NCHW order) between transposes, as lower/layout.py does."""
    x, w = ctx.inputs
    if int(ctx.attr("batch_dims", 1)) != 1 or x.rank != 4 or w.rank != 4:
        raise Unsupported(f"Conv of {list(x.shape)} with filter {list(w.shape)}, batch_dims="
                          f"{ctx.attr('batch_dims', 1)}: only 2-D convolutions with one batch "
                          "dim are compiled")
    if int(ctx.attr("groups", 1)) != 1:
        raise Unsupported(f"Conv with groups={ctx.attr('groups')}: grouped convolutions are "
                          "not compiled")
    first = text(ctx.attr("data_format", b"CHANNELS_LAST")) == "CHANNELS_FIRST"
    attrs = dict(ctx.node.attrs, data_format=b"NHWC")
    if first:
        for name in ("strides", "dilations"):
            if attrs.get(name) is not None and len(attrs[name]) == 4:
                v = list(attrs[name])
                attrs[name] = (v[0], v[2], v[3], v[1])
        pads = attrs.get("explicit_paddings")
        if pads and len(pads) == 8:
            attrs["explicit_paddings"] = tuple(pads[0:2]) + tuple(pads[4:8]) + tuple(pads[2:4])
        x = ctx.m.transpose(x, TO_NHWC)
    node = Node(ctx.node.name, "Conv2D", ctx.node.inputs, ctx.node.control_inputs, attrs,
                ctx.node.device)
    y = _conv2d(dataclasses.replace(ctx, node=node, inputs=[x, w]))
    return ctx.m.transpose(y, TO_NCHW) if first else y


def _backprop(ctx, op: Op, a: Instr, g: Instr, shape: tuple, strides: tuple, pads: tuple) -> Instr:
    """The library call for an undilated gradient, refused with TF's shapes in the message."""
    try:
        return ctx.m.conv_backprop(op, a, g, shape, strides, pads)
    except IRError:
        raise Unsupported(f"{ctx.node.op} of {list(a.shape)} and gradient {list(g.shape)} to "
                          f"{list(shape)}: the sizes disagree") from None


@register("Conv2DBackpropInput", dtypes=_DTYPES, half_in_f32=True, const_inputs=(0,))
def _conv2d_backprop_input(ctx):
    check_format(ctx)
    m = ctx.m
    sizes = _sizes(ctx, 0, "input_sizes")
    w, g = ctx.inputs[1], ctx.inputs[2]
    if _per_channel_groups(sizes[3], w.shape):       # the gradient of a depthwise Conv2D
        kh, kw, _, o = w.shape
        return _depthwise_grad_input(ctx, sizes, m.reshape(w, (kh, kw, sizes[3], o // sizes[3])), g)
    strides, dil = _spatial(ctx, "strides"), _spatial(ctx, "dilations")
    kh, kw, c, o = w.shape
    pads = padding(ctx, sizes[1:3], (_window(kh, dil[0]), _window(kw, dil[1])), strides)
    groups = _groups(ctx, sizes[3], w.shape)
    if groups > 1 and dil == (1, 1):        # each group's input gradient, from its outputs'
        each = sizes[:3] + (c,)
        return _per_group(m, groups, (w, g), lambda wk, gk: _backprop(
            ctx, Op.CONV_BACKPROP_INPUT, wk, gk, each, strides, pads))
    if groups > 1:
        raise Unsupported(f"Conv2DBackpropInput of a grouped convolution with dilations "
                          f"{list(dil)}: dilated grouped gradients are not compiled")
    if dil == (1, 1):
        return _backprop(ctx, Op.CONV_BACKPROP_INPUT, w, g, sizes, strides, pads)
    rows = _backprop_padding(sizes[1], kh, strides[0], dil[0], pads[0], pads[1], g.shape[1])
    cols = _backprop_padding(sizes[2], kw, strides[1], dil[1], pads[2], pads[3], g.shape[2])
    flipped = m.transpose(_flip_hw(m, w), (0, 1, 3, 2))          # [kh, kw, o, c]
    gd, pads = _crop_hw(m, _dilate_hw(m, g, strides), rows + cols)
    dx = m.convolution(gd, flipped, (1, 1), dil, pads)
    if dx.shape != sizes:
        raise Unsupported(f"Conv2DBackpropInput: input_sizes {list(sizes)} disagree with the "
                          f"gradient's shape {list(g.shape)}")
    return dx


@register("Conv2DBackpropFilter", dtypes=_DTYPES, half_in_f32=True, const_inputs=(1,))
def _conv2d_backprop_filter(ctx):
    check_format(ctx)
    m = ctx.m
    x, g = ctx.inputs[0], ctx.inputs[2]
    kh, kw, c, o = _sizes(ctx, 1, "filter_sizes")
    if x.rank == 4 and _per_channel_groups(x.shape[3], (kh, kw, c, o)):
        dw = _depthwise_grad_filter(ctx, x, g, (kh, kw, x.shape[3], o // x.shape[3]))
        return m.reshape(dw, (kh, kw, c, o))
    strides, dil = _spatial(ctx, "strides"), _spatial(ctx, "dilations")
    pads = padding(ctx, x.shape[1:3], (_window(kh, dil[0]), _window(kw, dil[1])), strides)
    n, ho, wo, _ = g.shape
    groups = _groups(ctx, x.shape[3], (kh, kw, c, o)) if x.rank == 4 else 1
    if groups > 1 and dil == (1, 1) and g.rank == 4 and g.shape[3] == o:
        # each group's filter gradient: its input channels against its outputs' gradient
        each = (kh, kw, c, o // groups)
        return _per_group(m, groups, (x, g), lambda xk, gk: _backprop(
            ctx, Op.CONV_BACKPROP_FILTER, xk, gk, each, strides, pads))
    if x.shape[3] != c or g.shape[3] != o:
        raise Unsupported("Conv2DBackpropFilter: depths disagree with filter_sizes (dilated "
                          "grouped gradients are not compiled)")
    if dil == (1, 1):
        return _backprop(ctx, Op.CONV_BACKPROP_FILTER, x, g, (kh, kw, c, o), strides, pads)
    xp = _pad_hw(m, x, pads)
    taps = [m.reshape(_tap(m, xp, i, j, (ho, wo), strides, dil), (n, ho, wo, 1, c))
            for i in range(kh) for j in range(kw)]
    patches = m.reshape(m.concat(taps, 3), (n * ho * wo, kh * kw * c))
    dw = m.dot(patches, m.reshape(g, (n * ho * wo, o)), transpose_lhs=True)
    return m.reshape(dw, (kh, kw, c, o))


# -- depthwise ---------------------------------------------------------------------------------

def _depthwise_attrs(ctx, x: Instr, kh: int, kw: int, in_size=None):
    check_format(ctx)
    strides, dil = _spatial(ctx, "strides"), _spatial(ctx, "dilations")
    size = in_size or x.shape[1:3]
    pads = padding(ctx, size, (_window(kh, dil[0]), _window(kw, dil[1])), strides)
    return strides, dil, pads


def _channels(m: Module, x: Instr, mult: int) -> Instr:
    """[..., C] -> [..., C, M] by repeating each channel (a broadcast)."""
    x = m.reshape(x, x.shape + (1,))
    return m.broadcast(x, x.shape[:-1] + (mult,), range(x.rank))


def _accumulate(m: Module, total: Instr | None, tap: Instr, weight: Instr) -> Instr:
    """``total + tap * weight``, one tap of a window.  In f32 (halves are computed in f32)
    one FMA: what every convolution library does per tap (oneDNN, cuDNN, XLA, whose CPU
    backend lets LLVM fuse any multiply-add), one rounding instead of two, and one
    instruction instead of two.  On a Zen 3 EPYC (one process, medians of 60, two runs)
    5x5 stride-2 depthwise convolutions of [32, 48, 48, 32] ran 1.5-1.7x faster; the
    stride-1 ones within the noise (see docs/performance.md).  f64 keeps the separate
    multiply and add (the IR has no f64 FMA, see ir/module.py)."""
    if total is None:
        return m.elementwise(Op.MUL, tap, weight)
    if tap.dtype is dt.F32:
        return m.elementwise(Op.FMA, tap, weight, total)
    return m.elementwise(Op.ADD, total, m.elementwise(Op.MUL, tap, weight))


@register("DepthwiseConv2dNative", dtypes=_DTYPES, half_in_f32=True)
def _depthwise(ctx):
    return _depthwise_conv(ctx, *ctx.inputs)


def _depthwise_conv(ctx, x: Instr, f: Instr) -> Instr:
    """Each input channel convolved with its own ``mult`` filters ([kh, kw, C, mult])."""
    m = ctx.m
    kh, kw, c, mult = f.shape
    if x.rank != 4 or x.shape[3] != c:
        raise Unsupported(f"DepthwiseConv2dNative of {list(x.shape)} with filter {list(f.shape)}")
    strides, dil, pads = _depthwise_attrs(ctx, x, kh, kw)
    n, h, w, _ = x.shape
    ho = _out_size(h, pads[0], pads[1], kh, strides[0], dil[0])
    wo = _out_size(w, pads[2], pads[3], kw, strides[1], dil[1])
    xp = _pad_hw(m, x, pads)
    total = None
    for i in range(kh):
        for j in range(kw):
            tap = _tap(m, xp, i, j, (ho, wo), strides, dil)
            taps = m.slice(f, (i, j, 0, 0), (1, 1, c, mult))
            if mult == 1:
                # [n, ho, wo, c]: a loop kernel runs along its last dim, vectorised; as
                # [n, ho, wo, c, 1] it ran one scalar element per row (Xception's 6x6x728
                # taps: no vector instruction, 0.56x TF graph's predict)
                weight = m.broadcast(m.reshape(taps, (c,)), tap.shape, (3,))
            else:
                tap = _channels(m, tap, mult)
                weight = m.broadcast(taps, tap.shape, (0, 1, 3, 4))
            total = _accumulate(m, total, tap, weight)
    if total is None:
        raise Unsupported("DepthwiseConv2dNative with an empty filter")
    return m.reshape(total, (n, ho, wo, c * mult))


@register("DepthwiseConv2dNativeBackpropInput", dtypes=_DTYPES, half_in_f32=True,
          const_inputs=(0,))
def _depthwise_backprop_input(ctx):
    return _depthwise_grad_input(ctx, _sizes(ctx, 0, "input_sizes"), ctx.inputs[1], ctx.inputs[2])


def _depthwise_grad_input(ctx, sizes: tuple, f: Instr, g: Instr) -> Instr:
    m = ctx.m
    kh, kw, c, mult = f.shape
    strides, dil, pads = _depthwise_attrs(ctx, None, kh, kw, sizes[1:3])
    if dil == (1, 1) and strides[0] == strides[1]:
        return _backprop(ctx, Op.DEPTHWISE_BACKPROP_INPUT, f, g, sizes, strides, pads)
    n, h, w, _ = sizes
    rows = _backprop_padding(h, kh, strides[0], dil[0], pads[0], pads[1], g.shape[1])
    cols = _backprop_padding(w, kw, strides[1], dil[1], pads[2], pads[3], g.shape[2])
    gp = _pad_hw(m, _dilate_hw(m, g, strides), rows + cols)
    gp = m.reshape(gp, gp.shape[:3] + (c, mult))
    total = None
    for i in range(kh):
        for j in range(kw):
            tap = m.slice(gp, (0, i * dil[0], j * dil[1], 0, 0), (n, h, w, c, mult))
            weight = m.slice(f, (kh - 1 - i, kw - 1 - j, 0, 0), (1, 1, c, mult))
            total = _accumulate(m, total, tap, m.broadcast(weight, tap.shape, (0, 1, 3, 4)))
    return m.reduce(total, "sum", 1)


@register("DepthwiseConv2dNativeBackpropFilter", dtypes=_DTYPES, half_in_f32=True,
          const_inputs=(1,))
def _depthwise_backprop_filter(ctx):
    return _depthwise_grad_filter(ctx, ctx.inputs[0], ctx.inputs[2], _sizes(ctx, 1, "filter_sizes"))


def _depthwise_grad_filter(ctx, x: Instr, g: Instr, filter_sizes: tuple) -> Instr:
    m = ctx.m
    kh, kw, c, mult = filter_sizes
    strides, dil, pads = _depthwise_attrs(ctx, x, kh, kw)
    if dil == (1, 1) and strides[0] == strides[1]:
        return _backprop(ctx, Op.DEPTHWISE_BACKPROP_FILTER, x, g, (kh, kw, c, mult), strides, pads)
    n, ho, wo, _ = g.shape
    xp = _pad_hw(m, x, pads)
    g5 = m.reshape(g, (n, ho, wo, c, mult))
    taps = []
    for i in range(kh):
        for j in range(kw):
            prod = m.elementwise(Op.MUL, _channels(m, _tap(m, xp, i, j, (ho, wo), strides, dil),
                                                   mult), g5)
            taps.append(m.reshape(prod, (1, n, ho, wo, c, mult)))
    stacked = m.transpose(m.concat(taps, 0), (0, 4, 5, 1, 2, 3))   # [taps, c, m, n, ho, wo]
    return m.reshape(m.reduce(stacked, "sum", 3), (kh, kw, c, mult))
