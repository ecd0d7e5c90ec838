"""A cluster's original subgraph as a TF function: what auto mode runs instead.

Every launch node that auto mode creates carries this function (attr
``fallback``), so a cluster that cannot be compiled for some signature runs
exactly the ops it replaced, in TensorFlow, with the same inputs and outputs.

The function is built from the cluster's self-contained definition (see
graph/cluster.py): ``_arg_<i>`` placeholders become input args ``arg_<i>``,
``_retval_<j>`` identities become output args ``ret_<j>``, and node inputs are
rewritten to FunctionDef's ``node:output_arg:index`` form using each op's
OpDef.  Every body node is tagged ``_tfjit_fallback`` so the auto-clustering
pass never clusters a fallback again.
"""
from __future__ import annotations

from tfjit.graph.functions import output_arg_names
from tfjit.graph.graphdef import ARG_PREFIX, RET_PREFIX

FALLBACK_ATTR = "_tfjit_fallback"


def function_name(key: str) -> str:
    return f"__tfjit_fallback_{key}"


def function_def(cluster_graph_def: bytes, key: str):
    """The FunctionDef of a cluster definition (serialised GraphDef bytes)."""
    from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2
    from tensorflow.python.framework import op_def_registry
    gd = graph_pb2.GraphDef()
    gd.ParseFromString(cluster_graph_def)
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = function_name(key)
    fdef.signature.is_stateful = False
    outputs = {}      # tensor name in the cluster graph -> FunctionDef reference
    rets = {}
    for nd in gd.node:
        if nd.name.startswith(ARG_PREFIX) and nd.op == "Placeholder":
            arg = fdef.signature.input_arg.add(name="arg_" + nd.name[len(ARG_PREFIX):])
            arg.type = nd.attr["dtype"].type
            outputs[nd.name] = outputs[nd.name + ":0"] = arg.name
    for nd in gd.node:
        if nd.name in outputs:
            continue
        if nd.name.startswith(RET_PREFIX):
            rets[int(nd.name[len(RET_PREFIX):])] = (nd.input[0], nd.attr["T"].type)
            continue
        op_def = op_def_registry.get(nd.op)
        if op_def is None:
            raise ValueError(f"fallback for cluster {key}: unknown op {nd.op} (node {nd.name})")
        if op_def.is_stateful:
            fdef.signature.is_stateful = True
        for k, ref in enumerate(output_arg_names(nd, op_def)):
            outputs[f"{nd.name}:{k}"] = f"{nd.name}:{ref}"
        outputs[nd.name] = outputs.get(f"{nd.name}:0", nd.name)
        body = fdef.node_def.add()
        body.CopyFrom(nd)
        body.attr[FALLBACK_ATTR].CopyFrom(attr_value_pb2.AttrValue(b=True))
    for body in fdef.node_def:
        body.input[:] = [t if t.startswith("^") else outputs[t] for t in body.input]
    for j in range(len(rets)):
        src, dtype = rets[j]
        fdef.signature.output_arg.add(name=f"ret_{j}", type=dtype)
        fdef.ret[f"ret_{j}"] = outputs[src]
    return fdef
