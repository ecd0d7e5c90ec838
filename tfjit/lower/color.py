"""Lowerings of TF's colour-space image ops: RGBToHSV, HSVToRGB, AdjustSaturation,
AdjustHue and AdjustContrastv2, in the arithmetic of TF's CPU kernels.

TF has three HSV conversions and each op keeps its own: RGBToHSV/HSVToRGB are Eigen
expressions in the image's type (colorspace_op.h: ``norm = (1 / range) * (1/6)``,
the clamped-ramp inverse); AdjustSaturation's float kernel converts per pixel with
``norm = 1 / (6 range)``, adds the 2/6 and 4/6 offsets in double, and converts back
by hue sector (adjust_saturation_op.cc); AdjustHue's works on hue in [0, 6) with the
pixel's min and max only (adjust_hue_op.cc).  Those two and AdjustContrastv2 have
float-only CPU kernels; their halves (which XLA compiles, in float) are the float
result rounded.  The channel is the last dimension;
every rule slices it into three planes and concatenates the results.
"""
from __future__ import annotations

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.ops import Op
from tfjit.lower.halfmath import HALVES, Arith
from tfjit.lower.reduce import reduce_axes
from tfjit.lower.registry import FLOATS, InvalidArgument, register, scalar_like


class _E:
    """Elementwise shorthand over one plane shape (every operand has it).  With an
    ``Arith`` (halves) every result and constant is rounded to the half type, as
    Eigen's half arithmetic rounds each step."""

    def __init__(self, m, like, arith=None):
        self.m, self.like, self.arith = m, like, arith

    def c(self, v, like=None):
        like = like if like is not None else self.like
        if self.arith is not None and like.dtype is self.arith.compute:
            return self.arith.like(v, like)
        return scalar_like(self.m, v, like)

    def __getattr__(self, name):
        op = getattr(Op, name.rstrip("_").upper())
        if self.arith is not None:
            return lambda *xs: self.arith.op(op, *xs)
        return lambda *xs: self.m.elementwise(op, *xs)

    def sel(self, p, a, b):
        return self.m.elementwise(Op.SELECT, p, a, b)


def _planes(ctx, x):
    """The three channel planes of ``x`` (last dimension 3), TF's checks first."""
    op = ctx.node.op
    if x.rank < 1 or x.shape[-1] != 3:
        if op in ("AdjustHue", "AdjustSaturation"):
            if x.rank < 3:
                raise InvalidArgument(f"input must be at least 3-D, got shape{list(x.shape)}")
            raise InvalidArgument(f"input must have 3 channels but instead has {x.shape[-1]} channels.")
        raise InvalidArgument(f"input must have 3 channels but input only has "
                              f"{x.shape[-1] if x.rank else 0} channels.")
    if op in ("AdjustHue", "AdjustSaturation") and x.rank < 3:
        raise InvalidArgument(f"input must be at least 3-D, got shape{list(x.shape)}")
    m = ctx.m
    size = x.shape[:-1] + (1,)
    return [m.slice(x, (0,) * (x.rank - 1) + (i,), size) for i in range(3)]


def _scalar(ctx, i, like, what):
    v = ctx.inputs[i]
    if v.rank != 0:
        raise InvalidArgument(f"{what} must be scalar: {list(v.shape)}")
    return ctx.m.broadcast(v, like.shape, ())


def _join(ctx, planes):
    return ctx.m.concat(planes, planes[0].rank - 1)


def _np(dtype, v):
    """``v`` as a numpy scalar of ``dtype`` (so constant quotients round as in T)."""
    return np.dtype(dtype.numpy()).type(v)


def _max3(e, r, g, b):
    """std::max(r, std::max(g, b)) (no NaNs are defined here)."""
    return e.max(r, e.max(g, b))


def _min3(e, r, g, b):
    return e.min(r, e.min(g, b))


