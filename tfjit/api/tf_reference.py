"""TensorFlow as the reference of ``tfjit-run-module --reference=tf``.

A dumped module ``module_NNNN.<name>.before_optimizations.txt`` has its cluster's
self-contained GraphDef next to it (``module_NNNN.<name>.cluster.pbtxt``, see
api/dump.py): placeholders ``_arg_<k>`` are the module's parameters, identities
``_retval_<j>`` its outputs.  ``TFReference`` runs that graph with TF's own
executor, so a module can be checked against the program it came from and not
only against tfjit's own interpreter (which shares tfjit's reading of TF's ops).
"""
from __future__ import annotations

import os

import numpy as np

from tfjit.graph.cluster import ARG_PREFIX, RET_PREFIX
from tfjit import dtypes as dt
from tfjit.ir.module import IRError

_MODULE_SUFFIXES = (".before_optimizations.txt", ".after_optimizations.txt")
CLUSTER_SUFFIX = ".cluster.pbtxt"
# Every node is renamed into this scope before import: TF's importer refuses node names
# that start with "_", such as the cluster's _arg_<k> (its name= prefix does not help).
_SCOPE = "cluster"


def _scoped(gd):
    """A copy of ``gd`` with every node name, and every input naming one, under _SCOPE."""
    out = type(gd)()
    out.CopyFrom(gd)
    for node in out.node:
        node.name = f"{_SCOPE}/{node.name}"
        node.input[:] = [f"^{_SCOPE}/{i[1:]}" if i.startswith("^") else f"{_SCOPE}/{i}"
                         for i in node.input]
    return out


def cluster_graph_path(module_path: str) -> str:
    """``X.cluster.pbtxt`` for ``X.before_optimizations.txt`` (or ``.after_…``)."""
    for suffix in _MODULE_SUFFIXES:
        if module_path.endswith(suffix):
            return module_path[:-len(suffix)] + CLUSTER_SUFFIX
    raise IRError(f"{module_path}: not a dumped module (module_NNNN.<name>.before_optimizations.txt); "
                  "name the cluster graph with --tf_graph")


class TFReference:
    """Runs a cluster GraphDef (text form) in TF for a parsed module's inputs."""

    def __init__(self, path: str, module):
        import tensorflow as tf
        from google.protobuf import text_format
        from tensorflow.core.framework import graph_pb2
        from tensorflow.core.protobuf import config_pb2
        if not os.path.exists(path):
            raise IRError(f"no TF cluster graph at {path} (dumps write one for modules that came "
                          "from a TF graph)")
        gd = graph_pb2.GraphDef()
        with open(path) as fh:
            try:
                text_format.Parse(fh.read(), gd)
            except text_format.ParseError as e:
                raise IRError(f"{path}: not a GraphDef in text form: {e}") from None
        nodes = {n.name: n for n in gd.node}
        self.feeds, self.fetches = [], []
        counts = len(set(module.output_rows.values()))     # row counts: not TF's outputs
        self.params = module.boundary_params()
        self.outputs = module.boundary_outputs()[:len(module.outputs) - counts]
        for k, (dtype, shape) in enumerate(self.params):
            node = nodes.get(f"{ARG_PREFIX}{k}")
            if node is None or node.op != "Placeholder":
                raise IRError(f"{path}: no placeholder {ARG_PREFIX}{k} for parameter {k}")
            if node.attr["dtype"].type != dtype.tf_enum:
                raise IRError(f"{path}: {node.name} has TF dtype {node.attr['dtype'].type}, "
                              f"parameter {k} is {dtype.name}")
            dims = [d.size for d in node.attr["shape"].shape.dim]
            if not node.attr["shape"].shape.unknown_rank and (
                    len(dims) != len(shape) or any(d not in (-1, s) for d, s in zip(dims, shape))):
                raise IRError(f"{path}: {node.name} has shape {dims}, parameter {k} is {list(shape)}")
            self.feeds.append(f"{_SCOPE}/{node.name}:0")
        extra = [n for n in nodes if n.startswith(ARG_PREFIX) and
                 f"{_SCOPE}/{n}:0" not in self.feeds]
        if extra:
            raise IRError(f"{path}: placeholders {extra} have no module parameter")
        for j in range(len(self.outputs)):
            if f"{RET_PREFIX}{j}" not in nodes:
                raise IRError(f"{path}: no {RET_PREFIX}{j} for output {j}")
            self.fetches.append(f"{_SCOPE}/{RET_PREFIX}{j}:0")
        self.graph = tf.Graph()
        with self.graph.as_default():
            try:
                tf.graph_util.import_graph_def(_scoped(gd), name="")
            except ValueError as e:
                raise IRError(f"{path}: TensorFlow cannot import the graph: {e}") from None
        # TF's own executor, never TF's XLA: global_jit_level OFF.
        opts = config_pb2.OptimizerOptions(global_jit_level=config_pb2.OptimizerOptions.OFF)
        self.session = tf.compat.v1.Session(graph=self.graph, config=config_pb2.ConfigProto(
            graph_options=config_pb2.GraphOptions(optimizer_options=opts)))
        self._errors = tf.errors.OpError

    def __call__(self, inputs: list) -> list:
        """The graph's outputs for ``inputs``; ValueError carries TF's error (as the
        compiled code reports a kernel's error)."""
        inputs = [dt.complex_of_view(x, d) if d.is_complex else x     # the IR's real views
                  for x, (d, _) in zip(inputs, self.params)]
        try:
            outs = self.session.run(self.fetches, dict(zip(self.feeds, inputs)))
        except self._errors as e:
            raise ValueError(f"TF: {e.message.splitlines()[0]}") from None
        return [dt.complex_view(o) if d.is_complex else np.asarray(o)
                for o, (d, _) in zip(outs, self.outputs)]

    def close(self) -> None:
        self.session.close()
