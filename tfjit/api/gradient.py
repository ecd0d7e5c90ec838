"""The gradient of TfjitLaunch: the backward of the cluster's original subgraph, compiled too.

Registered with ``tf.RegisterGradient`` rather than wrapped around the front door
with ``tf.custom_gradient``: a registered gradient is found wherever TensorFlow
meets the op — an eager tape over ``tfjit.function``, a tape inside an outer
``tf.function``, the function graphs that auto mode rewrites — and it sees the
op's real inputs, captured variable handles included, so ``tape.gradient(loss,
[v])`` reaches variables the cluster reads with no bookkeeping at the front door.

The backward of a cluster is a must-compile ``tfjit.function`` of (cluster
inputs, output gradients): it imports the cluster's definition (the launch
node's ``cluster_def``), differentiates it with ``tf.gradients`` and is compiled
by tfjit as its own cluster (recomputing what it needs of the forward, fused into
the gradient kernels).  Being a tfjit.function itself, it is differentiable in
turn.  One backward is kept per cluster and set of differentiated outputs.

Limits: inputs and outputs that are not floating point get no gradient (None);
variables are read again when the gradient runs (TF uses the values read by the
forward: they differ only if the variable was assigned in between); a cluster
that assigns a variable is not differentiable (an InvalidArgumentError says so).
"""
from __future__ import annotations

import threading

import tensorflow as tf
from tensorflow.python.ops import handle_data_util

from tfjit.graph.cluster import ARG_PREFIX, RET_PREFIX

# tfjit.Function, which a backward function is.  api/function.py sets it: it imports
# this module (to register the gradient), so importing it here would make a cycle.
FUNCTION = None

_lock = threading.Lock()
_backwards: dict = {}     # (cluster key, differentiated outputs) -> tfjit Function


def _is_float(dtype) -> bool:
    """Whether TF differentiates tensors of ``dtype`` (floats and complex numbers)."""
    d = tf.as_dtype(dtype)
    return d.is_floating or d.is_complex


class _Definition:
    """What the gradient needs to know about one cluster definition."""

    def __init__(self, key: str, cluster_def: bytes):
        from tensorflow.core.framework import graph_pb2
        self.key = key
        self.graph_def = graph_pb2.GraphDef.FromString(cluster_def)
        args, dtypes = {}, {}
        for nd in self.graph_def.node:
            if nd.name.startswith(ARG_PREFIX) and nd.op == "Placeholder":
                args[nd.name] = k = int(nd.name[len(ARG_PREFIX):])
                dtypes[k] = nd.attr["dtype"].type
        self.num_inputs = len(args)
        resource = tf.resource.as_datatype_enum
        readers = {}           # resource input -> dtypes it is read as
        self.writers = []      # (node, op, input) of nodes that update a variable
        for nd in self.graph_def.node:
            for text in nd.input:
                src = text.split(":")[0]
                if src not in args or dtypes[args[src]] != resource:
                    continue
                if nd.op == "ReadVariableOp":
                    readers.setdefault(args[src], []).append(nd.attr["dtype"].type)
                else:
                    self.writers.append((nd.name, nd.op, args[src]))
        self.differentiable = [
            k for k in range(self.num_inputs)
            if (_is_float(dtypes[k]) if dtypes[k] != resource
                else any(_is_float(d) for d in readers.get(k, ())))]


def _importable(graph_def):
    """A copy whose node names import_graph_def accepts (``_arg_0`` does not): ``t_arg_0``."""
    from tensorflow.core.framework import graph_pb2

    def rename(name: str) -> str:
        return "t" + name if name.startswith("_") else name

    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    for nd in out.node:
        nd.name = rename(nd.name)
        nd.input[:] = ["^" + rename(t[1:]) if t.startswith("^") else rename(t) for t in nd.input]
    return out


def _handle_spec(t):
    """(dtype enum, shape) of the variable behind a resource tensor, or None if unknown."""
    if t.dtype != tf.resource:
        return None
    data = handle_data_util.get_handle_data(t)
    if data is None or not data.is_set or not data.shape_and_type:
        return None
    st = data.shape_and_type[0]
    shape = None if st.shape.unknown_rank else tuple(d.size for d in st.shape.dim)
    return st.dtype, shape


def _backward_function(definition: _Definition, outputs: tuple):
    """The must-compile tfjit.function (*inputs, *dys, handle_specs) -> [grad or None per input].

    ``handle_specs`` (a Python value, so part of the trace key) gives the backward's
    resource inputs the dtype and shape of their variables: the imported reads then
    have static shapes, and so have the gradients' shape computations."""
    n_in, diff = definition.num_inputs, definition.differentiable
    graph_def = _importable(definition.graph_def)

    def backward(*tensors_and_specs):
        *tensors, handle_specs = tensors_and_specs
        xs, dys = tensors[:n_in], tensors[n_in:]
        for x, spec in zip(xs, handle_specs):
            if spec is not None:
                shape = None if spec[1] is None else [None if d < 0 else d for d in spec[1]]
                handle_data_util.set_handle_data(
                    x, handle_data_util.create_handle_data(tf.TensorShape(shape), tf.as_dtype(spec[0])))
        ys = tf.graph_util.import_graph_def(
            graph_def, input_map={f"t{ARG_PREFIX}{k}:0": x for k, x in enumerate(xs)},
            return_elements=[f"t{RET_PREFIX}{j}:0" for j in outputs], name="forward")
        grads = tf.gradients(ys, [xs[k] for k in diff], grad_ys=list(dys))
        result = [None] * n_in
        for k, g in zip(diff, grads):
            result[k] = tf.convert_to_tensor(g) if g is not None else None
        return result

    backward.__name__ = f"tfjit_grad_{definition.key[:12]}"
    return FUNCTION(backward, jit_compile=True, autograph=False)


def _backward_for(key: str, cluster_def: bytes, outputs: tuple):
    with _lock:
        fn = _backwards.get((key, outputs))
        if fn is None:
            definition = _Definition(key, cluster_def)
            if definition.writers:
                node, op, k = definition.writers[0]
                raise tf.errors.InvalidArgumentError(
                    None, None, f"tfjit cluster {key} is not differentiable: {op} {{{{node {node}}}}} "
                    f"updates the resource variable of input {k} (a gradient through a cluster "
                    "that assigns variables is not supported; compute it outside the function)")
            fn = _backwards[(key, outputs)] = _backward_function(definition, outputs)
        return fn


@tf.RegisterGradient("TfjitLaunch")
def _launch_gradient(op, *dys):
    """Gradients for every input of one TfjitLaunch node (None where there is none)."""
    from tfjit.api.service import SERVICE
    key = op.get_attr("cluster")
    key = key.decode() if isinstance(key, bytes) else key
    cluster_def = op.get_attr("cluster_def") or SERVICE.definition(key)
    if not cluster_def:
        raise LookupError(f"tfjit cluster {key}: no definition to differentiate")
    out_dtypes = op.get_attr("Tout")
    outputs = tuple(j for j, (dy, d) in enumerate(zip(dys, out_dtypes))
                    if dy is not None and _is_float(d))
    inputs = list(op.inputs)
    if not outputs:
        return [None] * len(inputs)
    backward = _backward_for(key, cluster_def, outputs)
    handle_specs = tuple(_handle_spec(t) for t in inputs)
    grads = backward(*inputs, *[tf.convert_to_tensor(dys[j]) for j in outputs], handle_specs)
    return list(grads)
