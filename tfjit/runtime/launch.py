"""Python side of the TfjitLaunch op: loading, executables, the compile callback.

The op (launch_op.cc) runs compiled kernels without Python. Python is entered
only on a cache miss, through the callback registered with
``set_compile_callback``; that callback returns an ``Executable`` built by
``make_executable``. Python owns every executable: the C++ cache holds raw
pointers, so an executable stays referenced here until ``clear_cache``.

This module must not import the compiler (codegen/lower/passes/ir): a deployed
artefact needs only the runtime.
"""
from __future__ import annotations

import ctypes
import os
import re
import threading
import weakref
from typing import Callable, Sequence

from tfjit.runtime import abi, build
from tfjit.runtime.abi import TfjitExecutable, TfjitStep

PARALLEL_FOR = "tfjit_rt_parallel_for"   # parallel.cc: the loop drivers' sharding entry
RUN_GROUP = "tfjit_rt_run_group"         # parallel.cc: a loop body's concurrent group

# The structs and constants the op library shares are in abi.py (mirroring abi.h).

COMPILE_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int32,
    ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int64,           # cluster, cluster_def, len
    ctypes.c_int32, ctypes.POINTER(ctypes.c_int32),              # num_inputs, dtypes
    ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int64),  # ranks, dims
    ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64),  # values, value_bytes
    ctypes.c_int64, ctypes.c_int32,                              # executions, can_fall_back
    ctypes.POINTER(ctypes.c_void_p),                             # out
    ctypes.c_void_p, ctypes.c_int32)                             # error, error_len

PASS_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int32,
    ctypes.c_void_p, ctypes.c_int64,                             # graph_def, len
    ctypes.c_int32, ctypes.c_int32,                              # is_function_graph, jit_level
    ctypes.c_char_p,                                             # function_name
    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)            # result_ctx, error, error_len

Signature = list[tuple[int, tuple[int, ...]]]    # per input: (TF DataType enum, dims)

DT_RESOURCE = 20                 # TF's DataType enum of resource handles (variables)
DT_INT64 = 9                     # the row counts of data-dependent shapes (abi.h)


def error_text(message: str, details: Sequence[int]) -> str:
    """A kernel's message with each ``{i}`` replaced by ``details[i]`` (as launch_op.cc's
    ErrorText does)."""
    return re.sub(r"\{([0-6])\}", lambda m: str(int(details[int(m.group(1))])), message)


def status_text(code: int, details: Sequence[int], messages: Sequence[str]) -> str:
    """The error a kernel's status block reports: message ``code`` (1-based) with its
    details, or the bare code when it names no message."""
    if 0 < code <= len(messages):
        return error_text(messages[code - 1], details)
    return f"status {code}"


VARIABLE_DTYPE_OFFSET = 100      # a variable input signs as (value dtype + 100, value dims)


class Fallback(Exception):
    """Raised by a compile callback: run the node's original subgraph instead.

    ``remember``: for this signature from now on (else only this time, and the
    callback is asked again at the next run)."""

    def __init__(self, reason: str, remember: bool):
        super().__init__(reason)
        self.remember = remember


class CompileError(Exception):
    """Raised by a compile callback: the op fails with exactly this message (no type prefix)."""


_FALLBACK_ONCE, _FALLBACK_ALWAYS = 2, 3


