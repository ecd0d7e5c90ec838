"""NCHW (``data_format="NCHW"``) convolutions, pools and depth/space moves: the NHWC
rule between transposes.

TF's CPU kernels refuse NCHW ("only supports NHWC"); XLA runs it, and so does
tfjit: the node's tensors in the layout are transposed to NHWC, its layout
attributes (strides, dilations, ksize, explicit_paddings) and shape operands
(input_sizes, orig_input_shape, MaxPoolV2's ksize/strides) permuted, the NHWC
rule lowers it, and outputs in the layout are transposed back.  The transposes
are ordinary IR movement: fusion folds them into neighbouring kernels where it
can, and a library call (the convolution) reads a transposed copy.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from tfjit.graph.graphdef import Node
from tfjit.ir.module import Instr, Module
from tfjit.lower.registry import Unsupported

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
_LAYOUT_ATTRS = ("strides", "dilations", "ksize")


@dataclasses.dataclass(frozen=True)
class Form:
    tensors: tuple          # inputs in the node's layout
    sizes: tuple = ()       # inputs that are 4-vectors in the node's layout (constants)
    output: bool = True     # is the output in the layout (a filter gradient is not)


FORMS = {
    "Conv2D": Form((0,)),
    "Conv2DBackpropInput": Form((2,), (0,)),
    "Conv2DBackpropFilter": Form((0, 2), output=False),
    "DepthwiseConv2dNative": Form((0,)),
    "DepthwiseConv2dNativeBackpropInput": Form((2,), (0,)),
    "DepthwiseConv2dNativeBackpropFilter": Form((0, 2), output=False),
    "MaxPool": Form((0,)),
    "MaxPoolV2": Form((0,), (1, 2)),
    "AvgPool": Form((0,)),
    "MaxPoolGrad": Form((0, 1, 2)),
    "MaxPoolGradV2": Form((0, 1, 2), (3, 4)),
    "AvgPoolGrad": Form((1,), (0,)),
    "DepthToSpace": Form((0,)),
    "SpaceToDepth": Form((0,)),
}


def is_nchw(node: Node) -> bool:
    return node.op in FORMS and node.attrs.get("data_format") == b"NCHW"


def _nhwc(values) -> list:
    v = list(values)
    return [v[0], v[2], v[3], v[1]]


def lower_nchw(m: Module, node: Node, inputs: list, lower) -> list:
    """``lower(m, node, inputs)``: the NHWC lowering (registry.lower_node)."""
    form = FORMS[node.op]
    attrs = dict(node.attrs, data_format=b"NHWC")
    for name in _LAYOUT_ATTRS:
        if name in attrs and attrs[name] is not None and len(attrs[name]) == 4:
            attrs[name] = tuple(_nhwc(attrs[name]))
    pads = attrs.get("explicit_paddings")
    if pads:
        if len(pads) != 8:
            raise Unsupported(f"{node.op}: explicit_paddings={list(pads)} needs 8 values")
        pairs = [tuple(pads[2 * k:2 * k + 2]) for k in range(4)]
        attrs["explicit_paddings"] = tuple(v for pair in _nhwc(pairs) for v in pair)
    args = list(inputs)
    for i in form.tensors:
        if args[i].rank != 4:
            raise Unsupported(f"{node.op} with data_format=NCHW: input {i} must be 4-D, got "
                              f"shape {list(args[i].shape)}")
        args[i] = m.transpose(args[i], TO_NHWC)
    for i in form.sizes:
        args[i] = _permuted_constant(m, node, args[i], i)
    outs = lower(m, Node(node.name, node.op, node.inputs, node.control_inputs, attrs, node.device), args)
    if form.output:
        outs = [m.transpose(o, TO_NCHW) if o.rank == 4 else o for o in outs]
    return outs


def _permuted_constant(m: Module, node: Node, x: Instr, i: int) -> Instr:
    from tfjit.ir.ops import Op
    if x.op is not Op.CONSTANT or x.size != 4:
        raise Unsupported(f"{node.op} with data_format=NCHW: input {i} must be a compile-time "
                          "constant 4-vector")
    value = np.asarray(x.value).reshape(-1)
    return m.constant(np.asarray(_nhwc(value), value.dtype), x.dtype)
