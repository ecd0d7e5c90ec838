"""From a frozen GraphDef (or a SavedModel signature) and its feeds/fetches to one cluster.

tfcompile's recipe, in tfjit's terms: every fed tensor is replaced by a
placeholder of the config's static shape, the nodes the fetches need are
collected backwards from the fetches (stopping at fed tensors), and that set
becomes one cluster (``graph/cluster.extract``) whose inputs are the feeds, in
config order, and whose outputs are the fetches, in config order.  Every node
must be compilable (``graph/mark``): AOT has no TensorFlow to fall back to.

Control inputs from outside the needed set are dropped, as when clustering:
a frozen inference graph's control edges order side effects (asserts, summaries)
that an AOT artefact does not run.
"""
from __future__ import annotations

import dataclasses
import os

from tfjit import dtypes as dt
from tfjit.aot.config import AotError, Spec, Tensor, c_identifier
from tfjit.graph import cluster as clustering
from tfjit.graph.graphdef import Graph
from tfjit.graph.mark import reason

FEED_PREFIX = "tfjit_aot_feed"


@dataclasses.dataclass
class Cluster:
    """What the compiler needs: the cluster definition, its signature and the tensors' names."""
    graph_def: bytes
    signature: list          # [(DType, shape)] per feed
    feeds: list              # [Tensor] with dtype and shape filled in
    fetches: list            # [Tensor] with dtype filled in (shape after lowering)


def read_graph_def(path: str):
    """A GraphDef from ``path``: text format for ``*.pbtxt``/``*.txt``, else binary (like tfcompile)."""
    from google.protobuf import message, text_format
    from tensorflow.core.framework import graph_pb2
    gd = graph_pb2.GraphDef()
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise AotError(f"cannot read graph {path}: {e.strerror}") from None
    try:
        if path.endswith((".pbtxt", ".txt")):
            text_format.Parse(data.decode("utf-8"), gd)
        else:
            gd.ParseFromString(data)
    except (UnicodeDecodeError, text_format.ParseError, message.DecodeError) as e:
        raise AotError(f"{path} is not a GraphDef: {e}") from None
    return gd


def _import(graph_def, placeholders=(), input_map=None):
    import tensorflow as tf
    g = tf.Graph()
    with g.as_default():
        mapped = {}
        for name, dtype, shape in placeholders:
            mapped[name] = tf.compat.v1.placeholder(dtype.tf_enum, shape, name=name)
        try:
            tf.graph_util.import_graph_def(
                graph_def, name="",
                input_map={t: mapped[n] for t, n in (input_map or {}).items()})
        except (ValueError, TypeError, tf.errors.OpError) as e:
            raise AotError(f"TensorFlow cannot import the graph: {e}") from None
    return g


def _resolve(g, t: Tensor, kind: str):
    """The tf.Tensor behind a feed/fetch, with errors that name it."""
    try:
        op = g.get_operation_by_name(t.node)
    except KeyError:
        raise AotError(f"{kind} '{t.tensor}' ({t.name}): the graph has no node named "
                       f"{t.node!r}") from None
    if t.index >= len(op.outputs):
        raise AotError(f"{kind} '{t.tensor}' ({t.name}): node {t.node!r} ({op.type}) has "
                       f"{len(op.outputs)} output(s)")
    tensor = op.outputs[t.index]
    have = dt.from_tf_enum(tensor.dtype.as_datatype_enum)
    if have is None:
        raise AotError(f"{kind} '{t.tensor}' ({t.name}): tfjit cannot compile tensors of "
                       f"type {tensor.dtype.name}")
    if have.is_complex:     # complex values inside the graph compile; the header has no complex type
        raise AotError(f"{kind} '{t.tensor}' ({t.name}): tfjit-aot does not take or return "
                       f"{tensor.dtype.name} tensors; feed or fetch the real and imaginary parts")
    if t.dtype is not None and t.dtype is not have:
        raise AotError(f"{kind} '{t.tensor}' ({t.name}): the config says {t.dtype}, the graph "
                       f"has {have}")
    return tensor, have


