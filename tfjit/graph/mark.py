"""Marking: which nodes tfjit can compile, and a reason for every one it can't.

A node is a candidate when a lowering exists for its op and dtypes, its output
shapes follow from input shapes and compile-time constants (not from input
values; the one exception, Where, compiles as a cluster output only: lower/where.py),
and compiling it would not change what it does (random numbers,
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
    "NonMaxSuppressionV5": "output shape depends on input values",
    "BooleanMask": "output shape depends on input values",
    "DynamicPartition": "output shape depends on input values",
    **{op: ("stateful random number generation: compiled only where TensorFlow keeps its "
            "state, split by graph/random_state.py (CPU nodes of a Session, tf.function or "
            "tfjit.function), never by tfjit-aot")
       for op in ("RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt",
                  "RandomShuffle")},
    "TfjitRandomReserve": "a stateful random node's state stays with TensorFlow (graph/random_state.py)",
    "Assert": "assertions must run in TensorFlow",
    "CheckNumerics": "assertions must run in TensorFlow",
    "Print": "side effects (printing)",
    "PrintV2": "side effects (printing)",
    "PyFunc": "calls back into Python",
    "EagerPyFunc": "calls back into Python",
}

# Nodes that carry no computation in a cluster.
STRUCTURAL = frozenset({"NoOp", "Placeholder", "_Arg", "_Retval"})


def reason(node: Node) -> str | None:
    """None when ``node`` can be compiled, else why not."""
    why = refusal(node)
    if why and node.op in _WHY:
        why = f"{why}: {_WHY[node.op]}"
    return why


# The function attributes of functional control flow and of calls (graph/functions.py).
_CALLS = {"While": ("cond", "body"), "StatelessWhile": ("cond", "body"),
          "XlaWhile": ("cond", "body"),
          "If": ("then_branch", "else_branch"), "StatelessIf": ("then_branch", "else_branch"),
          "Case": ("branches",), "StatelessCase": ("branches",),
          "PartitionedCall": ("f",), "StatefulPartitionedCall": ("f",)}


def _called_reason(node: Node, library: dict, memo: dict) -> str | None:
    """Why a While/If/Case cannot be compiled because of a function it calls, or None.

    Functional control flow is compiled only when its bodies compile (every node
    of every function it reaches has a lowering), as XLA clusters them."""
    for attr in _CALLS.get(node.op, ()):
        value = node.attrs.get(attr)
        for fname in value if isinstance(value, tuple) else (value,):
            why = _function_reason(fname, library, memo)
            if why:
                return why
    return None


def _function_reason(fname: str, library: dict, memo: dict) -> str | None:
    if fname in memo:
        return memo[fname]
    memo[fname] = None        # a recursive reference is judged by its other nodes
    if fname not in library:
        memo[fname] = f"function {fname} is not in the graph's library"
        return memo[fname]
    from tfjit.graph.graphdef import RET_PREFIX
    from tfjit.graph.functions import function_graph
    try:
        body = function_graph(library[fname], library)
    except ValueError as e:
        memo[fname] = f"function {fname} cannot be read: {e}"
        return memo[fname]
    for n in body.nodes.values():
        if n.op in STRUCTURAL or n.name.startswith(RET_PREFIX):   # a function's returns
            continue
        why = reason(n) or _called_reason(n, library, memo)
        if why:
            memo[fname] = f"{fname} does not compile: {n.op} ({why}) {{{{node {n.name}}}}}"
            break
    return memo[fname]


def mark(graph: Graph) -> dict:
    """{node name: None | reason} for every non-structural node."""
    memo: dict = {}
    return {n.name: reason(n) or _called_reason(n, graph.functions, memo)
            for n in graph.nodes.values() if n.op not in STRUCTURAL}
