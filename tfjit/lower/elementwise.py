"""Lowerings of TF's elementwise ops (math_ops / nn activations).

TF's implicit numpy broadcasting becomes explicit ``broadcast`` instructions
(``broadcast_all``); everything else maps onto IR elementwise ops whose
semantics (NaN propagation, integer division by zero, saturation of casts) are
TF's, as documented in tfjit/ir/ops.py and implemented by codegen and interp.
"""
from __future__ import annotations

from tfjit import dtypes as dt
from tfjit.ir.ops import Op
from tfjit.lower.registry import (ALL, FLOATS, INTS, NUMERIC, Unsupported, broadcast_all,
                                  register, scalar_like)

SIGNED = tuple(d for d in NUMERIC if d.is_float or d.is_signed)

# -- binary arithmetic -----------------------------------------------------

_BINARY = {
    "Add": Op.ADD, "AddV2": Op.ADD, "Sub": Op.SUB, "Mul": Op.MUL,
    "Maximum": Op.MAX, "Minimum": Op.MIN,
}
for _tf, _op in _BINARY.items():
    register(_tf, half_in_f32=True)(lambda ctx, _op=_op: ctx.m.elementwise(_op, *broadcast_all(ctx.m, *ctx.inputs)))


@register("Div", "RealDiv", half_in_f32=True)
def _div(ctx):
    if ctx.node.op == "RealDiv" and not ctx.dtype.is_float:
        raise Unsupported("RealDiv on integers has no CPU kernel in TensorFlow")
    return ctx.m.elementwise(Op.DIV, *broadcast_all(ctx.m, *ctx.inputs))


def _float_quotient(ctx, x, y):
    """x / y as TF's float kernels round it before floor or trunc: in the node's own
    dtype, so a half quotient of 2.9999 is 3 first (computed in f32, rounded once)."""
    m = ctx.m
    q = m.elementwise(Op.DIV, x, y)
    return m.convert(m.convert(q, ctx.dtype), q.dtype) if ctx.dtype is not q.dtype else q


@register("TruncateDiv", half_in_f32=True)
def _truncate_div(ctx):
    # Integer division is truncating already; on floats TF gives trunc(x / y), which
    # keeps the quotient's sign of zero (-1 / 7 is -0.0) and its inf and NaN.
    m = ctx.m
    x, y = broadcast_all(m, *ctx.inputs)
    if not x.dtype.is_float:
        return m.elementwise(Op.DIV, x, y)
    q = _float_quotient(ctx, x, y)
    negative = m.elementwise(Op.LT, q, scalar_like(m, 0, q))
    return m.elementwise(Op.SELECT, negative, m.elementwise(Op.CEIL, q), m.elementwise(Op.FLOOR, q))


@register("DivNoNan", dtypes=FLOATS, half_in_f32=True)
def _div_no_nan(ctx):
    m = ctx.m
    x, y = broadcast_all(m, *ctx.inputs)
    zero = scalar_like(m, 0, y)
    return m.elementwise(Op.SELECT, m.elementwise(Op.EQ, y, zero), zero, m.elementwise(Op.DIV, x, y))


def _zero_x_gives_x(ctx, op: Op, *transform: Op):
    """Xlogy, Xlog1py, Xdivy: x op f(y), and x itself where x == 0 (TF's vector code
    selects x, keeping -0; its scalar tail returns +0 -- the vector order is tfjit's)."""
    m = ctx.m
    x, y = broadcast_all(m, *ctx.inputs)
    for t in transform:
        y = m.elementwise(t, y)
    return m.elementwise(Op.SELECT, m.elementwise(Op.EQ, x, scalar_like(m, 0, x)), x,
                         m.elementwise(op, x, y))


register("Xlogy", dtypes=FLOATS, half_in_f32=True)(lambda ctx: _zero_x_gives_x(ctx, Op.MUL, Op.LOG))
register("Xlog1py", dtypes=FLOATS, half_in_f32=True)(
    lambda ctx: _zero_x_gives_x(ctx, Op.MUL, Op.LOG1P))
register("Xdivy", dtypes=FLOATS, half_in_f32=True)(lambda ctx: _zero_x_gives_x(ctx, Op.DIV))


