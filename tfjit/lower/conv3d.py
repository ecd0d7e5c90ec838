"""Lowerings of TF's 3-D convolutions and their gradients (NDHWC, as TF's CPU kernels):
TF's own 3-D kernels as library calls (``Op.CONV3D_OPS``: runtime/tf_conv3d.cc runs
Conv3D, Conv3DBackpropInputV2, Conv3DBackpropFilterV2, oneDNN's or Eigen's), or the
2-D ``convolution`` library call on the depth taps (lower/conv.py), whichever was
faster for the convolution's class (``_native`` says which, and why).

A filter [kd, kh, kw, C, O] over x [N, D, H, W, C] touches kd depth planes per output
plane.  Gathering those planes side by side along the channels (the depth taps' im2col,
``_depth_taps``: movement only, one loop kernel) gives P [N * Do, H, W, kd * C], and the
3-D convolution is one 2-D convolution of P with the filter read as [kh, kw, kd * C, O]
(channel index t * C + c for depth tap t): the depth stride, dilation and padding live
in which planes P holds; the rows and columns are the 2-D call's own.  One library call
with a kd-times deeper contraction, instead of kd calls whose results are added.

* ``Conv3D``: as above.  With kd = 1, stride 1 and no depth padding P is x itself,
  read in place through a reshape.
* ``Conv3DBackpropFilterV2``: the 2-D filter gradient of P against the output
  gradient [N * Do, Ho, Wo, O], read back as [kd, kh, kw, C, O].
* ``Conv3DBackpropInputV2``: the 2-D input gradient gives dP; each depth tap's share
  goes back to the planes it was gathered from (spread by the depth stride, shifted by
  the tap's offset, summed over taps in tap order), and the depth padding is cut off.

Dilations: the forward op takes any (depth dilation picks the planes, the rows' and
columns' go to the 2-D call); the gradients are compiled undilated only, as TF's CPU
kernels (Eigen's) run them.  NCDHW is refused, as TF's CPU kernels refuse it.

Grouped 3-D convolutions (input depth G times the filter's: Keras's
``Conv3D(groups=G)``, which Keras runs through TF's XLA because TF's CPU kernels refuse
it) and their gradients: each group as above on its slice of the channels and of the
filter's outputs, side by side along the channels (lower/conv.py ``_per_group``).
"""
from __future__ import annotations

from tfjit import dtypes as dt
from tfjit.ir.module import Instr
from tfjit.ir.ops import Op
from tfjit.lower.conv import _backprop, _groups, _per_group, _window, check_format, padding
from tfjit.lower.registry import Unsupported, register

_DTYPES = (dt.F16, dt.BF16, dt.F32, dt.F64)


def _spatial3(ctx, name: str) -> tuple:
    """(planes, rows, cols) of a 5-element NDHWC attr (strides, dilations), checked."""
    v = tuple(int(a) for a in (ctx.attr(name) or (1, 1, 1, 1, 1)))
    if len(v) != 5 or v[0] != 1 or v[4] != 1 or min(v) < 1:
        raise Unsupported(f"{ctx.node.op}: {name}={list(v)} (only spatial values > 0 are "
                          "compiled, with 1 for the batch and channels)")
    return v[1:4]


