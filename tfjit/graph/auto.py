"""Auto-clustering of a whole graph: candidates, clusters, rewritten graph.

Used by every auto-mode front door: the graph pass that sees Session graphs
and tf.function bodies (api/autojit.py), ``tfjit.function(jit_compile=None)``
(api/autocluster.py) and ``tfjit.explain`` (api/explain.py).

Steps (after XLA's MarkForCompilationPass; tfjit's own code):
1. candidates: marking (graph/mark.py: a lowering exists and compiling keeps
   the op's meaning) plus auto mode's own filters, each with a reason: the
   ``--tfjit_ops_to_cluster`` allow-list, ``--tfjit_cluster_exclude_ops``,
   ``_XlaCompile=false``/``_tfjit_compile=false`` opt-outs, non-CPU devices,
   and nodes whose value a compile needs but that read a variable (left to TF,
   their output reaches the cluster as a constant argument: graph/const_args.py);
2. a context per node (device, v1 control-flow frame, predicates it is
   conditional on): clusters never span two contexts;
3. cycle-free edge contraction (graph/cluster.py), size limits in effective
   ops: Identity/Const count 0, an op whose TF kernel makes several passes over
   memory (Softmax: 4) counts that many, so it is worth a cluster on its own;
   a cluster never takes or returns a TensorList (variant): the nodes on such
   an edge are refused and the clusters are formed again;
4. each cluster's definition, its fallback function and the rewritten graph.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools

from tfjit import settings
from tfjit.graph import cluster as clustering
from tfjit.graph import const_args, fallback, random_state
from tfjit.graph.graphdef import Graph
from tfjit.graph.mark import mark
from tfjit.graph.rewrite import rewrite
from tfjit.lower.registry import multi_pass_ops

OPT_OUT_ATTRS = ("_XlaCompile", "_tfjit_compile")
SCOPE_ATTR = "_tfjit_scope"     # set by api/replica.py: a tfjit.function's node in a replica
CROSS_REPLICA = ("cross-replica (a collective, merge_call's ops or code around strategy.run): "
                 "TensorFlow runs it between the compiled segments")
_ENTER = frozenset({"Enter", "RefEnter"})
_EXIT = frozenset({"Exit", "RefExit"})
_SWITCH = frozenset({"Switch", "RefSwitch"})
_MERGE = frozenset({"Merge", "RefMerge"})

_counter = itertools.count()     # process-wide cluster numbering, as XLA's cluster_N


@dataclasses.dataclass
class Options:
    min_size: int = 4
    max_size: int = 0                  # 0: unbounded
    ops_to_cluster: frozenset = frozenset()   # empty: every op with a lowering
    exclude_ops: frozenset = frozenset()
    deterministic_names: bool = False
    fallback: bool = True              # give launch nodes their original subgraph
    scope_only: bool = False           # cluster only nodes with SCOPE_ATTR (api/replica.py)
    # op -> effective ops a node of it counts as (see op_weights())
    weights: dict = dataclasses.field(default_factory=lambda: op_weights())

    @classmethod
    def from_flags(cls, flags) -> "Options":
        return cls(flags.tfjit_min_cluster_size, flags.tfjit_max_cluster_size,
                   op_list(flags.tfjit_ops_to_cluster, "--tfjit_ops_to_cluster"),
                   op_list(flags.tfjit_cluster_exclude_ops, "--tfjit_cluster_exclude_ops"),
                   flags.tfjit_deterministic_cluster_names)

    @staticmethod
    def scoped(options: "Options") -> "Options":
        """For a graph with nodes of tfjit.function calls in replicas: those nodes are
        must-compile code, so no size limits, no op filters and no fallback."""
        return dataclasses.replace(options, min_size=1, max_size=0, ops_to_cluster=frozenset(),
                                   exclude_ops=frozenset(), fallback=False, scope_only=True)


# Ops that TensorFlow itself replaces, after tfjit's pass, by a oneDNN kernel making a
# single fused pass (MklLayoutRewritePass: Softmax -> _MklSoftmax) when oneDNN is on.
_ONEDNN_FUSED = frozenset({"Softmax"})


def op_weights() -> dict:
    """{op: effective ops it counts as}: the passes TF's own kernel makes
    (lower/registry.py ``tf_passes``), except for ops TF will run as one fused oneDNN
    pass: tfjit's kernel is not faster than those, so they count as 1 again."""
    weights = multi_pass_ops()
    if settings.onednn_enabled():
        weights = {op: n for op, n in weights.items() if op not in _ONEDNN_FUSED}
    return weights


