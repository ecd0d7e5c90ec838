"""The CPU target: LLVM IR for the host CPU, optimised (``llvm_target.PIPELINES``), as machine code.

What differs from other targets is only here: the target machine (host CPU
name and features, so AVX-512 is used where present), transcendental math
(``mathlib``: branch-free polynomials that the loop vectoriser can widen), and
how machine code is made and loaded.  Two ways, one pipeline (``optimise``):

* through the compile server (``jit_server``, the default): LLVM runs in a
  process of its own and returns a position-independent object, which
  ``runtime/loader.py`` links and dlopens; this process never loads LLVM;
* in this process, with MCJIT: ``Compiler.in_process`` (``--tfjit_compile_in_process``,
  read by pipeline.jit_compiler), or where there is no system linker.  Dumps and introspection of assembly use it too when
  the server is off.

llvmlite's IR builder is plain Python; only ``llvmlite.binding`` loads LLVM, so
it is imported (``llvm_target``) only on the in-process path and in the server.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import threading

from llvmlite import ir

from tfjit.codegen import (body_sharing, control, ir_split, lanes, library, llvm_target, mathlib,
                           own_kernels)
from tfjit.codegen.elemental import MESSAGES
from tfjit.codegen.llvm_target import LOCK as _lock
from tfjit.codegen.llvm_target import binding, new_target_machine, optimise, target_machine
from tfjit.codegen.emitter import KernelEmitter
from tfjit.codegen.target import Compiler
from tfjit.codegen.update import UpdateEmitter
from tfjit.passes.fusion import KernelKind

log = logging.getLogger("tfjit")


_client = None
_helpers: list = []     # more compile servers, for the parts of a split module (ir_split)
_background = []        # the server that builds optimised code behind quick code (tiering.py)
# A module is split only where each part gets at least this much LLVM IR text: about
# 150 ms of LLVM here, against a few ms for the extra request and ``ld -r``.
SPLIT_BYTES = 16384


def server(compiler: Compiler):
    """The compile server's client, or None when LLVM runs in this process."""
    global _client
    from tfjit.codegen import jit_server
    from tfjit.runtime import loader
    if compiler.in_process:
        return None
    with _lock:
        if _client is None:
            if loader.linker() is None:
                log.info("tfjit: no system linker (ld): LLVM runs in this process")
                _client = False
            else:
                _client = jit_server.Client(timeout=compiler.timeout)
    return _client or None


def servers(compiler: Compiler) -> list:
    """The compile servers' clients, ``compiler.processes`` of them (none in process)."""
    from tfjit.codegen import jit_server
    first = server(compiler)
    if first is None:
        return []
    with _lock:
        while len(_helpers) < compiler.processes - 1:
            _helpers.append(jit_server.Client(timeout=compiler.timeout))
        return [first] + _helpers[:compiler.processes - 1]


def background_servers(compiler: Compiler) -> list:
    """The client of the compile server that makes optimised code while quick code runs
    (``codegen/tiering.py``): a server of its own, so that no first call waits behind it,
    at a lower priority (niceness 10), so that it takes a core only where nothing else
    wants one; none in process."""
    from tfjit.codegen import jit_server
    if server(compiler) is None:
        return []
    with _lock:
        if not _background:
            _background.append(jit_server.Client(timeout=compiler.timeout, nice=10))
        return list(_background)


def start_server(compiler: Compiler) -> None:
    """Starts the compile servers now, if there are to be any, so that their start-up
    (Python, llvmlite, LLVM's target) overlaps whatever the caller does next."""
    for client in servers(compiler):
        client.start()


def target_env(compiler: Compiler) -> dict:
    """{"triple", "data_layout", "cpu", "llvm", "loader"} of the code this process gets
    ("loader": "dlopen" from the compile server, "mcjit" in-process)."""
    client = server(compiler)
    if client is not None:
        return client.env() | {"loader": "dlopen"}
    return llvm_target.env(target_machine()) | {"loader": "mcjit"}