class Executable:
    """A C ``TfjitExecutable`` plus every buffer it points into.

    ``address`` is what the compile callback hands to the op. ``keepalive``
    holds whatever owns the machine code (e.g. the LLVM execution engine).
    """

    def __init__(self, struct: TfjitExecutable, buffers: tuple, keepalive: object,
                 runtime: tuple = ()):
        self._struct = struct
        self._buffers = buffers
        self.keepalive = keepalive
        self.address = ctypes.addressof(struct)
        self.runtime = runtime      # the op library functions its code calls
        self.retired: list = []     # code that swap_code replaced, kept loaded
        self.cluster = "?"          # its cluster's name and, per step, (kernel symbol, what
        self.steps: list = []       # it computes): name_steps, for api/kernel_profile.py

    def swap_code(self, addresses: Sequence[int], keepalive: object) -> None:
        """Runs the steps' functions at ``addresses`` (one per step, in order) from now on:
        another build of the same module (codegen/tiering.py), held by ``keepalive``.
        Each address is one aligned 8-byte store, and the launch op reads a step's
        address once per run of the step, so a call in flight runs each step whole in
        one build or the other; the code it replaces stays loaded (``retired``) while
        this executable lives, since such a call may still be in it."""
        steps = self._buffers[7]
        if len(addresses) != self._struct.num_steps or not all(addresses):
            raise ValueError(f"{len(addresses)} addresses for {self._struct.num_steps} steps")
        self.retired.append(self.keepalive)
        self.keepalive = keepalive
        for k, address in enumerate(addresses):
            steps[k].fn = address

    @property
    def step_addresses(self) -> list:
        """The address of each step's function, in run order."""
        return [step.fn for step in self._buffers[7][:self._struct.num_steps]]

    def marks(self) -> list:
        """Per step, its (group, task) marks: the concurrent groups (abi.h)."""
        return [(step.group, step.task) for step in self._buffers[7][:self._struct.num_steps]]

    @property
    def needs_host_library(self) -> bool:
        """Whether a run without TfjitLaunch (runtime/host.py) needs the host library:
        every runtime function but the drivers' parallel_for and run_group runs linalg.cc's
        code there."""
        return any(name not in (PARALLEL_FOR, RUN_GROUP) for name in self.runtime)

    @property
    def num_inputs(self) -> int:
        return self._struct.num_inputs

    @property
    def num_outputs(self) -> int:
        return self._struct.num_outputs


def _array(ctype, values):
    values = list(values)
    return (ctype * max(len(values), 1))(*values)


