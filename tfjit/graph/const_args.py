"""Which tensors must be compile-time constants (after XLA's BackwardsConstAnalysis).

A lowering reads some operands at compile time (Reshape's shape, reduction axes,
Transpose's perm, ...: ``const_inputs`` in lower/registry.py).  Such an operand
is fine when a Const makes it, or a chain that folds to one (Shape → Pack →
Reshape).  When it comes from outside the cluster, the cluster can still compile
if that input becomes a *constant argument*: the launch op reads its value (a
small host tensor) at run time, the value is part of the compile-cache key, and
the compiler lowers it as a constant, one executable per value seen (as XLA's
``XlaCompilationCache`` does with compile-time constant inputs).

The analysis walks backwards: an operand a rule needs as a constant must be
constant; a node whose output must be constant needs all its data inputs
constant too when it is index arithmetic (``PROPAGATE_OPS``: casts, packing,
slicing, integer arithmetic, ...); IdentityN passes the requirement to the one
input its output forwards; metadata ops (Shape, Size, Rank) end it, as their
value follows from the input's static shape.  Unlike XLA, the requirement does
not travel through other ops (a reduction, a matmul): a size computed from
data (``tf.range(tf.cast(tf.reduce_sum(x), tf.int32))``) would make the data a
constant argument, compiled per value of a tensor that changes every step; it
stays refused with the lowering's reason.  Functional control flow (If, While,
calls) is not looked into either: what a body needs as a constant is lowered as
before.
"""
from __future__ import annotations

import numpy as np

from tfjit.graph.graphdef import Graph, Node
from tfjit.lower.registry import const_inputs

# Ops whose value follows from their input's shape alone (static in every signature).
METADATA_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank", "VariableShape"})

# Index arithmetic: the ops through which a compile-time constant requirement travels
# to their inputs (what computes shapes, axes and bounds from other small values).
PROPAGATE_OPS = frozenset({
    "Identity", "IdentityN", "Snapshot", "StopGradient", "PreventGradient", "Cast",
    "Pack", "Unpack", "ConcatV2", "Reshape", "ExpandDims", "Squeeze", "Slice", "StridedSlice",
    "GatherV2", "Gather", "Fill", "Range", "Tile", "Transpose", "ReverseV2",
    "Add", "AddV2", "Sub", "Mul", "Neg", "Abs", "FloorDiv", "FloorMod", "TruncateDiv",
    "Maximum", "Minimum", "Select", "SelectV2", "Equal", "NotEqual", "Less", "LessEqual",
    "Greater", "GreaterEqual", "LogicalAnd", "LogicalOr", "LogicalNot",
})

DT_RESOURCE = 20


def _value_of(graph: Graph, node: Node):
    """``value_of(i)``: input i's value when a Const node makes it, else None."""
    def value_of(i: int):
        if i >= len(node.inputs):
            return None
        src = graph.nodes.get(node.inputs[i][0])
        if src is None or src.op != "Const":
            return None
        value = src.attrs.get("value")
        return None if value is None else np.asarray(value)
    return value_of


def must_be_constant(graph: Graph, nodes=None) -> set:
    """The tensors ``(node, output)`` whose values must be known at compile time when
    ``nodes`` (default: every node) are compiled together.  Tensors that nodes outside
    ``nodes`` make are included (they are the cluster's constant arguments); the walk
    does not continue past them."""
    inside = set(graph.nodes) if nodes is None else set(nodes)
    need: dict = {}       # node -> its outputs that must be constant

    def add(srcs):
        for name, k in srcs:
            need.setdefault(name, set()).add(k)

    for node in reversed(graph.topological()):
        if node.name not in inside or node.op in METADATA_OPS:
            continue
        outputs = need.get(node.name)
        if outputs and node.op == "IdentityN":
            add(node.inputs[k] for k in outputs if k < len(node.inputs))
        elif outputs and node.op in PROPAGATE_OPS:
            add(node.inputs)
        else:
            add(node.inputs[i] for i in const_inputs(node, _value_of(graph, node)))
    return {(name, k) for name, ks in need.items() for k in ks}


def unconstant_refusals(graph: Graph, marks: dict, tensor_info) -> dict:
    """{node: reason} for compilable nodes that auto mode must leave to TensorFlow
    because their value is needed at compile time but cannot be known then: a node
    that reads a resource variable (its value is read when the cluster runs).  Left
    outside, its output reaches the cluster as a constant argument (XLA isolates
    must-be-constant stateful ops the same way)."""
    need = must_be_constant(graph, [n for n, why in marks.items() if why is None])
    out = {}
    for name in {n for n, _ in need}:
        node = graph.nodes.get(name)
        if node is None or marks.get(name, "structural") is not None:
            continue
        if any(tensor_info(*src)[0] == DT_RESOURCE for src in node.inputs):
            out[name] = ("its value is needed at compile time (a shape, axis or bound of a "
                         "node it feeds) but it reads a variable: TensorFlow computes it and "
                         "the cluster gets it as a constant argument")
    return out