def _adjust_toward_floor(m, r, y):
    """True where a truncated remainder r must move to floor semantics."""
    zero = scalar_like(m, 0, r)
    nonzero = m.elementwise(Op.NE, r, zero)
    signs_differ = m.elementwise(Op.NE, m.elementwise(Op.LT, r, zero), m.elementwise(Op.LT, y, zero))
    return m.elementwise(Op.AND, nonzero, signs_differ)


@register("FloorDiv", half_in_f32=True)
def _floor_div(ctx):
    m = ctx.m
    x, y = broadcast_all(m, *ctx.inputs)
    if x.dtype.is_float:
        return m.elementwise(Op.FLOOR, _float_quotient(ctx, x, y))
    q = m.elementwise(Op.DIV, x, y)
    if not x.dtype.is_signed:
        return q
    adjust = _adjust_toward_floor(m, m.elementwise(Op.REM, x, y), y)
    return m.elementwise(Op.SUB, q, m.convert(adjust, x.dtype))


@register("FloorMod", "Mod", "TruncateMod", half_in_f32=True)
def _floor_mod(ctx):
    m = ctx.m
    x, y = broadcast_all(m, *ctx.inputs)
    r = m.elementwise(Op.REM, x, y)
    if ctx.node.op != "FloorMod" or not (x.dtype.is_float or x.dtype.is_signed):
        return r
    return m.elementwise(Op.SELECT, _adjust_toward_floor(m, r, y), m.elementwise(Op.ADD, r, y), r)


# Constant float exponents computed as multiplications (XLA's algebraic simplifier does
# the same for 2 and 3).  pow(x, 3) of tanh-GELU, computed by the general power
# (2^(y log2|x|) in float64), was 4.4 of the 33 ms of the pre-LN encoder block's forward
# (tools/train_bench.py attn); x * x * x is three multiplies.  The products agree with
# pow on every special value (signed zeros, +-inf, NaN; TF's flush-to-zero applies to
# both) and are within 2 ulp (two roundings).  Negative exponents other than -1 are not
# rewritten: 1 / (x * x) underflows in x * x where pow(x, -2) is still finite.
_POW_AS_PRODUCT = (1.0, 2.0, 3.0, 4.0)


def _constant_exponent(y) -> float | None:
    """The value of a constant exponent whose elements are all equal, else None."""
    if y.op is not Op.CONSTANT or y.value.size == 0:
        return None
    first = y.value.flat[0]
    return float(first) if (y.value == first).all() else None


@register("Pow", half_in_f32=True)
def _pow(ctx):
    m = ctx.m
    x, y = broadcast_all(m, *ctx.inputs)
    e = _constant_exponent(ctx.inputs[1]) if x.dtype.is_float else None
    if e in _POW_AS_PRODUCT:
        square = m.elementwise(Op.MUL, x, x) if e >= 2 else x
        return {1.0: x, 2.0: square, 3.0: m.elementwise(Op.MUL, square, x),
                4.0: m.elementwise(Op.MUL, square, square)}[e]
    if e == -1.0:      # one correctly rounded division, as pow(x, -1) is
        return m.elementwise(Op.DIV, scalar_like(m, 1.0, x), x)
    return m.elementwise(Op.POW, x, y)


@register("Atan2", dtypes=FLOATS, half_in_f32=True)
def _atan2(ctx):
    return ctx.m.elementwise(Op.ATAN2, *broadcast_all(ctx.m, *ctx.inputs))


