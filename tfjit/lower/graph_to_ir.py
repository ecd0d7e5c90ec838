"""Lowers a cluster definition (see graph/cluster.py) to one IR module.

Parameters come from the ``_arg_<i>`` placeholders with the concrete shapes of
this compilation's signature; outputs are the ``_retval_<j>`` identities.
Every node is lowered by its registered rule, in topological order; constant
operands are folded as they are built, so later rules see compile-time values
(Shape → Pack → Reshape chains fold to a constant shape).
"""
from __future__ import annotations

from tfjit.graph.cluster import ARG_PREFIX, RET_PREFIX
from tfjit.graph.graphdef import Graph
from tfjit.graph.mark import STRUCTURAL
from tfjit.ir import interp
from tfjit.ir.module import IRError, Module
import tfjit.lower  # noqa: F401  (registers the rules)
from tfjit.lower.registry import Unsupported, lower_node
from tfjit.lower.variables import Variable


class LoweringError(Exception):
    """A node could not be lowered; carries the node and op for the user."""

    def __init__(self, node: str, op: str, reason: str):
        super().__init__(f"{op} ({reason}) {{{{node {node}}}}}")
        self.node, self.op, self.reason = node, op, reason


def _fold(instr, values):
    try:
        return interp.evaluate_instr(instr, values)
    except (ArithmeticError, ValueError):
        return None    # e.g. a constant integer division by zero: the kernel reports it at run time


def lower_cluster(graph: Graph, signature: list, name: str) -> Module:
    """``signature`` is [(DType, shape)] per cluster input."""
    m = Module(name)
    m.folder = _fold
    params = [m.parameter(d, shp) for d, shp in signature]
    values, outputs = {}, {}
    for node in graph.topological():
        if node.name.startswith(ARG_PREFIX) and node.op == "Placeholder":
            k = int(node.name[len(ARG_PREFIX):])
            if node.attrs["dtype"].name == "resource":   # a variable: its value is the param
                m.variable_params.add(k)
                values[(node.name, 0)] = Variable(k, params[k])
                continue
            declared = node.attrs["dtype"].ir
            if declared is not params[k].dtype:
                raise LoweringError(node.name, node.op,
                                    f"input {k} is {params[k].dtype}, the cluster expects {declared}")
            values[(node.name, 0)] = params[k]
            continue
        if node.name.startswith(RET_PREFIX):
            value = values[node.inputs[0]]
            if isinstance(value, Variable):
                raise LoweringError(node.name, "Identity", "a resource handle is not a value "
                                    "tfjit can return from a cluster")
            outputs[int(node.name[len(RET_PREFIX):])] = value
            continue
        if node.op in STRUCTURAL:
            continue
        try:
            outs = lower_node(m, node, [values[src] for src in node.inputs])
        except (Unsupported, IRError) as e:
            raise LoweringError(node.name, node.op, getattr(e, "reason", str(e))) from None
        for k, v in enumerate(outs):
            values[(node.name, k)] = v
    m.outputs = [outputs[k] for k in range(len(outputs))]
    for var in sorted({v for v in values.values() if isinstance(v, Variable) and v.assigned},
                      key=lambda v: v.param):
        m.outputs.append(var.value)      # written back to the variable after the run
        m.updates.append(var.param)
    m.folder = None
    return m
