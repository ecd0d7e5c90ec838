"""LLVM's target for tfjit's CPU code: the host's CPU and features, and the O3 pipeline.

The part of the CPU target that needs LLVM itself (``llvmlite.binding``): used
by the compile server (``jit_server``, which imports nothing else of tfjit's
codegen, so it starts quickly) and by ``llvm_cpu`` when LLVM runs in-process.
"""
from __future__ import annotations

import functools
import threading

LOCK = threading.Lock()     # LLVM's global state (pass registration, MCJIT) is not thread-safe


def binding():
    """``llvmlite.binding``: importing it loads LLVM (about 80 MB once it has compiled)."""
    import llvmlite.binding as llvm
    return llvm


def new_target_machine(**kwargs):
    """A target machine for this host's CPU and features (MCJIT's defaults unless overridden)."""
    llvm = binding()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    options = dict(opt=3, codemodel="jitdefault", jit=True) | kwargs
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=features(),
                                        **options)


@functools.lru_cache(maxsize=None)
def target_machine():
    """The shared target machine for layout, optimisation and assembly printing.

    Never hand it to MCJIT: an execution engine takes ownership of its target
    machine and frees it with the engine (see ``llvm_cpu.compile_ir``)."""
    return new_target_machine()


@functools.lru_cache(maxsize=None)
def shared_object_target_machine():
    """The compile server's target machine: the host CPU, code for a shared library."""
    return new_target_machine(reloc="pic", codemodel="default", jit=False)


def features() -> str:
    """Host features; wide vectors preferred (LLVM defaults to 256-bit on AVX-512 parts,
    which halves the throughput of the memory-bound loops tfjit emits)."""
    host = binding().get_host_cpu_features().flatten()
    return host + ",-prefer-256-bit" if "+avx512f" in host else host


def cpu_fingerprint() -> str:
    """What the machine code depends on besides its IR: target triple, host CPU name and the
    features it was compiled for.  Part of the persistent cache key (``objcache``), so code
    built for another CPU (say, with AVX-512 where this one has none) is never loaded."""
    llvm = binding()
    return f"{llvm.get_process_triple()} {llvm.get_host_cpu_name()} {features()}"


def optimise(mod, tm) -> None:
    """LLVM's O3 pipeline with loop and SLP vectorisation, for ``tm``'s CPU."""
    llvm = binding()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def emit_object(tm, llvm_ir: str) -> tuple:
    """(object file bytes, optimised IR) of LLVM IR text for target machine ``tm`` (AOT)."""
    llvm = binding()
    with LOCK:
        mod = llvm.parse_assembly(llvm_ir)
        mod.verify()
        optimise(mod, tm)
        return tm.emit_object(mod), str(mod)


def env(tm) -> dict:
    """{"triple", "data_layout", "cpu", "llvm"} of the code ``tm`` generates."""
    llvm = binding()
    return {"triple": llvm.get_process_triple(), "data_layout": str(tm.target_data),
            "cpu": cpu_fingerprint(), "llvm": ".".join(map(str, llvm.llvm_version_info))}
