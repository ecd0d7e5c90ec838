"""A typed, read-only view of a TensorFlow GraphDef.

Every attribute is decoded once, here, into plain Python values (``DType``,
shape tuples, numpy arrays, lists), so no later stage touches protobuf
``AttrValue`` objects.  Node inputs are parsed into ``(node, output_index)``
pairs with control inputs kept apart.
"""
from __future__ import annotations

import dataclasses


from tfjit import dtypes as dt

# The names of a cluster's argument and result nodes (graph/cluster.py makes them).
ARG_PREFIX, RET_PREFIX = "_arg_", "_retval_"


@dataclasses.dataclass(frozen=True)
class TFType:
    """A TF dtype that tfjit may not compile (resource, string, ...)."""
    enum: int
    name: str

    @property
    def ir(self) -> dt.DType | None:
        """The IR element type of this TF type (a quantized type's storage integer type;
        lower/registry.py refuses quantized types where a rule does not take them)."""
        d = dt.edge_from_tf_enum(self.enum)
        return d.storage if d is not None else None

    @property
    def quantized(self) -> bool:
        return self.enum in dt.QUANTIZED_BY_TF_ENUM


def _tf_type(enum: int) -> TFType:
    from tensorflow.core.framework import types_pb2
    try:
        name = types_pb2.DataType.Name(enum)
    except ValueError:
        name = f"type_{enum}"
    return TFType(enum, name.replace("DT_", "").lower())


def _shape(proto) -> tuple | None:
    """Shape as a tuple with None for unknown dims, or None for unknown rank."""
    if proto.unknown_rank:
        return None
    return tuple(None if d.size < 0 else int(d.size) for d in proto.dim)


def _decode(value):
    which = value.WhichOneof("value")
    if which == "type":
        return _tf_type(value.type)
    if which == "shape":
        return _shape(value.shape)
    if which == "tensor":
        import tensorflow as tf
        return tf.make_ndarray(value.tensor)
    if which == "list":
        lst = value.list
        for field, conv in (("type", _tf_type), ("shape", _shape), ("i", int), ("f", float),
                            ("b", bool), ("s", bytes), ("func", lambda f: f.name)):
            items = getattr(lst, field)
            if len(items):
                return tuple(conv(v) for v in items)
        return ()
    if which == "func":
        return value.func.name
    if which in ("i", "f", "b", "s"):
        return getattr(value, which)
    return None


@dataclasses.dataclass
class Node:
    name: str
    op: str
    inputs: list           # [(node_name, output_index)]
    control_inputs: list   # [node_name]
    attrs: dict            # decoded values
    device: str = ""

    def attr(self, name, default=None):
        return self.attrs.get(name, default)


def _parse_input(text: str) -> tuple:
    name, _, idx = text.partition(":")
    return name, int(idx) if idx else 0


class Graph:
    """Nodes by name, in GraphDef order, plus the function library."""

    def __init__(self, graph_def):
        self.graph_def = graph_def
        self.nodes: dict[str, Node] = {}
        self.protos: dict = {}            # name -> its NodeDef in graph_def
        for nd in graph_def.node:
            self.protos[nd.name] = nd
            data_inputs = [_parse_input(i) for i in nd.input if not i.startswith("^")]
            controls = [i[1:] for i in nd.input if i.startswith("^")]
            attrs = {k: _decode(v) for k, v in nd.attr.items()}
            self.nodes[nd.name] = Node(nd.name, nd.op, data_inputs, controls, attrs, nd.device)
        self.functions = {f.signature.name: f for f in graph_def.library.function}
        self._order = None

    @classmethod
    def from_bytes(cls, data: bytes) -> "Graph":
        from tensorflow.core.framework import graph_pb2
        gd = graph_pb2.GraphDef()
        gd.ParseFromString(data)
        return cls(gd)

    def sources(self, node: Node) -> list:
        """Names of the nodes ``node`` depends on (data and control), without the
        back edges of v1 while loops (NextIteration -> Merge), so that order is
        defined on graphs with loops."""
        names = [s for s, _ in node.inputs] + node.control_inputs
        if node.op in _MERGE_OPS:
            names = [s for s in names if self.nodes.get(s) is None
                     or self.nodes[s].op not in _NEXT_ITERATION_OPS]
        return names

    def topological(self) -> list:
        """Nodes ordered so that every input comes first; raises on a cycle."""
        if self._order is not None:
            return self._order
        order, state = [], {}
        for root in self.nodes:
            stack = [(root, False)]
            while stack:
                name, done = stack.pop()
                if done:
                    state[name] = 2
                    order.append(self.nodes[name])
                    continue
                if state.get(name) == 2:
                    continue
                if state.get(name) == 1:
                    raise ValueError(f"graph has a cycle through node {name!r}")
                state[name] = 1
                stack.append((name, True))
                node = self.nodes[name]
                for src in self.sources(node):
                    if src not in self.nodes:
                        raise ValueError(f"node {name!r} reads unknown node {src!r}")
                    if state.get(src) != 2:
                        if state.get(src) == 1:
                            raise ValueError(f"graph has a cycle through node {src!r}")
                        stack.append((src, False))
        self._order = order
        return order


_MERGE_OPS = frozenset({"Merge", "RefMerge"})
_NEXT_ITERATION_OPS = frozenset({"NextIteration", "RefNextIteration"})
