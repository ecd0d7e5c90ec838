"""LLVM's target for tfjit's CPU code: the host's CPU and features, and the pipeline
(O3 without partial unrolling and loop strength reduction: ``PIPELINES``).

The part of the CPU target that needs LLVM itself (``llvmlite.binding``): used
by the compile server (``jit_server``, which imports nothing else of tfjit's
codegen, so it starts quickly) and by ``llvm_cpu`` when LLVM runs in-process.
"""
from __future__ import annotations

import functools
import threading
import typing

LOCK = threading.Lock()     # LLVM's global state (pass registration, MCJIT) is not thread-safe


def binding():
    """``llvmlite.binding``: importing it loads LLVM (about 80 MB once it has compiled)."""
    import llvmlite.binding as llvm
    return llvm


def new_target_machine(**kwargs):
    """A target machine for this host's CPU and features (MCJIT's defaults and the default
    pipeline's code generator opt level unless overridden)."""
    llvm = binding()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    options = dict(opt=codegen_level(), codemodel="jitdefault", jit=True) | kwargs
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=features(),
                                        **options)


@functools.lru_cache(maxsize=None)
def target_machine():
    """The shared target machine for layout, optimisation and assembly printing.

    Never hand it to MCJIT: an execution engine takes ownership of its target
    machine and frees it with the engine (see ``llvm_cpu.compile_ir``)."""
    return new_target_machine()


@functools.lru_cache(maxsize=None)
def shared_object_target_machine(level: int | None = None):
    """The compile server's target machine: the host CPU, code for a shared library, made
    at code generator opt level ``level`` (the default pipeline's when None)."""
    return new_target_machine(reloc="pic", codemodel="default", jit=False,
                              opt=codegen_level() if level is None else level)


def features() -> str:
    """Host features; wide vectors preferred (LLVM defaults to 256-bit on AVX-512 parts,
    which halves the throughput of the memory-bound loops tfjit emits)."""
    host = binding().get_host_cpu_features().flatten()
    return host + ",-prefer-256-bit" if has_feature(host, "avx512f") else host


def has_feature(features: str, name: str) -> bool:
    """Whether an LLVM feature string ("+avx2,-avx512f,...": the last mention wins)
    turns ``name`` on.  A CPU name's implied features are not known here, so a
    feature the string does not mention counts as off."""
    on = False
    for item in features.split(","):
        if item[1:] == name:
            on = item[0] == "+"
    return on


def vector_ldexp(features: str) -> bool:
    """Whether code for ``features`` scales by 2^n in one vector instruction (AVX-512's
    vscalefps), so mathlib's exp may end in ``llvm.ldexp`` (``Target.vector_ldexp``);
    elsewhere LLVM makes that intrinsic a scalar libm call per element."""
    return has_feature(features, "avx512f")


def native_bf16(features: str) -> bool:
    """Whether code for ``features`` multiplies bf16 pairs in hardware (AVX512-BF16's
    vdpbf16ps, AMX-BF16's tiles): oneDNN's bf16 kernels then run at twice its f32 rate
    or more; without, oneDNN converts, and an f32 call on widened operands is no slower."""
    return has_feature(features, "avx512bf16") or has_feature(features, "amx-bf16")


def machine_vector_ldexp(tm) -> bool:
    """``vector_ldexp`` for target machine ``tm``, asked of its code generator: whether a
    vector ``llvm.ldexp`` compiles without a call.  For tfjit-aot, whose ``--target_cpu``
    may name a CPU (skylake-avx512) whose features are not spelled out."""
    llvm = binding()
    mod = llvm.parse_assembly(
        "declare <8 x float> @llvm.ldexp.v8f32.v8i32(<8 x float>, <8 x i32>)\n"
        "define <8 x float> @probe(<8 x float> %x, <8 x i32> %n) {\n"
        "  %r = call <8 x float> @llvm.ldexp.v8f32.v8i32(<8 x float> %x, <8 x i32> %n)\n"
        "  ret <8 x float> %r\n}\n")
    return "ldexp" not in tm.emit_assembly(mod).replace("llvm.ldexp", "")