def arena_offsets(temp_bytes: Sequence[int]) -> list:
    """Offsets that give every temp its own ALIGN-byte aligned range of the arena."""
    out, end = [], 0
    for b in temp_bytes:
        out.append(end)
        end += -(-int(b) // abi.ALIGN) * abi.ALIGN
    return out


def make_executable(*, input_dtypes: Sequence[int], output_dtypes: Sequence[int],
                    output_shapes: Sequence[Sequence[int]], output_source: Sequence[int],
                    output_forward: Sequence[int], temp_bytes: Sequence[int],
                    steps: Sequence[tuple[int, int, int]], messages: Sequence[str],
                    update_inputs: Sequence[int] = (), update_in_place: Sequence[bool] = (),
                    temp_offsets: Sequence[int] | None = None,
                    keepalive: object = None, runtime: Sequence[str] = (),
                    output_rows: Sequence[int] | None = None,
                    marks: Sequence[tuple[int, int]] | None = None) -> Executable:
    """Builds an executable; ``steps`` are ``(fn_address, rows, cost_per_row)``.

    ``marks``: per step ``(group, task)``, the concurrent groups (abi.h's TfjitStep,
    passes/concurrency.py); by default none (every step alone).

    Temps live in one arena: temp t is ``temp_bytes[t]`` bytes at ``temp_offsets[t]``
    (abi.ALIGN-byte aligned; temps whose lifetimes are disjoint may overlap, see
    passes/buffers.py); by default each has its own range.

    ``update_inputs``: the last ``len(update_inputs)`` outputs are new values of
    the resource-variable inputs at these indices (input dtype DT_RESOURCE);
    ``update_in_place[u]`` says the kernels may write update u over the
    variable's old value (the op does when nobody else holds that tensor).

    ``output_rows`` (data-dependent shapes, abi.h): per output, -1, or the index of the
    int64 scalar output holding its row count; those count outputs are the last ones,
    after the variable updates."""
    n_in, n_out = len(input_dtypes), len(output_dtypes)
    output_rows = [-1] * n_out if output_rows is None else [int(c) for c in output_rows]
    counts = sorted({c for c in output_rows if c >= 0})
    num_counts = len(counts)
    if len(output_rows) != n_out or counts != list(range(n_out - num_counts, n_out)) or any(
            c >= 0 and (o >= n_out - num_counts - len(update_inputs) or not output_shapes[o]
                        or output_dtypes[c] != DT_INT64 or tuple(output_shapes[c]) != ())
            for o, c in enumerate(output_rows)):
        raise ValueError(f"output_rows {output_rows}: each must be -1 or name one of the last "
                         "outputs, an int64 scalar, for a node output of rank >= 1")
    for name, seq in (("output_shapes", output_shapes), ("output_source", output_source),
                      ("output_forward", output_forward)):
        if len(seq) != n_out:
            raise ValueError(f"{name} has {len(seq)} entries for {n_out} outputs")
    for o, (src, fwd) in enumerate(zip(output_source, output_forward)):
        if not (-1 <= src < n_in and -1 <= fwd < n_in):
            raise ValueError(f"output {o}: source {src} / forward {fwd} is not an input index")
    if len(update_inputs) > n_out or any(
            not 0 <= i < n_in or input_dtypes[i] != DT_RESOURCE for i in update_inputs):
        raise ValueError(f"variable updates {list(update_inputs)} must name resource inputs")
    in_place = [int(bool(x)) for x in update_in_place] or [0] * len(update_inputs)
    if len(in_place) != len(update_inputs):
        raise ValueError("update_in_place needs one entry per variable update")
    if any(b < 0 for b in temp_bytes):
        raise ValueError(f"negative temp size in {list(temp_bytes)}")
    if temp_offsets is None:
        temp_offsets = arena_offsets(temp_bytes)
    if len(temp_offsets) != len(temp_bytes) or any(o < 0 or o % abi.ALIGN for o in temp_offsets):
        raise ValueError(f"temp offsets {list(temp_offsets)}: one {abi.ALIGN}-byte aligned offset "
                         "per temp")
    arena_bytes = max((o + b for o, b in zip(temp_offsets, temp_bytes)), default=0)
    for fn, rows, cost in steps:
        if not fn or rows < 0 or cost < 0:
            raise ValueError(f"bad step (fn={fn!r}, rows={rows}, cost_per_row={cost})")
    marks = [(0, 0)] * len(steps) if marks is None else [(int(g), int(t)) for g, t in marks]
    check_marks(marks)
    shapes = [tuple(int(d) for d in s) for s in output_shapes]
    message_bytes = [m.encode() for m in messages]
    buffers = (
        _array(ctypes.c_int32, input_dtypes), _array(ctypes.c_int32, output_dtypes),
        _array(ctypes.c_int32, [len(s) for s in shapes]),
        _array(ctypes.c_int64, [d for s in shapes for d in s]),
        _array(ctypes.c_int32, output_source), _array(ctypes.c_int32, output_forward),
        _array(ctypes.c_int64, temp_bytes),
        _array(TfjitStep, [TfjitStep(fn, rows, cost, g, t)
                           for (fn, rows, cost), (g, t) in zip(steps, marks)]),
        _array(ctypes.c_char_p, message_bytes), message_bytes,
        _array(ctypes.c_int32, update_inputs),
        _array(ctypes.c_int32, in_place),
        _array(ctypes.c_int64, temp_offsets),
        _array(ctypes.c_int32, output_rows),
    )
    struct = TfjitExecutable(n_in, buffers[0], n_out, buffers[1], buffers[2], buffers[3],
                             buffers[4], buffers[5], len(temp_bytes), buffers[6],
                             len(steps), buffers[7], len(messages), buffers[8],
                             len(update_inputs), buffers[10], buffers[11], buffers[12],
                             arena_bytes, num_counts, buffers[13])
    return Executable(struct, buffers, keepalive, tuple(runtime))


def check_marks(marks: Sequence[tuple[int, int]]) -> None:
    """Refuses group marks the launch op would misread: a group must start with its
    length (> 1) inside the steps, and its tasks must tile it exactly, each from its
    first step; steps outside groups carry (0, 0)."""
    s = 0
    while s < len(marks):
        group, task = marks[s]
        if group == 0 and task == 0:
            s += 1
            continue
        if group < 2 or s + group > len(marks):
            raise ValueError(f"step {s}: group of {group} steps in {len(marks)} steps")
        t = s
        while t < s + group:
            n = marks[t][1]
            if n < 1 or t + n > s + group or (t > s and marks[t][0] != 0) or any(
                    marks[u] != (0, 0) for u in range(t + 1, t + n)):
                raise ValueError(f"step {t}: task marks {marks[s:s + group]} do not tile "
                                 f"the group of {group} steps at step {s}")
            t += n
        s += group


# -- Loading ----------------------------------------------------------------

class _Library:
    def __init__(self, path: str, cache_root: str | None):
        import tensorflow as tf
        self.path = path
        self.cache_root = cache_root
        self.ops = tf.load_op_library(path)     # registers the op and kernel
        self.c = ctypes.CDLL(path)              # same dlopen handle: same globals
        abi.check(self.c, path)                 # its structs are this tfjit's (abi.h)
        abi.check_gpu(self.c, path)             # and its GPU kernel's (gpu_abi.h), if built
        self.c.TfjitSetCompileCallback.argtypes = [COMPILE_CALLBACK]
        self.c.TfjitSetCompileCallback.restype = None
        self.c.TfjitClearCache.argtypes = []
        self.c.TfjitClearCache.restype = None
        self.c.TfjitGetStats.argtypes = [ctypes.POINTER(ctypes.c_int64)] * 2
        self.c.TfjitGetStats.restype = None
        self.c.TfjitSetPassCallback.argtypes = [PASS_CALLBACK]
        self.c.TfjitSetPassCallback.restype = None
        self.c.TfjitPassResult.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64]
        self.c.TfjitPassResult.restype = None
        self.c.tfjit_rt_kernel_choices.argtypes = [ctypes.c_char_p, ctypes.c_int64]
        self.c.tfjit_rt_kernel_choices.restype = ctypes.c_int64
        self.c.TfjitSetKernelProfile.argtypes = [ctypes.c_int32]
        self.c.TfjitSetKernelProfile.restype = None
        self.c.TfjitKernelProfile.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]
        self.c.TfjitKernelProfile.restype = ctypes.c_int64