@register("RGBToHSV", dtypes=FLOATS)
def _rgb_to_hsv(ctx):
    t, ar = ctx.inputs[0].dtype, Arith(ctx.m, ctx.inputs[0].dtype)
    r, g, b = _planes(ctx, ar.load(ctx.inputs[0]))
    e = _E(ctx.m, r, ar if t in HALVES else None)
    v = _max3(e, r, g, b)
    rng = e.sub(v, _min3(e, r, g, b))
    s = e.sel(e.gt(v, e.c(0)), e.div(rng, v), e.c(0))
    norm = e.mul(e.div(e.c(1), rng), e.c(_np(t, 1) / _np(t, 6)))
    two, four = _np(t, 2) / _np(t, 6), _np(t, 4) / _np(t, 6)
    h = e.sel(e.eq(r, v), e.mul(norm, e.sub(g, b)),
              e.sel(e.eq(g, v), e.add(e.mul(norm, e.sub(b, r)), e.c(two)),
                    e.add(e.mul(norm, e.sub(r, g)), e.c(four))))
    h = e.sel(e.gt(rng, e.c(0)), h, e.c(0))
    h = e.sel(e.lt(h, e.c(0)), e.add(h, e.c(1)), h)
    return ar.store(_join(ctx, [h, s, v]))


@register("HSVToRGB", dtypes=FLOATS)
def _hsv_to_rgb(ctx):
    t, ar = ctx.inputs[0].dtype, Arith(ctx.m, ctx.inputs[0].dtype)
    h, s, v = _planes(ctx, ar.load(ctx.inputs[0]))
    e = _E(ctx.m, h, ar if t in HALVES else None)
    dh = e.mul(h, e.c(6))

    def clamp(x):
        return e.min(e.max(x, e.c(0)), e.c(1))
    dr = clamp(e.sub(e.abs(e.sub(dh, e.c(3))), e.c(1)))
    dg = clamp(e.add(e.neg(e.abs(e.sub(dh, e.c(2)))), e.c(2)))
    db = clamp(e.add(e.neg(e.abs(e.sub(dh, e.c(4)))), e.c(2)))
    one_s = e.add(e.neg(s), e.c(1))
    return ar.store(_join(ctx, [e.mul(e.add(one_s, e.mul(s, d)), v) for d in (dr, dg, db)]))


def _sector_select(e, cat, cases):
    """cases[k] where cat == k (k = 0..len-2), else the last entry (the default)."""
    out = cases[-1]
    for k in reversed(range(len(cases) - 1)):
        out = tuple(e.sel(e.eq(cat, e.c(k, cat)), a, o) for a, o in zip(cases[k], out))
    return out


@register("AdjustSaturation", dtypes=(dt.F16, dt.F32), half_in_f32=True)
def _adjust_saturation(ctx):
    m = ctx.m
    r, g, b = _planes(ctx, ctx.inputs[0])
    e = _E(m, r)
    scale = _scalar(ctx, 1, r, "scale")
    # rgb_to_hsv, the kernel's float version
    def std_max(a, b):           # std::max: (a < b) ? b : a, so a NaN b is dropped
        return e.sel(e.lt(a, b), b, a)

    def std_min(a, b):           # std::min: (b < a) ? b : a
        return e.sel(e.lt(b, a), b, a)
    vv = std_max(r, std_max(g, b))
    rng = e.sub(vv, std_min(r, std_min(g, b)))
    s = e.sel(e.gt(vv, e.c(0)), e.div(rng, vv), e.c(0))
    norm = e.div(e.c(1), e.mul(e.c(6), rng))

    def plus_double(x, k):       # float + 2.0/6.0: added in double, rounded once
        wide = m.convert(x, dt.F64)
        return m.convert(m.elementwise(Op.ADD, wide, scalar_like(m, k / 6.0, wide)), dt.F32)
    h = e.sel(e.eq(r, vv), e.mul(norm, e.sub(g, b)),
              e.sel(e.eq(g, vv), plus_double(e.mul(norm, e.sub(b, r)), 2.0),
                    plus_double(e.mul(norm, e.sub(r, g)), 4.0)))
    h = e.sel(e.le(rng, e.c(0)), e.c(0), h)
    h = e.sel(e.lt(h, e.c(0)), e.add(h, e.c(1)), h)
    s = std_min(e.c(1), std_max(e.c(0), e.mul(s, scale)))     # a NaN product gives 0, as TF
    # hsv_to_rgb
    c = e.mul(s, vv)
    mm = e.sub(vv, c)
    dh = e.mul(h, e.c(6))
    cat = m.convert(dh, dt.I32)
    # fmodu: dh reduced into [0, 2) by adding/subtracting 2 (exact: dh = h * 6 >= 0 here)
    fmodu = e.sub(dh, e.mul(e.c(2), e.floor(e.mul(dh, e.c(0.5)))))
    x = e.mul(c, e.sub(e.c(1), e.abs(e.sub(fmodu, e.c(1)))))
    z = e.c(0)
    rr, gg, bb = _sector_select(e, cat, [(c, x, z), (x, c, z), (z, c, x), (z, x, c), (x, z, c),
                                         (c, z, x), (z, z, z)])
    return _join(ctx, [e.add(rr, mm), e.add(gg, mm), e.add(bb, mm)])


