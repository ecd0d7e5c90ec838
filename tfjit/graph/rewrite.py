"""Rewrite: replace each cluster by one TfjitLaunch node.

Data edges out of a cluster are redirected to the launch node's outputs; control
edges into cluster nodes become control edges into the launch node, and control
edges out of cluster nodes leave from the launch node, so ordering is kept.

In auto mode each launch node also carries its cluster's original subgraph as
a function (``fallback``, added to the graph's library) and the device its
nodes were placed on (a cluster never mixes devices).
"""
from __future__ import annotations

from tfjit.graph.cluster import ClusterSpec


def launch_node_name(spec: ClusterSpec) -> str:
    return f"tfjit/{spec.name}"


def rewrite(graph_def, specs: list, tensor_info, fallbacks: dict | None = None):
    """A new GraphDef with every cluster of ``specs`` replaced by a launch node.

    ``fallbacks`` maps a cluster key to the FunctionDef of its original
    subgraph (graph/fallback.py). Returns (graph_def, remap) where remap maps
    (node, output) of a replaced tensor to its new "name:index" string.
    """
    from tensorflow.core.framework import attr_value_pb2, graph_pb2, tensor_shape_pb2
    owner = {n: s for s in specs for n in s.nodes}
    remap = {}
    for s in specs:
        for k, src in enumerate(s.outputs):
            remap[src] = f"{launch_node_name(s)}:{k}"

    def redirect(text: str) -> str | None:
        if text.startswith("^"):
            src = text[1:]
            return f"^{launch_node_name(owner[src])}" if src in owner else text
        name, _, idx = text.partition(":")
        return remap.get((name, int(idx) if idx else 0), text)

    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    controls_of, device_of = {}, {}
    for nd in graph_def.node:
        if nd.name in owner:
            controls_of[nd.name] = [i[1:] for i in nd.input if i.startswith("^")]
            device_of.setdefault(owner[nd.name].key, nd.device)
    for nd in graph_def.node:
        if nd.name in owner:
            continue
        new = out.node.add()
        new.CopyFrom(nd)
        del new.input[:]
        seen = set()
        for text in nd.input:
            t = redirect(text)
            if t.startswith("^") and t in seen:
                continue
            seen.add(t)
            new.input.append(t)
    for s in specs:
        node = out.node.add(name=launch_node_name(s), op="TfjitLaunch", device=device_of[s.key])
        for src in s.inputs:
            node.input.append(redirect(src[0] if src[1] == 0 else f"{src[0]}:{src[1]}"))
        inside = set(s.nodes)
        controls = sorted({c for n in s.nodes for c in controls_of[n] if c not in inside})
        node.input.extend(redirect("^" + c) for c in controls)
        infos_in = [tensor_info(*src) for src in s.inputs]
        infos_out = [tensor_info(*src) for src in s.outputs]
        node.attr["Tin"].CopyFrom(attr_value_pb2.AttrValue(
            list=attr_value_pb2.AttrValue.ListValue(type=[d for d, _ in infos_in])))
        node.attr["Tout"].CopyFrom(attr_value_pb2.AttrValue(
            list=attr_value_pb2.AttrValue.ListValue(type=[d for d, _ in infos_out])))
        node.attr["cluster"].CopyFrom(attr_value_pb2.AttrValue(s=s.key.encode()))
        node.attr["cluster_def"].CopyFrom(attr_value_pb2.AttrValue(s=s.graph_def))
        if s.constant_args:     # read by the launch op, compiled per value (graph/const_args.py)
            node.attr["constant_args"].CopyFrom(attr_value_pb2.AttrValue(
                list=attr_value_pb2.AttrValue.ListValue(i=list(s.constant_args))))
        shapes = []
        for _, shape in infos_out:
            proto = tensor_shape_pb2.TensorShapeProto(unknown_rank=shape is None)
            for d in shape or ():
                proto.dim.add(size=-1 if d is None else d)
            shapes.append(proto)
        node.attr["output_shapes"].CopyFrom(attr_value_pb2.AttrValue(
            list=attr_value_pb2.AttrValue.ListValue(shape=shapes)))
        if fallbacks and s.key in fallbacks:
            fdef = fallbacks[s.key]
            if fdef.signature.name not in {f.signature.name for f in out.library.function}:
                out.library.function.add().CopyFrom(fdef)
            fn = attr_value_pb2.NameAttrList(name=fdef.signature.name)
            node.attr["fallback"].CopyFrom(attr_value_pb2.AttrValue(
                list=attr_value_pb2.AttrValue.ListValue(func=[fn])))
    return out, remap
