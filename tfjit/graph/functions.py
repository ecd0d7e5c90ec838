"""Library functions (FunctionDefs) that functional control flow calls.

A ``While`` names its condition and body, an ``If``/``Case`` its branches; the
functions live in the graph's library (``graph_def.library``).  A cluster keeps
every function its nodes reach (``referenced``), so its definition stays
self-contained and its key (a hash of the definition) covers the bodies too.

``function_graph`` turns a FunctionDef into the same form as a cluster
definition (graph/cluster.py): ``_arg_<i>`` placeholders for its inputs, the body
with GraphDef-style inputs (``node:index``), and ``_retval_<j>`` identities for
its outputs; the lowering then treats a body exactly like a cluster.
"""
from __future__ import annotations

from tfjit.graph.graphdef import ARG_PREFIX, RET_PREFIX
from tfjit.graph.graphdef import Graph

FUNCTIONAL_OPS = frozenset({"While", "StatelessWhile", "XlaWhile", "If", "StatelessIf", "Case",
                            "StatelessCase"})


def called_names(node_def) -> list:
    """Names of the functions a NodeDef calls through its func / list(func) attributes."""
    out = []
    for key in sorted(node_def.attr):
        value = node_def.attr[key]
        which = value.WhichOneof("value")
        if which == "func":
            out.append(value.func.name)
        elif which == "list":
            out.extend(f.name for f in value.list.func)
    return out


def referenced(node_defs, library: dict) -> list:
    """Every library function that ``node_defs`` reach, directly or through other
    functions (also as an op type: a call of the function by name), sorted."""
    seen, stack = set(), []
    for nd in node_defs:
        stack += called_names(nd) + ([nd.op] if nd.op in library else [])
    while stack:
        name = stack.pop()
        if name in seen or name not in library:
            continue
        seen.add(name)
        for nd in library[name].node_def:
            stack += called_names(nd) + ([nd.op] if nd.op in library else [])
    return sorted(seen)


def _output_names(node_def, library: dict) -> list:
    """FunctionDef references ("out:0", ...) of a node's outputs, in output order."""
    if node_def.op in library:
        return [f"{a.name}:0" for a in library[node_def.op].signature.output_arg]
    from tensorflow.python.framework import op_def_registry
    op_def = op_def_registry.get(node_def.op)
    if op_def is None:
        raise ValueError(f"unknown op {node_def.op} (node {node_def.name})")
    return output_arg_names(node_def, op_def)


def output_arg_names(node_def, op_def) -> list:
    """FunctionDef names ("out:0", "out:1", "other:0", ...) of each output of a node."""
    names = []
    for arg in op_def.output_arg:
        if arg.number_attr:
            count = node_def.attr[arg.number_attr].i
        elif arg.type_list_attr:
            count = len(node_def.attr[arg.type_list_attr].list.type)
        else:
            count = 1
        names.extend(f"{arg.name}:{k}" for k in range(count))
    return names


def function_graph(fdef, library: dict) -> Graph:
    """``fdef`` in cluster-definition form (see the module docstring)."""
    from tensorflow.core.framework import attr_value_pb2, graph_pb2
    gd = graph_pb2.GraphDef()
    flat = {}                    # FunctionDef tensor reference -> GraphDef tensor name
    for k, arg in enumerate(fdef.signature.input_arg):
        ph = gd.node.add(name=f"{ARG_PREFIX}{k}", op="Placeholder")
        ph.attr["dtype"].CopyFrom(attr_value_pb2.AttrValue(type=arg.type))
        flat[arg.name] = ph.name
    for nd in fdef.node_def:
        for k, ref in enumerate(_output_names(nd, library)):
            flat[f"{nd.name}:{ref}"] = nd.name if k == 0 else f"{nd.name}:{k}"

    def tensor(ref: str) -> str:
        if ref.startswith("^"):
            return "^" + flat.get(ref[1:], ref[1:])
        if ref in flat:
            return flat[ref]
        if ref.count(":") == 1 and ref + ":0" in flat:      # "node:out" means "node:out:0"
            return flat[ref + ":0"]
        raise ValueError(f"function {fdef.signature.name}: unknown tensor {ref!r}")

    for nd in fdef.node_def:
        new = gd.node.add()
        new.CopyFrom(nd)
        new.input[:] = [tensor(i) for i in nd.input]
    for j, arg in enumerate(fdef.signature.output_arg):
        ret = gd.node.add(name=f"{RET_PREFIX}{j}", op="Identity")
        ret.input.append(tensor(fdef.ret[arg.name]))
        ret.attr["T"].CopyFrom(attr_value_pb2.AttrValue(type=arg.type))
    return Graph(gd)


# Ops that forward their input unchanged (what a loop body wraps a passed-through value in).
_FORWARDING = frozenset({"Identity", "Snapshot", "StopGradient", "PreventGradient"})


def passes_through(graph: Graph, k: int) -> bool:
    """Whether function ``graph`` (``function_graph``'s form) returns its input ``k`` as its
    output ``k`` unchanged, through identities only: a While body's loop-invariant value
    (XLA's IsLoopInvariant)."""
    ret = graph.nodes.get(f"{RET_PREFIX}{k}")
    if ret is None or not ret.inputs:
        return False
    src = ret.inputs[0]
    for _ in range(len(graph.nodes)):
        node = graph.nodes.get(src[0])
        if node is None:
            return False
        if node.op in _FORWARDING and node.inputs:
            src = node.inputs[0]
        elif node.op == "IdentityN" and src[1] < len(node.inputs):
            src = node.inputs[src[1]]
        else:
            break
    return src == (f"{ARG_PREFIX}{k}", 0)


def validate(fname: str, graph: Graph, library: dict) -> None:
    """Raises ValueError, in TensorFlow's words, where TF would refuse function ``fname``
    (its body as ``function_graph`` made it): an op it does not know, an attr that is
    missing or of the wrong type for its OpDef, an input whose dtype is not its
    producer's.  TF's own importer checks these; it sees the functions the body calls
    too, which are checked when they are lowered in turn."""
    import tensorflow as tf
    gd = graph.graph_def.__class__()
    gd.CopyFrom(graph.graph_def)

    def legal(name: str) -> str:     # TF's node names may not start with "_" (_arg_0)
        return "tfjit" + name if name.startswith("_") else name

    def legal_input(ref: str) -> str:
        return "^" + legal(ref[1:]) if ref.startswith("^") else legal(ref)
    for nd in gd.node:
        nd.name = legal(nd.name)
        nd.input[:] = [legal_input(i) for i in nd.input]
    for name in referenced(gd.node, library):
        gd.library.function.add().CopyFrom(library[name])
    try:
        with tf.Graph().as_default():
            tf.graph_util.import_graph_def(gd, name="")
    except (ValueError, TypeError, tf.errors.OpError) as e:
        text = getattr(e, "message", None) or str(e)
        raise ValueError(f"function {fname} is invalid: {text.splitlines()[0][:500]}") from None
