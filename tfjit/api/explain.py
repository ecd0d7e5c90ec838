"""``tfjit.explain(fn)(*args)``: what auto mode would do with a function, and why.

Modelled on ``torch._dynamo.explain`` (XLA has no equivalent): the function is
traced for these arguments, clustered exactly as auto mode clusters it
(graph/auto.py, with the current flags), and nothing is compiled or run.  The
result lists the clusters with their op counts, and every op left to
TensorFlow with the reason; printing it shows both as tables.
"""
from __future__ import annotations

import collections
import dataclasses

from tfjit import settings


@dataclasses.dataclass
class ClusterInfo:
    name: str
    nodes: list
    op_counts: dict            # op type -> how many nodes of it

    @property
    def size(self) -> int:
        return len(self.nodes)


@dataclasses.dataclass
class ExplainOutput:
    clusters: list             # [ClusterInfo]
    left_out: list             # [(node, op, reason)]
    num_ops: int               # nodes that compute something (placeholders etc. excluded)
    # under tf.distribute (api/replica.py): [(node, op)] TensorFlow runs between the
    # compiled segments of the replicas: collectives, merge_call's ops, code around them
    boundaries: list = dataclasses.field(default_factory=list)

    @property
    def clustered_ops(self) -> int:
        return sum(c.size for c in self.clusters)

    def __str__(self) -> str:
        lines = [f"tfjit.explain: {len(self.clusters)} cluster(s) covering "
                 f"{self.clustered_ops} of {self.num_ops} ops; {len(self.left_out)} op(s) "
                 "left to TensorFlow", ""]
        if self.clusters:
            lines.append(f"{'cluster':<24} {'ops':>5}  op types")
            for c in self.clusters:
                kinds = ", ".join(f"{op} x{n}" if n > 1 else op
                                  for op, n in sorted(c.op_counts.items()))
                lines.append(f"{c.name:<24} {c.size:>5}  {kinds}")
            lines.append("")
        if self.boundaries:
            collectives = sorted({op for _, op in self.boundaries if op in _collectives()})
            lines.append(f"{len(self.boundaries)} op(s) between the replicas' compiled segments"
                         + (f" (collectives: {', '.join(collectives)})" if collectives else ""))
            lines.append("")
        if self.left_out:
            width = max(len(n) for n, _, _ in self.left_out)
            width = min(max(width, 4), 48)
            lines.append(f"{'node':<{width}}  {'op':<20} reason")
            for node, op, reason in self.left_out:
                lines.append(f"{node:<{width}}  {op:<20} {reason}")
        return "\n".join(lines)


def explain(fn, *, verbose: bool = True):
    """``explain(fn)(*args, **kwargs) -> ExplainOutput`` (printed unless verbose=False)."""
    def run(*args, **kwargs):
        out = analyse(fn, args, kwargs)
        if verbose:
            print(out)
        return out
    return run


def _concrete(fn, args, kwargs):
    import tensorflow as tf

    from tfjit.api.function import Function
    if isinstance(fn, Function):
        fn = fn._tf
    if not hasattr(fn, "get_concrete_function"):
        fn = tf.function(fn)
    return fn.get_concrete_function(*args, **kwargs)


def analyse(fn, args, kwargs) -> ExplainOutput:
    from tfjit.api.tracing import tensor_info
    from tfjit.graph import auto
    from tfjit.graph.mark import STRUCTURAL
    cf = _concrete(fn, args, kwargs)
    gd = cf.graph.as_graph_def()
    options = auto.Options.from_flags(settings.flags())
    scoped = any(auto.SCOPE_ATTR in nd.attr for nd in gd.node)
    if scoped:       # strategy.run of tfjit.functions: what the graph pass will compile
        options = auto.Options.scoped(options)
    outputs = [(t.op.name, t.value_index) for t in cf.outputs]
    result = auto.cluster_graph(gd, tensor_info(cf.graph), options, outputs=outputs,
                                rewrite_graph=False)
    clusters = []
    for spec in result.specs:
        counts = collections.Counter(result.graph.nodes[n].op for n in spec.nodes)
        clusters.append(ClusterInfo(spec.name, list(spec.nodes), dict(counts)))
    cluster_of = result.cluster_of()
    left_out = []
    num_ops = 0
    for node in result.graph.topological():
        if node.op in STRUCTURAL:
            continue
        num_ops += 1
        if node.name in cluster_of:
            continue
        why = result.marks.get(node.name) or (
            f"compilable, but its connected group is smaller than --tfjit_min_cluster_size="
            f"{options.min_size} effective ops (or was split to avoid a cycle)")
        left_out.append((node.name, node.op, why))
    boundaries = [(n, op) for n, op, why in left_out if why == auto.CROSS_REPLICA]
    return ExplainOutput(clusters, left_out, num_ops, boundaries)


def _collectives() -> frozenset:
    from tfjit.api.replica import COLLECTIVE_OPS
    return COLLECTIVE_OPS
