"""Clusters: connected sets of compilable nodes, and their self-contained form.

A cluster becomes one ``TfjitLaunch`` node.  Its definition is a small
GraphDef: one ``Placeholder`` per input tensor (``_arg_<i>``), the cluster's
nodes with inputs renamed, and one ``Identity`` per output (``_retval_<j>``).
That GraphDef is serialised into the launch node's ``cluster_def`` attribute,
so a rewritten graph stays self-contained: the compiler needs nothing else.
Its library holds the functions that the cluster's control flow calls (loop
bodies, branches; graph/functions.py), so the key covers them too.

Auto-clustering merges clusters by contracting data edges and refuses a
contraction that would create a cycle through a node outside the cluster
(after XLA's MarkForCompilationPass).
"""
from __future__ import annotations

import dataclasses
import hashlib

from tfjit.graph.graphdef import ARG_PREFIX, RET_PREFIX, Graph  # noqa: F401  (also read from here)
from tfjit.graph.mark import STRUCTURAL


@dataclasses.dataclass
class ClusterSpec:
    name: str
    nodes: list            # node names, in graph order
    inputs: list           # [(node, output)] read from outside
    outputs: list          # [(node, output)] used outside
    graph_def: bytes       # the self-contained definition
    key: str               # content hash of graph_def
    constant_args: tuple = ()   # inputs whose values the compile needs (graph/const_args.py)


def _tensor_attrs(pb, dtype_enum: int, shape) -> None:
    from tensorflow.core.framework import attr_value_pb2, tensor_shape_pb2
    pb.attr["dtype"].CopyFrom(attr_value_pb2.AttrValue(type=dtype_enum))
    proto = tensor_shape_pb2.TensorShapeProto()
    if shape is None:
        proto.unknown_rank = True
    else:
        for d in shape:
            proto.dim.add(size=-1 if d is None else int(d))
    pb.attr["shape"].CopyFrom(attr_value_pb2.AttrValue(shape=proto))


def extract(graph: Graph, names: list, tensor_info, outputs=None, inputs=None,
            name: str = "cluster") -> ClusterSpec:
    """The definition of the cluster made of ``names``.

    ``tensor_info(node, index) -> (dtype_enum, shape)`` describes any tensor;
    ``outputs`` fixes the output list (default: every cluster tensor that a
    node outside the cluster reads); ``inputs`` fixes the input order (default:
    order of first use).
    """
    from tensorflow.core.framework import graph_pb2
    inside = set(names)
    order = [n.name for n in graph.topological() if n.name in inside]
    inputs = list(inputs or [])
    arg_of = {src: k for k, src in enumerate(inputs)}
    for n in order:
        for src in graph.nodes[n].inputs:
            if src[0] not in inside and src not in arg_of:
                arg_of[src] = len(inputs)
                inputs.append(src)
    if outputs is None:
        outputs = []
        for node in graph.nodes.values():
            if node.name in inside:
                continue
            for src in node.inputs:
                if src[0] in inside and src not in outputs:
                    outputs.append(src)
    by_name = graph.protos
    gd = graph_pb2.GraphDef()
    gd.versions.CopyFrom(graph.graph_def.versions)
    for k, src in enumerate(inputs):
        ph = gd.node.add(name=f"{ARG_PREFIX}{k}", op="Placeholder")
        _tensor_attrs(ph, *tensor_info(*src))
    for n in order:
        nd = gd.node.add()
        nd.CopyFrom(by_name[n])
        nd.ClearField("input")
        nd.ClearField("device")
        for text in by_name[n].input:
            if text.startswith("^"):
                if text[1:] in inside:
                    nd.input.append(text)
                continue
            src = graph.nodes[n].inputs[len([i for i in nd.input if not i.startswith("^")])]
            nd.input.append(f"{ARG_PREFIX}{arg_of[src]}" if src in arg_of else _tensor_name(src))
        for attr in [a for a in nd.attr if a.startswith("_")]:
            del nd.attr[attr]
    from tfjit.graph.functions import referenced
    library = graph.functions
    for fname in referenced([by_name[n] for n in order], library):
        gd.library.function.add().CopyFrom(library[fname])
    for k, src in enumerate(outputs):
        ret = gd.node.add(name=f"{RET_PREFIX}{k}", op="Identity")
        ret.input.append(f"{ARG_PREFIX}{arg_of[src]}" if src in arg_of else _tensor_name(src))
        from tensorflow.core.framework import attr_value_pb2
        ret.attr["T"].CopyFrom(attr_value_pb2.AttrValue(type=tensor_info(*src)[0]))
    data = gd.SerializeToString(deterministic=True)
    key = hashlib.sha256(data).hexdigest()[:24]
    return ClusterSpec(name, order, inputs, list(outputs), data, key,
                       _constant_args(graph, inside, arg_of, tensor_info))


def _constant_args(graph: Graph, inside: set, arg_of: dict, tensor_info) -> tuple:
    """The cluster inputs whose values its lowering needs (sorted input indices): tensors
    of a type tfjit computes (a resource handle or a TensorList is never one; the
    lowering then says what it needs)."""
    from tfjit import dtypes as dt
    from tfjit.graph.const_args import DT_RESOURCE, must_be_constant
    need = must_be_constant(graph, inside)
    return tuple(sorted(arg_of[src] for src in need if src in arg_of
                        and tensor_info(*src)[0] != DT_RESOURCE
                        and dt.from_tf_enum(tensor_info(*src)[0]) is not None))