def cpu_fingerprint() -> str:
    """What the machine code depends on besides its IR: target triple, host CPU name and the
    features it was compiled for.  Part of the persistent cache key (``objcache``), so code
    built for another CPU (say, with AVX-512 where this one has none) is never loaded."""
    llvm = binding()
    return f"{llvm.get_process_triple()} {llvm.get_host_cpu_name()} {features()}"


class Pipeline(typing.NamedTuple):
    """An LLVM pipeline: the optimisation pipeline's speed level, loop unrolling, loop
    interleaving, partial and runtime unrolling; the code generator's opt level
    (``new_target_machine``'s ``opt``); LLVM command-line options set while it runs
    (("-disable-lsr", "true"), ...: process-wide, set by ``optimise``, which ``OPTIONS``
    resets for the next pipeline that does not name them); loop and SLP vectorisation
    (off only in a quick tier's pipeline: mathlib's polynomials are written for them)."""
    speed: int
    unroll: bool
    interleave: bool
    partial: bool
    codegen: int = 3
    options: tuple = ()
    vectorise: bool = True


# LLVM pipelines by name.  Loop and SLP vectorisation are on but in quick-tier candidates
# (mathlib's polynomials are written for them).  "Loop unrolling" off drops full unrolling
# too, which the small constant windows of pooling and convolution loops need; partial and
# runtime unrolling (LLVM's -unroll-allow-partial and -unroll-runtime, which the target
# turns on for CPUs whose scheduling model has a loop buffer, AMD's Zen among them) copy
# loop bodies that the vectoriser has already widened and interleaved.  The rest are
# tools/llvm_ab.py's trials of cheaper code generation (docs/performance.md).
PIPELINES = {
    "o3": Pipeline(3, True, True, True),
    "o3-nounroll": Pipeline(3, False, True, True),
    "o3-nopartial": Pipeline(3, True, True, False),
    "o2-nopartial": Pipeline(2, True, True, False),
    "o3-nointerleave": Pipeline(3, True, False, False),
    "o3-cg2": Pipeline(3, True, True, False, codegen=2),
    "o3-cg1": Pipeline(3, True, True, False, codegen=1),
    "o3-nolsr": Pipeline(3, True, True, False, options=(("-disable-lsr", "true"),)),
    "o1-cg1": Pipeline(1, True, True, False, codegen=1),
    "o2-nolsr": Pipeline(2, True, True, False, options=(("-disable-lsr", "true"),)),
    "o3-nolsr-cg1": Pipeline(3, True, True, False, codegen=1,
                             options=(("-disable-lsr", "true"),)),
    "o3-nolsr-nointerleave": Pipeline(3, True, False, False, options=(("-disable-lsr", "true"),)),
    "o1-cg0": Pipeline(1, True, True, False, codegen=0),
    "o1-novec-cg0": Pipeline(1, True, False, False, codegen=0, vectorise=False),
    "o1-novec-cg1": Pipeline(1, True, False, False, codegen=1, vectorise=False,
                             options=(("-disable-lsr", "true"),)),
    "o2-cg0": Pipeline(2, True, True, False, codegen=0),
}
# The default: O3 without partial/runtime unrolling, and without loop strength reduction
# (LLVM's -disable-lsr: code generation's LSR pass and what it leaves to instruction
# selection were about a third of LLVM's time on the CNN step; no kernel measured slower).
# tools/llvm_ab.py measured both: see docs/performance.md, "Where a first call goes".
PIPELINES["default"] = PIPELINES["o3-nolsr"]
# The first tier of a big module's code (codegen/tiering.py): O1 with the vectorisers,
# code generation at O0 (fast instruction selection and register allocation).  Without
# the vectorisers LLVM takes half as long again, but MobileNet's first run took 4x as
# long (its depthwise and elementwise kernels): slower first calls than no tiers at all.
PIPELINES["quick"] = PIPELINES["o1-cg0"]
# LLVM's defaults of the options a pipeline may set (restored when the next one does not)
OPTIONS = {"-disable-lsr": "false"}
_partial = [None]     # the partial-unrolling state last set in this process's LLVM
_options: dict = {}   # option -> value last set in this process's LLVM


