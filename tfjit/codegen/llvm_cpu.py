"""The CPU target: LLVM IR for the host CPU, optimised at O3, loaded with MCJIT.

What differs from other targets is only here: the target machine (host CPU
name and features, so AVX-512 is used where present), transcendental math
(``mathlib``: branch-free polynomials that the loop vectoriser can widen), and
how machine code is loaded.
"""
from __future__ import annotations

import dataclasses
import functools
import threading

import llvmlite.binding as llvm
from llvmlite import ir

from tfjit.codegen import control, indexing, library, mathlib
from tfjit.codegen.elemental import MESSAGES
from tfjit.codegen.update import UpdateEmitter

_lock = threading.Lock()


def _new_target_machine():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                        features=_features(),
                                        opt=3, codemodel="jitdefault", jit=True)


@functools.lru_cache(maxsize=None)
def target_machine():
    """The shared target machine for layout, optimisation and assembly printing.

    Never hand it to MCJIT: an execution engine takes ownership of its target
    machine and frees it with the engine (see ``compile_module``)."""
    return _new_target_machine()


def _features() -> str:
    """Host features; wide vectors preferred (LLVM defaults to 256-bit on AVX-512 parts,
    which halves the throughput of the memory-bound loops tfjit emits)."""
    features = llvm.get_host_cpu_features().flatten()
    return features + ",-prefer-256-bit" if "+avx512f" in features else features


def cpu_fingerprint() -> str:
    """What the machine code depends on besides its IR: target triple, host CPU name and the
    features it was compiled for.  Part of the persistent cache key (``objcache``), so code
    built for another CPU (say, with AVX-512 where this one has none) is never loaded."""
    return f"{llvm.get_process_triple()} {llvm.get_host_cpu_name()} {_features()}"


@dataclasses.dataclass
class MachineCode:
    """Loaded code for one cluster; keep it alive while its addresses are used."""
    engine: object
    addresses: dict          # symbol -> address
    llvm_ir: str             # before optimisation
    optimized_ir: str
    from_cache: bool = False  # loaded from the persistent cache (objcache), not compiled

    def asm(self) -> str:
        return target_machine().emit_assembly(llvm.parse_assembly(self.optimized_ir))


def emit_module(name: str, fusions: list, plan, messages: list | None = None,
                parallel: bool = False) -> tuple:
    """LLVM IR for all kernels of one cluster; returns (ir.Module, steps).  ``messages``
    (``elemental.MESSAGES`` and more) receives the runtime error texts kernels add;
    status code k reports ``messages[k - 1]``.  ``parallel``: loop drivers shard their
    big steps through the op library's ``tfjit_rt_parallel_for`` (the JIT; an AOT object
    has no op library)."""
    messages = list(MESSAGES) if messages is None else messages
    module = ir.Module(name=name)
    module.triple = llvm.get_process_triple()
    module.data_layout = str(target_machine().target_data)
    return module, emit_kernels(module, fusions, plan, name, messages, parallel)


def emit_kernels(module: ir.Module, fusions: list, plan, prefix: str, messages: list,
                 parallel: bool = False) -> list:
    """The kernels of ``fusions`` (a computation's schedule) into ``module``; their steps."""
    steps = []
    for n, f in enumerate(fusions):
        kname = f"{prefix}.k{n}"
        if f.kind == "library":
            steps += library.emit(module, f, plan, kname, messages)
        elif f.kind in ("while", "conditional"):
            emit = control.emit_while if f.kind == "while" else control.emit_conditional
            steps += emit(module, f, plan, kname,
                          lambda fs, p: emit_kernels(module, fs, plan, p, messages, parallel),
                          parallel)
        elif f.kind == "update":
            steps += UpdateEmitter(module, mathlib.emit, f, plan, kname, messages).emit()
        else:
            emitter = indexing.emitter_for(f.kind)
            steps += emitter(module, mathlib.emit, f, plan, kname, messages).emit()
    return steps


def define_symbols(addresses: dict) -> None:
    """Makes runtime-library functions (``{name: address}``) resolvable by the code
    MCJIT loads from now on (process-wide, as the dynamic linker would)."""
    with _lock:
        for name, address in addresses.items():
            llvm.add_symbol(name, address)


def _optimise(mod) -> None:
    tm = target_machine()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def compile_module(module: ir.Module, symbols: list) -> MachineCode:
    return compile_ir(str(module), symbols)


def compile_ir(text: str, symbols: list, on_object=None) -> MachineCode:
    """Optimises and loads LLVM IR text; ``on_object(bytes)`` receives the object file MCJIT
    generated (what the persistent cache stores; see ``load_object``)."""
    with _lock:   # LLVM's global state (pass registration, MCJIT) is not thread-safe
        mod = llvm.parse_assembly(text)
        mod.verify()
        _optimise(mod)
        engine = llvm.create_mcjit_compiler(mod, _new_target_machine())   # owned by the engine
        if on_object is not None:   # MCJIT calls it once codegen is done, in finalize_object
            engine.set_object_cache(lambda _module, obj: on_object(obj))
        engine.finalize_object()
        addresses = {s: engine.get_function_address(s) for s in symbols}
    return MachineCode(engine, addresses, text, str(mod))


def load_object(obj: bytes, symbols: list, llvm_ir: str, optimized_ir: str) -> MachineCode:
    """Loads an object file that ``compile_ir`` produced on this CPU (no optimisation, no
    codegen).  The caller must have verified ``obj`` (a checksum): LLVM trusts object files.
    ValueError when a symbol is missing."""
    with _lock:
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine())
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))   # LLVM copies the bytes
        engine.finalize_object()
        addresses = {s: engine.get_function_address(s) for s in symbols}
    missing = [s for s, a in addresses.items() if not a]
    if missing:
        raise ValueError(f"object file lacks symbols {missing}")
    return MachineCode(engine, addresses, llvm_ir, optimized_ir, from_cache=True)