@dataclasses.dataclass
class MachineCode:
    """Loaded code for one cluster; keep it alive while its addresses are used."""
    engine: object           # what holds the code: an MCJIT engine, or a dlopen handle
    addresses: dict          # symbol -> address
    llvm_ir: str             # before optimisation
    optimized_ir: str
    compiler: Compiler       # where it was compiled (its assembly is asked there)
    from_cache: bool = False  # loaded from the persistent cache (objcache), not compiled
    pipeline: str = "default"  # llvm_target.PIPELINES: "quick" for a first tier (tiering.py)
    upgrade: object = None   # quick-tier code: its optimised build (tiering.Upgrade)

    def asm(self) -> str:
        """Assembly text; a module compiled in parts (ir_split) prints part after part."""
        client = server(self.compiler)
        parts = ["; ModuleID" + p for p in self.optimized_ir.split("; ModuleID")[1:]]
        if client is not None:
            return "\n".join(client.request("asm", p) for p in parts or [self.optimized_ir])
        with _lock:
            llvm_target.use_options()
            return "\n".join(target_machine().emit_assembly(binding().parse_assembly(p))
                             for p in parts or [self.optimized_ir])


def emit_module(name: str, fusions: list, plan, messages: list, target,
                per_kernel: list | None = None) -> tuple:
    """LLVM IR for all kernels of one cluster for ``target`` (codegen/target.py); returns
    (ir.Module, steps).  ``messages`` (``elemental.MESSAGES`` and more) receives the
    runtime error texts kernels add; status code k reports ``messages[k - 1]``;
    ``per_kernel``, when given, the number of steps of each kernel."""
    module = ir.Module(name=name)
    module.triple, module.data_layout = target.triple, target.data_layout
    return module, emit_kernels(module, fusions, plan, name, messages, target, per_kernel)


def emit_kernels(module: ir.Module, fusions: list, plan, prefix: str, messages: list,
                 target, per_kernel: list | None = None) -> list:
    """The kernels of ``fusions`` (a computation's schedule) into ``module``; their steps.

    On the CPU, kernels whose row bodies are the same code (the same computation on
    the same shapes, reading other buffers: a model's repeated blocks) share one body,
    so LLVM optimises and generates it once: found by key before a loop or reduce
    kernel's body is emitted, by text after (codegen/body_sharing.py)."""
    steps = []
    bodies = None if target.gpu_arch else {}    # body text -> body
    keyed = None if target.gpu_arch else {}     # body_key -> {symbol suffix: body}
    for n, f in enumerate(fusions):
        name = bounded_name(f"{prefix}.k{n}")
        if keyed is not None and f.kind in body_sharing.KEYED:
            new = _emit_keyed(module, f, plan, name, messages, bodies, keyed, target)
        else:
            new = EMITTERS[f.kind](module, f, plan, name, messages, target)
            if bodies is not None:
                for symbol, _, _ in new:
                    body_sharing.share_body(module, symbol, bodies)
        steps += new
        if per_kernel is not None:
            per_kernel.append(len(new))
    return steps


def _emit_keyed(module, f, plan, name, messages, bodies: dict, keyed: dict, target) -> list:
    """A CPU loop or reduce kernel whose body another kernel with its ``body_key`` may
    have emitted already (then only its wrapper is made, unless ``target.verify_sharing``)."""
    key = body_sharing.body_key(f, plan)
    hit = keyed.get(key)
    if hit is not None and not target.verify_sharing:
        for body in hit.values():       # called by several wrappers now: see share_body
            body_sharing.mark_shared(body)
        return KernelEmitter(module, _math(target), f, plan, name, messages, reuse=hit).emit()
    names = set(module.globals)
    emitter = KernelEmitter(module, _math(target), f, plan, name, messages)
    steps = emitter.emit()
    for symbol, _, _ in steps:
        body_sharing.share_body(module, symbol, bodies)
    called = {symbol[len(name):]: body_sharing.called_body(module, symbol) for symbol, _, _ in steps}
    if hit is not None:         # verify: the text test must have found the same bodies
        if called != hit:
            raise body_sharing.SharingError(
                f"kernel {name} ({f.name}) has the key of an earlier kernel but other code: "
                + body_sharing.first_difference(module, hit, called))
        return steps
    own = set(module.globals) - names - {symbol for symbol, _, _ in steps} \
        - {symbol + ".body" for symbol, _, _ in steps}
    if not emitter.reported and not own and None not in called.values():
        keyed[key] = called
    return steps


def _math(target):
    """mathlib's emitter for ``target``'s code (its vector ldexp, codegen/target.py)."""
    return functools.partial(mathlib.emit, native_ldexp=target.vector_ldexp)