def _tensor_name(src) -> str:
    return src[0] if src[1] == 0 else f"{src[0]}:{src[1]}"


def auto_clusters(graph: Graph, marks: dict, min_size: int, max_size: int | None = None,
                  context: dict | None = None, weights: dict | None = None) -> list:
    """Groups compilable nodes into cycle-free clusters by edge contraction.

    ``context`` maps a node to a key (device, v1 control-flow frame and
    predicates): nodes with different keys are never merged.  Returns a list of
    node-name lists, each with at least ``min_size`` effective ops
    (Identity/Const and friends do not count; a node of an op in ``weights``
    counts as that many, see ``effective_size``), except a cluster of 2 or more
    that is the whole graph.

    A node of an op in ``DATA_DEPENDENT`` (Where) never shares a cluster with a consumer:
    its result's shape is known only when it has run, so it must leave its cluster.

    A contraction of clusters A and B is refused when a path leaves A and
    reaches B (or the reverse) through a node outside both: the merged cluster
    would then both feed and consume that node.  The search only visits nodes
    that come before B's last node in topological order, since no path into B
    can pass a later node; that keeps a 10,000-node graph fast.  The search walks
    the contracted graph (a cluster is one node), since the merged graph must stay
    acyclic as a whole, not only around A and B.
    """
    order = graph.topological()
    pos = {n.name: k for k, n in enumerate(order)}
    context = context or {}   # (both limits count effective ops: Identity/Const are free)
    cluster = {n.name: n.name for n in order if marks.get(n.name, "structural") is None}
    members = {c: {c} for c in cluster}
    last = {c: pos[c] for c in cluster}
    size = {c: effective_size(graph.nodes[c].op, weights) for c in cluster}
    succ = {n.name: [] for n in order}
    for n in order:
        for src in graph.sources(n):
            succ[src].append(n.name)
    dynamic = {c: {c} if graph.nodes[c].op in DATA_DEPENDENT else set() for c in cluster}

    def feeds_dynamic(a: str, b: str) -> bool:
        """Does a data-dependent node of cluster a feed a member of cluster b?"""
        return any(s in members[b] for w in dynamic[a] for s in succ[w])

    def find(x):
        while cluster[x] != x:
            cluster[x] = cluster[cluster[x]]
            x = cluster[x]
        return x

    # per cluster, the nodes outside it that its members feed (kept up to date on every
    # merge, so a search starts from them rather than walking all the members)
    leaving = {c: {s for s in succ[c] if s != c} for c in cluster}

    def unit(x: str) -> str:
        """The contracted graph's node that holds x: its cluster's root, or x itself."""
        return find(x) if x in cluster else x

    def path_avoiding(a: str, b: str, limit: int) -> bool:
        """Is there a path from cluster a into cluster b that leaves a∪b on the way?

        The walk is over the contracted graph: reaching any member of another cluster
        continues from all that cluster leads to (a path a -> u -> C -> b may enter C at
        one member and leave it at another).  A unit can lead into b only if it starts
        before b's last node; a cluster's root is its first node in topological order.
        """
        b_members = members[b]
        stack = [s for s in leaving[a] if s not in b_members]
        seen = set()
        while stack:
            x = stack.pop()
            if x in b_members:
                return True
            u = unit(x)
            if u in seen or pos[u] > limit:
                continue
            seen.add(u)
            stack.extend(leaving[u] if u in members else succ[x])
        return False

    for n in order:
        if n.name not in cluster:
            continue
        for src, _ in n.inputs:
            if src not in cluster or context.get(src) != context.get(n.name):
                continue
            a, b = find(src), find(n.name)
            if a == b:
                continue
            if max_size and size[a] + size[b] > max_size:
                continue
            if feeds_dynamic(a, b) or feeds_dynamic(b, a):
                continue
            if path_avoiding(a, b, last[b]) or path_avoiding(b, a, last[a]):
                continue
            keep, gone = (a, b) if pos[a] < pos[b] else (b, a)
            cluster[gone] = keep
            members[keep] |= members.pop(gone)
            leaving[keep] = {s for s in leaving[keep] | leaving.pop(gone) if s not in members[keep]}
            last[keep] = max(last[keep], last.pop(gone))
            size[keep] += size.pop(gone)
            dynamic[keep] |= dynamic.pop(gone)
    # A cluster holding every node of the graph that computes anything is kept at any
    # size from 2 effective ops: it replaces all of TF's ops by one launch, so it can
    # only save overhead. (Not from 1: a lone one-pass op gains nothing from fusion.
    # TF runs each eager op as a one-op function graph; the graph pass never clusters
    # those, whatever their size: api/autojit.py.)
    whole = len(members) == 1 and all(why is None for why in marks.values())
    out = [sorted(names, key=pos.get) for root, names in members.items()
           if size[root] >= min_size or (whole and size[root] >= 2)]
    return sorted(out, key=lambda c: pos[c[0]])


# Ops whose result's shape depends on their input's values (lower/where.py).
DATA_DEPENDENT = frozenset({"Where"})

_FREE = frozenset({"Identity", "Const", "IdentityN", "StopGradient", "Snapshot", "NoOp"}) | STRUCTURAL


def effective_size(op: str, weights: dict | None = None) -> int:
    """How many ops a node of ``op`` counts as in a cluster's size: 0 for the free ones,
    ``weights[op]`` for an op whose TF kernel is several passes over memory, else 1."""
    if op in _FREE:
        return 0
    return (weights or {}).get(op, 1)
