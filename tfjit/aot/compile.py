"""Ahead-of-time compilation of one cluster into a relocatable object file.

The same stages as the JIT (``tfjit/pipeline.py``): lower → PASSES → fusion →
buffer assignment → kernels (``codegen.llvm_cpu.emit_module``); then, instead
of loading the code with MCJIT, the C entry points of ``driver.py`` are added,
every other symbol is made internal, and the module is optimised and emitted as
a position-independent ELF object for the requested target.  The object calls
nothing from llvmlite or TensorFlow: only libc (``malloc``/``free``/
``memcpy``) and, for float64 transcendentals, libm.
"""
from __future__ import annotations

import dataclasses

import llvmlite.binding as llvm

from tfjit.aot import driver
from tfjit.aot.config import AotError
from tfjit.aot.frontend import Cluster
from tfjit.codegen import llvm_cpu, llvm_target
from tfjit.codegen.elemental import MESSAGES
from tfjit.graph.graphdef import Graph
from tfjit.lower.graph_to_ir import LoweringError, lower_cluster
from tfjit.passes import buffers, fusion


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
    target: str                  # "triple cpu features"


def compile_cluster(cluster: Cluster, prefix: str, target: Target = Target()) -> Artifact:
    """Compiles ``cluster`` into an object whose entry points are named ``<prefix>_*``."""
    from tfjit import pipeline
    from tfjit.ir import text
    tm = target.machine()
    triple, cpu, features = target.resolve()
    try:
        m = lower_cluster(Graph.from_bytes(cluster.graph_def), cluster.signature, prefix)
    except LoweringError as e:
        raise AotError(f"cannot compile {e.op} ({e.reason}) {{{{node {e.node}}}}}") from None
    # The same steps as pipeline.compile_module (kept in step with it by hand: that
    # function also builds the JIT's executable, which an AOT object must not need).
    for p in pipeline.PASSES:
        p.run(m)
    fusions = fusion.fuse(m)
    library = [f.roots[0] for f in fusion.walk(fusions) if f.kind == "library"]
    if library:   # they call the op library (runtime/tf_kernels.cc), which an AOT object does not ship
        i = library[0]
        raise AotError(f"cannot compile {i.op.spelling} {{{{node {i.source}}}}}: tfjit-aot does "
                       "not link the runtime library (dot, convolution and its gradients) yet")
    plan = buffers.assign(m, fusions)
    messages = list(MESSAGES)        # kernels add theirs (a gather's bound, ...)
    llmod, steps = llvm_cpu.emit_module(prefix, fusions, plan, messages,
                                        target={"triple": triple,
                                                "data_layout": str(tm.target_data)})
    driver.internalize(llmod)
    output_bytes = [o.size * o.dtype.itemsize for o in m.outputs]
    layout = driver.emit(llmod, prefix, steps, plan, output_bytes, messages,
                         x86=triple.startswith("x86_64"))
    with llvm_cpu._lock:     # LLVM's global state is not thread-safe (shared with the JIT)
        mod = llvm.parse_assembly(str(llmod))
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = pto.slp_vectorization = pto.loop_unrolling = True
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        obj = tm.emit_object(mod)
    fetches = [dataclasses.replace(t, shape=tuple(o.shape), dtype=o.dtype)
               for t, o in zip(cluster.fetches, m.outputs)]
    for t, o in zip(cluster.fetches, m.outputs):
        if t.dtype is not None and t.dtype is not o.dtype:
            raise AotError(f"fetch '{t.tensor}' ({t.name}): compiled as {o.dtype}, the graph "
                           f"says {t.dtype}")
    return Artifact(prefix, obj, list(cluster.feeds), fetches, layout, len(fusions),
                    text.module_str(m), str(mod),
                    f"{triple}, cpu {cpu}, "
                    + (f"features {target.features}" if target.features else
                       "this machine's features" if features else "the CPU's default features"))
