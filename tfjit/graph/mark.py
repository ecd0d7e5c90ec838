"""Marking: which nodes tfjit can compile, and a reason for every one it can't.

A node is a candidate when a lowering exists for its op and dtypes, its output
shapes follow from input shapes and compile-time constants (not from input
values), and compiling it would not change what it does (random numbers,
assertions, printing, I/O and other stateful ops stay with TensorFlow).
"""
from __future__ import annotations

from tfjit.graph.graphdef import Graph, Node
import tfjit.lower  # noqa: F401  (registers the rules)
from tfjit.lower.registry import refusal

# Why some well-known ops are never compiled (appended to "no tfjit lowering").
_WHY = {
    "Unique": "output shape depends on input values",
    "UniqueV2": "output shape depends on input values",
    "Where": "output shape depends on input values",
    "NonMaxSuppressionV5": "output shape depends on input values",
    "BooleanMask": "output shape depends on input values",
    "DynamicPartition": "output shape depends on input values",
    "RandomUniform": "stateful random number generation",
    "RandomStandardNormal": "stateful random number generation",
    "Assert": "assertions must run in TensorFlow",
    "CheckNumerics": "assertions must run in TensorFlow",
    "Print": "side effects (printing)",
    "PrintV2": "side effects (printing)",
    "PyFunc": "calls back into Python",
    "EagerPyFunc": "calls back into Python",
    "StatefulPartitionedCall": "function calls are not inlined yet",
    "PartitionedCall": "function calls are not inlined yet",
}

# Nodes that carry no computation in a cluster.
STRUCTURAL = frozenset({"NoOp", "Placeholder", "_Arg", "_Retval"})


def reason(node: Node) -> str | None:
    """None when ``node`` can be compiled, else why not."""
    why = refusal(node)
    if why and node.op in _WHY:
        why = f"{why}: {_WHY[node.op]}"
    return why


def mark(graph: Graph) -> dict:
    """{node name: None | reason} for every non-structural node."""
    return {n.name: reason(n) for n in graph.nodes.values() if n.op not in STRUCTURAL}