def _library(module, f, plan, name, messages, target) -> list:
    return library.emit(module, f, plan, name, messages, onednn=target.onednn,
                        prefix=target.library_prefix, native_bf16=target.native_bf16)


def _control(module, f, plan, name, messages, target) -> list:
    """Loop drivers shard their big steps through the op library's parallel_for where the
    target's code may call it."""
    emit = control.emit_while if f.kind is KernelKind.WHILE else control.emit_conditional
    return emit(module, f, plan, name,
                lambda fs, p, per_kernel=None: emit_kernels(module, fs, plan, p, messages, target,
                                                             per_kernel),
                target.runtime_calls)


def _emitter(cls):
    """A kernel emitted by an emitter class (``emitter.KernelEmitter`` and its kinds)."""
    return lambda module, f, plan, name, messages, target: \
        cls(module, _math(target), f, plan, name, messages, gpu=bool(target.gpu_arch),
            warp=lanes.WARP if target.triple.startswith("nvptx") else 1).emit()


# The one dispatch on kernel kinds: every kind fusion makes has its emitter here.
EMITTERS = {
    KernelKind.LOOP: _emitter(KernelEmitter),
    KernelKind.REDUCE: _emitter(KernelEmitter),
    KernelKind.LIBRARY: _library,
    KernelKind.UPDATE: _emitter(UpdateEmitter),
    KernelKind.WHILE: _control,
    KernelKind.CONDITIONAL: _control,
    KernelKind.SCATTER: _emitter(own_kernels.ScatterEmitter),
    KernelKind.SCAN: _emitter(own_kernels.ScanEmitter),
    KernelKind.SORT: _emitter(own_kernels.TopKEmitter),
}
assert set(EMITTERS) == set(KernelKind), "a kernel kind without an emitter"


MAX_NAME = 120     # LLVM refuses local names (labels carry the kernel's) past 1024 chars


def bounded_name(name: str) -> str:
    """``name``, or where nesting made it long (a kernel in a branch of a branch ...
    of a conditional), its head and a digest of the whole: still unique in the module."""
    if len(name) <= MAX_NAME:
        return name
    import hashlib
    return f"{name[:MAX_NAME - 18]}..{hashlib.sha256(name.encode()).hexdigest()[:16]}"


def _bind_in_process(runtime: list) -> None:
    """Makes the op library's functions ``runtime`` resolvable by the code MCJIT loads
    from now on (process-wide, as the dynamic linker would)."""
    if not runtime:
        return
    from tfjit.runtime import launch
    addresses = launch.symbol_addresses(runtime)
    llvm = binding()
    with _lock:
        for name, address in addresses.items():
            llvm.add_symbol(name, address)


def _libraries(runtime: list) -> list:
    """The shared libraries that code calling the op library's ``runtime`` functions needs."""
    from tfjit.runtime import launch
    return [launch.library_path()] if runtime else []


def _in_process_from_now_on(why: str) -> None:
    global _client
    log.warning("tfjit: %s; LLVM runs in this process from now on", why)
    with _lock:
        _client = False


def loader(compiler: Compiler) -> str:
    """How this process loads the code it compiles now: "dlopen" (a shared library from
    the compile server) or "mcjit" (in-process LLVM)."""
    return "dlopen" if server(compiler) is not None else "mcjit"


def compile_module(module: ir.Module, symbols: list, compiler: Compiler,
                   runtime: list = (), phases=None) -> MachineCode:
    text = str(module)
    if phases is not None:
        phases("LLVM IR text")
    return compile_ir(text, symbols, compiler, runtime=runtime, phases=phases)


