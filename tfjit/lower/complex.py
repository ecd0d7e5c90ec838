"""complex64/complex128 in lowering: a complex tensor is two real ones.

The code generator stays real-only.  While a cluster is lowered, a complex value is a
``registry.Complex`` pair (re, im) of f32 (complex64) or f64 (complex128) IR values;
rules here build the real arithmetic (lower/complex_math.py has the arithmetic
helpers).  At the cluster's edges a complex buffer of shape S holds the same bytes as
a real buffer of shape S + [2] (interleaved re, im, as std::complex lays them out), so
the IR parameter is that real view (marked ``complex=c64`` / ``c128``) and is split by a
slice of its last axis; a complex result is stacked back along a new last axis and
listed in ``Module.complex_outputs``.  Slices, reshapes and the stacking concatenate are
movement, which fusion keeps inside the kernels that compute the values.

Ops whose complex form is their real form on both parts (data movement, and ops linear
in their complex operands: sums, scatter-adds, Select) are ``register_split``; the rest
are ``register_complex`` rules below.  An op without either is refused ("no tfjit
lowering for 'X' on complex64 tensors"): Prod, Cumprod, segment products (the IR
reduces real values only), complex -> bool casts, Log1p (Eigen's scalar log1p divides
and multiplies with C99's recovery, compiler-rt's __divsc3/__mulsc3, after the C
library's atan2: not reproduced yet), and Pow and Rsqrt, whose TF kernels (the C
library's cpow, a scalar 1 / sqrt) give zeros and infinities signs that exp(y log x)
and Eigen's vectorised division do not reproduce.
"""
from __future__ import annotations

import numpy as np

from tfjit import dtypes as dt
from tfjit.graph.graphdef import Node
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.lower import complex_math as cm
from tfjit.lower.registry import (Complex, Unsupported, broadcast_all, lower_node, part_node,
                                  register_complex, register_split)
from tfjit.lower.variables import _var

# -- the cluster's edges ---------------------------------------------------------------


def parameter(m: Module, dtype: dt.DType, shape) -> Instr | Complex:
    """Parameter ``len(m.params)`` of ``dtype`` and ``shape``: a complex one is declared
    as its real view ``part[shape + [2]]`` and returned as a ``Complex`` pair."""
    if not dtype.is_complex:
        return m.parameter(dtype, shape)
    p = m.parameter(dtype.part, tuple(shape) + (2,))
    p.attrs["complex"] = dtype.name
    return unpack(m, p)


def unpack(m: Module, view: Instr) -> Complex:
    """The complex value whose real view (last dim 2: re, im) is ``view``."""
    shape = view.shape[:-1]
    parts = [m.reshape(m.slice(view, (0,) * len(shape) + (k,), shape + (1,)), shape) for k in (0, 1)]
    return Complex(*parts)


def pack(m: Module, c: Complex) -> Instr:
    """The real view (shape + [2]) of complex value ``c``."""
    shape = c.shape + (1,)
    return m.concat([m.reshape(c.re, shape), m.reshape(c.im, shape)], len(c.shape))


def view(m: Module, c: Complex) -> Instr:
    """The real view of ``c`` for an operand that reads memory (a library call): the
    view ``c`` was unpacked from when it still is one (a parameter, a library result),
    else ``pack``."""
    parts = []
    for k, x in enumerate((c.re, c.im)):
        s = x.operands[0] if x.op is Op.RESHAPE else None
        if s is None or s.op is not Op.SLICE or s.operands[0].shape != c.shape + (2,) \
                or s.attrs["starts"] != (0,) * len(c.shape) + (k,) or any(t != 1 for t in s.attrs["strides"]):
            return pack(m, c)
        parts.append(s.operands[0])
    return parts[0] if parts[0] is parts[1] else pack(m, c)


def constant(m: Module, value, dtype: dt.DType) -> Complex:
    value = np.asarray(value, dtype=dtype.numpy())
    return Complex(m.constant(value.real.copy(), dtype.part),   # copies: contiguous parts
                   m.constant(value.imag.copy(), dtype.part))


# -- ops whose complex form is the real one on each part ---------------------------------

