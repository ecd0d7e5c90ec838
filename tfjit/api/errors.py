"""User-facing compile errors, modelled on TF's XLA messages."""
from __future__ import annotations

import os
import sys

import tensorflow as tf

# Frames in these packages are never "the user's line" (found by the packages' own
# directories: a substring test such as "/keras/" would also match a user's checkout).
_INTERNAL_PACKAGES = ("tensorflow", "keras", "tf_keras", "tfjit")


def _internal_roots() -> tuple:
    roots = []
    for name in _INTERNAL_PACKAGES:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            roots.append(os.path.dirname(os.path.realpath(path)) + os.sep)
    return tuple(roots)


def _is_internal(filename: str, roots: tuple) -> bool:
    if filename.startswith("<frozen "):
        return True
    return os.path.realpath(filename).startswith(roots)


def user_frame(graph, node_name: str) -> str:
    """``File "prog.py", line 12, in f`` for the user code that created ``node_name``."""
    try:
        # an op imported from a GraphDef (import_graph_def, a frozen graph) has no traceback
        frames = list(graph.get_operation_by_name(node_name).traceback or ())
    except (KeyError, ValueError, AttributeError):
        return ""
    roots = _internal_roots()
    for fr in reversed(frames):
        if not _is_internal(fr.filename, roots):
            return f'File "{fr.filename}", line {fr.lineno}, in {fr.name}'
    return ""


def message(graph_name: str, problems: list, graph=None, frame_node: str | None = None) -> str:
    """The text of ``unsupported``; problems: [(node_name, op, reason)].  The user's line
    is that of ``frame_node`` (default: the first problem's node), e.g. the While
    whose body holds the node."""
    parts = [f"{op} ({reason}) {{{{node {node}}}}}" for node, op, reason in problems]
    msg = (f"Detected unsupported operations when trying to compile graph {graph_name} on TFJIT_CPU: "
           + "; ".join(parts))
    where = user_frame(graph, frame_node or problems[0][0]) if graph is not None else ""
    if where:
        msg += f"\nThe op is created at: {where}"
    return msg


def unsupported(graph_name: str, problems: list, graph=None,
                frame_node: str | None = None) -> tf.errors.InvalidArgumentError:
    """problems: [(node_name, op, reason)]."""
    return tf.errors.InvalidArgumentError(None, None, message(graph_name, problems, graph,
                                                              frame_node))
