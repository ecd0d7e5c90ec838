"""Lowerings of TF's 2-D and 3-D pooling ops and their gradients (NHWC, NDHWC, as TF's CPU kernels).

A k×k window with stride s is k² strided slices of the padded input, one per
window offset d; the pool is an elementwise chain over them, so the whole pool
is one loop kernel.  The gradients scatter each window's share back to the
input with movement ops only (see ``scatter_windows``).

Semantics are those of TF's CPU kernels (maxpooling_op.cc, avgpooling_op.cc,
pooling_ops_common.h), including their quirks:

* MaxPool starts every output at the type's lowest finite value and keeps the
  running max with ``v > max``: NaN inputs are ignored, a window of -inf (or
  NaN) gives -FLT_MAX, not -inf, and ±0 ties keep the first.
* MaxPoolGrad recomputes the argmax from ``orig_input`` (``orig_output`` is not
  read): the first in-bounds element of the window is taken unconditionally
  (even NaN), a later one replaces it only when strictly greater; the gradient
  goes to that one element.  Gradients arriving at one input are added in
  increasing output order, from 0, as TF does (bit-exact sums).
* AvgPool divides the window's sum (taken in window order, from +0) by the
  number of in-bounds elements (SAME padding does not count the padding);
  AvgPoolGrad multiplies by ``1 / count`` rounded to the type and adds.
* float16/bfloat16 round after every operation, as Eigen's half types do.

The 3-D ops (NDHWC: MaxPool3D, AvgPool3D and their gradients) are the same rules
over one more window dim: what oneDNN's 3-D pools do, which TF runs by default on x86.
TF's reference kernels (oneDNN off; Eigen's cuboid pooling) differ on special values
only, in ways that follow Eigen's vectorisation rather than a rule: they start from
-inf (a window of -inf gives -inf), let a NaN through or not depending on the channel
lane and the window's shape, break ±0 ties either way, skip inputs equal to -FLT_MAX
in AvgPool3D, and MaxPool3DGrad gives the gradient to every element within 1e-5 of
the window's max (all ties) instead of the first.
"""
from __future__ import annotations

import dataclasses
import itertools

import ml_dtypes
import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Kind, Op
from tfjit.lower.halfmath import Arith
from tfjit.lower.registry import FLOATS, NUMERIC, LowerCtx, Unsupported, register


@dataclasses.dataclass(frozen=True)
class Dim:
    """One dimension of a pooling window: output o reads padded positions o*s + d,
    d in [0, k), i.e. input positions o*s + d - lo."""
    size: int
    k: int
    s: int
    lo: int
    out: int

    @property
    def hi(self) -> int:
        """Padding above the input that the last window reaches."""
        return max((self.out - 1) * self.s + self.k - self.size - self.lo, 0) if self.out else 0

    def valid(self, d: int) -> np.ndarray:
        """Which outputs read an in-bounds input at window offset d."""
        pos = np.arange(self.out) * self.s + d - self.lo
        return (pos >= 0) & (pos < self.size)


_3D_DTYPES = (dt.F32, dt.BF16)      # TF's CPU kernels for the 3-D pools