def codegen_level(pipeline: str = "default") -> int:
    """The code generator's opt level for ``pipeline`` (``new_target_machine(opt=...)``)."""
    return PIPELINES[pipeline].codegen


def use_options(pipeline: str = "default") -> None:
    """Sets LLVM's process-wide options to ``pipeline``'s (``PIPELINES``): what
    ``optimise`` does first, and what code generation of an already optimised module
    (assembly of ``MachineCode.asm``) needs.  Call with LOCK held where threads share LLVM."""
    llvm = binding()
    p = PIPELINES[pipeline]
    if _partial[0] != p.partial and not (_partial[0] is None and p.partial):
        # LLVM's default (None) is the target's choice; set only once something turned
        # it off (then "true" forces it on: tools/llvm_ab.py's A/B in one process).
        value = "true" if p.partial else "false"
        llvm.set_option("tfjit", f"-unroll-allow-partial={value}")
        llvm.set_option("tfjit", f"-unroll-runtime={value}")
        _partial[0] = p.partial
    wanted = dict(p.options)
    for option in set(_options) | set(wanted):
        value = wanted.get(option, OPTIONS[option])
        if _options.get(option, OPTIONS[option]) != value:
            llvm.set_option("tfjit", f"{option}={value}")
            _options[option] = value


def optimise(mod, tm, pipeline: str = "default") -> None:
    """LLVM's pipeline ``pipeline`` (``PIPELINES``) with loop and SLP vectorisation, for
    ``tm``'s CPU; sets the pipeline's LLVM options (``use_options``), which code
    generation (that the caller runs next, LOCK still held) reads too.  Call with LOCK
    held where threads share LLVM (the options are process-wide)."""
    llvm = binding()
    p = PIPELINES[pipeline]
    use_options(pipeline)
    pto = llvm.create_pipeline_tuning_options(speed_level=p.speed)
    pto.loop_vectorization = p.vectorise
    pto.slp_vectorization = p.vectorise
    pto.loop_unrolling = p.unroll
    pto.loop_interleaving = p.interleave
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
    """{"triple", "data_layout", "cpu", "features", "llvm"} of the code ``tm`` generates."""
    llvm = binding()
    return {"triple": llvm.get_process_triple(), "data_layout": str(tm.target_data),
            "cpu": cpu_fingerprint(), "features": features(),
            "llvm": ".".join(map(str, llvm.llvm_version_info))}


# ---------------------------------------------------------------- NVPTX (codegen/nvptx.py)
NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
# PTX ISA 8.0 (CUDA 12.0): the oldest that has sm_90, so every CUDA 12 or 13 driver and
# ptxas reads it (CUDA 13's ptxas accepts up to 9.0); LLVM would otherwise pick the
# lowest its backend allows for the arch, which can be below what sm_90a features need.
PTX_FEATURES = "+ptx80"


@functools.lru_cache(maxsize=None)
def nvptx_target_machine(arch: str):
    """LLVM's NVPTX target machine for compute capability ``arch`` ("sm_90")."""
    llvm = binding()
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm.Target.from_triple(NVPTX_TRIPLE).create_target_machine(
        cpu=arch, features=PTX_FEATURES, opt=3)


def emit_ptx(llvm_ir, arch: str) -> tuple:
    """(PTX text, optimised IR) of LLVM IR text for ``arch`` (or of a list of texts,
    linked into one module: tests assemble thousands of modules).  An intrinsic LLVM cannot
    lower for NVPTX (``llvm.exp``: "no libcall available") aborts the process, so this
    runs in the compile server; nvptx.py refuses such code before it gets here."""
    llvm = binding()
    tm = nvptx_target_machine(arch)
    texts = [llvm_ir] if isinstance(llvm_ir, str) else list(llvm_ir)
    with LOCK:
        mod = llvm.parse_assembly(texts[0])
        for text in texts[1:]:     # several modules (distinct entry names) as one PTX
            mod.link_in(llvm.parse_assembly(text))
        mod.verify()
        optimise(mod, tm, "o3")    # the GPU keeps LLVM's partial unrolling (NVPTX turns it on)
        return tm.emit_assembly(mod), str(mod)