@register("AdjustHue", dtypes=(dt.F16, dt.F32), half_in_f32=True)
def _adjust_hue(ctx):
    """Hue in [0, 6) from the sorted channels (rgb_to_hv_range), shifted by delta * 6
    and brought back into [0, 6) as the kernel's loops do, by adding or subtracting 6.
    Below 2^24 every such step is exact except the one that crosses 0 from below (the
    result has a coarser ulp), so the loops equal an exact fmod by 6, then one rounded
    + 6 for a negative remainder, then - 6 if that rounded up to 6."""
    m = ctx.m
    r, g, b = _planes(ctx, ctx.inputs[0])
    e = _E(m, r)
    delta = _scalar(ctx, 1, r, "delta")
    lt, gt = e.lt, e.gt

    def pick(p, a, q):
        return tuple(e.sel(p, x, y) for x, y in zip(a, q))
    ci = lambda k: e.c(k, e.c(0))   # noqa: E731  (category as float: exact small ints)
    # (v_max, v_mid, v_min, category) by the kernel's comparison tree
    r_lt_g = (pick(lt(b, r), (g, r, b, ci(1)), pick(gt(b, g), (b, g, r, ci(3)), (g, b, r, ci(2)))))
    r_ge_g = (pick(lt(b, g), (r, g, b, ci(0)), pick(gt(b, r), (b, r, g, ci(4)), (r, b, g, ci(5)))))
    vmax, vmid, vmin, cat = pick(lt(r, g), r_lt_g, r_ge_g)
    ratio = e.div(e.sub(vmid, vmin), e.sub(vmax, vmin))
    odd = e.eq(e.sub(cat, e.mul(e.c(2), e.floor(e.mul(cat, e.c(0.5))))), e.c(1))
    h = e.add(cat, e.sel(odd, e.sub(e.c(1), ratio), ratio))
    h = e.sel(e.eq(vmax, vmin), e.c(0), h)
    h = e.add(h, e.mul(delta, e.c(6)))
    h = e.rem(h, e.c(6))                            # fmod: exact, the dividend's sign
    h = e.sel(lt(h, e.c(0)), e.add(h, e.c(6)), h)
    h = e.sel(e.ge(h, e.c(6)), e.sub(h, e.c(6)), h)
    # hv_range_to_rgb
    hcat = e.floor(h)                 # static_cast<int>(h), h >= 0
    rt = e.sub(h, hcat)
    odd = e.eq(e.sub(hcat, e.mul(e.c(2), e.floor(e.mul(hcat, e.c(0.5))))), e.c(1))
    rt = e.sel(odd, e.sub(e.c(1), rt), rt)
    vmid = e.add(vmin, e.mul(rt, e.sub(vmax, vmin)))
    cases = [(vmax, vmid, vmin), (vmid, vmax, vmin), (vmin, vmax, vmid), (vmin, vmid, vmax),
             (vmid, vmin, vmax), (vmax, vmin, vmid)]
    return _join(ctx, list(_sector_select(e, hcat, cases)))


@register("AdjustContrastv2", dtypes=(dt.F16, dt.F32), half_in_f32=True)
def _adjust_contrast(ctx):
    """(x - mean) * factor + mean, the mean per image and channel over height and width."""
    m, x = ctx.m, ctx.inputs[0]
    if x.rank < 3:
        raise InvalidArgument(f"input must be at least 3-D, got shape{list(x.shape)}")
    factor = ctx.inputs[1]
    if factor.rank != 0:
        raise InvalidArgument(f"contrast_factor must be scalar: {list(factor.shape)}")
    factor = m.convert(factor, x.dtype)
    hw = [x.rank - 3, x.rank - 2]
    count = x.shape[hw[0]] * x.shape[hw[1]]
    total = reduce_axes(m, x, "sum", hw, True)
    mean = m.elementwise(Op.DIV, total, m.broadcast(m.scalar(float(max(count, 1)), x.dtype), total.shape, ()))
    mean = m.broadcast(m.reshape(mean, [s for i, s in enumerate(x.shape) if i not in hw]), x.shape,
                       [i for i in range(x.rank) if i not in hw])
    e = _E(m, x)
    return e.add(e.mul(e.sub(x, mean), m.broadcast(factor, x.shape, ())), mean)
