"""Facts about a traced TF graph that the graph stages need (dtypes and shapes)."""
from __future__ import annotations


def tensor_info(graph):
    """``info(node, index) -> (dtype enum, shape or None)`` for tensors of a live tf.Graph."""
    def info(node: str, index: int):
        t = graph.get_operation_by_name(node).outputs[index]
        shape = None if t.shape.rank is None else tuple(t.shape.as_list())
        return t.dtype.as_datatype_enum, shape
    return info