class _Geometry:
    """One 3-D convolution's shapes: x [N, D, H, W, C], filter [kd, kh, kw, C, O]."""

    def __init__(self, ctx, x_shape: tuple, w_shape: tuple, dilated_ok: bool):
        if len(x_shape) != 5 or len(w_shape) != 5 or x_shape[4] != w_shape[3]:
            raise Unsupported(f"{ctx.node.op} of {list(x_shape)} with filter {list(w_shape)}: "
                              "5-D input and filter with matching depths are compiled "
                              "(or grouped: a depth G times the filter's)")
        self.x_shape, self.w_shape = tuple(x_shape), tuple(w_shape)
        self.strides, self.dil = _spatial3(ctx, "strides"), _spatial3(ctx, "dilations")
        if not dilated_ok and self.dil != (1, 1, 1):
            raise Unsupported(f"{ctx.node.op} with dilations {list(self.dil)}: dilated 3-D "
                              "convolution gradients are not compiled (TF's CPU kernels "
                              "refuse them too)")
        windows = tuple(_window(k, d) for k, d in zip(w_shape[:3], self.dil))
        flat = padding(ctx, x_shape[1:4], windows, self.strides)
        self.pads = list(zip(flat[::2], flat[1::2]))
        self.out = tuple((size + lo + hi - win) // s + 1 for size, (lo, hi), win, s
                         in zip(x_shape[1:4], self.pads, windows, self.strides))
        if min(self.out) < 1:
            raise Unsupported(f"{ctx.node.op}: filter {list(w_shape)} is larger than the "
                              f"padded input {list(x_shape)}")

    @property
    def flat_pads(self) -> tuple:
        return tuple(p for pair in self.pads for p in pair)

    @property
    def hw_pads(self) -> tuple:
        (top, bottom), (left, right) = self.pads[1], self.pads[2]
        return top, bottom, left, right

    @property
    def taps_are_x(self) -> bool:
        """P is x itself: one depth tap, stride 1, no depth padding."""
        return self.w_shape[0] == 1 and self.strides[0] == 1 and self.pads[0] == (0, 0)

    def p_shape(self) -> tuple:
        n, _, h, w, c = self.x_shape
        return (n * self.out[0], h, w, self.w_shape[0] * c)


def _depth_taps(m, x: Instr, g: _Geometry) -> Instr:
    """P [N * Do, H, W, kd * C]: for output plane o and tap t, plane o * sd + t * dd of
    the depth-padded x, taps side by side along the channels."""
    n, d, h, w, c = x.shape
    kd, do = g.w_shape[0], g.out[0]
    if g.taps_are_x:
        return m.reshape(x, g.p_shape())
    lo, hi = g.pads[0]
    if lo or hi:
        x = m.pad(x, m.scalar(0, x.dtype), (0, lo, 0, 0, 0), (0, hi, 0, 0, 0))
    taps = [m.slice(x, (0, t * g.dil[0], 0, 0, 0), (n, do, h, w, c), (1, g.strides[0], 1, 1, 1))
            for t in range(kd)]
    p = taps[0] if kd == 1 else m.concat(taps, 4)
    return m.reshape(p, g.p_shape())


def _filter_2d(m, w: Instr) -> Instr:
    """[kd, kh, kw, C, O] read as the 2-D filter [kh, kw, kd * C, O]."""
    kd, kh, kw, c, o = w.shape
    if kd == 1:
        return m.reshape(w, (kh, kw, c, o))
    return m.reshape(m.transpose(w, (1, 2, 0, 3, 4)), (kh, kw, kd * c, o))


def _checked_grad(grad: Instr, g: _Geometry) -> Instr:
    n, do, ho, wo, o = grad.shape
    if (do, ho, wo) != g.out or n != g.x_shape[0] or o != g.w_shape[4]:
        raise Unsupported(f"out_backprop {list(grad.shape)} does not match the convolution's "
                          f"output {[g.x_shape[0], *g.out, g.w_shape[4]]}")
    return grad


def _grad_2d(m, grad: Instr, g: _Geometry) -> Instr:
    n, do, ho, wo, o = _checked_grad(grad, g).shape
    return m.reshape(grad, (n * do, ho, wo, o))


@register("Conv3D", dtypes=_DTYPES, half_in_f32=True)
def _conv3d(ctx):
    check_format(ctx, "NDHWC")
    x, w = ctx.inputs
    groups = _groups(ctx, x.shape[-1], w.shape) if x.rank == 5 and w.rank == 5 else 1
    if groups > 1:
        return _per_group(ctx.m, groups, (x, w), lambda xk, wk: _conv3d_of(ctx, xk, wk))
    return _conv3d_of(ctx, x, w)


