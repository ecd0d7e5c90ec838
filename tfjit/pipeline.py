"""The compiler driver: cluster definition → machine code, top to bottom.

    lower     graph → IR                       lower/graph_to_ir.py
    optimize  every pass, in PIPELINE order:   passes/
              simplification, fusion, buffer
              assignment (verified after each)
    emit      optimised IR → LLVM IR for a     codegen/ (target.py: what it is told)
              Target: the only road to code
    then, per target:
      JIT     LLVM IR → machine code → the     codegen/llvm_cpu.py, runtime/launch.py
              executable the TfjitLaunch op runs
      AOT     LLVM IR + C entry points → an    aot/compile.py
              object file
      GPU     LLVM IR + kernel entries → PTX   codegen/nvptx.py, compile_ptx below,
              for sm_80/sm_90                  run by runtime/cuda.py

Each stage consumes only what the previous one produced.  ``optimize`` and
``emit`` are shared by every target: a pass or a kernel added here reaches the
JIT, tfjit-aot and the GPU alike.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import os
import threading
import time

from tfjit import settings
from tfjit import dtypes as dt
from tfjit.codegen import control, lanes, library, llvm_cpu, llvm_target, nvptx, objcache, tiering
from tfjit.codegen.elemental import MESSAGES
from tfjit.codegen.target import Compiler, NotForTarget, Target
from tfjit.graph.graphdef import Graph
from tfjit.ir import text, verify
from tfjit.ir.module import Module
from tfjit.lower.graph_to_ir import lower_cluster
from tfjit.passes import buffers, concurrency, fusion, kernel_order
from tfjit.passes.dots import Bf16Products, DotsAsReductions, FoldBatchIntoContraction
from tfjit.passes.epilogue import FoldConvolutionBias
from tfjit.passes.sibling_convs import MergeSiblingConvolutions
from tfjit.passes.simplify import (CSE, DCE, FlattenReductions, MishFactor, RepeatsAsBroadcasts,
                                   ConvertsBeforeReshapes, ReshapeChains)
from tfjit.passes.collapse import CollapseDims
from tfjit.passes.copies import CopyPerReader
from tfjit.passes.reductions import TwoStageReductions
from tfjit.passes.transposes import CancelTransposes, ScatterBetweenTransposes
from tfjit.runtime import cuda, launch, launch_gpu, warmup


class CompileProfile:
    """Where compile time goes: seconds per phase, summed over the compiles (and the
    front doors' first calls) made while ``profiling()`` is on.

    Phases are marked in the order they run: ``mark(phase)`` books the time since the
    previous mark (or ``restart``) to ``phase``.  The front doors (api/function.py)
    add what is theirs (tracing, marking, the first run) with ``add``."""

    def __init__(self):
        self.seconds: dict = {}
        self.compiles = 0
        self._last = time.perf_counter()

    def restart(self) -> None:
        self._last = time.perf_counter()

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.add(phase, now - self._last)
        self._last = now

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def total(self) -> float:
        return sum(self.seconds.values())


_profile: CompileProfile | None = None      # on only inside ``profiling()``


@contextlib.contextmanager
def profiling():
    """Records compile phases while the block runs (in every thread: the launch op
    compiles lazily on TensorFlow's); yields the ``CompileProfile``.  Off, a phase
    costs one test of a module global."""
    global _profile
    outer, _profile = _profile, CompileProfile()
    try:
        yield _profile
    finally:
        _profile = outer


def profile() -> CompileProfile | None:
    """The profile being recorded, if any (the front doors add their phases to it)."""
    return _profile


def _mark(phase: str) -> None:
    if _profile is not None:
        _profile.mark(phase)


_gc_lock = threading.Lock()
_gc_holders = 0             # compiles running now (several threads may compile at once)
_gc_was_enabled = False


@contextlib.contextmanager
def gc_held():
    """Python's cyclic garbage collector off while a compile runs, back on after.

    A compile allocates tens of thousands of objects that live through it (IR,
    fusions, llvmlite's module), and CPython starts a full collection when enough
    survive: one that walks every object of the process, most of them TensorFlow's
    from the tracing just before (~370k in a Keras step's first call), for 130-142
    ms of a 0.5-2 s first call (measured with gc.callbacks).  Held off, that
    collection runs at some later allocation instead: the work is moved out of the
    first call, not removed.  Reference counting still frees everything acyclic
    meanwhile.  A collector the user turned off stays off."""
    global _gc_holders, _gc_was_enabled
    with _gc_lock:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_was_enabled:
                gc.enable()


@dataclasses.dataclass
class Optimized:
    """A module after every pass: its kernels (fusions) and where their values live."""
    module: Module
    before: str                 # IR text as lowered
    after: str = ""             # IR text after the passes
    fusions: list | None = None
    plan: buffers.BufferPlan | None = None
    groups: list | None = None  # per group, kernels per task (passes/concurrency.py)
    options: "Options | None" = None   # what optimize ran with


class Fuse:
    """Groups instructions into kernels (passes/fusion.py)."""
    name = "fusion"

    def run(self, o: Optimized):
        o.fusions = fusion.fuse(o.module)
        return o.fusions

    def verify(self, o: Optimized) -> None:
        verify.fusions(o.module, o.fusions, self.name)


class AssignBuffers:
    """Gives every kernel root a buffer slot and every temp its arena offset."""
    name = "buffer-assignment"

    def run(self, o: Optimized):
        o.plan = buffers.assign(o.module, o.fusions)
        return o.plan

    def verify(self, o: Optimized) -> None:
        verify.buffer_plan(o.module, o.fusions, o.plan, buffers.ALIGN, self.name)


class GroupConcurrent:
    """Regroups the kernels so that kernels sharing no memory may run at once."""
    name = "concurrency"

    def run(self, o: Optimized):
        if settings.flags().tfjit_concurrent_groups:
            s = concurrency.schedule(o.module, o.fusions, o.plan)
            concurrency.schedule_loops(o.module, o.fusions, o.plan)
        else:                   # --tfjit_concurrent_groups=false: the schedule as it is
            s = concurrency.Schedule(list(o.fusions), [[1]] * len(o.fusions), {})
        o.fusions, o.groups = s.fusions, s.groups
        return s

    def verify(self, o: Optimized) -> None:
        verify.concurrent_groups(o.module, o.fusions, o.groups, o.plan, self.name)


class _OnModule:
    """A pass of ``Module -> changed`` (passes/simplify.py), as a pipeline step."""

    def __init__(self, p):
        self.p, self.name = p, p.name

    def run(self, o: Optimized):
        option = getattr(self.p, "option", None)      # a pass only some targets ask for
        if option and not (o.options and getattr(o.options, option)):
            return False
        return self.p.run(o.module)

    def verify(self, o: Optimized) -> None:
        verify.module(o.module, self.name)


PASSES = [CSE(), RepeatsAsBroadcasts(), MishFactor(), FoldBatchIntoContraction(), DotsAsReductions(),
          Bf16Products(), CancelTransposes(),
          ScatterBetweenTransposes(), FoldConvolutionBias(), MergeSiblingConvolutions(),
          TwoStageReductions(), ConvertsBeforeReshapes(), ReshapeChains(), DCE(),
          CollapseDims(), FlattenReductions(), CopyPerReader()]   # the module-to-module passes, in order
PIPELINE = [_OnModule(p) for p in PASSES] + [Fuse(), AssignBuffers(), GroupConcurrent()]   # what optimize runs


@dataclasses.dataclass(frozen=True)
class Options:
    verify: bool = False        # the IR verifier after every pass (ir/verify.py)
    # bf16 products and convolutions as bf16 calls (passes/dots.py Bf16Products): where
    # the code's target runs oneDNN on a CPU that multiplies bf16 (Target.onednn and
    # native_bf16); elsewhere they stay f32 calls between converts, which fuse with their
    # producers and readers (a call widening its own operands was slower)
    bf16_calls: bool = False

    @staticmethod
    def from_flags(target: Target | None = None) -> "Options":
        return Options(verify=settings.flags().tfjit_verify_ir,
                       bf16_calls=bool(target and target.onednn and target.native_bf16))


def optimize(m: Module, options: Options | None = None, after_pass=None) -> Optimized:
    """Runs PIPELINE on ``m`` (changed in place; its parameters stay the inputs).

    ``after_pass(seq, pass_name, module, result)``, when given, sees the module after
    every pass (``result``: changed-or-not, the fusions, the buffer plan); the debug
    dumps (api/dump.py, --tfjit_dump_pass_re) hook in here."""
    options = options or Options.from_flags()
    o = Optimized(m, text.module_str(m), options=options)
    _mark("IR text")
    if options.verify:
        verify.module(m, "lowering")
    for seq, step in zip(itertools.count(), PIPELINE):
        result = step.run(o)
        _mark(step.name)
        if options.verify:
            step.verify(o)
        if after_pass is not None:
            after_pass(seq, step.name, m, result)
        _mark("verify and dumps")
    o.after = text.module_str(m)
    _mark("IR text")
    return o


@dataclasses.dataclass
class Emitted:
    """LLVM IR for one optimised module and one target."""
    llvm_module: object         # llvmlite ir.Module
    steps: list                 # [(kernel symbol, rows, cost)] in run order
    messages: list              # runtime error texts: status code k is messages[k - 1]
    runtime: list               # op library functions the code calls
    marks: list | None = None   # per step (group, task): the concurrent groups (abi.h)
    kernels: list | None = None  # per step, the kernel (Fusion) it runs


def emit(o: Optimized, target: Target, name: str) -> Emitted:
    """The kernels of ``o`` as LLVM IR for ``target``; NotForTarget when the module needs
    what the target lacks (a dot or convolution on a target without a runtime library)."""
    kinds = {f.kind for f in kernel_order.walk(o.fusions)}
    if o.module.output_rows and (target.gpu_arch or target.compiler is None):   # GPU, AOT
        j = next(iter(o.module.output_rows))
        raise NotForTarget(o.module.outputs[j], f"{target.name} code cannot return a result whose "
                           "shape depends on the data (Where): only the JIT's launch op and "
                           "host runner take its row count")
    if target.gpu_arch:
        nvptx.refuse(o.fusions, target)
    if "library" in kinds and not target.library_prefix:
        i = next(f.roots[0] for f in kernel_order.walk(o.fusions) if f.kind == "library")
        raise NotForTarget(i, f"{target.name} code cannot call the runtime library "
                              "(dot, convolution and its gradients)")
    if target.library_prefix and target.library_prefix != "tfjit_rt_":
        for f in kernel_order.walk(o.fusions):
            if f.kind == "library" and library.call_kind(f.roots[0]) in library.ONLY_UNDER_TF:
                raise NotForTarget(f.roots[0], f"{target.name} code cannot run TF's "
                                   f"{library.tf_op(f.roots[0])} kernel (its runtime has no FFT: "
                                   "TF's CPU FFT is DUCC's, which tfjit does not build)")
    messages = list(MESSAGES)        # kernels add theirs (a gather's bound, ...)
    per_kernel: list = []       # steps per kernel
    llmod, steps = llvm_cpu.emit_module(name, o.fusions, o.plan, messages, target, per_kernel)
    marks = concurrency.step_marks(o.groups or [[1]] * len(o.fusions), per_kernel)
    if target.gpu_arch:         # kernel entries over the same row bodies (codegen/nvptx.py)
        nvptx.check_calls(llmod, o.fusions, target)
        steps = nvptx.add_entries(llmod, steps)
    runtime = []             # op library functions the code calls
    if "library" in kinds:   # dot/conv call the runtime library (TF's kernels for the JIT)
        runtime += library.runtime_symbols(target.library_prefix)
    if target.runtime_calls and kinds & set(fusion.CONTROL):   # drivers shard big steps
        runtime.append(control.PARALLEL_FOR)
        if any(getattr(p, "groups", None) for p in o.plan.control.values()):
            runtime.append(control.RUN_GROUP)      # and run a body's concurrent groups
    kernels = [f for f, n in zip(o.fusions, per_kernel) for _ in range(n)]
    return Emitted(llmod, steps, messages, runtime, marks, kernels)


def jit_compiler() -> Compiler:
    """Where the JIT's LLVM runs, as the flags ask (--tfjit_compile_in_process,
    --tfjit_compile_timeout, --tfjit_compile_processes): the one place that reads them.

    Processes: 0 (the default) is one compile server per core this process may run on,
    at most 4: past that, a cluster's kernels rarely split into parts big enough to pay
    for another server's start and memory (~100 MB while it lives)."""
    f = settings.flags()
    processes = f.tfjit_compile_processes
    if processes <= 0:
        processes = min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                        else os.cpu_count() or 1)
    return Compiler(in_process=f.tfjit_compile_in_process, timeout=f.tfjit_compile_timeout,
                    processes=processes)


def jit_target() -> Target:
    """The JIT's target: the code this process's compile server (or in-process LLVM)
    makes, run inside the launch op, with TF's oneDNN choice for this CPU."""
    compiler = jit_compiler()
    env = llvm_cpu.target_env(compiler)
    return Target("cpu-jit", env["triple"], env["data_layout"], runtime_calls=True,
                  onednn=settings.onednn_enabled(), compiler=compiler,
                  verify_sharing=settings.flags().tfjit_verify_ir,
                  vector_ldexp=llvm_target.vector_ldexp(env.get("features", "")),
                  native_bf16=llvm_target.native_bf16(env.get("features", "")))


class TooLarge(Exception):
    """A cluster past the size bound it was compiled under (``max_kernels``): auto mode
    runs it in TensorFlow instead, with this reason.  Compile time grows with the kernels
    (LLVM optimises each: ~10 ms apiece on one core), so the bound caps it before LLVM."""


@dataclasses.dataclass
class Compiled:
    """Everything one compilation produced, for execution and introspection."""
    name: str
    signature: list
    module_before: str          # IR text as lowered
    module_after: str           # IR text after the passes
    fusions: list
    plan: buffers.BufferPlan
    code: llvm_cpu.MachineCode
    executable: object          # runtime.launch.Executable
    seconds: float
    cluster_def: bytes = b""    # the TF cluster it was lowered from (empty for a parsed module)
    constants: dict = dataclasses.field(default_factory=dict)   # constant arguments' values
    upgrade: object = None      # tiering.Upgrade: its optimised build, where code is quick-tier

    @property
    def num_kernels(self) -> int:
        return len(self.fusions)


@gc_held()
def compile_cluster(cluster_def: bytes, signature: list, name: str, after_pass=None,
                    constants: dict | None = None, max_kernels: int = 0) -> Compiled:
    """Compiles one cluster for one input signature [(DType, shape)] (the JIT).
    ``constants`` {input: numpy value}: the values of its constant arguments;
    ``max_kernels`` (0: none): raise TooLarge for more kernels than that after fusion."""
    start = time.perf_counter()
    if _profile is not None:
        _profile.restart()
        _profile.compiles += 1
    m = lower_cluster(Graph.from_bytes(cluster_def), signature, name, constants)
    _mark("lower")
    compiled = compile_module(m, name, after_pass, max_kernels)
    compiled.signature = signature
    compiled.cluster_def = cluster_def
    compiled.constants = dict(constants or {})
    compiled.seconds = time.perf_counter() - start
    return compiled


@gc_held()
def compile_module(m: Module, name: str, after_pass=None, max_kernels: int = 0) -> Compiled:
    """The JIT for a lowered (or parsed) module: optimize, emit for this process's CPU,
    machine code, and the executable the launch op runs (TooLarge past ``max_kernels``)."""
    start = time.perf_counter()
    if _profile is not None:
        _profile.restart()
    signature = m.boundary_params()
    target = jit_target()
    o = optimize(m, Options.from_flags(target), after_pass=after_pass)
    kernels = sum(1 for _ in kernel_order.walk(o.fusions))
    if max_kernels and kernels > max_kernels:
        raise TooLarge(f"{kernels} kernels after fusion, more than the {max_kernels} that "
                       "auto mode compiles (--tfjit_auto_max_kernels)")
    if library.runs_onednn_gemm(f.roots[0] for f in kernel_order.walk(o.fusions) if f.kind == "library"):
        warmup.start()       # oneDNN's GEMM code generated beside LLVM (runtime/warmup.py)
    e = emit(o, target, name)
    _mark("emit LLVM IR")
    code = objcache.compile_module(e.llvm_module, [s for s, _, _ in e.steps], target.compiler,
                                   runtime=e.runtime, phases=_mark if _profile else None,
                                   tiered=settings.tiered_compile())
    executable = launch.make_executable(
        input_dtypes=[launch.DT_RESOURCE if k in m.variable_params else d.tf_enum
                      for k, (d, _) in enumerate(signature)],
        output_dtypes=[d.tf_enum for d, _ in m.boundary_outputs()],
        output_shapes=[s for _, s in m.boundary_outputs()],
        output_source=o.plan.output_source,
        output_forward=[-1] * len(m.outputs),
        temp_bytes=o.plan.temp_bytes,
        temp_offsets=o.plan.temp_offsets,
        steps=[(code.addresses[s], rows, cost) for s, rows, cost in e.steps],
        marks=e.marks,
        messages=e.messages,
        update_inputs=list(m.updates),
        update_in_place=o.plan.update_in_place,
        keepalive=code,
        runtime=e.runtime,
        output_rows=[m.output_rows.get(j, -1) for j in range(len(m.outputs))])
    launch.name_steps(executable, name, [(s, describe_kernel(f)) for (s, _, _), f
                                         in zip(e.steps, e.kernels)])
    _mark("executable")
    compiled = Compiled(name, signature, o.before, o.after, o.fusions, o.plan, code, executable,
                        time.perf_counter() - start)
    if code.pipeline == tiering.QUICK:     # the optimised build follows (codegen/tiering.py)
        tiering.start(compiled, [s for s, _, _ in e.steps])
    return compiled


def describe_kernel(f) -> str:
    """One line on what kernel ``f`` computes, for the kernel profile: its kind, its first
    root's name, type and shape, and TF's kernel where it calls one."""
    root = f.roots[0]
    what = f"{f.kind} {root.name} {root.dtype.name}{list(root.shape)}"
    if len(f.roots) > 1:
        what += f" (+{len(f.roots) - 1} roots)"
    if f.kind == "library":
        what += f": TF's {library.tf_op(root)}"
    return what


@dataclasses.dataclass
class CompiledPtx:
    """One module as PTX for one GPU arch, with what runtime/cuda.py needs to run it."""
    name: str
    arch: str
    ptx: str
    llvm_ir: str                # before LLVM's optimisation
    entries: list               # [(PTX entry name, rows)] in run order
    messages: list              # status code k is messages[k - 1]
    plan: buffers.BufferPlan
    params: list                # [(DType, shape)]
    outputs: list               # [(DType, shape)]
    fusions: list
    variable_params: frozenset = frozenset()   # inputs that are resource variables
    updates: tuple = ()         # the trailing outputs' variable inputs
    boundary: tuple = ()        # (params, outputs) as TF sees them (Module.boundary_params)
    blocks: tuple = ()          # per entry: its exact threads per block, 0 any (lanes.block)

    def program(self) -> cuda.Program:
        """The plain data runtime/cuda.py runs (no compiler objects)."""
        return cuda.Program(
            self.name, self.arch, self.ptx, list(self.entries), list(self.messages),
            [(d.numpy(), s) for d, s in self.params], [(d.numpy(), s) for d, s in self.outputs],
            list(self.plan.output_source), list(self.plan.temp_offsets), self.plan.arena_bytes,
            list(self.blocks))

    def executable(self) -> launch_gpu.GpuExecutable:
        """What TfjitLaunch's GPU kernel runs (runtime/launch_gpu.py)."""
        params, outputs = self.boundary or (self.params, self.outputs)
        return launch_gpu.make_gpu_executable(
            self.program(),
            input_dtypes=[launch.DT_RESOURCE if k in self.variable_params else d.tf_enum
                          for k, (d, _) in enumerate(params)],
            output_dtypes=[d.tf_enum for d, _ in outputs], output_shapes=[s for _, s in outputs],
            temp_bytes=self.plan.temp_bytes,
            update_inputs=list(self.updates), update_in_place=self.plan.update_in_place)


def compile_ptx(m: Module, name: str, arch: str = "sm_90", after_pass=None) -> CompiledPtx:
    """The GPU for a lowered (or parsed) module: optimize, emit for NVPTX ``arch``, PTX.
    NotForTarget when a kernel cannot run there (codegen/nvptx.py says why)."""
    params = [(p.dtype, p.shape) for p in m.params]
    o = optimize(m, after_pass=after_pass)
    e = emit(o, nvptx.target(arch), name)
    text_ir = str(e.llvm_module)
    ptx, _ = nvptx.to_ptx(text_ir, arch, jit_compiler())
    return CompiledPtx(name, arch, ptx, text_ir, [(s, rows) for s, rows, _ in e.steps],
                       e.messages, o.plan, params,
                       [(out.dtype, out.shape) for out in m.outputs], o.fusions,
                       frozenset(m.variable_params), tuple(m.updates),
                       (m.boundary_params(), m.boundary_outputs()),
                       tuple(lanes.block(e.llvm_module, s) for s, _, _ in e.steps))


def compile_cluster_gpu(cluster_def: bytes, signature: list, name: str, device_arch: str,
                        constants: dict | None = None) -> CompiledPtx:
    """One cluster as PTX for a GPU of ``device_arch`` (the TfjitLaunch GPU kernel's
    compile): the newest of nvptx.ARCHS the device runs; NotForTarget as compile_ptx."""
    m = lower_cluster(Graph.from_bytes(cluster_def), signature, name, constants)
    return compile_ptx(m, name, nvptx.arch_for(device_arch))


def ptx_of(compiled: Compiled, arch: str = "sm_90") -> CompiledPtx:
    """The GPU's PTX for a module the JIT compiled (re-optimised from the IR as lowered:
    ``optimize`` works in place, and its result is shared by every target)."""
    return compile_ptx(text.parse_module(compiled.module_before), compiled.name, arch)


def signature_of(dtypes_enums: list, shapes: list) -> list:
    """[(DType, shape)] from the launch op's signature; a resource variable input
    signs with its value's dtype + 100 and its value's shape (launch_op.cc)."""
    out = []
    for e, s in zip(dtypes_enums, shapes):
        if e > launch.VARIABLE_DTYPE_OFFSET:
            e -= launch.VARIABLE_DTYPE_OFFSET
        d = dt.edge_from_tf_enum(e)
        if d is None:
            raise TypeError(f"tfjit cannot compile inputs of TF dtype enum {e}")
        out.append((d, tuple(int(x) for x in s)))
    return out