@register("NextAfter", dtypes=(dt.F32, dt.F64))
def _next_after(ctx):
    """The C library's nextafter, as TF's kernel calls it: NaN in either -> NaN;
    x1 == x2 (a float compare, so under DAZ a denormal equals 0) -> x2; else x1 one
    step towards x2.  The step is taken on ordered integer keys (the bits for x >= 0,
    INT_MIN - bits below, so both zeros are key 0), which gives glibc's answers
    without testing the bits for zero: LLVM rewrites such a test into a float
    compare, which DAZ then answers wrongly for denormals."""
    m = ctx.m
    x, y = broadcast_all(m, *ctx.inputs)
    it = dt.I32 if x.dtype is dt.F32 else dt.I64
    zero, least = scalar_like(m, 0, m.bitcast(x, it)), scalar_like(m, -(1 << (it.bits - 1)), m.bitcast(x, it))

    def flip(h):       # its own inverse
        return m.elementwise(Op.SELECT, m.elementwise(Op.GE, h, zero), h, m.elementwise(Op.SUB, least, h))
    kx, ky = flip(m.bitcast(x, it)), flip(m.bitcast(y, it))
    step = m.elementwise(Op.SELECT, m.elementwise(Op.LT, kx, ky), scalar_like(m, 1, kx), scalar_like(m, -1, kx))
    out = m.bitcast(flip(m.elementwise(Op.ADD, kx, step)), x.dtype)
    out = m.elementwise(Op.SELECT, m.elementwise(Op.EQ, x, y), y, out)
    nan = m.elementwise(Op.OR, m.elementwise(Op.IS_NAN, x), m.elementwise(Op.IS_NAN, y))
    return m.elementwise(Op.SELECT, nan, m.elementwise(Op.ADD, x, y), out)


@register("Cross", dtypes=(dt.F16, dt.BF16, dt.F32, dt.F64) + INTS)
def _cross(ctx):
    """TF's kernel's formula per component: a[1]*b[2] - a[2]*b[1], ... (ints wrap).
    Halves compute as Eigen's half arithmetic does: each product and the difference in
    f32, each rounded to the half type (the products are exact in f32; the rounding of
    each product matters, as the difference cancels)."""
    m, (a, b) = ctx.m, ctx.inputs
    half = a.dtype if a.dtype in (dt.F16, dt.BF16) else None
    if half is not None:
        a, b = m.convert(a, dt.F32), m.convert(b, dt.F32)

    def rounded(x):
        return m.convert(m.convert(x, half), dt.F32) if half is not None else x
    if a.shape != b.shape or a.rank < 1 or a.shape[-1] != 3:
        raise Unsupported(f"Cross: both inputs must be the same shape ending in 3, got "
                          f"{list(a.shape)} and {list(b.shape)}")
    lead = a.shape[:-1]

    def part(x, i):
        return m.slice(x, (0,) * len(lead) + (i,), lead + (1,))
    out = [rounded(m.elementwise(Op.SUB, rounded(m.elementwise(Op.MUL, part(a, i), part(b, j))),
                                 rounded(m.elementwise(Op.MUL, part(a, j), part(b, i)))))
           for i, j in ((1, 2), (2, 0), (0, 1))]
    out = m.concat(out, a.rank - 1)
    return m.convert(out, half) if half is not None else out


@register("ToBool", dtypes=(dt.F32, dt.F64, dt.PRED) + INTS)   # TF: "half cannot be converted"
def _to_bool(ctx):
    """A scalar: whether it is non-zero (NaN is); any other tensor: whether it has elements."""
    m, x = ctx.m, ctx.inputs[0]
    if x.rank:
        return m.scalar(x.size > 0, dt.PRED)
    return x if x.dtype is dt.PRED else m.elementwise(Op.NE, x, m.scalar(0, x.dtype))


@register("SquaredDifference", half_in_f32=True)
def _squared_difference(ctx):
    d = ctx.m.elementwise(Op.SUB, *broadcast_all(ctx.m, *ctx.inputs))
    return ctx.m.elementwise(Op.MUL, d, d)


# -- unary math --------------------------------------------------------------

