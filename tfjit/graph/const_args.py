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
stays refused with the lowering's reason.

Functional control flow is followed into its bodies, as XLA's analysis follows
function bodies: an input of a call (PartitionedCall), or of an If/Case (after
the predicate or index), must be constant when the function or a branch needs
its parameter constant; an input of a While when the condition or body needs it
and the body passes it through unchanged (a loop invariant, which the lowering
sinks into the body as a constant: lower/control_flow.py).  A value a body needs
constant that changes from one iteration to the next cannot be a constant
argument; the lowering refuses it with its reason.
"""
from __future__ import annotations

import numpy as np

from tfjit.graph.functions import function_graph, passes_through
from tfjit.graph.graphdef import ARG_PREFIX, Graph, Node
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
    "DynamicStitch", "ParallelDynamicStitch",
})

CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
BRANCH_OPS = frozenset({"If", "StatelessIf", "Case", "StatelessCase"})
LOOP_OPS = frozenset({"While", "StatelessWhile", "XlaWhile"})

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


class _Bodies:
    """Which parameters of the library's functions must be constants (memoised; a
    function being analysed counts as needing none, so a call cycle, which TF refuses
    anyway, ends)."""

    def __init__(self, library: dict):
        self.library, self.graphs, self.needs = library, {}, {}

    def graph(self, fname: str) -> Graph | None:
        if fname not in self.graphs:
            try:
                self.graphs[fname] = function_graph(self.library[fname], self.library)
            except (KeyError, ValueError):     # the lowering says what is wrong with it
                self.graphs[fname] = None
        return self.graphs[fname]

    def params(self, fname) -> set:
        if not isinstance(fname, str):
            return set()
        if fname not in self.needs:
            self.needs[fname] = set()
            body = self.graph(fname)
            if body is not None:
                need = _walk(body, set(body.nodes), self)
                self.needs[fname] = {int(n[len(ARG_PREFIX):]) for n, k in need
                                     if n.startswith(ARG_PREFIX) and k == 0
                                     and body.nodes.get(n) is not None
                                     and body.nodes[n].op == "Placeholder"}
        return self.needs[fname]

    def inputs(self, node: Node) -> list:
        """The inputs of a control-flow node (or a call of a function by name) that must
        be constant for its bodies."""
        if node.op in CALL_OPS or node.op in self.library:
            return sorted(self.params(node.attrs.get("f") if node.op in CALL_OPS else node.op))
        if node.op in BRANCH_OPS:
            fnames = node.attrs.get("branches") or (node.attrs.get("then_branch"),
                                                    node.attrs.get("else_branch"))
            return sorted({1 + i for f in fnames for i in self.params(f)})
        if node.op in LOOP_OPS:
            body = node.attrs.get("body")
            wanted = self.params(node.attrs.get("cond")) | self.params(body)
            graph = self.graph(body) if isinstance(body, str) else None
            return sorted(i for i in wanted if graph is not None and passes_through(graph, i))
        return []


def must_be_constant(graph: Graph, nodes=None) -> set:
    """The tensors ``(node, output)`` whose values must be known at compile time when
    ``nodes`` (default: every node) are compiled together.  Tensors that nodes outside
    ``nodes`` make are included (they are the cluster's constant arguments); the walk
    does not continue past them."""
    inside = set(graph.nodes) if nodes is None else set(nodes)
    return _walk(graph, inside, _Bodies(graph.functions))


def _walk(graph: Graph, inside: set, bodies: _Bodies) -> set:
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
            add(node.inputs[i] for i in const_inputs(node, _value_of(graph, node))
                + bodies.inputs(node) if i < len(node.inputs))
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
