"""Lowers a cluster definition (see graph/cluster.py) to one IR module.

Parameters come from the ``_arg_<i>`` placeholders with the concrete shapes of
this compilation's signature; outputs are the ``_retval_<j>`` identities.
Every node is lowered by its registered rule, in topological order; constant
operands are folded as they are built, so later rules see compile-time values
(Shape → Pack → Reshape chains fold to a constant shape).  Library functions
that control flow calls (loop bodies, branches) are lowered the same way, into
modules of their own (``Functions``; lower/control_flow.py).
"""
from __future__ import annotations

import numpy as np

from tfjit.graph.cluster import ARG_PREFIX, RET_PREFIX
from tfjit.graph.functions import function_graph, validate
from tfjit import dtypes as dt
from tfjit.graph.graphdef import Graph, TFType
from tfjit.graph.mark import STRUCTURAL
from tfjit.ir import interp
from tfjit.ir.module import Instr, IRError, Module
import tfjit.lower  # noqa: F401  (registers the rules)
from tfjit.lower import complex as complex_values
from tfjit.lower import layout
from tfjit.lower.registry import Complex, InvalidArgument, Unsupported, lower_node
from tfjit.lower.variables import Variable
from tfjit.lower.where import PASS_THROUGH


class LoweringError(Exception):
    """A node could not be lowered; carries the node and op for the user."""

    def __init__(self, node: str, op: str, reason: str, caller: str | None = None,
                 invalid: bool = False):
        super().__init__(f"{op} ({reason}) {{{{node {node}}}}}")
        self.node, self.op, self.reason = node, op, reason
        self.caller = caller      # inside a loop body or branch: the outermost calling node
        self.invalid = invalid    # raised as InvalidArgument: TF's kernel raises it too


def _fold(instr, values):
    try:
        return interp.evaluate_instr(instr, values)
    except (ArithmeticError, ValueError):
        return None    # e.g. a constant integer division by zero: the kernel reports it at run time


def lower_cluster(graph: Graph, signature: list, name: str, constants: dict | None = None) -> Module:
    """``signature`` is [(DType, shape)] per cluster input.  ``constants`` {input: value}:
    inputs this module is compiled for one value of (constant arguments,
    graph/const_args.py); their nodes see a constant, and the parameter stays (the
    launch op still passes the input) but is read by nothing."""
    m = Module(name)
    m.folder = _fold
    params = [_parameter(m, d, shp) for d, shp in signature]
    args = list(params)
    for k, value in (constants or {}).items():
        d, shp = signature[k]
        value = np.asarray(value)
        if value.shape != tuple(shp) or value.dtype != np.dtype(d.numpy()):
            raise LoweringError(f"{ARG_PREFIX}{k}", "Placeholder", f"the value of constant argument "
                                f"{k} is {value.dtype}{list(value.shape)}, the signature says {d}{list(shp)}")
        args[k] = complex_values.constant(m, value, d) if d.is_complex else m.constant(value, d)
    for node in graph.nodes.values():
        if node.name.startswith(ARG_PREFIX) and node.op == "Placeholder":
            k = int(node.name[len(ARG_PREFIX):])
            if node.attrs["dtype"].name == "resource":   # a variable: its value is the param
                m.variable_params.add(k)
                args[k] = Variable(k, params[k])
                continue
            declared = dt.edge_from_tf_enum(node.attrs["dtype"].enum)
            if declared is not signature[k][0]:
                raise LoweringError(node.name, node.op,
                                    f"input {k} is {signature[k][0]}, the cluster expects {declared}")
    results = _lower_graph(m, graph, args, Functions(graph.functions))
    for j, value in enumerate(results):
        if isinstance(value, Variable):
            raise LoweringError(f"{RET_PREFIX}{j}", "Identity", "a resource handle is not a value "
                                "tfjit can return from a cluster")
        if not isinstance(value, (Instr, Complex)):
            raise LoweringError(f"{RET_PREFIX}{j}", "Identity", f"a {type(value).__name__} is not a "
                                "value tfjit can return from a cluster")
    m.outputs = list(results)
    for var in sorted({v for v in args if isinstance(v, Variable) and v.assigned},
                      key=lambda v: v.param):
        m.outputs.append(var.value)      # written back to the variable after the run
        m.updates.append(var.param)
    _count_outputs(m)
    for j, value in enumerate(m.outputs):
        if isinstance(value, Complex):   # its real view; the launch op sees the complex type
            m.complex_outputs[j] = value.dtype
            m.outputs[j] = complex_values.view(m, value)
    for node in graph.nodes.values():     # a quantized result: TF sees its quantized type
        t = node.attrs.get("T") if node.name.startswith(RET_PREFIX) else None
        if isinstance(t, TFType) and t.quantized:
            j = int(node.name[len(RET_PREFIX):])
            m.quantized_outputs[j] = dt.QUANTIZED_BY_TF_ENUM[t.enum]
            if m.outputs[j].dtype is not m.quantized_outputs[j].storage:
                raise LoweringError(node.name, node.op, f"output {j} is {m.outputs[j].dtype}, not "
                                    f"{t.name}'s storage type")
    m.folder = None
    return m


def _count_outputs(m: Module) -> None:
    """Each output of a data-dependent shape (lower/where.py) gets its row count as an
    output of its own, after every other (the launch op reads it, abi.h)."""
    counts: dict = {}
    for j, value in enumerate(list(m.outputs)):
        count = m.bounded.get(value) if isinstance(value, Instr) else None
        if count is not None:
            if count not in counts:
                counts[count] = len(m.outputs)
                m.outputs.append(count)
            m.output_rows[j] = counts[count]
    m.bounded = {}


