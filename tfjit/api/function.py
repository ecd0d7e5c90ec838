"""``tfjit.function``: the jit_compile front door.

``jit_compile=True`` (must-compile): the traced function becomes one cluster;
an op tfjit cannot compile is an InvalidArgumentError at the first call that
names the op, the node and the user's source line.  Each new input signature
(dtypes + shapes) traces and compiles once; later calls with that signature go
straight to the TfjitLaunch op (one eager op, no tf.function round trip).

``jit_compile=None``: auto-clustering inside this function; ``False``: a plain
``tf.function``.
"""
from __future__ import annotations

import functools
import threading

import numpy as np
import tensorflow as tf

from tfjit import dtypes as dt
from tfjit.api import errors
from tfjit.api.service import SERVICE
from tfjit.api.tracing import tensor_info
from tfjit.graph import cluster as clustering
from tfjit.graph.graphdef import Graph
from tfjit.graph.mark import mark
from tfjit.runtime import launch


def _is_tensor(x) -> bool:
    return isinstance(x, (tf.Tensor, np.ndarray, tf.Variable)) and not isinstance(x, tf.RaggedTensor)


def _leaf_key(x):
    if isinstance(x, tf.Tensor):
        return (x.dtype, tuple(x.shape))
    if isinstance(x, np.ndarray):
        return (tf.as_dtype(x.dtype), x.shape)
    if isinstance(x, tf.Variable):
        raise TypeError("tfjit.function does not take tf.Variable arguments yet; pass tensors")
    try:
        hash(x)
    except TypeError:
        raise TypeError(f"tfjit.function: argument {x!r} is neither a tensor nor hashable") from None
    return ("py", type(x), x)


class _Entry:
    """One compiled signature: calls the launch op and rebuilds the output structure."""

    def __init__(self, key, compiled, captures, structured_outputs, out_dtypes, out_shapes, spec):
        self.key = key
        self.compiled = compiled
        self.captures = captures
        self.structured_outputs = structured_outputs
        self.out_dtypes = out_dtypes
        self.out_shapes = out_shapes
        self.spec = spec

    def __call__(self, flat_tensors):
        outs = launch.launch(list(flat_tensors) + self.captures, cluster=self.spec.key,
                             Tout=self.out_dtypes, output_shapes=self.out_shapes)
        it = iter(outs)
        return tf.nest.map_structure(lambda x: next(it) if isinstance(x, tf.Tensor) else x,
                                     self.structured_outputs)


