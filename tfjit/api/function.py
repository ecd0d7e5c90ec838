"""``tfjit.function``: the jit_compile front door.

``jit_compile=True`` (must-compile): the traced function becomes one cluster;
an op tfjit cannot compile is an InvalidArgumentError at the first call that
names the op, the node and the user's source line.  Each new input signature
(dtypes + shapes) traces and compiles once; later calls with that signature go
straight to the TfjitLaunch op (one eager op, no tf.function round trip).

``jit_compile=None``: auto-clustering inside this function; ``False``: a plain
``tf.function``.

Called while another function is being traced (a ``tf.function``, Keras's
steps), the launch op becomes a node of that graph.  When the graph's shapes
are not all known there (Keras's batch dimension, relaxed shapes) or an input
is a resource handle, the node carries the cluster's definition and compiles
lazily, once per concrete signature, when it first runs (DESIGN.md,
"Execution"); a must-compile error then surfaces as the op's
InvalidArgumentError, with the same message.

An argument whose value fixes a shape, an axis or a bound (``def f(x, axis):
return tf.reduce_sum(x, axis)`` called with a tensor ``axis``) is a constant
argument (graph/const_args.py): such a signature always compiles lazily, once per
value seen, up to ``--tfjit_max_constant_argument_variants`` values.

A call recorded by a ``tf.GradientTape`` is differentiable: api/gradient.py
registers the gradient of TfjitLaunch.
"""
from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
import weakref

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import record
from tensorflow.python.ops import resource_variable_ops

from tfjit import dtypes as dt
from tfjit.api import binding, errors, replica
from tfjit.api import gradient  # registers the gradient of TfjitLaunch
from tfjit.api.service import SERVICE
from tfjit.api.tracing import tensor_info
from tfjit.graph import cluster as clustering
from tfjit.graph import random_state
from tfjit.graph.graphdef import Graph
from tfjit.graph.mark import mark
from tfjit.runtime import launch

log = logging.getLogger("tfjit")


class _Entry:
    """One traced signature: calls the launch op and rebuilds the output structure.

    ``compiled`` is None when the signature is compiled lazily by the launch op
    (shapes not all known at trace time); the node then carries ``cluster_def``
    and, when it may fall back, the traced function itself (``fallback``)."""

    def __init__(self, compiled, cf, spec, out_shapes, lazy: bool, fallback=None, rng=None):
        self.compiled = compiled
        self.rng = rng
        self.captures = list(cf.captured_inputs)
        self.variables = list(cf.graph.variables)   # watched by an outer tape, as TF's calls do
        self.structured_outputs = cf.structured_outputs
        self.out_dtypes = [t.dtype for t in cf.outputs]
        self.out_shapes = out_shapes
        self.spec = spec
        self.lazy = lazy
        self.fallback = fallback
        # A capture of another graph's tensor is only valid in that graph: not cached.
        self.cacheable = all(not isinstance(c, tf.Tensor) or hasattr(c, "numpy") for c in self.captures)

    def __call__(self, flat_tensors):
        if self.variables and record.could_possibly_record():
            for v in self.variables:
                resource_variable_ops.variable_accessed(v)
        graph_mode = not tf.executing_eagerly()
        rng = self.rng.reserve() if self.rng is not None else []
        outs = launch.launch(list(flat_tensors) + self.captures + rng, cluster=self.spec.key,
                             cluster_def=self.spec.graph_def if graph_mode else b"",
                             Tout=self.out_dtypes, output_shapes=self.out_shapes,
                             fallback=self.fallback if graph_mode else None,
                             constant_args=self.spec.constant_args)
        return binding.pack_outputs(self.structured_outputs, outs)

    def latest(self):
        """The ``pipeline.Compiled`` of this entry (the latest one, when compiled lazily)."""
        return self.compiled if self.compiled is not None else SERVICE.latest.get(self.spec.key)


