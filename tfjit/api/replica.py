"""``tfjit.function`` called by ``strategy.run``: compiled code between collectives.

A replica function that synchronises (``all_reduce``, ``merge_call``, an
optimizer's gradient aggregation) cannot be traced into a function of its own:
MirroredStrategy runs ``merge_call``'s function on the main thread, in the graph
``strategy.run`` is traced into, and refuses to be called from a nested graph.
TF's XLA avoids this by compiling all replicas as one XLA computation (its
all-reduce inside); on CPU that fails (a variable of CPU:1 read on CPU:0).

tfjit keeps TensorFlow's engine for the devices and compiles each replica:

1. the Python function runs *inline*, in the graph being traced (the one
   ``strategy.run`` is traced into), so ``merge_call`` works as without jit;
2. every op this replica's thread creates there is recorded (a device function:
   TensorFlow's device stack is per thread, so other replicas' ops and those
   ``merge_call`` creates on the main thread are not seen);
3. must-compile still holds: a recorded op tfjit cannot compile is an
   InvalidArgumentError naming it, now (a ``fall_back`` function, Keras's
   "auto", leaves the replica's ops to TensorFlow instead; ``jit_compile=None``
   leaves just the ops it cannot compile), unless it is a collective
   (``COLLECTIVE_OPS``): collectives stay TensorFlow ops, the one exception to
   must-compile;
4. the other recorded ops get ``_tfjit_scope``; the graph pass
   (api/autojit.py) clusters scoped nodes when the graph runs, whatever the
   auto-jit flags say: one context per scope and device, no minimum size, no
   fallback (a cluster that fails to compile fails the step).  The clusters
   end where a collective or the merge_call's cross-replica ops begin.

A collective inside control flow cannot be a boundary (the branch or body is one
function): TensorFlow refuses its merge_call, and tfjit says so as an
InvalidArgumentError naming the function.  Variables: the graph pass runs after
TensorFlow's placer, and clusters never span two devices (graph/auto.py
contexts), so each replica's cluster runs where its variables live.

Called eagerly by ``strategy.run`` (no enclosing tf.function), a function that
synchronises raises a clear error: wrap ``strategy.run`` in ``tf.function``, as
TensorFlow itself asks for such steps.
"""
from __future__ import annotations

import itertools

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.python.framework import ops

from tfjit.api import errors
from tfjit.graph import auto
from tfjit.graph.graphdef import Graph
from tfjit.graph.mark import mark

SCOPE_ATTR = auto.SCOPE_ATTR

# TensorFlow's cross-device ops: boundaries between compiled segments, never compiled.
COLLECTIVE_OPS = frozenset({
    "CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveGather",
    "CollectiveGatherV2", "CollectiveBcastSend", "CollectiveBcastRecv",
    "CollectiveBcastSendV2", "CollectiveBcastRecvV2", "CollectiveAllToAllV2",
    "CollectiveAllToAllV3", "CollectiveReduceScatterV2", "CollectiveInitializeCommunicator",
    "CollectiveAssignGroupV2", "NcclAllReduce", "NcclBroadcast", "NcclReduce",
    "_Send", "_Recv", "_HostSend", "_HostRecv",
})

_scopes = itertools.count()


def in_replica() -> bool:
    """Is this call inside ``strategy.run`` of a real strategy (not the default one)?
    Asked at every call: an empty strategy stack (the default graph's, per thread, where
    TF's strategies push their scopes and replica contexts) answers in half the time."""
    if not getattr(ops.get_default_graph(), "_distribution_strategy_stack", True):
        return False
    return tf.distribute.has_strategy() and tf.distribute.get_replica_context() is not None \
        and not tf.distribute.in_cross_replica_context()


def eager_sync_error(name: str, error: RuntimeError) -> tf.errors.InvalidArgumentError:
    return tf.errors.InvalidArgumentError(None, None, (
        f"tfjit.function {name} synchronises replicas (all_reduce, merge_call or an "
        "optimizer's gradient aggregation) and was called by strategy.run eagerly: call "
        "strategy.run inside a tf.function; tfjit then compiles each replica's code "
        f"between the collectives. TensorFlow said: {_merge_call_line(str(error))}"))


def _merge_call_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if "merge_call" in ln), text.strip())


def call(function, args, kwargs):
    """Runs ``function``'s Python function inline in the graph being traced, recording
    the ops this thread creates and scoping those tfjit compiles (module doc)."""
    graph = tf.compat.v1.get_default_graph()
    recorded = []

    def record(op):             # a device function: sees each op, changes nothing
        if op.graph is graph:
            recorded.append(op)
        return op.device

    fn = function._fn
    if function._trace_options.get("autograph", True):     # as tf.function would trace it
        from tensorflow.python.autograph.core import ag_ctx
        from tensorflow.python.autograph.impl import api as autograph
        fn = autograph.tf_convert(fn, ag_ctx.ControlStatusCtx(status=ag_ctx.Status.ENABLED))
    # Two per-thread hooks see the ops this thread creates: the control-dependency stack
    # (every op, also under colocate_with, which empties the device stack) and the device
    # stack (also under control_dependencies(None), which empties the other)
    seen = graph.control_dependencies([])
    try:
        with graph.device(record), seen:
            result = fn(*args, **kwargs)
    except RuntimeError as e:     # a merge_call inside tf.cond / tf.while_loop
        if "merge_call" not in str(e):
            raise
        raise tf.errors.InvalidArgumentError(None, None, (
            f"tfjit.function {function.name}: a cross-replica call (all_reduce, merge_call, an "
            "optimizer's gradient aggregation) inside control flow (tf.cond, tf.while_loop, a "
            "Python if/for over tensors) cannot be a boundary between compiled segments; move "
            f"it out of the control flow. TensorFlow said: {_merge_call_line(str(e))}")) from None
    created = {id(op): op for op in list(seen._seen_nodes) + recorded if op.graph is graph}
    _scope(function, graph, sorted(created.values(), key=lambda op: op._id))
    return result


def _scope(function, graph, recorded: list) -> None:
    if not recorded:
        return
    from tfjit.api import autojit
    name = function.name
    view = Graph(graph.as_graph_def())
    marks = mark(view)
    refused = [(op.name, op.type, marks[op.name]) for op in recorded
               if marks.get(op.name) and op.type not in COLLECTIVE_OPS]
    if refused and function.jit_compile is None:   # auto-clustering: TF runs those ops
        left = {n for n, _, _ in refused}
        recorded = [op for op in recorded if op.name not in left]
    elif refused:
        error = errors.unsupported(f"{name} (in a replica of {graph.name})", refused, graph)
        function._refuse(error)     # raises, unless a fall_back function: then TF runs it
        return
    scope = f"{name}/{next(_scopes)}".encode()
    value = attr_value_pb2.AttrValue(s=scope)
    for op in recorded:
        if op.type not in COLLECTIVE_OPS:
            op._set_attr(SCOPE_ATTR, value)
    auto.SCOPE_NAMES[scope] = frozenset(op.name for op in recorded if op.type not in COLLECTIVE_OPS)
    autojit.activate(must=True)
