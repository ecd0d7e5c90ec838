"""Auto-clustering of one traced function (``tfjit.function(jit_compile=None)``).

Compile what can be compiled, leave the rest to TensorFlow: the function's
graph goes through the same auto-clustering as every graph in auto mode
(graph/auto.py), and the rewritten graph runs as a function.  Each launch
node carries its original subgraph, so a cluster that fails to compile runs
in TensorFlow instead (warned once): auto mode never breaks a working program.
"""
from __future__ import annotations

import tensorflow as tf

from tfjit import settings
from tfjit.api import binding
from tfjit.api.service import SERVICE
from tfjit.api.tracing import tensor_info
from tfjit.graph import auto, debug


class AutoEntry:
    """A traced function with its compilable clusters replaced by launch nodes."""
    cacheable = True

    def __init__(self, cf):
        gd = cf.graph.as_graph_def()
        fn_outputs = [(t.op.name, t.value_index) for t in cf.outputs]
        result = auto.cluster_graph(gd, tensor_info(cf.graph), auto.Options.from_flags(settings.flags()),
                                    outputs=fn_outputs)
        debug.maybe_dump_clustering(gd, result)
        self.result = result
        self.specs = result.specs
        SERVICE.install()
        for spec in self.specs:
            SERVICE.register(spec.key, spec.graph_def, name=spec.name)
        new_gd = result.graph_def if result.graph_def is not None else gd
        remap = {}
        for spec in self.specs:
            for k, src in enumerate(spec.outputs):
                remap[src] = f"tfjit/{spec.name}:{k}"
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
        """[(cluster name, node names, its latest pipeline.Compiled or None)]: a cluster
        compiles at its first run, so call the function first."""
        return [(s.name, s.nodes, SERVICE.latest.get(s.key)) for s in self.specs]

    def __call__(self, flat_tensors):
        outs = self.fn(*(list(flat_tensors) + self.captures))
        return binding.pack_outputs(self.structured_outputs, outs)