# Input gradients with fewer input channels than this go through the depth taps.
NATIVE_INPUT_GRADIENT_DEPTH = 16


def _native(g: _Geometry, op: Op) -> bool:
    """Whether TF's own 3-D kernel (``op``: a ``CONV3D_OPS`` call of its own) runs this
    convolution or gradient, rather than the 2-D call on the depth taps.

    Measured on 2 cores of AMD EPYC Zen 4 (TF's kernels chosen as every library call's,
    oneDNN's or Eigen's cuboid convolution; 12 shapes, batch 4-32, 1-64 channels, in one
    process against the depth taps): the plain convolution 1.03-1.67x faster native
    (1.3x at 32 channels: the taps' gather writes kd copies of x), the filter gradient
    1.2-1.9x.  The input gradient is 1.15-1.34x faster native from 16 input channels up,
    but 0.51x, 0.78x, 0.88x at 1, 4, 8: the 2-D gradient over kd * C channels is the
    deeper contraction.  Where P is x itself (one depth tap, stride 1, no depth
    padding: read in place, nothing gathered) the 2-D call stays: even without a bias
    (0.97-1.03x), and its bias and ReLU fold into it (passes/epilogue.py; native
    0.86-0.91x with them).  Dilated convolutions stay too (the gradients are compiled
    undilated only, as TF's CPU kernels run them)."""
    if g.dil != (1, 1, 1) or g.taps_are_x:
        return False
    return op is not Op.CONV3D_BACKPROP_INPUT or g.x_shape[4] >= NATIVE_INPUT_GRADIENT_DEPTH


def _conv3d_of(ctx, x: Instr, w: Instr) -> Instr:
    m = ctx.m
    g = _Geometry(ctx, x.shape, w.shape, dilated_ok=True)
    if _native(g, Op.CONV3D):
        return m.convolution_3d(Op.CONV3D, x, w, g.strides, g.flat_pads)
    y = m.convolution(_depth_taps(m, x, g), _filter_2d(m, w), g.strides[1:], g.dil[1:], g.hw_pads)
    return m.reshape(y, (x.shape[0], *g.out, w.shape[4]))


def _sizes5(ctx, i: int, what: str) -> tuple:
    v = tuple(ctx.const_ints(i, what))
    if len(v) != 5 or min(v) < 0:
        raise Unsupported(f"{ctx.node.op}: {what} {list(v)} must be 5 non-negative sizes")
    return v