def _parameter(m: Module, d, shape):
    """Parameter ``len(m.params)``: a complex one as its real view (lower/complex.py), a
    quantized one as its storage integer type marked with the quantized type's name."""
    if d.is_quantized:
        p = m.parameter(d.storage, shape)
        p.attrs["quantized"] = d.name
        return p
    return complex_values.parameter(m, d, shape)


def _lower_graph(m: Module, graph: Graph, args: list, functions: "Functions") -> list:
    """Lowers every node of ``graph`` (cluster-definition form) into ``m``, the
    ``_arg_<i>`` placeholders standing for ``args[i]``; returns the ``_retval_<j>`` values."""
    values, outputs = {}, {}
    for node in graph.topological():
        if node.name.startswith(ARG_PREFIX) and node.op == "Placeholder":
            values[(node.name, 0)] = args[int(node.name[len(ARG_PREFIX):])]
            continue
        if node.name.startswith(RET_PREFIX):
            outputs[int(node.name[len(RET_PREFIX):])] = values[node.inputs[0]]
            continue
        if node.op in STRUCTURAL:
            continue
        try:
            args = [values[src] for src in node.inputs]
            _check_bounded(m, node, args)
            if layout.is_nchw(node):     # the NHWC rule between transposes
                outs = layout.lower_nchw(m, node, args, lambda m_, n_, xs: lower_node(m_, n_, xs, functions))
            else:
                outs = lower_node(m, node, args, functions)
        except (Unsupported, IRError) as e:
            raise LoweringError(node.name, node.op, getattr(e, "reason", str(e)),
                                invalid=isinstance(e, InvalidArgument)) from None
        for k, v in enumerate(outs):
            values[(node.name, k)] = v
    return [outputs[k] for k in range(len(outputs))]


def _check_bounded(m: Module, node, args: list) -> None:
    """A value of a data-dependent shape (Where's) may only leave the cluster, through
    ops that pass it as is: any other consumer would compute with its bound."""
    if node.op in PASS_THROUGH or not m.bounded:
        return
    for k, (x, src) in enumerate(zip(args, node.inputs)):
        if isinstance(x, Instr) and x in m.bounded:
            raise Unsupported(f"input {k} is the result of {{{{node {src[0]}}}}}, whose shape "
                              "depends on its input's values: tfjit compiles it only as a "
                              "cluster output, not with a consumer in the same cluster")


class Functions:
    """Lowers the library functions that control flow calls (loop bodies, branches).

    Control-flow rules (lower/control_flow.py) get it as ``LowerCtx.functions``.
    Errors inside a function keep the inner node's name and op, and say which
    function (and which caller node) they were found in."""

    def __init__(self, library: dict):
        self.library = library
        self._graphs: dict = {}
        self._names: set = set()
        self._active: list = []     # the functions being lowered, outermost first

    def computation_name(self, base: str) -> str:
        """A name for a new computation, unique within this cluster's module."""
        base = "".join(c if c.isalnum() or c in "_.-" else "_" for c in base)
        base = base if base[:1].isalpha() else "c_" + base      # never read as a number
        name, n = base, 1
        while name in self._names:
            name, n = f"{base}.{n}", n + 1
        self._names.add(name)
        return name

    def num_args(self, fname: str) -> int:
        return len(self._function(fname).signature.input_arg)

    def _function(self, fname: str):
        if fname not in self.library:
            raise Unsupported(f"function {fname} is not in the graph's library")
        return self.library[fname]

    def graph(self, fname: str) -> Graph:
        """Function ``fname`` in cluster-definition form, checked as TF would."""
        graph = self._graphs.get(fname)
        if graph is None:
            graph = function_graph(self._function(fname), self.library)
            try:
                validate(fname, graph, self.library)
            except ValueError as e:
                raise Unsupported(str(e)) from None
            self._graphs[fname] = graph
        return graph

    def lower(self, m: Module, fname: str, args: list, caller) -> list:
        """Lowers function ``fname`` into ``m`` with ``args`` as its inputs (IR values,
        variables, TensorLists); returns its outputs.  ``caller``: the calling node."""
        if len(args) != self.num_args(fname):
            raise Unsupported(f"{fname} takes {self.num_args(fname)} inputs, {caller.op} passes "
                              f"{len(args)}")
        if fname in self._active:     # TF refuses it too: a function cannot call itself
            cycle = " -> ".join(self._active[self._active.index(fname):] + [fname])
            raise Unsupported(f"function {fname} calls itself ({cycle}): recursion in a "
                              "function library is invalid")
        graph = self.graph(fname)
        folder, source = m.folder, m.source
        m.folder = _fold
        self._active.append(fname)
        try:
            results = _lower_graph(m, graph, args, self)
            if any(isinstance(r, Instr) and r in m.bounded for r in results):
                raise LoweringError(caller.name, caller.op, "a result's shape depends on its input's "
                                    "values (Where): tfjit compiles that only as a cluster "
                                    "output, not as a function's result")
            return results
        except LoweringError as e:
            where = f"in {fname} (called by {caller.op} {caller.name})"
            raise LoweringError(e.node, e.op, f"{e.reason}; {where}", caller.name,
                                e.invalid) from None
        finally:
            self._active.pop()
            m.folder, m.source = folder, source
