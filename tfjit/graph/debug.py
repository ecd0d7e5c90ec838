"""Clustering dumps (``--tfjit_clustering_debug`` with ``TF_DUMP_GRAPH_PREFIX``).

Named as XLA names its own, so the same habits work; each is a GraphDef text
proto TensorBoard can load:

* ``before_mark_for_compilation.pbtxt``  the graph as the pass received it;
* ``mark_for_compilation.pbtxt``          the same graph with ``_XlaCluster``
  (and ``_tfjit_cluster``) on every clustered node;
* ``mark_for_compilation_annotated.pbtxt`` nodes renamed ``cluster_N/<name>``
  or ``unclustered/<name>``, so TensorBoard groups them by cluster; every
  unclustered node carries its reason in ``_tfjit_reason``;
* ``mark_for_compilation.dot`` (and ``.svg`` when graphviz's ``dot`` is
  installed; it is said once when it is not): clusters coloured.

A second dump of the same name gets ``_1``, ``_2``... as TF's own dumps do.
Dumping is a debugging aid: a failure is logged, never raised.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading

from tfjit import settings

log = logging.getLogger("tfjit")

_lock = threading.Lock()
_used: set = set()
_PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69",
            "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f")
_MAX_DOT_NODES = 2000


def dump_dir() -> str | None:
    """Where clustering dumps go: the bug report's directory, else TF_DUMP_GRAPH_PREFIX
    when --tfjit_clustering_debug is on, else nowhere."""
    flags = settings.flags()
    if flags.tfjit_bug_report:
        return os.path.join(flags.tfjit_bug_report, "clustering")
    if flags.tfjit_clustering_debug:
        return settings.tf_dump_graph_prefix() or None
    return None


def _unique_path(directory: str, stem: str, ext: str) -> str:
    with _lock:
        k = 0
        while True:
            name = stem if k == 0 else f"{stem}_{k}"
            path = os.path.join(directory, name + ext)
            if path not in _used and not os.path.exists(path):
                _used.add(path)
                return path
            k += 1


def maybe_dump_clustering(graph_def, result) -> list:
    """Writes the dumps for one clustered graph when dumping is on; returns the paths."""
    directory = dump_dir()
    if not directory:
        return []
    try:
        os.makedirs(directory, exist_ok=True)
        return write_dumps(directory, graph_def, result)
    except Exception as e:   # noqa: BLE001 - a debugging aid never breaks the program
        log.warning("tfjit: clustering dump to %s failed: %s", directory, e)
        return []


def write_dumps(directory: str, graph_def, result) -> list:
    from google.protobuf import text_format
    from tensorflow.core.framework import attr_value_pb2, graph_pb2
    cluster_of = result.cluster_of()
    paths = []

    def write(stem, gd):
        path = _unique_path(directory, stem, ".pbtxt")
        with open(path, "w") as f:
            f.write(text_format.MessageToString(gd))
        paths.append(path)

    write("before_mark_for_compilation", graph_def)
    marked = graph_pb2.GraphDef()
    marked.CopyFrom(graph_def)
    for nd in marked.node:
        if nd.name in cluster_of:
            for attr in ("_XlaCluster", "_tfjit_cluster"):
                nd.attr[attr].CopyFrom(attr_value_pb2.AttrValue(s=cluster_of[nd.name].encode()))
    write("mark_for_compilation", marked)
    write("mark_for_compilation_annotated", annotated(graph_def, result))
    paths += _picture(directory, graph_def, result)
    return paths


def _prefixed(name: str, cluster_of: dict) -> str:
    return f"{cluster_of.get(name, 'unclustered')}/{name}"


def annotated(graph_def, result):
    """The graph with nodes renamed ``cluster_N/...``/``unclustered/...``."""
    from tensorflow.core.framework import attr_value_pb2, graph_pb2
    cluster_of = result.cluster_of()
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    for nd in out.node:
        why = result.marks.get(nd.name)
        nd.name = _prefixed(nd.name, cluster_of)
        renamed = []
        for text in nd.input:
            control = text.startswith("^")
            base, sep, port = text.lstrip("^").partition(":")
            renamed.append(("^" if control else "") + _prefixed(base, cluster_of) + sep + port)
        nd.input[:] = renamed
        if why:
            nd.attr["_tfjit_reason"].CopyFrom(attr_value_pb2.AttrValue(s=why.encode()))
    return out


def to_dot(graph_def, result) -> str:
    """Graphviz source: one coloured box per cluster, unclustered nodes grey."""
    cluster_of = result.cluster_of()
    names = [nd.name for nd in graph_def.node][:_MAX_DOT_NODES]
    ids = {n: f"n{k}" for k, n in enumerate(names)}
    lines = ["digraph tfjit_clusters {", "  rankdir=TB; node [shape=box, style=filled, fontsize=10];"]
    by_cluster = {}
    ops = {nd.name: nd.op for nd in graph_def.node}
    for n in names:
        by_cluster.setdefault(cluster_of.get(n), []).append(n)
    for k, spec in enumerate(result.specs):
        colour = _PALETTE[k % len(_PALETTE)]
        lines.append(f'  subgraph "cluster_{k}" {{ label="{spec.name}"; style=filled; '
                     f'color="{colour}";')
        lines += [f'    {ids[n]} [label="{n}\\n{ops[n]}", fillcolor=white];'
                  for n in by_cluster.get(spec.name, [])]
        lines.append("  }")
    lines += [f'  {ids[n]} [label="{n}\\n{ops[n]}", fillcolor="#eeeeee"];'
              for n in by_cluster.get(None, [])]
    for nd in graph_def.node:
        if nd.name not in ids:
            continue
        for text in nd.input:
            src = text.lstrip("^").split(":")[0]
            if src in ids:
                style = " [style=dashed]" if text.startswith("^") else ""
                lines.append(f"  {ids[src]} -> {ids[nd.name]}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _picture(directory: str, graph_def, result) -> list:
    path = _unique_path(directory, "mark_for_compilation", ".dot")
    with open(path, "w") as f:
        f.write(to_dot(graph_def, result))
    dot = shutil.which("dot")
    if dot is None:
        if "graphviz" not in _used:
            _used.add("graphviz")
            log.warning("tfjit: graphviz's 'dot' is not installed: wrote %s only (no SVG)", path)
        return [path]
    svg = path[:-len(".dot")] + ".svg"
    subprocess.run([dot, "-Tsvg", path, "-o", svg], check=True, capture_output=True, timeout=60)
    return [path, svg]
