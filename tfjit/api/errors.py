"""User-facing compile errors, modelled on TF's XLA messages."""
from __future__ import annotations

import os

import tensorflow as tf

_INTERNAL = (os.sep + "tensorflow" + os.sep, os.sep + "keras" + os.sep, os.sep + "tfjit" + os.sep,
             os.sep + "tf_keras" + os.sep, "<frozen ")


def user_frame(graph, node_name: str) -> str:
    """``File "prog.py", line 12, in f`` for the user code that created ``node_name``."""
    try:
        frames = list(graph.get_operation_by_name(node_name).traceback)
    except (KeyError, ValueError, AttributeError):
        return ""
    for fr in reversed(frames):
        if not any(p in fr.filename for p in _INTERNAL):
            return f'File "{fr.filename}", line {fr.lineno}, in {fr.name}'
    return ""


def unsupported(graph_name: str, problems: list, graph=None,
                frame_node: str | None = None) -> tf.errors.InvalidArgumentError:
    """problems: [(node_name, op, reason)]; the user's line is that of ``frame_node``
    (default: the first problem's node), e.g. the While whose body holds the node."""
    parts = [f"{op} ({reason}) {{{{node {node}}}}}" for node, op, reason in problems]
    msg = (f"Detected unsupported operations when trying to compile graph {graph_name} on TFJIT_CPU: "
           + "; ".join(parts))
    where = user_frame(graph, frame_node or problems[0][0]) if graph is not None else ""
    if where:
        msg += f"\nThe op is created at: {where}"
    return tf.errors.InvalidArgumentError(None, None, msg)
