"""Ahead-of-time compilation of one cluster into a relocatable object file.

The JIT's own stages (``tfjit/pipeline.py``): lower, ``optimize`` (every pass),
``emit`` for a CPU-AOT ``Target``; then, instead of loading the code, the C
entry points of ``driver.py`` are added, every other symbol is made internal,
and the module is optimised and emitted as a position-independent ELF object
for the requested target (``llvm_target.emit_object``).  The object calls
nothing from llvmlite or TensorFlow: only libc (``malloc``/``free``/
``memcpy``) and libm: float64 transcendentals, and ``fmaf`` where the IR's FMA
(a depthwise convolution's taps) is compiled for a target CPU without the FMA
instructions.
"""
from __future__ import annotations

import dataclasses

import llvmlite.binding as llvm

from tfjit.aot import driver
from tfjit.aot.config import AotError
from tfjit.aot.frontend import Cluster
from tfjit.codegen import llvm_target
from tfjit.codegen import target as codegen_target
from tfjit.graph.graphdef import Graph
from tfjit.lower.graph_to_ir import LoweringError, lower_cluster


@dataclasses.dataclass(frozen=True)
class Target:
    """``triple``/``cpu``/``features`` as tfcompile's ``--target_*`` flags; empty: the host's."""
    triple: str = ""
    cpu: str = ""
    features: str = ""

    def resolve(self) -> tuple:
        """(triple, cpu, features) with the host's filled in where not given."""
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        host = llvm.get_process_triple()
        triple = self.triple or host
        if not triple.startswith("x86_64"):
            raise AotError(f"target triple {triple!r}: tfjit-aot generates x86-64 code only")
        try:
            llvm.Target.from_triple(triple)
        except RuntimeError as e:
            raise AotError(f"target triple {triple!r}: {e}") from None
        same_host = triple == host and not self.cpu
        cpu = self.cpu or (llvm.get_host_cpu_name() if same_host else "x86-64")
        # the host's features (wide vectors preferred, see llvm_cpu) when compiling for this CPU
        features = self.features if self.features or not same_host else llvm_target.features()
        return triple, cpu, features

    def machine(self):
        triple, cpu, features = self.resolve()
        return llvm.Target.from_triple(triple).create_target_machine(
            cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default", jit=False)


@dataclasses.dataclass
class Artifact:
    """One AOT compilation: the object bytes plus everything the header describes."""
    prefix: str
    object_code: bytes
    feeds: list                  # config.Tensor (dtype, shape)
    fetches: list                # config.Tensor (dtype, shape filled in)
    layout: driver.Layout
    num_kernels: int
    module_after: str            # IR text after the passes
    llvm_ir: str                 # optimised LLVM IR
    runtime: list                # AOT runtime functions the object calls (dot, convolution)
    cpu: str                     # the target CPU (the runtime library is built for it)
    target: str                  # "triple cpu features"
    runtime_library: str = ""    # its file name, when written (cli.build)
    runtime_level: str = ""      # the x86-64 level it was built for


def compile_cluster(cluster: Cluster, prefix: str, target: Target = Target()) -> Artifact:
    """Compiles ``cluster`` into an object whose entry points are named ``<prefix>_*``."""
    from tfjit import pipeline
    tm = target.machine()
    triple, cpu, features = target.resolve()
    try:
        m = lower_cluster(Graph.from_bytes(cluster.graph_def), cluster.signature, prefix)
    except LoweringError as e:
        raise AotError(f"cannot compile {e.op} ({e.reason}) {{{{node {e.node}}}}}") from None
    optimized = pipeline.optimize(m)
    # dot and convolution call the AOT runtime (aot/runtime.py), not the op library
    aot = codegen_target.Target("tfjit-aot", triple, str(tm.target_data), runtime_calls=False,
                                library_prefix="tfjit_aot_rt_",
                                vector_ldexp=llvm_target.machine_vector_ldexp(tm))
    try:
        emitted = pipeline.emit(optimized, aot, prefix)
    except codegen_target.NotForTarget as e:
        raise AotError(f"cannot compile {e.instr.op.spelling} {{{{node {e.instr.source}}}}}: "
                       f"{e.reason}") from None
    llmod = emitted.llvm_module
    driver.internalize(llmod)
    output_bytes = [o.size * o.dtype.itemsize for o in m.outputs]
    layout = driver.emit(llmod, prefix, emitted.steps, optimized.plan, output_bytes,
                         emitted.messages, x86=triple.startswith("x86_64"))
    obj, optimized_ir = llvm_target.emit_object(tm, str(llmod))
    fetches = [dataclasses.replace(t, shape=tuple(o.shape), dtype=o.dtype)
               for t, o in zip(cluster.fetches, m.outputs)]
    for t, o in zip(cluster.fetches, m.outputs):
        if t.dtype is not None and t.dtype is not o.dtype:
            raise AotError(f"fetch '{t.tensor}' ({t.name}): compiled as {o.dtype}, the graph "
                           f"says {t.dtype}")
    return Artifact(prefix, obj, list(cluster.feeds), fetches, layout, len(optimized.fusions),
                    optimized.after, optimized_ir, emitted.runtime, cpu,
                    f"{triple}, cpu {cpu}, "
                    + (f"features {target.features}" if target.features else
                       "this machine's features" if features else "the CPU's default features"))