_load_lock = threading.Lock()
_library: _Library | None = None


def symbol_addresses(names) -> dict:
    """``{name: address}`` of functions the op library exports (its runtime library,
    tf_kernels.cc), loading the library if needed; KeyError names a missing one."""
    lib = _lib()
    out = {}
    for name in names:
        try:
            out[name] = ctypes.cast(getattr(lib.c, name), ctypes.c_void_p).value
        except AttributeError:
            raise KeyError(f"the tfjit op library ({lib.path}) does not export {name}") from None
    return out


def library_path() -> str:
    """The op library's file (loading it if needed): compiled code that calls its runtime
    functions names it as a dependency (runtime/loader.py)."""
    return _lib().path


def load(cache_root: str | None = None) -> None:
    """Builds (if needed) and loads the op library once; idempotent, thread-safe."""
    _lib(cache_root)


_host: dict = {}             # path -> the loaded host library (the op library holds its table)
_host_in_use: list = []      # the path whose table the op library has


def load_host_library(level: str | None = "host") -> str:
    """Builds (if needed) and loads the host library (linalg.cc) for x86-64 ``level``
    (build.HOST_LEVELS; "host": this CPU's best) and hands its functions to the op
    library: runs without a launch call them from then on.  Returns its path."""
    lib = _lib()
    with _load_lock:
        path = build.host_library_path(lib.cache_root, level)
        host = _host.get(path) or ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        _host[path] = host
        host.tfjit_linalg_table.restype = ctypes.c_void_p
        lib.c.tfjit_rt_set_linalg.argtypes = [ctypes.c_void_p]
        if lib.c.tfjit_rt_set_linalg(host.tfjit_linalg_table()) != 0:
            raise build.BuildError(f"the host library {path} does not match the op library "
                                   f"{lib.path} (built from other sources)")
        _host_in_use[:] = [path]
    return path


