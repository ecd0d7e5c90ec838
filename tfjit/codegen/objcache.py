"""Machine code from the persistent compile cache (``runtime/diskcache.py``).

What is cached, and why: LLVM's O3 optimisation and code generation are most
of a compile, so an entry holds the object file MCJIT generated plus the
optimised LLVM IR (for dumps, ``experimental_get_compiler_ir`` and ``asm()``,
which prints assembly from it lazily).  Lowering, passes, fusion and LLVM IR
emission still run on a hit: they are cheaper, and they produce the kernel
steps, buffer plan and output layout the executable needs, so nothing of
those has to be serialised (or kept in step with the code that makes them).

The key is a sha256 of the *unoptimised LLVM IR text* plus everything else the
machine code depends on: the tfjit version, the source of ``llvm_cpu.py`` and
``llvm_target.py`` (optimisation pipeline and target options live there, and
``__version__`` is not bumped for every change), the llvmlite and LLVM versions,
the host CPU (``llvm_target.cpu_fingerprint``: triple, CPU name, features) and
the loader (an MCJIT object is not a shared library's).  Keying by the
LLVM IR rather than by the tfjit IR + plan means every change to lowering,
fusion, the emitter or the math library changes the key by itself; no
hand-maintained version number can be forgotten.  Entries for other CPUs or
versions are never looked up, let alone loaded.
"""
from __future__ import annotations

import functools
import hashlib
import struct

import llvmlite

import tfjit
from tfjit.codegen import llvm_cpu, llvm_target
from tfjit.codegen.target import Compiler
from tfjit.runtime import diskcache

# object bytes, optimised IR bytes, the digest of what it was compiled from; then both.
# The digest binds a payload to its entry: a header can be valid for a payload of
# another module (an entry copied or re-packed under another key), the digest cannot.
_PAYLOAD = struct.Struct("<QQ32s")
PAYLOAD_FORMAT = 2


def environment(compiler: Compiler) -> bytes:
    """The part of the key shared by every module this process compiles with its current
    loader (llvm_cpu may move from the compile server to in-process LLVM mid-run)."""
    return _environment(compiler, llvm_cpu.loader(compiler))


@functools.lru_cache(maxsize=None)
def _environment(compiler: Compiler, loader: str) -> bytes:
    source = hashlib.sha256()
    for module in (llvm_cpu, llvm_target):      # pipeline and target options
        with open(module.__file__, "rb") as f:
            source.update(f.read())
    codegen_source = source.hexdigest()
    env = llvm_cpu.target_env(compiler)
    return "\n".join([
        "tfjit " + tfjit.__version__,
        "llvm_cpu.py llvm_target.py " + codegen_source,
        "llvmlite " + llvmlite.__version__,
        "LLVM " + env["llvm"],
        "cpu " + env["cpu"],
        "loader " + loader,             # an MCJIT object and a shared-library one differ
        f"payload {PAYLOAD_FORMAT}",
    ]).encode()


environment.cache_clear = _environment.cache_clear    # (tests)


def cache_key(llvm_ir: str, env: bytes) -> bytes:
    h = hashlib.sha256(env)
    h.update(b"\0")
    h.update(llvm_ir.encode())
    return h.digest()


def source_digest(llvm_ir: str, symbols: list) -> bytes:
    """What a payload was compiled from: its module's LLVM IR and entry symbols."""
    return hashlib.sha256("\0".join([llvm_ir, *symbols]).encode()).digest()


def pack_payload(obj: bytes, optimized_ir: str, source: bytes) -> bytes:
    ir_bytes = optimized_ir.encode()
    return _PAYLOAD.pack(len(obj), len(ir_bytes), source) + obj + ir_bytes


def unpack_payload(payload: bytes, source: bytes, symbols: list = ()) -> tuple:
    """(object bytes, optimised IR) of a payload compiled from ``source``
    (``source_digest``) that defines every entry symbol; ValueError otherwise."""
    if len(payload) < _PAYLOAD.size:
        raise ValueError("payload shorter than its size fields")
    n_obj, n_ir, compiled_from = _PAYLOAD.unpack_from(payload)
    if _PAYLOAD.size + n_obj + n_ir != len(payload) or n_obj == 0:
        raise ValueError("payload sizes do not add up")
    if compiled_from != source:
        raise ValueError("the payload was compiled from another module")
    start = _PAYLOAD.size
    obj = payload[start:start + n_obj]
    try:
        optimized_ir = payload[start + n_obj:].decode()
    except UnicodeDecodeError:
        raise ValueError("optimised IR is not UTF-8") from None
    missing = [s for s in symbols if f'@"{s}"(' not in optimized_ir and f"@{s}(" not in optimized_ir]
    if missing:
        raise ValueError(f"the payload does not define {missing[0]}")
    return obj, optimized_ir


def compile_module(module, symbols: list, compiler: Compiler,
                   cache: diskcache.DiskCache | None = None,
                   runtime: list = (), phases=None, tiered: bool = False) -> llvm_cpu.MachineCode:
    """``llvm_cpu.compile_module`` through the persistent cache (the flags' directory unless
    ``cache`` is given; straight compilation when the cache is off).  ``phases(name)``, when
    given, is called as each step ends (``llvm_cpu.compile_ir``; "disk cache").  ``tiered``
    (--tfjit_tiered_compile): a module that misses the cache and that ``tiering.applies``
    to is compiled quick-tier, its ``upgrade`` builds the optimised code, and only that
    is stored in the cache (``tiering.py``)."""
    from tfjit.codegen import tiering
    cache = cache if cache is not None else diskcache.active()
    if cache is None and not tiered:
        return llvm_cpu.compile_module(module, symbols, compiler, runtime, phases)
    text = str(module)
    if cache is None:
        if phases is not None:
            phases("LLVM IR text")
        if tiering.applies(text, compiler, tiered):
            return tiering.compile_quick(text, symbols, compiler, runtime, phases, None)
        return llvm_cpu.compile_ir(text, symbols, compiler, runtime=runtime, phases=phases)
    key, source = cache_key(text, environment(compiler)), source_digest(text, symbols)
    payload = cache.get(key)        # verified against the key and its checksum, or None
    if phases is not None:
        phases("disk cache")
    if payload is not None:
        try:
            obj, optimized_ir = unpack_payload(payload, source, symbols)
            return llvm_cpu.load_object(obj, symbols, text, optimized_ir, compiler, runtime)
        except ValueError as e:
            cache.reject(key, str(e))

    def store(obj: bytes, optimized_ir: str) -> None:
        cache.put(key, pack_payload(obj, optimized_ir, source))
    if tiering.applies(text, compiler, tiered):
        return tiering.compile_quick(text, symbols, compiler, runtime, phases, store)
    objects = []
    code = llvm_cpu.compile_ir(text, symbols, compiler, on_object=objects.append,
                               runtime=runtime, phases=phases)
    if len(objects) == 1:            # one module makes one object
        store(objects[0], code.optimized_ir)
    return code