class _Reserves:
    """The state of a traced signature's stateful random nodes (graph/random_state.py).

    One TfjitRandomReserve per node, called before each launch; its (key, counter)
    are the cluster's last inputs.  Eagerly, each signature's node has its own
    kernel (``instance``), as each concrete function has its own in TensorFlow;
    inside an outer graph each call adds its own reserve nodes.  A node's shape
    must be known when the function is traced (it sizes the reservation)."""

    _instances = itertools.count()

    def __init__(self, graph, reserves: dict):
        self.nodes, self.refused, self.inputs, self.signature = [], [], [], ()
        self._shapes = None
        for node in sorted(reserves):
            op = graph.get_operation_by_name(node)
            shuffle = op.type == "RandomShuffle"      # reserves by its value's shape
            if shuffle:
                known = op.inputs[0].shape.is_fully_defined()
                shape = np.asarray(op.inputs[0].shape.as_list() if known else None, np.int64)
                shape = shape if known else None
            else:
                shape = tf.get_static_value(op.inputs[0])
            if shape is None:
                self.refused.append((node, op.type, "stateful random op whose shape is not known "
                                     "when the function is traced (it sizes the counter's skip)"))
                continue
            self.nodes.append((node, np.asarray(shape, np.int64 if shuffle else op.inputs[0].dtype.as_numpy_dtype),
                               op.get_attr("seed"), op.get_attr("seed2"), "shuffle" if shuffle else "outputs",
                               f"{node}#{next(self._instances)}"))
            self.inputs += [(reserves[node], 0), (reserves[node], 1)]
            self.signature += ((dt.U64, (1,)), (dt.U64, (2,)))

    def reserve(self) -> list:
        eager = tf.executing_eagerly()
        if eager and self._shapes is None:      # made once: an eager constant costs a call's time
            self._shapes = [tf.constant(n[1]) for n in self.nodes]
        out = []
        for k, (node, shape, seed, seed2, samples, instance) in enumerate(self.nodes):
            out += launch.random_reserve(self._shapes[k] if eager else tf.constant(shape), seed=seed,
                                         seed2=seed2, samples=samples, instance=instance)
        return out


class _InTensorFlow:
    """A signature that ``fall_back`` functions run as a plain tf.function."""
    cacheable = True
    compiled = None

    def __init__(self, reason: str):
        self.reason = reason


