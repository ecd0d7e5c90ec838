"""Auto mode for unmodified programs: the graph pass's Python side.

``activate()`` loads the op library and registers ``on_graph`` with its
auto-clustering pass (runtime/cluster_pass.cc), which TensorFlow runs on
every graph it executes: tf.compat.v1 Session graphs and every tf.function
body, Keras's included.  Whether a graph is clustered follows XLA's rules:

* ``--tfjit_auto_jit=-1``: never; ``1``/``2`` (or ``config.set_jit``): always;
  ``0`` (default): when the graph's ConfigProto asks for it
  (``optimizer_options.global_jit_level`` ON_1/ON_2);
* on CPU only with ``--tfjit_cpu_global_jit`` (as ``--tf_xla_cpu_global_jit``);
  without it nothing is clustered and that is said once.

Eager ops, which TF runs as one-op function graphs, are never clustered.

The pass never fails a run: any error here leaves that graph to TensorFlow
(the op library logs the reason).  Nodes tfjit leaves unclustered get
``_XlaCompile=false`` so TensorFlow's own XLA does not compile them instead.
"""
from __future__ import annotations

import collections
import logging
import threading

from tfjit import settings

log = logging.getLogger("tfjit")

_lock = threading.Lock()
_active = False
_said = set()       # messages logged once per process
stats = {"graphs_seen": 0, "graphs_clustered": 0, "clusters": 0}
recent = collections.deque(maxlen=32)   # graph/auto.Result of the latest clustered graphs


def _once(key: str, level: int, message: str, *args) -> None:
    if key not in _said:
        _said.add(key)
        log.log(level, message, *args)


def activate(must: bool = False) -> None:
    """Turns the graph pass on for this process (idempotent).  ``must``: a failed op
    library build raises (tfjit.function in a replica needs the pass) instead of
    leaving every graph to TensorFlow."""
    global _active
    from tfjit.api.service import SERVICE
    from tfjit.graph.auto import Options
    from tfjit.runtime import launch
    from tfjit.runtime.build import BuildError
    with _lock:
        if _active:
            return
        Options.from_flags(settings.flags())     # a bad op list is an error now, not per graph
        try:
            SERVICE.install()
        except BuildError as e:   # auto mode never breaks a working program
            if must:
                raise
            _once("build", logging.WARNING, "tfjit: auto-clustering is off in this process, "
                  "TensorFlow runs every graph itself: %s", e)
            return
        launch.set_pass_callback(on_graph)
        _active = True


def is_active() -> bool:
    """Whether the graph pass runs (``activate`` succeeded and no ``deactivate`` since)."""
    return _active


def deactivate() -> None:
    """Unregisters the graph pass (graphs already rewritten keep their launch nodes)."""
    global _active
    from tfjit.runtime import launch
    with _lock:
        if _active:
            launch.set_pass_callback(None)
            _active = False


def wanted(jit_level: int) -> bool:
    """Does auto mode cluster a graph whose ConfigProto says ``jit_level``?"""
    flags = settings.flags()
    if flags.tfjit_auto_jit < 0:
        return False
    if flags.tfjit_auto_jit == 0 and jit_level not in (1, 2):   # OptimizerOptions ON_1, ON_2
        return False
    if not flags.tfjit_cpu_global_jit:
        _once("cpu", logging.WARNING, "tfjit: auto mode is on but clusters nothing on CPU "
              "without --tfjit_cpu_global_jit (as XLA's --tf_xla_cpu_global_jit)")
        return False
    return True


def on_graph(data: bytes, is_function: bool, jit_level: int,
             function_name: str = "") -> bytes | None:
    """The pass callback: the rewritten GraphDef's bytes, or None to leave it.

    A graph holding nodes of a tfjit.function called in a replica (api/replica.py:
    ``_tfjit_scope``) has those clustered, and only those, whatever the flags say."""
    stats["graphs_seen"] += 1
    if is_eager_op(function_name):
        return None
    scoped = _SCOPE_ATTR.encode() in data     # cheap: attr names are plain bytes in the proto
    if not scoped and not wanted(jit_level):
        return None
    from tensorflow.core.framework import attr_value_pb2, graph_pb2

    from tfjit.api.service import SERVICE
    from tfjit.graph import auto, debug
    gd = graph_pb2.GraphDef()
    gd.ParseFromString(data)
    scoped = scoped and any(_SCOPE_ATTR in nd.attr for nd in gd.node)
    if not scoped and (not wanted(jit_level) or not auto.is_clusterable_graph(gd)):
        return None
    info = _tensor_info(gd)
    for nd in gd.node:
        del nd.attr[_TYPES_ATTR]
    options = auto.Options.from_flags(settings.flags())
    if scoped:
        auto.restore_scopes(gd)
        options = auto.Options.scoped(options)
    result = auto.cluster_graph(gd, info, options)
    debug.maybe_dump_clustering(gd, result)
    if result.graph_def is None:
        return None
    for spec in result.specs:
        SERVICE.register(spec.key, spec.graph_def, name=spec.name)
    no_xla = attr_value_pb2.AttrValue(b=False)
    for nd in result.graph_def.node:
        if nd.op != "TfjitLaunch" and "_XlaCompile" not in nd.attr:
            nd.attr["_XlaCompile"].CopyFrom(no_xla)
    recent.append(result)
    stats["graphs_clustered"] += 1
    stats["clusters"] += len(result.specs)
    log.info("tfjit: clustered %s graph: %s", "function" if is_function else "session",
             ", ".join(f"{s.name} ({len(s.nodes)} nodes)" for s in result.specs))
    return result.graph_def.SerializeToString()


_TYPES_ATTR = "_tfjit_output_types"   # set by cluster_pass.cc
_SCOPE_ATTR = "_tfjit_scope"          # api/replica.py SCOPE_ATTR (not imported: it imports TF)
# TensorFlow runs each eager op as a one-op function of this name prefix
# (WrapInCallOp in core/common_runtime/eager/execute.cc).
_EAGER_OP_PREFIX = "__wrapped__"


def is_eager_op(function_name: str) -> bool:
    """Is this graph an eager op that TF wrapped in a function?  Those are never
    clustered, as XLA never auto-clusters eager ops: eager code asks for op-by-op
    execution, often with changing shapes, and a compile per op and shape costs far
    more than one op's kernel could win back."""
    return function_name.startswith(_EAGER_OP_PREFIX)


def _tensor_info(gd):
    """``info(node, index)`` from the dtypes the pass attached and any known shapes."""
    types, shapes = {}, {}
    for nd in gd.node:
        types[nd.name] = list(nd.attr[_TYPES_ATTR].list.type) if _TYPES_ATTR in nd.attr else []
        if "_output_shapes" in nd.attr:
            shapes[nd.name] = nd.attr["_output_shapes"].list.shape

    def info(node: str, index: int):
        shape = None
        if node in shapes and index < len(shapes[node]):
            proto = shapes[node][index]
            if not proto.unknown_rank:
                shape = tuple(None if d.size < 0 else d.size for d in proto.dim)
        return types[node][index], shape
    return info