def op_list(text: str, flag: str) -> frozenset:
    """Op names from a comma-separated flag; an op TensorFlow doesn't know is an error."""
    from tensorflow.python.framework import op_def_registry

    from tfjit.settings import FlagError
    names = frozenset(x.strip() for x in text.split(",") if x.strip())
    unknown = sorted(n for n in names if op_def_registry.get(n) is None)
    if unknown:
        raise FlagError(f"{flag}: unknown TensorFlow op(s) {', '.join(unknown)}")
    return names


@dataclasses.dataclass
class Result:
    graph: Graph
    marks: dict                # node -> None | reason it is not compiled
    specs: list                # ClusterSpec per cluster, in graph order
    graph_def: object = None   # the rewritten GraphDef (None when nothing was clustered)

    def cluster_of(self) -> dict:
        return {n: s.name for s in self.specs for n in s.nodes}


def candidates(graph: Graph, options: Options) -> dict:
    """{node: None | reason}: marking plus auto mode's own filters."""
    marks = mark(graph)
    for name, why in marks.items():
        node = graph.nodes[name]
        if options.scope_only and SCOPE_ATTR not in node.attrs:
            marks[name] = CROSS_REPLICA
        elif why:
            continue
        elif options.ops_to_cluster and node.op not in options.ops_to_cluster:
            marks[name] = f"{node.op} is not in --tfjit_ops_to_cluster"
        elif node.op in options.exclude_ops:
            marks[name] = f"{node.op} is excluded by --tfjit_cluster_exclude_ops"
        elif any(node.attrs.get(a) is False for a in OPT_OUT_ATTRS):
            marks[name] = "opted out of compilation (_XlaCompile=false)"
        elif _device_kind(node.device) not in ("", "CPU"):
            marks[name] = f"placed on {node.device}: tfjit compiles for CPU"
    return marks


def _device_kind(device: str) -> str:
    for part in device.split("/"):
        if part.startswith("device:"):
            part = part[len("device:"):]
        kind = part.split(":")[0].upper()
        if kind in ("CPU", "GPU", "TPU") or part.startswith("device"):
            return kind
    return ""


def contexts(graph: Graph) -> dict:
    """{node: (device, frame, predicates, scope)}: nodes that may share a cluster.

    The frame follows v1 loops (Enter opens ``frame_name``, Exit closes it);
    the predicates are the Switch outputs a node's value depends on (a Merge
    keeps only those common to all its inputs), so a cluster never mixes the
    two sides of a conditional or code inside and outside a loop; the scope
    (api/replica.py) keeps two calls of a tfjit.function in replicas apart.
    """
    frame_out, preds_out, out = {}, {}, {}
    for node in graph.topological():
        srcs = graph.sources(node)
        frame = next((frame_out[s] for s in srcs if s in frame_out), "")
        inputs = [(s, k) for s, k in node.inputs if s in preds_out] + \
                 [(s, -1) for s in node.control_inputs if s in preds_out]
        sets = [preds_out[s] | ({(s, k)} if graph.nodes[s].op in _SWITCH and k >= 0 else set())
                for s, k in inputs]
        if node.op in _MERGE:
            preds = frozenset.intersection(*map(frozenset, sets)) if sets else frozenset()
        else:
            preds = frozenset().union(*sets) if sets else frozenset()
        out[node.name] = (node.device, frame, preds, node.attrs.get(SCOPE_ATTR))
        preds_out[node.name] = preds
        if node.op in _ENTER:
            frame_out[node.name] = f"{frame}/{node.attrs.get('frame_name', b'')!r}"
        elif node.op in _EXIT:
            frame_out[node.name] = frame.rsplit("/", 1)[0]
        else:
            frame_out[node.name] = frame
    return out