def from_graph_def(graph_def, spec: Spec) -> Cluster:
    """The one cluster that computes ``spec``'s fetches from its feeds."""
    g0 = _import(graph_def)
    feeds = []
    for f in spec.feeds:
        tensor, dtype = _resolve(g0, f, "feed")
        if not tensor.shape.is_compatible_with(f.shape):
            raise AotError(f"feed '{f.tensor}' ({f.name}): config shape {list(f.shape)} does not "
                           f"match the graph's {tensor.shape}")
        feeds.append(dataclasses.replace(f, dtype=dtype))
    fetches = [dataclasses.replace(t, dtype=_resolve(g0, t, "fetch")[1]) for t in spec.fetches]

    taken = {n.name for n in graph_def.node}
    ph_names = []
    for f in feeds:
        name, k = f"{FEED_PREFIX}_{f.name}", 0
        while name in taken:
            k += 1
            name = f"{FEED_PREFIX}_{f.name}_{k}"
        taken.add(name)
        ph_names.append(name)
    g = _import(graph_def, [(n, f.dtype, f.shape) for n, f in zip(ph_names, feeds)],
                {f.tensor: n for f, n in zip(feeds, ph_names)})
    graph = Graph(g.as_graph_def())
    fed = {(f.node, f.index): (n, 0) for f, n in zip(feeds, ph_names)}
    outputs = [fed.get((t.node, t.index), (t.node, t.index)) for t in fetches]
    inputs = [(n, 0) for n in ph_names]
    names = _needed(graph, outputs, set(ph_names))
    _check_compilable(graph, names)
    from tfjit.api.tracing import tensor_info
    cluster = clustering.extract(graph, names, tensor_info(g), outputs=outputs, inputs=inputs,
                                 name="aot")
    return Cluster(cluster.graph_def, [(f.dtype, f.shape) for f in feeds], feeds, fetches)


def _needed(graph: Graph, outputs: list, feeds: set) -> list:
    """Names of the nodes the outputs depend on through data edges, feeds excluded."""
    order, seen = [], set(feeds)
    stack = [n for n, _ in outputs]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        node = graph.nodes[name]
        if node.op in ("Placeholder", "PlaceholderV2"):
            raise AotError(f"placeholder {name!r} is needed to compute the fetches but is not "
                           "fed; add a feed for it to the config")
        order.append(name)
        stack.extend(src for src, _ in node.inputs)
    return order


def _check_compilable(graph: Graph, names: list) -> None:
    refused = [(n, graph.nodes[n].op, reason(graph.nodes[n])) for n in names]
    refused = [r for r in refused if r[2]]
    if refused:
        lines = [f"{op} ({why}) {{{{node {n}}}}}" for n, op, why in sorted(refused)]
        raise AotError("Detected unsupported operations when trying to compile the graph ahead "
                       "of time (an AOT artefact has no TensorFlow to run them): "
                       + "; ".join(lines))


def from_saved_model(directory: str, tags: str, signature_key: str) -> tuple:
    """(GraphDef with variables frozen into constants, Spec) for one SavedModel signature.

    Feeds are the signature's inputs and fetches its outputs, each in the order TF
    flattens them (sorted by key); their C names are the keys made into identifiers.
    """
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)
    if not os.path.isdir(directory):
        raise AotError(f"SavedModel directory {directory} does not exist")
    tag_list = [t for t in tags.split(",") if t]
    try:
        loaded = tf.saved_model.load(directory, tags=tag_list or None)
    except (OSError, ValueError, RuntimeError, tf.errors.OpError) as e:
        raise AotError(f"cannot load the SavedModel in {directory} with tags {tag_list}: "
                       f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if signature_key not in loaded.signatures:
        raise AotError(f"SavedModel {directory} has no signature {signature_key!r}; it has: "
                       + (", ".join(sorted(loaded.signatures.keys())) or "none"))
    signature = loaded.signatures[signature_key]
    # The frozen function keeps the signature's placeholders and output order (inputs,
    # then captured variables, which it folds away), but not the structure: names
    # come from the signature, tensors from the frozen graph.
    frozen = convert_variables_to_constants_v2(signature)
    in_specs = _flat_items(signature.structured_input_signature[1])
    out_specs = _flat_items(signature.structured_outputs)
    if len(in_specs) != len(frozen.inputs) or len(out_specs) != len(frozen.outputs):
        raise AotError(f"signature {signature_key!r}: the frozen graph has {len(frozen.inputs)} "
                       f"inputs and {len(frozen.outputs)} outputs for {len(in_specs)} and "
                       f"{len(out_specs)} in the signature (resource inputs are not supported)")
    feeds, names = [], set()
    for (key, spec), t in zip(in_specs, frozen.inputs):
        if not spec.shape.is_fully_defined():
            raise AotError(f"signature input {key!r} has shape {spec.shape}, which is not fully "
                           "known; AOT compilation needs a static shape for every input")
        feeds.append(Tensor(t.op.name, t.value_index, _unique(c_identifier(key), names),
                            tuple(spec.shape.as_list()), None))
    names = set()
    fetches = [Tensor(t.op.name, t.value_index, _unique(c_identifier(key), names), None, None)
               for (key, _), t in zip(out_specs, frozen.outputs)]
    return frozen.graph.as_graph_def(), Spec(feeds, fetches)


def _flat_items(structure) -> list:
    """[(key, leaf)] in tf.nest's order: signatures map names to tensors (sorted by key)."""
    import tensorflow as tf
    if isinstance(structure, dict):
        return [(str(k), structure[k]) for k in sorted(structure)]
    return [(f"output_{k}", v) for k, v in enumerate(tf.nest.flatten(structure))]


def _unique(name: str, taken: set) -> str:
    out, k = name, 1
    while out in taken:
        out, k = f"{name}_{k}", k + 1
    taken.add(out)
    return out