class Function:
    """``fall_back`` (what Keras's ``jit_compile="auto"`` uses): must-compile, except that
    a function tfjit cannot compile runs as a plain tf.function instead, said in one log
    line (or passed to ``fall_back(message)`` when it is a callable), and a lazily
    compiled signature that fails runs the traced function (the launch node carries it)
    instead of failing.  ``reduce_retracing`` is passed to the tf.function that traces."""

    def __init__(self, fn, jit_compile=True, autograph: bool = True, name: str | None = None,
                 *, fall_back=False, reduce_retracing: bool = False):
        if jit_compile not in (True, False, None):
            raise ValueError(f"jit_compile must be True, False or None, got {jit_compile!r}")
        self._fn = fn
        self.jit_compile = jit_compile
        self.fall_back = fall_back
        self._tf = tf.function(fn, autograph=autograph, reduce_retracing=reduce_retracing)
        self._trace_options = dict(autograph=autograph, reduce_retracing=reduce_retracing)
        self._binder = binding.Binder(fn)
        self._entries: dict = {}
        self._lock = threading.Lock()
        self.name = name or getattr(fn, "__name__", "fn")
        # the name and doc only: merging fn's __dict__ let a wrapped object's attributes
        # replace this one's (a Keras layer's _lock); and no __wrapped__: TensorFlow follows
        # it (a default argument of a tf.function, strategy.run) and calls fn uncompiled
        functools.update_wrapper(self, fn, updated=())
        del self.__wrapped__

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return functools.partial(self.__call__, instance)

    # -- calling ---------------------------------------------------------------------
    # strategy.run converts the function it runs with AutoGraph: tfjit's own code is not
    # for converting (the user's function is, by tf.function or replica.call)
    @tf.autograph.experimental.do_not_convert
    def __call__(self, *args, **kwargs):
        if self.jit_compile is False:
            return self._tf(*args, **kwargs)
        if replica.in_replica():    # called by strategy.run (jit_compile True or None)
            if not tf.executing_eagerly():
                return replica.call(self, args, kwargs)
            try:
                return self._call(args, kwargs)
            except RuntimeError as e:
                if "merge_call" not in str(e):
                    raise
                raise replica.eager_sync_error(self.name, e) from None
        return self._call(args, kwargs)

    def _call(self, args, kwargs):
        call = self._binder.bind(args, kwargs)
        key = call.key()
        entry = self._entries.get(key)
        if entry is None:
            with self._lock:
                entry = self._entries.get(key) or self._build(call)
                if entry.cacheable:
                    self._entries[key] = entry
            profile = _compile_profile()
            if profile is not None and not isinstance(entry, _InTensorFlow) \
                    and tf.executing_eagerly():
                return _first_run(profile, entry, call.inputs())
        if isinstance(entry, _InTensorFlow):
            return self._tf(*args, **kwargs)
        return entry(call.inputs())

    def experimental_get_compile_count(self) -> int:
        """How many signatures this function has traced for tfjit (one per new shape/dtype
        signature; a lazily compiled one counts once, however many shapes it then sees)."""
        return sum(not isinstance(e, _InTensorFlow) for e in self._entries.values())

    # -- tracing and compiling -------------------------------------------------------------
    def _build(self, call):
        """Traces the call (binding.py: its inputs are the call's tensor leaves, in
        parameter order) and compiles it, or auto-clusters it (jit_compile=None)."""
        profile = _compile_profile()
        start = time.perf_counter()
        traced = tf.function(binding.traceable(self._fn, call), **self._trace_options)
        cf = traced.get_concrete_function(*call.specs())
        if profile is not None:
            profile.add("trace", time.perf_counter() - start)
        if self.jit_compile is None:
            from tfjit.api.autocluster import AutoEntry
            return AutoEntry(cf)
        from tfjit import pipeline
        with pipeline.gc_held():        # marking and clustering are the compile's too
            return self._must_compile(cf)

    def _refuse(self, error: tf.errors.InvalidArgumentError):
        """A must-compile error: raised, or for ``fall_back`` functions logged once."""
        if not self.fall_back:
            raise error
        if not any(isinstance(e, _InTensorFlow) for e in self._entries.values()):
            line = f"tfjit: {self.name} runs in TensorFlow: " + error.message.replace("\n", " ")
            if callable(self.fall_back):
                self.fall_back(line)
            else:
                log.info("%s", line)
        return _InTensorFlow(error.message)

    def _must_compile(self, cf):
        profile = _compile_profile()
        start = time.perf_counter()
        graph_def, info, reserves = random_state.split(cf.graph.as_graph_def(), tensor_info(cf.graph))
        graph = Graph(graph_def)
        graph_name = cf.graph.name
        refused = [(n, graph.nodes[n].op, r) for n, r in mark(graph).items()
                   if r and n not in reserves.values()]
        rng = _Reserves(cf.graph, reserves)
        refused += rng.refused
        if refused:
            return self._refuse(errors.unsupported(graph_name, refused, cf.graph))
        inputs = [(t.op.name, t.value_index) for t in cf.inputs]
        outputs = [(t.op.name, t.value_index) for t in cf.outputs]
        input_nodes = {i[0] for i in inputs} | set(reserves.values())
        names = [n for n in graph.nodes if n not in input_nodes]
        spec = clustering.extract(graph, names, info, outputs=outputs, inputs=inputs + rng.inputs,
                                  name=graph_name)
        SERVICE.install()
        SERVICE.register(spec.key, spec.graph_def, name=_safe(graph_name),
                         describe=_describer(graph_name, cf.graph))
        signature = _signature(cf)
        if signature is not None:
            signature += rng.signature
        if profile is not None:
            profile.add("graph, marking, clustering", time.perf_counter() - start)
        if signature is None or spec.constant_args:   # compiled by the launch op, per concrete
            # signature (and per value of the constant arguments)
            fallback = cf if self.fall_back and not tf.executing_eagerly() else None
            return _Entry(None, cf, spec, [t.shape for t in cf.outputs], lazy=True,
                          fallback=fallback, rng=rng if rng.nodes else None)
        from tfjit.lower.graph_to_ir import LoweringError
        from tfjit.pipeline import TooLarge
        from tfjit.settings import flags
        try:    # a function that may fall back does past auto mode's size bound
            compiled = SERVICE.get(spec.key, signature, name=_safe(graph_name),
                                   max_kernels=flags().tfjit_auto_max_kernels if self.fall_back else 0)
        except LoweringError as e:
            return self._refuse(errors.unsupported(graph_name, [(e.node, e.op, e.reason)], cf.graph,
                                                   frame_node=e.caller))
        except TooLarge as e:
            return self._refuse(tf.errors.InvalidArgumentError(None, None, f"{graph_name}: {e}"))
        # partial shapes are fine (the attr is list(shape)): TF leaves some outputs' rank
        # unknown, e.g. FusedBatchNormV3's reserve_space_3
        return _Entry(compiled, cf, spec, [t.shape for t in cf.outputs], lazy=False,
                      rng=rng if rng.nodes else None)   # no per-call work without random nodes

    # -- introspection -----------------------------------------------------------------------
    def _entry(self, args, kwargs):
        key = self._binder.bind(args, kwargs).key()
        if key not in self._entries:
            self(*args, **kwargs)
        return self._entries[key]

    def compiled(self, *args, **kwargs):
        """The ``pipeline.Compiled`` for these arguments' signature (must-compile functions)."""
        entry = self._entry(args, kwargs)
        if isinstance(entry, _InTensorFlow):
            raise ValueError(f"{self.name} runs in TensorFlow for these arguments: {entry.reason}")
        if not isinstance(entry, _Entry):
            raise ValueError("compiled() is for jit_compile=True functions; use clusters()")
        if entry.spec.constant_args:       # the executable of these arguments' values
            self(*args, **kwargs)           # compiled now if it was not
            inputs = self._binder.bind(args, kwargs).inputs() + entry.captures
            values = {k: np.asarray(inputs[k]) for k in entry.spec.constant_args}
            return SERVICE.compiled_with(entry.spec.key, values) or entry.latest()
        return entry.latest()

    def experimental_get_compiler_ir(self, *args, **kwargs):
        """Like TF's: returns ``get(stage="ir") -> str`` for these arguments' signature.

        Stages: ``ir`` (as lowered), ``optimized_ir`` (after the passes),
        ``optimized_ir_dot`` (graphviz, kernels as clusters), ``llvm`` (optimised LLVM
        IR), ``asm``, ``ptx`` (PTX for an NVIDIA GPU, ``arch="sm_90"`` or ``"sm_80"``,
        made on any machine).  Arguments are all tensors, or all ``tf.TensorSpec`` (fully
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
        call = self._binder.bind(args, kwargs)
        specs = [x for x in call.leaves if isinstance(x, tf.TensorSpec)]
        if specs and len(specs) != len(call.specs()):
            raise ValueError(f"{caller}: all arguments must be TensorSpecs "
                             "or all must be tensors")
        if specs:
            return self._compile_for_specs(call)
        return self.compiled(*args, **kwargs)

    def _compile_for_specs(self, call):
        for s in call.leaves:
            if isinstance(s, tf.TensorSpec) and not s.shape.is_fully_defined():
                raise ValueError(f"experimental_get_compiler_ir: TensorSpec {s} needs a fully "
                                 "defined shape (tfjit compiles for static shapes)")
        key = call.key()    # the key the same tensors would have
        with self._lock:
            entry = self._entries.get(key) or self._build(call)
            self._entries[key] = entry
        if isinstance(entry, _InTensorFlow):
            raise ValueError(f"{self.name} runs in TensorFlow for these arguments: {entry.reason}")
        if entry.spec.constant_args:
            raise ValueError(f"{self.name} compiles once per value of its inputs "
                             f"{list(entry.spec.constant_args)} (they fix shapes, axes or bounds): "
                             "pass tensors, not TensorSpecs")
        return entry.compiled

    def clusters(self, *args, **kwargs) -> list:
        """[(cluster name, node names, pipeline.Compiled)] for these arguments' signature."""
        entry = self._entry(args, kwargs)
        if isinstance(entry, _InTensorFlow):
            return []
        if isinstance(entry, _Entry):
            return [(entry.spec.name, entry.spec.nodes, entry.latest())]
        return entry.clusters()