def host_library_in_use() -> str:
    """The host library runs without a launch call (loading this CPU's on first use)."""
    return _host_in_use[0] if _host_in_use else load_host_library()


def _lib(cache_root: str | None = None) -> _Library:
    global _library
    if _library is None:
        with _load_lock:
            if _library is None:
                _library = _Library(build.op_library_path(cache_root), cache_root)
    return _library


# -- Compile callback -------------------------------------------------------

_callback_lock = threading.Lock()
_callbacks: list = []    # every CFUNCTYPE ever registered: a C thread may still hold one
_executables: dict[tuple, Executable] = {}


def _write_error(buffer: int, size: int, text: str) -> None:
    if not buffer or size <= 0:
        return
    data = text.encode("utf-8", "replace")[: size - 1]
    data = data.decode("utf-8", "ignore").encode()    # never cut a character in half
    ctypes.memmove(buffer, data + b"\0", len(data) + 1)


def decode_request(n, dtypes, ranks, dims, values, value_bytes) -> tuple[Signature, dict]:
    """(signature, {input: bytes of a constant argument}) from a compile callback's
    C arguments (the CPU's and the GPU's callbacks pass them alike)."""
    signature, pos, constants = [], 0, {}
    for i in range(n):
        signature.append((dtypes[i], tuple(dims[pos:pos + ranks[i]])))
        pos += ranks[i]
        if values[i]:
            constants[i] = ctypes.string_at(values[i], value_bytes[i])
    return signature, constants


def answer_request(compile_one: Callable, out, error, error_len) -> int:
    """Runs ``compile_one() -> address`` for a compile callback: 0 and ``out[0]`` set, or
    the op's code (a fallback, or 1 with the error text written); nothing escapes to C."""
    try:
        out[0] = compile_one()
        return 0
    except Fallback as e:
        _write_error(error, error_len, str(e))
        return _FALLBACK_ALWAYS if e.remember else _FALLBACK_ONCE
    except CompileError as e:
        _write_error(error, error_len, str(e))
        return 1
    except BaseException as e:  # noqa: BLE001 - must never escape into C
        try:
            _write_error(error, error_len, f"{type(e).__name__}: {e}")
        except BaseException:  # noqa: BLE001
            pass
        return 1


def cached_address(cache: dict, lock, key, make: Callable, kind: type, what: str) -> int:
    """The address of ``cache[key]``, made by ``make()`` on a miss (outside the lock: a
    compile can take seconds; concurrent misses keep the first executable), which must
    be a ``kind`` (the CPU's and the GPU's callbacks share this)."""
    with lock:
        exe = cache.get(key)
    if exe is None:
        exe = make()
        if not isinstance(exe, kind):
            raise TypeError(f"{what} returned {type(exe).__name__}, "
                            f"not {kind.__module__}.{kind.__name__}")
        with lock:
            exe = cache.setdefault(key, exe)
    return exe.address


def _trampoline(fn: Callable) -> COMPILE_CALLBACK:
    def callback(cluster, def_ptr, def_len, n, dtypes, ranks, dims, values, value_bytes,
                 executions, can_fall_back, out, error, error_len):
        def compile_one():
            signature, constants = decode_request(n, dtypes, ranks, dims, values, value_bytes)
            name = cluster.decode()

            def make():
                cluster_def = ctypes.string_at(def_ptr, def_len) if def_len else b""
                extra = {"constants": constants} if constants else {}
                return fn(name, cluster_def, signature, executions=executions,
                          can_fall_back=bool(can_fall_back), **extra)
            key = (name, tuple(signature), tuple(sorted(constants.items())))
            return cached_address(_executables, _callback_lock, key, make, Executable,
                                  "compile callback")
        return answer_request(compile_one, out, error, error_len)
    return COMPILE_CALLBACK(callback)


