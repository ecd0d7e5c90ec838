"""Lowerings of the nodes grappler's remapper fuses before tfjit's graph pass sees a
tf.function's graph (auto mode; tfjit.function traces the unfused ops itself).

The remapper runs when a function is instantiated, before the graph optimisation
passes, so auto mode meets ``x * tanh(softplus(x))`` as one ``_MklFusedMish`` node and a
convolution with its bias and ReLU as one ``_FusedConv2D``.  Without these rules such a
node is left to TensorFlow and splits the clusters around it (Mish in auto mode ran at
TF graph's speed, 0.71x of tfjit.function's).  Each fused node is lowered as the ops it
stands for, in order, by their own rules, so the semantics are those ops' own (TF's
fused kernels apply them in turn) and fusion and the simplifier see the plain ops
(passes/simplify.py's Mish rewrite included):

_FusedMatMul, _FusedConv2D, _FusedDepthwiseConv2dNative
    the product, then ``fused_ops`` in order, each taking its arguments from ``args``:
    BiasAdd (bias), Add (addend), Mul (factor), FusedBatchNorm (scale, offset, mean, variance; the
    node's ``epsilon``), then an activation: Relu, Relu6, Elu, LeakyRelu (the node's
    ``leakyrelu_alpha``), Tanh, Sigmoid, GeluExact, GeluApproximate, _MklSwish,
    _FusedHardSwish.
_MklFusedBatchMatMulV2
    BatchMatMulV2, then ``fused_ops`` as above (oneDNN's: Mul by a scale, Add).
_FusedBatchNormEx   FusedBatchNormV3, plus the side input, then Identity or an activation.
_MklSwish           x * sigmoid(x).
_MklFusedMish       x * tanh(softplus(x)).
_UnaryOpsComposition  its ``op_names`` in order.

Auto-clustering counts each node as the ops it stands for (``tf_passes``), the size
the graph had before the remapper, so a lone fused Mish is clustered as the same three
ops would be.  A fused op this module does not know raises Unsupported: auto mode then
leaves the node to TensorFlow.
"""
from __future__ import annotations

import math

from tfjit import dtypes as dt
from tfjit.graph.graphdef import Node, TFType
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.lower import registry
from tfjit.lower.batch_norm import BN_TYPES
from tfjit.lower.registry import FLOATS, LowerCtx, Unsupported, lower_node, register, text

_F32 = TFType(1, "float")     # DT_FLOAT: batch norm's statistics type
# the attributes of the product each fused node's first step keeps
_CONV_ATTRS = ("strides", "padding", "explicit_paddings", "data_format", "dilations")
_ACTIVATIONS = ("Relu", "Relu6", "Elu", "Tanh", "Sigmoid")
# fused ops that combine the value with one argument, and the op each one is
_BINARY = {"BiasAdd": "BiasAdd", "Add": "AddV2", "AddV2": "AddV2", "Mul": "Mul"}


def _step(ctx: LowerCtx, op: str, inputs: list, **attrs) -> list:
    """Lowers one of the ops a fused node stands for, by that op's own rule."""
    node = Node(f"{ctx.node.name}/{op}", op, [], [], {"T": ctx.node.attrs.get("T"), **attrs})
    return lower_node(ctx.m, node, inputs)


def _swish(ctx: LowerCtx, x: Instr) -> Instr:
    sig, = _step(ctx, "Sigmoid", [x])
    return ctx.m.elementwise(Op.MUL, x, sig)


def _hard_swish(ctx: LowerCtx, x: Instr) -> Instr:
    """x * relu6(x + 3) / 6, as Keras's hard_swish the remapper matched."""
    m = ctx.m
    shifted = m.elementwise(Op.ADD, x, registry.scalar_like(m, 3.0, x))
    gate, = _step(ctx, "Relu6", [shifted])
    return m.elementwise(Op.MUL, x, m.elementwise(Op.MUL, gate, registry.scalar_like(m, 1 / 6, x)))


def _gelu(m: Module, x: Instr, exact: bool) -> Instr:
    """TF's fused GELU: 0.5 x (1 + erf(x / sqrt 2)), or its tanh approximation."""
    def c(v):
        return registry.scalar_like(m, v, x)
    if exact:
        inner = m.elementwise(Op.ERF, m.elementwise(Op.MUL, x, c(1 / math.sqrt(2.0))))
    else:
        cube = m.elementwise(Op.MUL, m.elementwise(Op.MUL, x, x), x)
        poly = m.elementwise(Op.ADD, x, m.elementwise(Op.MUL, cube, c(0.044715)))
        inner = m.elementwise(Op.TANH, m.elementwise(Op.MUL, poly, c(math.sqrt(2 / math.pi))))
    half = m.elementwise(Op.MUL, x, c(0.5))
    return m.elementwise(Op.MUL, half, m.elementwise(Op.ADD, inner, c(1.0)))


def _activation(ctx: LowerCtx, x: Instr, op: str) -> Instr:
    if op in _ACTIVATIONS:
        return _step(ctx, op, [x])[0]
    if op == "LeakyRelu":
        return _step(ctx, op, [x], alpha=ctx.attr("leakyrelu_alpha", 0.2))[0]
    if op in ("GeluExact", "GeluApproximate"):
        return _gelu(ctx.m, x, exact=op == "GeluExact")
    if op == "_MklSwish":
        return _swish(ctx, x)
    if op == "_FusedHardSwish":
        return _hard_swish(ctx, x)
    raise Unsupported(f"{ctx.node.op} with fused op {op!r}")