def _compile_profile():
    """The compile profile being recorded (pipeline.profiling), if any; asked only on the
    way to a compile, where the pipeline is imported anyway."""
    from tfjit import pipeline
    return pipeline.profile()


def _first_run(profile, entry, inputs):
    """Runs a new signature's first call (eagerly: it has run when this returns), booking
    its time to "first run", less the compile phases booked meanwhile (a lazily compiled
    signature compiles in it)."""
    before, start = profile.total(), time.perf_counter()
    out = entry(inputs)
    profile.add("first run", time.perf_counter() - start - (profile.total() - before))
    return out


def _signature(cf):
    """[(DType, shape)] of the cluster's inputs when all are known now, else None
    (the launch op then compiles for each concrete signature it meets)."""
    out = [_signature_entry(t, cf) for t in cf.inputs]
    return None if any(e is None for e in out) else tuple(out)


def _signature_entry(t, cf):
    """(DType, shape) of one cluster input, or None when not known before it runs.

    A captured resource variable signs with its value's dtype and current shape, as
    the launch op does (so a variable created with ``shape=None`` compiles for the
    shape it holds now, and again when that changes); a resource handle passed as an
    argument, or captured from another graph, is only known when the op runs."""
    if t.dtype != tf.resource:
        if not t.shape.is_fully_defined():
            return None
        return dt.edge_from_tf_enum(t.dtype.as_datatype_enum), tuple(t.shape)
    outer = next((o for o, inner in cf.graph.captures if inner is t), None)
    handle_data = getattr(outer, "_handle_data", None)
    if outer is None or not hasattr(outer, "numpy") or handle_data is None \
            or not handle_data.shape_and_type:
        return None
    dtype = dt.from_tf_enum(handle_data.shape_and_type[0].dtype)
    with tf.init_scope():
        shape = tf.raw_ops.VariableShape(input=outer, out_type=tf.int64).numpy()
    return dtype, tuple(int(d) for d in shape)