def set_compile_callback(fn: Callable[..., Executable] | None) -> None:
    """Registers ``fn(cluster, cluster_def, signature, *, executions, can_fall_back
    [, constants]) -> Executable`` for cache misses.

    ``signature`` is ``[(tf_dtype_enum, dims), ...]`` per input; ``constants``
    (passed only to nodes that have constant arguments) is ``{input: bytes}``, the
    values of the inputs the code is compiled for (the node's ``constant_args``;
    each distinct value is a miss of its own); ``executions``
    counts the node's runs so far; ``can_fall_back`` says whether the node has
    its original subgraph to run instead (then ``fn`` may raise ``Fallback``).
    Any other exception raised by ``fn`` becomes the op's InvalidArgumentError
    text. ``None`` unregisters.
    """
    lib = _lib()
    with _callback_lock:
        cb = _trampoline(fn) if fn is not None else COMPILE_CALLBACK()
        _callbacks.append(cb)
    lib.c.TfjitSetCompileCallback(cb)


def set_pass_callback(fn: Callable[[bytes, bool, int, str], bytes | None] | None) -> None:
    """Registers the auto-clustering pass's
    ``fn(graph_def, is_function_graph, jit_level, function_name)``.

    ``function_name`` names the function the graph was instantiated from ("" for a
    Session graph). ``fn`` returns the rewritten GraphDef's bytes, or None to leave
    the graph as it is; an exception leaves the graph unclustered (the op library
    logs it). ``None`` unregisters.
    """
    lib = _lib()

    def callback(data, size, is_function, jit_level, function_name, result_ctx, error,
                 error_len):
        try:
            out = fn(ctypes.string_at(data, size), bool(is_function), jit_level,
                     (function_name or b"").decode("utf-8", "replace"))
            if out is None:
                return 0
            lib.c.TfjitPassResult(result_ctx, out, len(out))
            return 1
        except BaseException as e:  # noqa: BLE001 - must never escape into C
            try:
                _write_error(error, error_len, f"{type(e).__name__}: {e}")
            except BaseException:  # noqa: BLE001
                pass
            return -1

    with _callback_lock:
        cb = PASS_CALLBACK(callback) if fn is not None else PASS_CALLBACK()
        _callbacks.append(cb)
    lib.c.TfjitSetPassCallback(cb)


# -- Running ----------------------------------------------------------------

def launch(inputs: list, *, cluster: str, cluster_def: bytes = b"", Tout: list,
           output_shapes: list, fallback=None, constant_args=(), name: str | None = None,
           gpu: bool = False) -> list:
    """Adds (graph) or runs (eager) one TfjitLaunch op; returns its outputs.

    ``fallback``: a function (e.g. a ConcreteFunction, added to the graph) that takes
    the same inputs and returns the same outputs: the node can then run it instead of
    compiled code (the compile callback decides, per signature).  ``constant_args``:
    the inputs whose values are part of the signature (compiled per value).
    ``gpu``: the node asks for the GPU kernel (its ``_kernel`` label, launch_gpu.py;
    graph mode only, where TF applies labels; a CUDA build's op library has it)."""
    attrs = dict(args=inputs, Tout=Tout, cluster=cluster, cluster_def=cluster_def,
                 output_shapes=output_shapes, fallback=[fallback] if fallback is not None else [],
                 constant_args=list(constant_args), name=name)
    if not gpu:
        return _outputs(_lib().ops.tfjit_launch(**attrs), Tout)
    import tensorflow as tf
    if tf.executing_eagerly():
        raise ValueError("TfjitLaunch's GPU kernel is chosen by the node's _kernel label, which "
                         "TensorFlow applies in graph mode: call launch(gpu=True) in a tf.function")
    with tf.compat.v1.get_default_graph()._kernel_label_map({"TfjitLaunch": KERNEL_LABEL}):
        return _outputs(_lib().ops.tfjit_launch(**attrs), Tout)