class Function:
    def __init__(self, fn, jit_compile=True, autograph: bool = True, name: str | None = None):
        if jit_compile not in (True, False, None):
            raise ValueError(f"jit_compile must be True, False or None, got {jit_compile!r}")
        self._fn = fn
        self.jit_compile = jit_compile
        self._tf = tf.function(fn, autograph=autograph)
        self._entries: dict = {}
        self._lock = threading.Lock()
        self.name = name or getattr(fn, "__name__", "fn")
        functools.update_wrapper(self, fn)

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return functools.partial(self.__call__, instance)

    # -- calling ---------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if self.jit_compile is False:
            return self._tf(*args, **kwargs)
        flat = tf.nest.flatten((args, kwargs))
        key = tuple(_leaf_key(x) for x in flat)
        entry = self._entries.get(key)
        if entry is None:
            with self._lock:
                entry = self._entries.get(key) or self._build(key, args, kwargs)
                self._entries[key] = entry
        return entry([x for x in flat if _is_tensor(x)])

    def experimental_get_compile_count(self) -> int:
        """How many signatures this function has compiled (one per new shape/dtype signature)."""
        return len(self._entries)

    # -- tracing and compiling -------------------------------------------------------------
    def _build(self, key, args, kwargs):
        def spec(x):
            if _is_tensor(x):
                return tf.TensorSpec(tuple(x.shape), tf.as_dtype(x.dtype))
            return x
        s_args, s_kwargs = tf.nest.map_structure(spec, (args, kwargs))
        cf = self._tf.get_concrete_function(*s_args, **s_kwargs)
        if self.jit_compile is None:
            from tfjit.api.autocluster import AutoEntry
            return AutoEntry(cf)
        return self._must_compile(key, cf)

    def _must_compile(self, key, cf):
        graph = Graph(cf.graph.as_graph_def())
        graph_name = cf.graph.name
        refused = [(n, graph.nodes[n].op, r) for n, r in mark(graph).items() if r]
        if refused:
            raise errors.unsupported(graph_name, refused, cf.graph)
        captures = list(cf.captured_inputs)
        inputs = [(t.op.name, t.value_index) for t in cf.inputs]
        outputs = [(t.op.name, t.value_index) for t in cf.outputs]
        names = [n for n in graph.nodes if n not in {i[0] for i in inputs}]
        info = tensor_info(cf.graph)
        spec = clustering.extract(graph, names, info, outputs=outputs, inputs=inputs, name=graph_name)
        SERVICE.install()
        SERVICE.register(spec.key, spec.graph_def)
        signature = tuple(_signature_entry(t, cf) for t in list(cf.inputs))
        from tfjit.lower.graph_to_ir import LoweringError
        try:
            compiled = SERVICE.get(spec.key, signature, name=_safe(graph_name))
        except LoweringError as e:
            raise errors.unsupported(graph_name, [(e.node, e.op, e.reason)], cf.graph,
                                     frame_node=e.caller) from None
        out_dtypes = [t.dtype for t in cf.outputs]
        out_shapes = [tuple(t.shape) for t in cf.outputs]
        return _Entry(key, compiled, captures, cf.structured_outputs, out_dtypes, out_shapes, spec)

    # -- introspection -----------------------------------------------------------------------
    def _entry(self, args, kwargs):
        key = tuple(_leaf_key(x) for x in tf.nest.flatten((args, kwargs)))
        if key not in self._entries:
            self(*args, **kwargs)
        return self._entries[key]

    def compiled(self, *args, **kwargs):
        """The ``pipeline.Compiled`` for these arguments' signature (must-compile functions)."""
        entry = self._entry(args, kwargs)
        if not isinstance(entry, _Entry):
            raise ValueError("compiled() is for jit_compile=True functions; use clusters()")
        return entry.compiled

    def experimental_get_compiler_ir(self, *args, **kwargs):
        """Like TF's: returns ``get(stage="ir") -> str`` for these arguments' signature.

        Stages: ``ir`` (as lowered), ``optimized_ir`` (after the passes),
        ``optimized_ir_dot`` (graphviz, kernels as clusters), ``llvm`` (optimised LLVM
        IR), ``asm``.  Arguments are all tensors, or all ``tf.TensorSpec`` (fully
        defined shapes): then the function is traced and compiled, not run."""
        if self.jit_compile is not True:
            raise ValueError("Compiler IR can only be returned for functions marked with "
                             f"'jit_compile=True' ({self.name} has jit_compile={self.jit_compile})")
        return functools.partial(_compiler_ir, self._compiled_for(args, kwargs,
                                                                  "experimental_get_compiler_ir"))

    def lower(self, *args, **kwargs):
        """JAX's and TF's staged API: ``f.lower(*args).compile()``, with ``as_text()`` at
        both stages and ``cost_analysis()`` (see api/stages.py).  Arguments as for
        experimental_get_compiler_ir: tensors, or TensorSpecs (compiled, not run)."""
        from tfjit.api.stages import Lowered
        if self.jit_compile is not True:
            raise ValueError("lower() is for functions marked with 'jit_compile=True' "
                             f"({self.name} has jit_compile={self.jit_compile})")
        return Lowered(self, self._compiled_for(args, kwargs, "lower"))

    def _compiled_for(self, args, kwargs, caller: str):
        """The ``pipeline.Compiled`` for arguments that are all tensors or all TensorSpecs."""
        flat = tf.nest.flatten((args, kwargs))
        specs = [x for x in flat if isinstance(x, tf.TensorSpec)]
        if specs and any(_is_tensor(x) for x in flat):
            raise ValueError(f"{caller}: all arguments must be TensorSpecs "
                             "or all must be tensors")
        if specs:
            return self._compile_for_specs(flat, args, kwargs)
        return self.compiled(*args, **kwargs)

    def _compile_for_specs(self, flat, args, kwargs):
        for s in flat:
            if isinstance(s, tf.TensorSpec) and not s.shape.is_fully_defined():
                raise ValueError(f"experimental_get_compiler_ir: TensorSpec {s} needs a fully "
                                 "defined shape (tfjit compiles for static shapes)")
        key = tuple((x.dtype, tuple(x.shape)) if isinstance(x, tf.TensorSpec) else _leaf_key(x)
                    for x in flat)   # the key the same tensors would have
        with self._lock:
            entry = self._entries.get(key) or self._build(key, args, kwargs)
            self._entries[key] = entry
        return entry.compiled

    def clusters(self, *args, **kwargs) -> list:
        """[(cluster name, node names, pipeline.Compiled)] for these arguments' signature."""
        entry = self._entry(args, kwargs)
        if isinstance(entry, _Entry):
            return [(entry.spec.name, entry.spec.nodes, entry.compiled)]
        return entry.clusters()


def _signature_entry(t, cf):
    """(DType, shape) of one cluster input.  A captured resource variable signs with its
    value's dtype and current shape, as the launch op does (so a variable created with
    ``shape=None`` compiles for the shape it holds now, and again when that changes)."""
    if t.dtype != tf.resource:
        return dt.from_tf_enum(t.dtype.as_datatype_enum), tuple(t.shape)
    outer = next((o for o, inner in cf.graph.captures if inner is t), None)
    handle_data = getattr(outer, "_handle_data", None)
    if outer is None or handle_data is None or not handle_data.shape_and_type:
        raise errors.unsupported(cf.graph.name, [(t.op.name, "Placeholder",
                                 "a resource input that is not a captured tf.Variable")], cf.graph)
    dtype = dt.from_tf_enum(handle_data.shape_and_type[0].dtype)
    shape = tf.raw_ops.VariableShape(input=outer, out_type=tf.int64).numpy()
    return dtype, tuple(int(d) for d in shape)


COMPILER_IR_STAGES = ("ir", "optimized_ir", "optimized_ir_dot", "llvm", "asm")


def _compiler_ir(compiled, stage: str = "ir") -> str:
    from tfjit.api import dump
    if stage == "ir":
        return compiled.module_before
    if stage == "optimized_ir":
        return compiled.module_after
    if stage == "optimized_ir_dot":
        return dump.ir_dot(compiled)
    if stage == "llvm":
        return compiled.code.optimized_ir
    if stage == "asm":
        return compiled.code.asm()
    raise ValueError(f"unknown compiler IR stage {stage!r}; valid stages: "
                     + ", ".join(COMPILER_IR_STAGES))


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_." else "_" for c in name)[:80]


def function(fn=None, *, jit_compile=True, autograph: bool = True):
    """Like ``tf.function``; ``jit_compile=True`` compiles the whole function with tfjit."""
    if fn is None:
        return lambda f: Function(f, jit_compile=jit_compile, autograph=autograph)
    return Function(fn, jit_compile=jit_compile, autograph=autograph)