def _describer(graph_name: str, graph):
    """The message of a LoweringError met when the launch op compiles lazily."""
    ref = weakref.ref(graph)

    def describe(e) -> str:
        return errors.message(graph_name, [(e.node, e.op, e.reason)], ref(),
                              getattr(e, "caller", None))
    return describe


COMPILER_IR_STAGES = ("ir", "optimized_ir", "optimized_ir_dot", "llvm", "asm", "ptx")


def _compiler_ir(compiled, stage: str = "ir", arch: str = "sm_90") -> str:
    from tfjit.api import dump
    from tfjit.codegen import tiering
    tiering.wait(compiled)      # the code later calls run, not a quick first tier's
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
    if stage == "ptx":          # the same module for an NVIDIA GPU, on any machine
        return _ptx(compiled, arch)
    raise ValueError(f"unknown compiler IR stage {stage!r}; valid stages: "
                     + ", ".join(COMPILER_IR_STAGES))


def _ptx(compiled, arch: str) -> str:
    """PTX for ``arch`` of the module as lowered (re-optimised: passes are per module, not
    per target); a kernel the GPU cannot run is a ValueError with the reason."""
    from tfjit import pipeline
    from tfjit.codegen.target import NotForTarget
    try:
        return pipeline.ptx_of(compiled, arch).ptx
    except NotForTarget as e:
        where = f" ({e.instr})" if e.instr is not None else ""
        raise ValueError(f"no PTX for {compiled.name}: {e.reason}{where}") from None


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_." else "_" for c in name)[:80]


def function(fn=None, *, jit_compile=True, autograph: bool = True):
    """Like ``tf.function``; ``jit_compile=True`` compiles the whole function with tfjit."""
    if fn is None:
        return lambda f: Function(f, jit_compile=jit_compile, autograph=autograph)
    return Function(fn, jit_compile=jit_compile, autograph=autograph)


gradient.FUNCTION = Function     # the backward functions of launch ops are tfjit Functions