def pool_dims(ctx: LowerCtx, shape: tuple, ksize: list, strides: list) -> list:
    """TF's pooling geometry (GetWindowedOutputSize) for NHWC input ``shape`` (NDHWC
    for the 3-D ops)."""
    op = ctx.node.op
    rank, layout = (5, b"NDHWC") if "3D" in op else (4, b"NHWC")
    fmt = ctx.attr("data_format", layout)
    if fmt != layout:
        raise Unsupported(f"Default {op} only supports {layout.decode()} on device type CPU "
                          f"(got {fmt.decode()})")
    if len(shape) != rank or len(ksize) != rank or len(strides) != rank:
        raise Unsupported(f"{op}: input must be {rank}-D with {rank} ksize/strides entries, got "
                          f"shape {list(shape)}, ksize {ksize}, strides {strides}")
    for field, values in (("ksize", ksize), ("stride", strides)):   # XLA's wording
        for dim, v in enumerate(values):
            if v <= 0:
                raise Unsupported(f"{op}: Sliding window {field} field for dimension {dim} must be "
                                  f"positive but is {v}")
    if ksize[0] != 1 or strides[0] != 1 or ksize[-1] != 1 or strides[-1] != 1:
        raise Unsupported(f"{op}: pooling across batch or depth (ksize {ksize}, strides {strides}) is not "
                          "supported")
    padding = ctx.attr("padding", b"VALID")
    explicit = list(ctx.attr("explicit_paddings", ()) or ())
    dims = []
    for i, (n, k, s) in enumerate(zip(shape, ksize, strides)):
        if padding == b"SAME":
            out = -(-n // s)
            lo = max((out - 1) * s + k - n, 0) // 2
        elif padding == b"VALID":
            span = n - k + s                   # C++ division: truncates toward zero
            out, lo = (span // s if span >= 0 else -(-span // s)), 0
            if out < 0:
                raise Unsupported(f"{op}: computed output size would be negative: input {n}, window {k}, "
                                  f"stride {s}")
        elif padding == b"EXPLICIT" and len(explicit) == 2 * rank:
            lo, hi = int(explicit[2 * i]), int(explicit[2 * i + 1])
            if lo < 0 or hi < 0 or lo >= k or hi >= k or n + lo + hi < k:
                raise Unsupported(f"{op}: explicit padding {lo},{hi} invalid for window {k} on size {n}")
            out = (n + lo + hi - k) // s + 1
        else:
            raise Unsupported(f"{op}: padding {padding!r} is not supported")
        dims.append(Dim(n, k, s, lo, out))
    return dims


def _v2_window(node, first_input: int) -> tuple:
    """The inputs that hold ksize and strides: none for MaxPool, two for the V2 ops."""
    return (first_input, first_input + 1) if node.op.endswith("V2") else ()


def _window_attrs(ctx: LowerCtx, first_input: int):
    """ksize and strides: attributes (MaxPool) or constant inputs (the V2 ops)."""
    if ctx.node.op.endswith("V2"):
        return (ctx.const_ints(first_input, f"{ctx.node.op}'s ksize"),
                ctx.const_ints(first_input + 1, f"{ctx.node.op}'s strides"))
    return [int(v) for v in ctx.attr("ksize", ())], [int(v) for v in ctx.attr("strides", ())]


def offsets(dims: list) -> list:
    """Every window offset d, in TF's scan order (row-major)."""
    return list(itertools.product(*[range(dm.k) for dm in dims]))


def _out_shape(dims: list) -> tuple:
    return tuple(dm.out for dm in dims)


def _padded(m: Module, x: Instr, dims: list, value) -> Instr:
    return m.pad(x, m.scalar(value, x.dtype), [dm.lo for dm in dims], [dm.hi for dm in dims])


def _window(m: Module, padded: Instr, dims: list, d: tuple) -> Instr:
    """The input element each output reads at window offset d."""
    return m.slice(padded, list(d), list(_out_shape(dims)), [dm.s for dm in dims])


def _along_dims(m: Module, vectors: list, shape: tuple, op: Op, dtype: dt.DType):
    """The product (``op``: AND or MUL) over dims of one 1-D vector per dim, each
    broadcast along its dim: a compile-time value over the output built from
    small constants (an outer product as one constant would be O(H*W)).
    Uniform vectors fold into a Python value: True/False, or a number."""
    parts, uniform = [], (True if op is Op.AND else 1)
    for i, v in enumerate(vectors):
        v = np.asarray(v)
        if v.size == 0 or (v == v.flat[0]).all():
            if v.size:
                uniform = (uniform and bool(v.flat[0])) if op is Op.AND else uniform * v.flat[0]
            continue
        parts.append(m.broadcast(m.constant(v, dtype), shape, (i,)))
    if op is Op.AND and not uniform:
        return False
    if not parts:
        return uniform
    out = parts[0]
    for p in parts[1:]:
        out = m.elementwise(op, out, p)
    if op is Op.MUL and uniform != 1:
        out = m.elementwise(Op.MUL, out, m.broadcast(m.scalar(uniform, dtype), shape, ()))
    return out


def _first_valid(dm: Dim) -> np.ndarray:
    """Per output along one dim: the first window offset that is in bounds."""
    return np.maximum(dm.lo - np.arange(dm.out) * dm.s, 0)


def _both(m: Module, a, b):
    """AND of masks that may be Python bools (compile-time uniform)."""
    if a is False or b is False:
        return False
    if a is True or b is True:
        return b if a is True else a
    return m.elementwise(Op.AND, a, b)


def _negate(m: Module, a):
    return (not a) if isinstance(a, bool) else m.elementwise(Op.NOT, a)


def _either(m: Module, a, b):
    if a is True or b is True:
        return True
    if a is False or b is False:
        return b if a is False else a
    return m.elementwise(Op.OR, a, b)


# -- forward pools ---------------------------------------------------------------

def _lowest(d: dt.DType):
    return float(ml_dtypes.finfo(d.numpy()).min) if d.is_float else int(np.iinfo(d.numpy()).min)


def max_pool(m: Module, x: Instr, dims: list) -> Instr:
    a = Arith(m, x.dtype)
    lowest = _lowest(x.dtype)
    padded = _padded(m, a.load(x), dims, lowest)
    shape = _out_shape(dims)
    best = a.const(lowest, shape)
    for d in offsets(dims):
        v = _window(m, padded, dims, d)
        best = m.elementwise(Op.SELECT, m.elementwise(Op.GT, v, best), v, best)
    return a.store(best)


@register("MaxPool", "MaxPoolV2", dtypes=NUMERIC, const_inputs=lambda node, _: _v2_window(node, 1))
@register("MaxPool3D", dtypes=_3D_DTYPES)
def _max_pool(ctx: LowerCtx):
    x = ctx.inputs[0]
    return max_pool(ctx.m, x, pool_dims(ctx, x.shape, *_window_attrs(ctx, 1)))


def window_counts(m: Module, dims: list, dtype: dt.DType):
    """In-bounds elements per output window (a product over dims), in ``dtype``;
    a Python int when every window has the same count."""
    per_dim = [sum(dm.valid(d).astype(np.int64) for d in range(dm.k)) for dm in dims]
    count = _along_dims(m, per_dim, _out_shape(dims), Op.MUL, dtype)
    return count if isinstance(count, Instr) else int(count)


@register("AvgPool", dtypes=FLOATS)
@register("AvgPool3D", dtypes=_3D_DTYPES)
def _avg_pool(ctx: LowerCtx):
    m, x = ctx.m, ctx.inputs[0]
    dims = pool_dims(ctx, x.shape, *_window_attrs(ctx, 1))
    a = Arith(m, x.dtype)
    shape = _out_shape(dims)
    padded = _padded(m, a.load(x), dims, 0)
    total = a.const(0, shape)
    for d in offsets(dims):
        total = a.op(Op.ADD, total, _window(m, padded, dims, d))
    count = window_counts(m, dims, a.compute)
    if not isinstance(count, Instr):
        count = a.const(count, shape)
    return a.store(a.op(Op.DIV, total, count))


# -- gradients: scattering windows back to the input -----------------------------------

def scatter_windows(a: Arith, dims: list, term) -> Instr:
    """sum over window offsets d of ``term(d)`` (output-shaped) placed at input
    positions o*s + d - lo, added in increasing output order from 0, as TF does.

    Padded position p = o*s + d is split as p = q*s + r (phase r): it receives
    ``term(d)[q - j]`` for every d = r + s*j.  Each phase is a sum of shifted
    (padded and sliced) terms over a [Q] grid; the phases are interleaved with
    concatenations along unit dims and one reshape, then the padding is sliced
    off.  With stride 1 there is one phase and no reshape arithmetic.
    """
    m = a.m
    rank = len(dims)
    grid = tuple(-(-(dm.lo + dm.size) // dm.s) for dm in dims)
    phases = {}
    for r in itertools.product(*[range(dm.s) for dm in dims]):
        members = [d for d in offsets(dims) if all(di % dm.s == ri for di, dm, ri in zip(d, dims, r))]
        acc = a.const(0, grid)
        for d in reversed(members):           # increasing output index = decreasing offset
            j = [(di - ri) // dm.s for di, ri, dm in zip(d, r, dims)]
            t = term(d)
            high = [max(q - dm.out - jj, 0) for q, dm, jj in zip(grid, dims, j)]
            shifted = m.pad(t, m.scalar(0, t.dtype), j, high)
            acc = a.op(Op.ADD, acc, m.slice(shifted, [0] * rank, list(grid)))
        phases[r] = m.reshape(acc, [n for q in grid for n in (q, 1)])

    def interleave(i: int, prefix: tuple) -> Instr:
        if i == rank:
            return phases[prefix]
        return m.concat([interleave(i + 1, prefix + (ri,)) for ri in range(dims[i].s)], 2 * i + 1)

    full = m.reshape(interleave(0, ()), [q * dm.s for q, dm in zip(grid, dims)])
    return m.slice(full, [dm.lo for dm in dims], [dm.size for dm in dims])


def _materialize(m: Module, x: Instr) -> Instr:
    """x, computed by a kernel of its own: a reduction over a unit dim is the
    IR's fusion barrier (the scatter reads x at k²/s² shifted positions).  For an
    incoming gradient that is a step or two of arithmetic (g1 + g2: 0.19 ms for
    [16, 28, 28, 64]), not for a window, which passes/windows.py splits off as a
    loop kernel that vectorises (``first_max_offsets``)."""
    return m.reduce(m.reshape(x, x.shape + (1,)), "max", 1)


def _computed(x: Instr) -> bool:
    """Is x arithmetic (not a parameter or constant seen through movement ops)?"""
    while x.op.kind is Kind.MOVEMENT:
        x = x.operands[0]
    return x.op.kind in (Kind.ELEMENTWISE, Kind.REDUCE)


def incoming_gradient(m: Module, g: Instr) -> Instr:
    """The gradient a scatter reads at k²/s² shifted positions, computed once by a
    kernel of its own when it is arithmetic (fused in, it would be recomputed at
    every position: k²/s² times the work and the code)."""
    return _materialize(m, g) if _computed(g) else g


def first_max_offsets(m: Module, x: Instr, dims: list) -> Instr:
    """Per output: the flat window offset TF's MaxPoolGrad routes the gradient to.

    The first in-bounds offset is taken unconditionally, a later one when
    strictly greater than the running max (so NaN never replaces, and a NaN
    taken first stays).  Which offsets are in bounds is known at compile time.
    The gradient's scatter reads the offsets at every window shift, so fusion gives
    them a kernel of their own (passes/windows.py), a loop over the channels; made
    one by a reduction over a unit dim, as the incoming gradient is, they ran as
    scalar code, one output per row: 11.6 ms for [16, 56, 56, 64], now 0.8."""
    a = Arith(m, x.dtype)
    shape = _out_shape(dims)
    padded = _padded(m, a.load(x), dims, 0)
    best, where = a.const(0, shape), None
    for flat, d in enumerate(offsets(dims)):
        valid = _along_dims(m, [dm.valid(di) for dm, di in zip(dims, d)], shape, Op.AND, dt.PRED)
        first = _along_dims(m, [_first_valid(dm) == di for dm, di in zip(dims, d)], shape, Op.AND, dt.PRED)
        later = _both(m, valid, _negate(m, first))
        v = _window(m, padded, dims, d)
        greater = m.elementwise(Op.GT, v, best) if later is not False else False
        take = _either(m, first, _both(m, later, greater))
        index = m.broadcast(m.scalar(flat, dt.I32), shape, ())
        if take is True or where is None:
            best, where = v, index
        elif take is not False:
            best = m.elementwise(Op.SELECT, take, v, best)
            where = m.elementwise(Op.SELECT, take, index, where)
    return where


def max_pool_grad(m: Module, x: Instr, grad: Instr, dims: list) -> Instr:
    if grad.shape != _out_shape(dims):
        raise Unsupported(f"MaxPoolGrad: grad shape {list(grad.shape)} does not match the pooled shape "
                          f"{list(_out_shape(dims))}")
    where = first_max_offsets(m, x, dims)
    a = Arith(m, grad.dtype)
    g = a.load(incoming_gradient(m, grad))
    zero = a.const(0, g.shape)
    flat = {d: k for k, d in enumerate(offsets(dims))}

    def term(d):
        hit = m.elementwise(Op.EQ, where, m.broadcast(m.scalar(flat[d], dt.I32), g.shape, ()))
        return m.elementwise(Op.SELECT, hit, g, zero)
    return a.store(scatter_windows(a, dims, term))


@register("MaxPoolGrad", "MaxPoolGradV2", dtypes=NUMERIC,
          const_inputs=lambda node, _: _v2_window(node, 3))
@register("MaxPool3DGrad", dtypes=_3D_DTYPES)
def _max_pool_grad(ctx: LowerCtx):
    x, _, grad = ctx.inputs[:3]
    if grad.dtype is not x.dtype:
        raise Unsupported("MaxPoolGrad: grad and orig_input differ in type")
    return max_pool_grad(ctx.m, x, grad, pool_dims(ctx, x.shape, *_window_attrs(ctx, 3)))


@register("AvgPoolGrad", dtypes=FLOATS, const_inputs=(0,))
@register("AvgPool3DGrad", dtypes=_3D_DTYPES, const_inputs=(0,))
def _avg_pool_grad(ctx: LowerCtx):
    m = ctx.m
    shape = tuple(ctx.const_ints(0, "AvgPoolGrad's orig_input_shape"))
    grad = ctx.inputs[1]
    dims = pool_dims(ctx, shape, *_window_attrs(ctx, 2))
    if grad.shape != _out_shape(dims):
        raise Unsupported(f"AvgPoolGrad: grad shape {list(grad.shape)} does not match the pooled shape "
                          f"{list(_out_shape(dims))}")
    a = Arith(m, grad.dtype)
    # TF: T(1.0 / count) per window (exact counts; one correctly rounded division)
    count = window_counts(m, dims, a.compute)
    if isinstance(count, Instr):
        coef = a.op(Op.DIV, a.const(1, grad.shape), count)
    else:
        coef = a.const(1.0 / count, grad.shape)
    share = a.op(Op.MUL, a.load(incoming_gradient(m, grad)), coef)
    return a.store(scatter_windows(a, dims, lambda d: share))