def cluster_graph(graph_def, tensor_info, options: Options, outputs: list | None = None,
                  rewrite_graph: bool = True) -> Result:
    """Finds the clusters of ``graph_def`` and (optionally) rewrites it.

    ``tensor_info(node, index) -> (dtype enum, shape or None)``; ``outputs``
    are tensors read from outside the graph (a function's results), which
    clusters must produce even when no node of the graph reads them.
    Stateful random nodes are split first (graph/random_state.py): their state
    stays with TensorFlow and their fill becomes a candidate.
    """
    graph_def, tensor_info, _ = random_state.split(graph_def, tensor_info)
    graph = Graph(graph_def)
    marks = candidates(graph, options)
    marks.update(const_args.unconstant_refusals(graph, marks, tensor_info))
    ctx = contexts(graph)
    while True:
        groups = clustering.auto_clusters(graph, marks, options.min_size, options.max_size or None,
                                          ctx, options.weights)
        crossing = _variant_crossings(graph, groups, tensor_info, outputs or [])
        if not crossing:
            break
        for name in crossing:
            marks[name] = ("a TensorList (variant tensor) would cross the cluster's boundary: "
                           "tfjit compiles lists only inside one cluster")
    used_outside = {}
    for node in graph.nodes.values():
        for src in node.inputs:
            used_outside.setdefault(src[0], set()).add((src, node.name))
    prefix = _name_prefix(graph_def, options)
    specs = []
    for names in groups:
        inside = set(names)
        outs = [src for n in names for src, reader in sorted(used_outside.get(n, ()))
                if reader not in inside]
        outs += [o for o in outputs or () if o[0] in inside]
        outs = list(dict.fromkeys(outs))
        name = f"cluster_{prefix}{len(specs) if prefix else next(_counter)}"
        specs.append(clustering.extract(graph, names, tensor_info, outputs=outs, name=name))
    result = Result(graph, marks, specs)
    if specs and rewrite_graph:
        fallbacks = ({s.key: fallback.function_def(s.graph_def, s.key) for s in specs}
                     if options.fallback else None)
        result.graph_def, _ = rewrite(graph_def, specs, tensor_info, fallbacks)
    return result


_DT_VARIANT = 21


def _variant_crossings(graph: Graph, groups: list, tensor_info, outputs: list) -> set:
    """Clustered nodes that would take or give a variant tensor across a cluster boundary."""
    owner = {n: k for k, names in enumerate(groups) for n in names}
    bad = set()
    for node in graph.nodes.values():
        for src in node.inputs:
            a, b = owner.get(src[0]), owner.get(node.name)
            if a != b and tensor_info(*src)[0] == _DT_VARIANT:
                bad |= {n for n, k in ((src[0], a), (node.name, b)) if k is not None}
    for src in outputs:
        if src[0] in owner and tensor_info(*src)[0] == _DT_VARIANT:
            bad.add(src[0])
    return bad


def _name_prefix(graph_def, options: Options) -> str:
    """Deterministic names: a fingerprint of the graph, then the cluster's index."""
    if not options.deterministic_names:
        return ""
    digest = hashlib.sha256(graph_def.SerializeToString(deterministic=True)).hexdigest()
    return digest[:8] + "_"


def is_clusterable_graph(graph_def) -> bool:
    """False for graphs tfjit made (launch nodes, fallback bodies): never cluster twice."""
    for nd in graph_def.node:
        if nd.op == "TfjitLaunch" or fallback.FALLBACK_ATTR in nd.attr:
            return False
    return True


def effective_ops(graph: Graph, names, weights: dict | None = None) -> int:
    """The size of a cluster as the min/max cluster size flags count it."""
    weights = op_weights() if weights is None else weights
    return sum(clustering.effective_size(graph.nodes[n].op, weights) for n in names)


# scope -> the names of its nodes (api/replica.py records them).  Grappler's remapper,
# which runs before the graph pass, replaces a MatMul + BiasAdd + Relu by one
# _FusedMatMul named as the last of them, without the scope attribute;
# restore_scopes gives it back.
SCOPE_NAMES: dict = {}


def restore_scopes(graph_def) -> None:
    """Gives ``SCOPE_ATTR`` back to nodes that grappler made from scoped ones: a node
    without it whose name is a node of scope S and which reads a node of scope S
    (both, so that a node of another graph with the same name is never taken in)."""
    scope_of = {nd.name: nd.attr[SCOPE_ATTR].s for nd in graph_def.node if SCOPE_ATTR in nd.attr}
    for _ in range(2):          # a fused node may read another fused node
        for nd in graph_def.node:
            if nd.name in scope_of:
                continue
            inputs = {scope_of.get(i.lstrip("^").split(":")[0]) for i in nd.input} - {None}
            scope = next((s for s in inputs if nd.name in SCOPE_NAMES.get(s, ())), None)
            if scope is not None:
                nd.attr[SCOPE_ATTR].s = scope
                scope_of[nd.name] = scope