_UNARY_FLOAT = {
    "Sqrt": Op.SQRT, "Rsqrt": Op.RSQRT, "Exp": Op.EXP, "Expm1": Op.EXPM1, "Log": Op.LOG,
    "Log1p": Op.LOG1P, "Sin": Op.SIN, "Cos": Op.COS, "Tanh": Op.TANH, "Sigmoid": Op.LOGISTIC,
    "Erf": Op.ERF, "Floor": Op.FLOOR, "Ceil": Op.CEIL, "Softplus": Op.SOFTPLUS,
    # TF's float32 kernels for these four are Eigen's vector polynomials (its scalar tail
    # calls the C library), so no one result is TF's: tfjit's polynomials, within 2 ulp
    "Asin": Op.ASIN, "Acos": Op.ACOS, "Atan": Op.ATAN, "Atanh": Op.ATANH,
    # the C library's, as TF's kernels call it per element (bit-identical; CPU only)
    "Tan": Op.TAN, "Sinh": Op.SINH, "Cosh": Op.COSH, "Asinh": Op.ASINH, "Acosh": Op.ACOSH,
}
for _tf, _op in _UNARY_FLOAT.items():
    register(_tf, dtypes=FLOATS, half_in_f32=True)(lambda ctx, _op=_op: ctx.m.elementwise(_op, ctx.inputs[0]))

register("Neg", dtypes=SIGNED, half_in_f32=True)(lambda ctx: ctx.m.elementwise(Op.NEG, ctx.inputs[0]))
register("Abs", dtypes=SIGNED, half_in_f32=True)(lambda ctx: ctx.m.elementwise(Op.ABS, ctx.inputs[0]))
register("Sign", dtypes=SIGNED, half_in_f32=True)(lambda ctx: ctx.m.elementwise(Op.SIGN, ctx.inputs[0]))
register("Square", half_in_f32=True)(lambda ctx: ctx.m.elementwise(Op.MUL, ctx.inputs[0], ctx.inputs[0]))


@register("Reciprocal", "Inv", dtypes=FLOATS, half_in_f32=True)
def _reciprocal(ctx):
    x = ctx.inputs[0]
    return ctx.m.elementwise(Op.DIV, scalar_like(ctx.m, 1, x), x)


@register("Rint", dtypes=FLOATS, half_in_f32=True)
def _rint(ctx):
    """Round half to even (std::rint in the default rounding mode), as Round on floats."""
    return ctx.m.elementwise(Op.ROUND_EVEN, ctx.inputs[0])


@register("Round", half_in_f32=True)
def _round(ctx):
    x = ctx.inputs[0]
    return ctx.m.elementwise(Op.ROUND_EVEN, x) if x.dtype.is_float else x


# -- activations ---------------------------------------------------------------

@register("Relu", dtypes=SIGNED, half_in_f32=True)
def _relu(ctx):
    x = ctx.inputs[0]
    return ctx.m.elementwise(Op.MAX, x, scalar_like(ctx.m, 0, x))


@register("Relu6", dtypes=SIGNED, half_in_f32=True)
def _relu6(ctx):
    m, x = ctx.m, ctx.inputs[0]
    return m.elementwise(Op.MIN, m.elementwise(Op.MAX, x, scalar_like(m, 0, x)), scalar_like(m, 6, x))


def _elu_negative_part(m, x):
    return m.elementwise(Op.EXPM1, x)


@register("Elu", dtypes=FLOATS, half_in_f32=True)
def _elu(ctx):
    m, x = ctx.m, ctx.inputs[0]
    positive = m.elementwise(Op.GT, x, scalar_like(m, 0, x))
    return m.elementwise(Op.SELECT, positive, x, _elu_negative_part(m, x))


@register("Selu", dtypes=FLOATS, half_in_f32=True)
def _selu(ctx):
    m, x = ctx.m, ctx.inputs[0]
    scale, alpha = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717
    positive = m.elementwise(Op.GT, x, scalar_like(m, 0, x))
    neg = m.elementwise(Op.MUL, scalar_like(m, scale * alpha, x), _elu_negative_part(m, x))
    return m.elementwise(Op.SELECT, positive, m.elementwise(Op.MUL, scalar_like(m, scale, x), x), neg)


@register("LeakyRelu", dtypes=FLOATS, half_in_f32=True)
def _leaky_relu(ctx):
    m, x = ctx.m, ctx.inputs[0]
    alpha = float(ctx.attr("alpha", 0.2))
    positive = m.elementwise(Op.GT, x, scalar_like(m, 0, x))
    return m.elementwise(Op.SELECT, positive, x, m.elementwise(Op.MUL, x, scalar_like(m, alpha, x)))


# -- predicates and logic ------------------------------------------------------