register_split("Identity", "IdentityN", "StopGradient", "Snapshot", "PreventGradient", "EnsureShape",
               "Reshape", "ExpandDims", "Squeeze", "Transpose", "Slice", "StridedSlice",
               "ConcatV2", "Concat", "Pack", "Unpack", "Tile", "BroadcastTo", "Pad", "PadV2",
               "MirrorPad", "ReverseV2", "GatherV2", "Gather", "Split", "SplitV", "Roll",
               "Select", "SelectV2", "Neg", "Add", "AddV2", "Sub", "AddN", "Sum",
               "ZerosLike", "Fill", "BiasAdd", "BiasAddV1", "MirrorPadGrad", "StridedSliceGrad",
               "Diag", "DiagPart", "MatrixDiag", "MatrixDiagV2", "MatrixDiagV3", "MatrixDiagPart",
               "MatrixDiagPartV2", "MatrixDiagPartV3", "MatrixSetDiag", "MatrixSetDiagV2",
               "MatrixSetDiagV3", "MatrixBandPart", "SpaceToDepth", "DepthToSpace", "OneHot",
               "GatherNd", "ScatterNd", "TensorScatterUpdate", "TensorScatterAdd",
               "TensorScatterSub", "UnsortedSegmentSum", "Cumsum")


def _real_rule(ctx, op: str | None = None, attrs: dict | None = None):
    """A function lowering node ``ctx.node`` (or ``op`` with ``attrs``) with real types."""
    node = part_node(ctx.node)
    if op is not None:
        node = Node(f"{node.name}/{op}", op, [], [], {**node.attrs, **(attrs or {})})
    return lambda *xs: lower_node(ctx.m, node, list(xs), ctx.functions)


def _c(ctx, i: int) -> Complex:
    x = ctx.inputs[i]
    if not isinstance(x, Complex):
        raise Unsupported(f"{ctx.node.op}: input {i} is {x.dtype}, not complex")
    return x


@register_complex("Shape", "ShapeN", "Size", "Rank")
def _shape_of(ctx):
    """Shapes of complex tensors: the real rule on the real parts (the same shapes)."""
    return _real_rule(ctx)(*[x.re if isinstance(x, Complex) else x for x in ctx.inputs])


@register_complex("Const")
def _const(ctx):
    return constant(ctx.m, ctx.attr("value"), ctx.attr("dtype").ir)


@register_complex("ReadVariableOp")
def _read_variable(ctx):
    v = _var(ctx)
    if not isinstance(v.value, Complex) or v.value.dtype is not ctx.attr("dtype").ir:
        raise Unsupported(f"ReadVariableOp expects a {ctx.attr('dtype').name} variable, the variable "
                          f"holds {v.value.dtype}")
    return v.value


@register_complex("AssignVariableOp")
def _assign_variable(ctx):
    v, x = _var(ctx), _c(ctx, 1)
    if not isinstance(v.value, Complex) or v.value.dtype is not x.dtype or v.value.shape != x.shape:
        raise Unsupported(f"AssignVariableOp: a {x.dtype}{list(x.shape)} value for a "
                          f"{v.value.dtype}{list(v.value.shape)} variable")
    v.assign(x)
    return []


@register_complex("OnesLike")
def _ones_like(ctx):
    x = _c(ctx, 0)
    return Complex(cm.full(ctx.m, 1.0, x.re), cm.full(ctx.m, 0.0, x.re))


@register_complex("Complex")
def _complex(ctx):
    re, im = broadcast_all(ctx.m, *ctx.inputs)
    out = ctx.attr("Tout").ir
    if re.dtype is not out.part or im.dtype is not out.part:
        raise Unsupported(f"Complex: {re.dtype} and {im.dtype} parts for a {out} result")
    return Complex(re, im)


@register_complex("Real")
def _real(ctx):
    return _c(ctx, 0).re


@register_complex("Imag")
def _imag(ctx):
    return _c(ctx, 0).im


@register_complex("Conj")
def _conj(ctx):
    return cm.conj(ctx.m, _c(ctx, 0))


@register_complex("ConjugateTranspose", const_inputs=(1,))
def _conjugate_transpose(ctx):
    transpose = _real_rule(ctx, "Transpose")
    x = _c(ctx, 0)
    re, = transpose(x.re, ctx.inputs[1])
    im, = transpose(x.im, ctx.inputs[1])
    return cm.conj(ctx.m, Complex(re, im))


@register_complex("Cast")
def _cast(ctx):
    """TF's Cast: real -> complex makes (x, 0); complex -> real keeps the real part (as
    static_cast of std::real); complex -> complex converts both parts."""
    m, x = ctx.m, ctx.inputs[0]
    target = ctx.attr("DstT").ir
    if target.is_complex:
        if isinstance(x, Complex):
            return Complex(m.convert(x.re, target.part), m.convert(x.im, target.part))
        re = m.convert(x, target.part)
        return Complex(re, cm.full(m, 0.0, re))
    if target is dt.PRED:
        raise Unsupported("Cast from complex to bool")
    return m.convert(_c(ctx, 0).re, target)


def _binary(fn):
    def rule(ctx):
        a, b = cm.broadcast(ctx.m, _c(ctx, 0), _c(ctx, 1))
        return fn(ctx.m, a, b)
    return rule


