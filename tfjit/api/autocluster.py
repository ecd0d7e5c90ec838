"""Auto-clustering of one traced function (``tfjit.function(jit_compile=None)``).

Compile what can be compiled, leave the rest to TensorFlow: the function's
graph is marked, clustered and rewritten with TfjitLaunch nodes, then run as a
function.  A cluster that fails to compile is left to TensorFlow (warned once);
auto mode never breaks a working program.
"""
from __future__ import annotations

import logging

import tensorflow as tf

from tfjit import config
from tfjit import dtypes as dt
from tfjit.api.service import SERVICE
from tfjit.api.tracing import tensor_info
from tfjit.graph import cluster as clustering
from tfjit.graph.graphdef import Graph
from tfjit.graph.mark import mark
from tfjit.graph.rewrite import rewrite

log = logging.getLogger("tfjit")


class AutoEntry:
    """A traced function with its compilable clusters replaced by launch nodes."""

    def __init__(self, cf):
        flags = config.flags()
        gd = cf.graph.as_graph_def()
        graph = Graph(gd)
        self.marks = mark(graph)
        info = tensor_info(cf.graph)
        fn_outputs = [(t.op.name, t.value_index) for t in cf.outputs]
        self.specs, self.signatures = [], []
        groups = clustering.auto_clusters(graph, self.marks, flags.tfjit_min_cluster_size,
                                          flags.tfjit_max_cluster_size or None)
        SERVICE.install()
        for names in groups:
            inside = set(names)
            outs = [src for node in graph.nodes.values() if node.name not in inside
                    for src in node.inputs if src[0] in inside]
            outs += [o for o in fn_outputs if o[0] in inside]
            outs = list(dict.fromkeys(outs))
            spec = clustering.extract(graph, names, info, outputs=outs, name=f"cluster_{len(self.specs)}")
            compiled, signature = self._compile_ahead(spec, info)
            if compiled:
                self.specs.append(spec)
                self.signatures.append(signature)
        new_gd, remap = rewrite(gd, self.specs, info)
        self.graph_def = new_gd
        placeholders = [t.op.name for t in cf.inputs]
        returns = [remap.get(o, f"{o[0]}:{o[1]}") for o in fn_outputs]
        self.captures = list(cf.captured_inputs)
        self.structured_outputs = cf.structured_outputs

        def imported(*flat):
            return tf.graph_util.import_graph_def(
                new_gd, input_map={f"{p}:0": a for p, a in zip(placeholders, flat)},
                return_elements=returns, name="")

        specs = [tf.TensorSpec(t.shape, t.dtype) for t in cf.inputs]
        self.fn = tf.compat.v1.wrap_function(imported, specs)

    def clusters(self) -> list:
        """[(cluster name, node names, pipeline.Compiled or None if compiled lazily)]."""
        out = []
        for spec, signature in zip(self.specs, self.signatures):
            out.append((spec.name, spec.nodes, SERVICE.get(spec.key, signature) if signature else None))
        return out

    def _compile_ahead(self, spec, info) -> bool:
        """Compiles a cluster whose shapes are static; False if it must stay with TF."""
        SERVICE.register(spec.key, spec.graph_def)
        infos = [info(*src) for src in spec.inputs]
        if any(s is None or None in s for _, s in infos):
            return True, None   # compiled lazily by the launch op for each concrete signature
        signature = tuple((dt.from_tf_enum(e), tuple(s)) for e, s in infos)
        try:
            SERVICE.get(spec.key, signature, name=spec.name)
            return True, signature
        except Exception as e:   # auto mode: any compile failure leaves the cluster to TF
            log.warning("tfjit: %s left to TensorFlow: %s", spec.name, e)
            return False, None

    def __call__(self, flat_tensors):
        outs = self.fn(*(list(flat_tensors) + self.captures))
        it = iter(outs)
        return tf.nest.map_structure(lambda x: next(it) if isinstance(x, tf.Tensor) else x,
                                     self.structured_outputs)