def _outputs(result, Tout: list) -> list:
    """The op wrapper's result as a list: for a launch without outputs (``Tout`` empty)
    the wrapper returns, in graph mode, the Operation of the stateful op."""
    return result if Tout else []


def random_reserve(shape, *, seed: int, seed2: int, samples: str = "outputs", instance: str = "",
                   name: str | None = None):
    """Adds (graph) or runs (eager) one TfjitRandomReserve op (runtime/random_state.cc):
    the (key u64[1], counter u64[2]) of a stateful random node's next run (``samples``:
    "outputs" for a value of ``shape``, "shuffle" for RandomShuffle's).  Eager kernels
    are cached by their attrs: ``instance`` gives each caller its own state."""
    return _lib().ops.tfjit_random_reserve(shape=shape, seed=seed, seed2=seed2, samples=samples,
                                           instance=instance, name=name)


def clear_cache() -> None:
    """Drops all executables (the GPU kernel's too). Must not race with running launches."""
    if _library is not None:
        _library.c.TfjitClearCache()
        if hasattr(_library.c, "TfjitGpuClearCache"):    # a CUDA build (launch_gpu.py)
            _library.c.TfjitGpuClearCache()
    with _callback_lock:
        _executables.clear()
    for drop in _on_clear:
        drop()


_on_clear: list = []     # what else holds executables (launch_gpu.py's), emptied by clear_cache
# The _kernel label that selects the GPU kernel (launch_op_gpu.cc's kTfjitGpuLabel); here,
# not in launch_gpu.py, which imports this module
KERNEL_LABEL = "tfjit_gpu"


def kernel_choices() -> dict:
    """{call: (kernel, default µs, oneDNN µs, split µs)} for every library call whose
    kernel was measured over its first calls (kernel_choice.cc's MeasuredFamily): ``call``
    is TF's op, dtype, attributes and input shapes; ``kernel`` is "default", "oneDNN" or
    "split" (the default kernel in parts side by side, one thread each); a time is -1
    where that kernel refused the call, None where it was not a candidate (split: a call
    that does not divide, or no second thread)."""
    if _library is None:
        return {}
    size = _library.c.tfjit_rt_kernel_choices(None, 0)
    buffer = ctypes.create_string_buffer(size + 1)
    _library.c.tfjit_rt_kernel_choices(buffer, size + 1)
    out = {}
    for line in buffer.value.decode().splitlines():
        key, kernel, *micros = line.split("\t")
        out[key] = (kernel, *(None if t == "-" else float(t) for t in micros))
    return out


_named = weakref.WeakValueDictionary()   # executable address -> Executable with step names


def name_steps(executable: Executable, cluster: str, steps: list) -> None:
    """Records what ``executable``'s steps are, [(kernel symbol, what it computes)] in run
    order, for the kernel profile (api/kernel_profile.py)."""
    executable.cluster, executable.steps = cluster, list(steps)
    _named[executable.address] = executable


def stats() -> dict:
    """Launch cache hits and misses, variable updates written in place or into a fresh
    buffer, and concurrent groups (passes/concurrency.py) run concurrently or one step
    at a time, since the op library loaded."""
    if _library is None:
        return {"hits": 0, "misses": 0, "updates_in_place": 0, "updates_fresh": 0,
                "groups_concurrent": 0, "groups_one_at_a_time": 0}
    hits, misses = ctypes.c_int64(), ctypes.c_int64()
    _library.c.TfjitGetStats(ctypes.byref(hits), ctypes.byref(misses))
    in_place, fresh = ctypes.c_int64(), ctypes.c_int64()
    _library.c.TfjitGetUpdateStats(ctypes.byref(in_place), ctypes.byref(fresh))
    concurrent, alone = ctypes.c_int64(), ctypes.c_int64()
    _library.c.TfjitGetGroupStats(ctypes.byref(concurrent), ctypes.byref(alone))
    return {"hits": hits.value, "misses": misses.value, "updates_in_place": in_place.value,
            "updates_fresh": fresh.value, "groups_concurrent": concurrent.value,
            "groups_one_at_a_time": alone.value}