def compile_ir(text: str, symbols: list, compiler: Compiler, on_object=None,
               runtime: list = (), phases=None, pipeline: str = "default",
               clients: list | None = None) -> MachineCode:
    """Optimises LLVM IR text with ``pipeline`` (``llvm_target.PIPELINES``) and loads its
    machine code, compiled by ``clients`` (compile servers; ``servers(compiler)`` when
    None) unless LLVM runs in this process; ``on_object(bytes)`` receives the
    object file (what the persistent cache stores; see ``load_object``).  ``runtime``: the
    op library's functions the code calls (dot, convolution, parallel_for).  ``phases(name)``,
    when given, is called as each step ends: "LLVM (compile server)" or "LLVM (in process)",
    then "link and load" (the caller's clock times them: pipeline.CompileProfile).

    Code the server made but this process cannot load (no linker at run time, a /tmp
    mounted noexec, ...) says why once, and LLVM runs here from then on."""
    client = server(compiler)
    if client is not None:
        try:
            client.start()
        except OSError as e:       # cannot start a process: say so, compile here
            _in_process_from_now_on(f"cannot start the compile server ({e})")
            return compile_ir(text, symbols, compiler, on_object, runtime, phases, pipeline)
        obj, optimized_ir = _compile_in_servers(text, compiler, pipeline, clients)
        if phases is not None:
            phases("LLVM (compile server)")
        try:
            code = load_object(obj, symbols, text, optimized_ir, compiler, runtime,
                               from_cache=False)
        except ValueError as e:
            _in_process_from_now_on(f"cannot load code from the compile server: {e}")
            return compile_ir(text, symbols, compiler, on_object, runtime, phases, pipeline)
        code.pipeline = pipeline
        if phases is not None:
            phases("link and load")
        if on_object is not None:
            on_object(obj)
        return code
    _bind_in_process(runtime)
    llvm = binding()
    with _lock:   # LLVM's global state (pass registration, MCJIT) is not thread-safe
        mod = llvm.parse_assembly(text)
        mod.verify()
        optimise(mod, target_machine(), pipeline)
        engine = llvm.create_mcjit_compiler(   # the engine owns its target machine
            mod, new_target_machine(opt=llvm_target.codegen_level(pipeline)))
        if on_object is not None:   # MCJIT calls it once codegen is done, in finalize_object
            engine.set_object_cache(lambda _module, obj: on_object(obj))
        engine.finalize_object()
        addresses = {s: engine.get_function_address(s) for s in symbols}
    if phases is not None:
        phases("LLVM (in process)")
    return MachineCode(engine, addresses, text, str(mod), compiler, pipeline=pipeline)


def _compile_in_servers(text: str, compiler: Compiler, pipeline: str = "default",
                        clients: list | None = None) -> tuple:
    """(object, optimised IR) of ``text`` from the compile servers: in parts side by side
    where the module is big enough (ir_split.py), the parts' objects merged into one and
    their optimised modules printed one after another."""
    clients = servers(compiler) if clients is None else clients
    parts = ir_split.split(text, len(clients), SPLIT_BYTES) if len(clients) > 1 else None
    if parts is None:
        return clients[0].request("compile", text, pipeline)
    replies: list = [None] * len(parts)

    def compile_part(k):
        try:
            replies[k] = ("ok", clients[k].request("compile", parts[k], pipeline))
        except BaseException as e:     # noqa: BLE001 - raised in the caller's thread below
            replies[k] = ("error", e)
    threads = [threading.Thread(target=compile_part, args=(k,), daemon=True)
               for k in range(1, len(parts))]
    for t in threads:
        t.start()
    compile_part(0)
    for t in threads:
        t.join()
    for status, value in replies:
        if status == "error":
            raise value
    from tfjit.runtime import loader as code_loader
    objects, optimised = zip(*(value for _, value in replies))
    try:
        return code_loader.combine(list(objects)), "\n".join(optimised)
    except code_loader.LinkError as e:
        raise ValueError(str(e)) from None


def load_object(obj: bytes, symbols: list, llvm_ir: str, optimized_ir: str,
                compiler: Compiler, runtime: list = (), from_cache: bool = True) -> MachineCode:
    """Loads an object file that ``compile_ir`` produced on this CPU (no optimisation, no
    codegen).  The caller must have verified ``obj`` (a checksum): LLVM and the dynamic
    linker trust object files.  ValueError when a symbol is missing or it does not load."""
    if server(compiler) is not None:
        from tfjit.runtime import loader
        try:
            handle, addresses = loader.load(obj, symbols, _libraries(runtime))
        except loader.LinkError as e:
            raise ValueError(str(e)) from None
        return MachineCode(handle, addresses, llvm_ir, optimized_ir, compiler,
                           from_cache=from_cache)
    _bind_in_process(runtime)
    llvm = binding()
    with _lock:
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_target_machine())
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))   # LLVM copies the bytes
        engine.finalize_object()
        addresses = {s: engine.get_function_address(s) for s in symbols}
    missing = [s for s, a in addresses.items() if not a]
    if missing:
        raise ValueError(f"object file lacks symbols {missing}")
    return MachineCode(engine, addresses, llvm_ir, optimized_ir, compiler, from_cache=from_cache)