for _tf, _op in {"IsNan": Op.IS_NAN, "IsInf": Op.IS_INF, "IsFinite": Op.IS_FINITE}.items():
    register(_tf, dtypes=FLOATS, half_in_f32=True)(lambda ctx, _op=_op: ctx.m.elementwise(_op, ctx.inputs[0]))

_COMPARE = {"Equal": Op.EQ, "NotEqual": Op.NE, "Less": Op.LT, "LessEqual": Op.LE,
            "Greater": Op.GT, "GreaterEqual": Op.GE}
for _tf, _op in _COMPARE.items():
    register(_tf, dtypes=ALL, half_in_f32=True)(
        lambda ctx, _op=_op: ctx.m.elementwise(_op, *broadcast_all(ctx.m, *ctx.inputs)))

register("LogicalAnd", dtypes=ALL)(lambda ctx: ctx.m.elementwise(Op.AND, *broadcast_all(ctx.m, *ctx.inputs)))
register("LogicalOr", dtypes=ALL)(lambda ctx: ctx.m.elementwise(Op.OR, *broadcast_all(ctx.m, *ctx.inputs)))
register("LogicalNot", dtypes=ALL)(lambda ctx: ctx.m.elementwise(Op.NOT, ctx.inputs[0]))


@register("Select", dtypes=ALL)
def _select(ctx):
    m = ctx.m
    cond, x, y = ctx.inputs
    if x.shape != y.shape:
        raise Unsupported(f"Select operands differ in shape: {list(x.shape)} vs {list(y.shape)}")
    if cond.rank == 1 and x.rank > 1:
        if cond.shape[0] != x.shape[0]:
            raise Unsupported("Select: a vector condition must match the first dimension")
        cond = m.broadcast(cond, x.shape, (0,))
    elif cond.shape != x.shape:
        if cond.rank != 0:
            raise Unsupported("Select: condition shape must equal the operands' shape or be a vector")
        cond = m.broadcast(cond, x.shape, ())
    return m.elementwise(Op.SELECT, cond, x, y)


@register("SelectV2", dtypes=ALL)
def _select_v2(ctx):
    return ctx.m.elementwise(Op.SELECT, *broadcast_all(ctx.m, *ctx.inputs))


@register("Cast", dtypes=ALL)
def _cast(ctx):
    target = ctx.attr("DstT").ir
    return ctx.m.convert(ctx.inputs[0], target)


@register("ClipByValue", half_in_f32=True)
def _clip(ctx):
    """TF's kernel: min(x, hi) then max(., lo), each as ``b < a ? b : a`` (std::min
    and std::max): NaN in x propagates, a NaN bound is ignored, lo > hi gives lo."""
    m = ctx.m
    x, lo, hi = ctx.inputs
    lo = lo if lo.shape == x.shape else broadcast_all(m, lo, x)[0]
    hi = hi if hi.shape == x.shape else broadcast_all(m, hi, x)[0]
    if lo.shape != x.shape or hi.shape != x.shape:
        raise Unsupported("ClipByValue bounds must be scalars or match the input shape")
    upper = m.elementwise(Op.SELECT, m.elementwise(Op.LT, hi, x), hi, x)
    return m.elementwise(Op.SELECT, m.elementwise(Op.LT, upper, lo), lo, upper)


@register("AddN", half_in_f32=True)
def _add_n(ctx):
    acc = ctx.inputs[0]
    for x in ctx.inputs[1:]:
        acc = ctx.m.elementwise(Op.ADD, acc, x)
    return acc


@register("BiasAdd", "BiasAddV1", half_in_f32=True)
def _bias_add(ctx):
    m = ctx.m
    x, b = ctx.inputs
    fmt = ctx.attr("data_format", b"NHWC")
    channel = 1 if fmt in (b"NCHW", b"NCDHW") and x.rank > 2 else x.rank - 1
    if b.rank != 1 or x.shape[channel] != b.shape[0]:
        raise Unsupported(f"BiasAdd: bias {list(b.shape)} does not match dim {channel} of {list(x.shape)}")
    return m.elementwise(Op.ADD, x, m.broadcast(b, x.shape, (channel,)))