@register("Conv3DBackpropFilterV2", dtypes=_DTYPES, half_in_f32=True, const_inputs=(1,))
def _conv3d_backprop_filter(ctx):
    check_format(ctx, "NDHWC")
    x, grad = ctx.inputs[0], ctx.inputs[2]
    w_shape = _sizes5(ctx, 1, "filter_sizes")
    groups = _groups(ctx, x.shape[-1], w_shape) if x.rank == 5 and grad.rank == 5 else 1
    if groups > 1 and grad.shape[-1] == w_shape[-1]:
        each = w_shape[:4] + (w_shape[4] // groups,)
        return _per_group(ctx.m, groups, (x, grad),
                          lambda xk, gk: _conv3d_filter_of(ctx, xk, gk, each))
    return _conv3d_filter_of(ctx, x, grad, w_shape)


def _conv3d_filter_of(ctx, x: Instr, grad: Instr, w_shape: tuple) -> Instr:
    m = ctx.m
    g = _Geometry(ctx, x.shape, w_shape, dilated_ok=False)
    if _native(g, Op.CONV3D_BACKPROP_FILTER):
        return m.convolution_3d(Op.CONV3D_BACKPROP_FILTER, x, _checked_grad(grad, g), g.strides,
                                g.flat_pads, w_shape)
    kd, kh, kw, c, o = w_shape
    dw = _backprop(ctx, Op.CONV_BACKPROP_FILTER, _depth_taps(m, x, g), _grad_2d(m, grad, g),
                   (kh, kw, kd * c, o), g.strides[1:], g.hw_pads)
    if kd == 1:
        return m.reshape(dw, w_shape)
    return m.transpose(m.reshape(dw, (kh, kw, kd, c, o)), (2, 0, 1, 3, 4))


def _spread_taps(m, dp: Instr, g: _Geometry) -> Instr:
    """The input gradient from dP [N * Do, H, W, kd * C]: tap t's share goes back to
    planes o * sd + t * dd of the padded depth, summed over taps in tap order; the
    padding planes are cut off."""
    n, d, h, w, c = g.x_shape
    kd, do = g.w_shape[0], g.out[0]
    if g.taps_are_x:
        return m.reshape(dp, g.x_shape)
    lo, hi = g.pads[0]
    depth, sd = d + lo + hi, g.strides[0]
    span = (do - 1) * sd + 1
    dp = m.reshape(dp, (n, do, h, w, kd, c))
    zero = m.scalar(0, dp.dtype)
    total = None
    # Rows, columns and channels stay dims of their own (merged into one, an element's
    # index was split back by division: LLVM gathered the taps, 0.72-0.84 ms for a
    # [32,16,16,16,8] Conv3DTranspose's 4 MB where contiguous channels take half)
    for t in range(kd):
        share = m.reshape(m.slice(dp, (0, 0, 0, 0, t, 0), (n, do, h, w, 1, c)), (n, do, 1, h, w, c))
        if sd > 1:        # sd - 1 zero planes after each plane, then the last ones cut off
            share = m.pad(share, zero, (0,) * 6, (0, 0, sd - 1, 0, 0, 0))
            share = m.slice(m.reshape(share, (n, do * sd, h, w, c)), (0,) * 5, (n, span, h, w, c))
        else:
            share = m.reshape(share, (n, do, h, w, c))
        start = t * g.dil[0]
        share = m.pad(share, zero, (0, start, 0, 0, 0), (0, depth - start - span, 0, 0, 0))
        total = share if total is None else m.elementwise(Op.ADD, total, share)
    if lo or hi:
        total = m.slice(total, (0, lo, 0, 0, 0), (n, d, h, w, c))
    return total


@register("Conv3DBackpropInputV2", dtypes=_DTYPES, half_in_f32=True, const_inputs=(0,))
def _conv3d_backprop_input(ctx):
    check_format(ctx, "NDHWC")
    w, grad = ctx.inputs[1], ctx.inputs[2]
    x_shape = _sizes5(ctx, 0, "input_sizes")
    groups = _groups(ctx, x_shape[-1], w.shape) if w.rank == 5 and grad.rank == 5 else 1
    if groups > 1 and grad.shape[-1] == w.shape[-1]:
        each = x_shape[:4] + (w.shape[3],)
        return _per_group(ctx.m, groups, (w, grad),
                          lambda wk, gk: _conv3d_input_of(ctx, wk, gk, each))
    return _conv3d_input_of(ctx, w, grad, x_shape)


def _conv3d_input_of(ctx, w: Instr, grad: Instr, x_shape: tuple) -> Instr:
    m = ctx.m
    g = _Geometry(ctx, x_shape, w.shape, dilated_ok=False)
    if _native(g, Op.CONV3D_BACKPROP_INPUT):
        return m.convolution_3d(Op.CONV3D_BACKPROP_INPUT, w, _checked_grad(grad, g), g.strides,
                                g.flat_pads, x_shape)
    dp = _backprop(ctx, Op.CONV_BACKPROP_INPUT, _filter_2d(m, w), _grad_2d(m, grad, g),
                   g.p_shape(), g.strides[1:], g.hw_pads)
    return _spread_taps(m, dp, g)