register_complex("Mul")(_binary(cm.mul))
register_complex("Div", "RealDiv")(_binary(cm.div))
register_complex("DivNoNan")(_binary(cm.div_no_nan))
register_complex("SquaredDifference")(_binary(cm.squared_difference))
register_complex("Equal")(_binary(lambda m, a, b: cm.compare(m, a, b, equal=True)))
register_complex("NotEqual")(_binary(lambda m, a, b: cm.compare(m, a, b, equal=False)))
register_complex("Square")(lambda ctx: cm.mul(ctx.m, _c(ctx, 0), _c(ctx, 0)))
register_complex("Reciprocal", "Inv")(lambda ctx: cm.reciprocal(ctx.m, _c(ctx, 0)))
register_complex("ComplexAbs", "Abs")(lambda ctx: cm.abs_(ctx.m, _c(ctx, 0)))
register_complex("Angle")(lambda ctx: ctx.m.elementwise(Op.ATAN2, _c(ctx, 0).im, _c(ctx, 0).re))
register_complex("Sign")(lambda ctx: cm.sign(ctx.m, _c(ctx, 0)))
register_complex("Sqrt")(lambda ctx: cm.sqrt(ctx.m, _c(ctx, 0)))
register_complex("Exp")(lambda ctx: cm.exp(ctx.m, _c(ctx, 0)))
register_complex("Expm1")(lambda ctx: cm.expm1(ctx.m, _c(ctx, 0)))


@register_complex("Sin", "Cos", "Tan", "Sinh", "Cosh", "Tanh", "Asin", "Acos", "Atan", "Asinh",
                  "Acosh", "Atanh")
def _complex_libm(ctx):
    """TF's kernels call the C library's csin, ccos, ctan, csinh, ..., catanh (std::sin
    of a std::complex ...; Eigen has no vector form): so does the compiled code, per element
    (ir: the csin-re/csin-im ... ops), so every result, special values included, is TF's."""
    z = _c(ctx, 0)
    re, im = (Op.from_spelling(f"c{ctx.node.op.lower()}-{part}") for part in ("re", "im"))
    return Complex(ctx.m.elementwise(re, z.re, z.im), ctx.m.elementwise(im, z.re, z.im))
register_complex("Log")(lambda ctx: cm.log(ctx.m, _c(ctx, 0)))


@register_complex("Mean", const_inputs=(1,))
def _mean(ctx):
    """TF's complex mean: the sum divided by (count + 0i), the scalar complex division
    of Eigen's MeanReducer (an infinite part makes the other NaN, as in TF)."""
    x = _c(ctx, 0)
    total_sum = _real_rule(ctx, "Sum")
    re, = total_sum(x.re, ctx.inputs[1])
    im, = total_sum(x.im, ctx.inputs[1])
    count = x.size // re.size if re.size else 0
    if count == 1:      # TF copies when only dims of size 1 are reduced
        return Complex(re, im)
    return cm.div_by_count(ctx.m, Complex(re, im), count)


@register_complex("Prod")
def _prod(ctx):
    raise Unsupported("Prod of complex tensors: a complex product reduction has no IR form "
                      "(the IR reduces real values only)")


# -- products: four real products ------------------------------------------------------

def _bilinear(ctx, a: Complex, b: Complex, attrs: dict | None = None) -> Complex:
    """op(a, b) for an op linear in each operand (MatMul, Einsum):
    (ar br - ai bi) + i (ar bi + ai br), each product by the op's real rule."""
    f = _real_rule(ctx, ctx.node.op, attrs)
    m = ctx.m
    rr, = f(a.re, b.re)
    ii, = f(a.im, b.im)
    ri, = f(a.re, b.im)
    ir, = f(a.im, b.re)
    return Complex(m.elementwise(Op.SUB, rr, ii), m.elementwise(Op.ADD, ri, ir))


@register_complex("MatMul", "Einsum")
def _matmul(ctx):
    if len(ctx.inputs) != 2:
        raise Unsupported(f"{ctx.node.op} on complex tensors with {len(ctx.inputs)} operands")
    return _bilinear(ctx, _c(ctx, 0), _c(ctx, 1))


@register_complex("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _batch_matmul(ctx):
    """adj_x/adj_y are adjoints for complex operands: the real rule transposes, the
    imaginary part is negated here."""
    a, b = _c(ctx, 0), _c(ctx, 1)
    if ctx.attr("adj_x"):
        a = cm.conj(ctx.m, a)
    if ctx.attr("adj_y"):
        b = cm.conj(ctx.m, b)
    return _bilinear(ctx, a, b)