def _epilogue(ctx: LowerCtx, x: Instr, args: list) -> Instr:
    """Applies the node's ``fused_ops`` to the product ``x`` in order, taking each
    one's arguments from ``args``; every argument must be used."""
    args = list(args)

    def take(op: str, n: int) -> list:
        if len(args) < n:
            raise Unsupported(f"{ctx.node.op}: {op} needs {n} argument(s), {len(args)} left")
        taken, args[:n] = args[:n], []
        return taken

    for op in map(text, ctx.attr("fused_ops", ())):
        if op in _BINARY:
            x, = _step(ctx, _BINARY[op], [x, *take(op, 1)])
        elif op == "FusedBatchNorm":
            if x.dtype not in BN_TYPES:
                raise Unsupported(f"{ctx.node.op}: FusedBatchNorm of {x.dtype}")
            x = _step(ctx, "FusedBatchNormV3", [x, *take(op, 4)], U=_F32, is_training=False,
                      epsilon=ctx.attr("epsilon", 1e-4),
                      data_format=ctx.attr("data_format", b"NHWC"))[0]
        else:
            x = _activation(ctx, x, op)
    if args:
        raise Unsupported(f"{ctx.node.op}: {len(args)} argument(s) left after fused_ops "
                          f"{list(ctx.attr('fused_ops', ()))}")
    return x


@register("_FusedMatMul", dtypes=FLOATS, half_in_f32=True, tf_passes=2)
def _fused_matmul(ctx):
    a, b, *args = ctx.inputs
    if a.rank != 2 or b.rank != 2:
        raise Unsupported(f"_FusedMatMul needs matrices, got ranks {a.rank} and {b.rank}")
    x = ctx.m.dot(a, b, bool(ctx.attr("transpose_a")), bool(ctx.attr("transpose_b")))
    return _epilogue(ctx, x, args)


@register("_MklFusedBatchMatMulV2", dtypes=(dt.BF16, dt.F32), half_in_f32=True, tf_passes=2)
def _fused_batch_matmul(ctx):
    """oneDNN's batched product with its scale and addend (attention's ``q k^T * s + mask``)."""
    x, y, *args = ctx.inputs
    prod, = _step(ctx, "BatchMatMulV2", [x, y], adj_x=ctx.attr("adj_x", False),
                  adj_y=ctx.attr("adj_y", False))
    return _epilogue(ctx, prod, args)


def _conv_attrs(ctx: LowerCtx) -> dict:
    return {k: ctx.node.attrs[k] for k in _CONV_ATTRS if k in ctx.node.attrs}


@register("_FusedConv2D", dtypes=FLOATS, half_in_f32=True, tf_passes=2)
def _fused_conv2d(ctx):
    if int(ctx.attr("num_host_args", 0)):
        raise Unsupported("_FusedConv2D with host arguments (a quantized form)")
    if ctx.attr("filter_format", b"HWIO") != b"HWIO":
        raise Unsupported(f"_FusedConv2D with filter_format {ctx.attr('filter_format')!r}")
    x, w, *args = ctx.inputs
    y, = _step(ctx, "Conv2D", [x, w], **_conv_attrs(ctx))
    return _epilogue(ctx, y, args)


@register("_FusedDepthwiseConv2dNative", dtypes=FLOATS, half_in_f32=True, tf_passes=2)
def _fused_depthwise(ctx):
    x, w, *args = ctx.inputs
    y, = _step(ctx, "DepthwiseConv2dNative", [x, w], **_conv_attrs(ctx))
    return _epilogue(ctx, y, args)


@register("_FusedBatchNormEx", dtypes=BN_TYPES, tf_passes=2)
def _fused_batch_norm_ex(ctx):
    """FusedBatchNormV3's six outputs, its y plus the side input, then the activation."""
    sides = int(ctx.attr("num_side_inputs", 0))
    x, scale, offset, mean, var, *rest = ctx.inputs
    if len(rest) != sides or sides > 1:
        raise Unsupported(f"_FusedBatchNormEx with {len(rest)} side inputs (num_side_inputs={sides})")
    keep = ("U", "epsilon", "exponential_avg_factor", "data_format", "is_training")
    outs = _step(ctx, "FusedBatchNormV3", [x, scale, offset, mean, var],
                 **{k: ctx.node.attrs[k] for k in keep if k in ctx.node.attrs})
    y = outs[0]
    if sides:
        y, = _step(ctx, "AddV2", [y, rest[0]])
    mode = text(ctx.attr("activation_mode", b"Identity"))
    if mode != "Identity":
        y = _activation(ctx, y, mode)
    return [y, *outs[1:]]


@register("_MklSwish", dtypes=(dt.BF16, dt.F32), half_in_f32=True, tf_passes=2)
def _mkl_swish(ctx):
    return _swish(ctx, ctx.inputs[0])


@register("_MklFusedMish", dtypes=(dt.BF16, dt.F32), half_in_f32=True, tf_passes=3)
def _mkl_mish(ctx):
    x = ctx.inputs[0]
    soft, = _step(ctx, "Softplus", [x])
    tanh, = _step(ctx, "Tanh", [soft])
    return ctx.m.elementwise(Op.MUL, x, tanh)


@register("_UnaryOpsComposition", dtypes=FLOATS)
def _unary_ops_composition(ctx):
    x = ctx.inputs[0]
    for op in map(text, ctx.attr("op_names", ())):
        x, = _step(ctx, op, [x])
    return x
