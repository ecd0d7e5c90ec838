"""Python side of TfjitLaunch's GPU kernel (launch_op_gpu.cc): GPU executables and
the GPU compile callback.

NOT YET RUN ON A GPU: the kernel exists only in the op library of a CUDA build of
TensorFlow, and no machine with both TensorFlow and a GPU has run it.

The interface, kept small:

* ``make_gpu_executable(program, ...)`` turns what ``runtime/cuda.py`` runs (a
  ``cuda.Program``: PTX, its entries and rows, messages, output shapes, temps) into
  a C ``TfjitGpuExecutable`` (gpu_abi.h): the CPU's ``TfjitExecutable`` with no
  steps, plus the PTX and a launch table ``(entry, rows, block, max_blocks_per_sm)``.
  ``block`` 0 lets the kernel ask the driver's occupancy calculator per entry (an entry
  whose rows are a block's, ``program.blocks``, gets exactly its size), and
  ``max_blocks_per_sm`` caps the grid: ``cuda.py``'s rule, so the same program runs
  with the same launch sizes in both.
* ``set_gpu_compile_callback(fn)`` registers ``fn(cluster, cluster_def, signature, *,
  arch, executions, can_fall_back[, constants]) -> GpuExecutable`` for the GPU
  kernel's cache misses; ``arch`` is the device's ("sm_90").  As on the CPU,
  ``fn`` may raise ``launch.Fallback`` or ``launch.CompileError``.
* ``gpu_kernel_built()`` says whether the loaded op library has the kernel, and
  ``KERNEL_LABEL`` is what a node's ``_kernel`` attr must say to get it: without
  it TF's placer never sees the GPU kernel, so unplaced TfjitLaunch nodes stay on
  the CPU (``launch(..., gpu=True)`` sets it in graph mode).

Like launch.py, this module reads only plain data and imports no compiler.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Callable, Sequence

from tfjit.runtime import abi, cuda, launch

KERNEL_LABEL = launch.KERNEL_LABEL

GPU_COMPILE_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int32,
    ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int64,            # cluster, cluster_def, len
    ctypes.c_int32, ctypes.POINTER(ctypes.c_int32),               # num_inputs, dtypes
    ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int64),   # ranks, dims
    ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64),  # values, value_bytes
    ctypes.c_int64, ctypes.c_int32, ctypes.c_int32,               # executions, can_fall_back, arch
    ctypes.POINTER(ctypes.c_void_p),                              # out
    ctypes.c_void_p, ctypes.c_int32)                              # error, error_len


class GpuExecutable:
    """A C ``TfjitGpuExecutable`` and every buffer it points into (``address`` is what
    the GPU compile callback hands the op)."""

    def __init__(self, struct: abi.TfjitGpuExecutable, host: launch.Executable, buffers: tuple,
                 program: cuda.Program):
        self._struct = struct
        self._host = host
        self._buffers = buffers
        self.program = program
        self.address = ctypes.addressof(struct)


def arch_number(arch: str) -> int:
    """90 for "sm_90"."""
    if not arch.startswith("sm_") or not arch[3:].isdigit():
        raise ValueError(f"not a CUDA arch: {arch!r}")
    return int(arch[3:])


def make_gpu_executable(program: cuda.Program, *, input_dtypes: Sequence[int],
                        output_dtypes: Sequence[int], temp_bytes: Sequence[int],
                        update_inputs: Sequence[int] = (), update_in_place: Sequence[bool] = (),
                        block: int = 0, output_shapes: Sequence | None = None) -> GpuExecutable:
    """The GPU kernel's executable for ``program``; ``input_dtypes``/``output_dtypes`` are
    TF DataType enums (DT_RESOURCE for a variable input), ``temp_bytes`` the program's
    temps' sizes (its offsets and arena are the program's), ``update_inputs``/
    ``update_in_place`` as ``launch.make_executable``'s.  ``block``: threads per block
    for every entry (0: the occupancy calculator's, per entry).  ``output_shapes``: the
    shapes TF allocates (default the program's; a complex output's is its real view's
    without the trailing 2)."""
    if len(input_dtypes) != len(program.inputs) or len(output_dtypes) != len(program.outputs):
        raise ValueError(f"{program.name}: {len(program.inputs)} inputs and "
                         f"{len(program.outputs)} outputs, given {len(input_dtypes)} and "
                         f"{len(output_dtypes)} dtypes")
    if block < 0:
        raise ValueError(f"block size {block}")
    host = launch.make_executable(
        input_dtypes=input_dtypes, output_dtypes=output_dtypes,
        output_shapes=list(output_shapes) if output_shapes is not None
        else [shape for _, shape in program.outputs],
        output_source=program.output_source, output_forward=[-1] * len(program.outputs),
        temp_bytes=temp_bytes, temp_offsets=program.temp_offsets, steps=[],
        messages=program.messages, update_inputs=update_inputs,
        update_in_place=update_in_place)
    if host._struct.arena_bytes != program.arena_bytes:
        raise ValueError(f"{program.name}: temps of {list(temp_bytes)} bytes do not fill the "
                         f"program's arena of {program.arena_bytes}")
    image = program.ptx.encode()
    entries = [name.encode() for name, _ in program.entries]
    exact = list(program.blocks) + [0] * (len(entries) - len(program.blocks))
    steps = (abi.TfjitGpuStep * max(len(entries), 1))(*[
        abi.TfjitGpuStep(name, int(rows), need or block, cuda.BLOCKS_PER_SM)
        for name, (_, rows), need in zip(entries, program.entries, exact)])
    struct = abi.TfjitGpuExecutable(host._struct, image, len(image), arch_number(program.arch),
                                    len(entries), steps)
    return GpuExecutable(struct, host, (image, entries, steps), program)


_lock = threading.Lock()
_callbacks: list = []          # every CFUNCTYPE registered: a C thread may still hold one
_executables: dict = {}        # (cluster, arch, signature, constants) -> GpuExecutable


def _trampoline(fn: Callable) -> GPU_COMPILE_CALLBACK:
    def callback(cluster, def_ptr, def_len, n, dtypes, ranks, dims, values, value_bytes,
                 executions, can_fall_back, arch, out, error, error_len):
        def compile_one():
            signature, constants = launch.decode_request(n, dtypes, ranks, dims, values,
                                                         value_bytes)
            name, sm = cluster.decode(), f"sm_{arch}"

            def make():
                cluster_def = ctypes.string_at(def_ptr, def_len) if def_len else b""
                extra = {"constants": constants} if constants else {}
                return fn(name, cluster_def, signature, arch=sm, executions=executions,
                          can_fall_back=bool(can_fall_back), **extra)
            key = (name, sm, tuple(signature), tuple(sorted(constants.items())))
            return launch.cached_address(_executables, _lock, key, make, GpuExecutable,
                                         "GPU compile callback")
        return launch.answer_request(compile_one, out, error, error_len)
    return GPU_COMPILE_CALLBACK(callback)


def _forget() -> None:
    with _lock:
        _executables.clear()


launch._on_clear.append(_forget)


def gpu_kernel_built() -> bool:
    """Whether the op library (loading it if needed) has TfjitLaunch's GPU kernel: only a
    CUDA build of TensorFlow gets one (runtime/build.py)."""
    return hasattr(launch._lib().c, "TfjitSetGpuCompileCallback")


def set_gpu_compile_callback(fn: Callable[..., GpuExecutable] | None) -> bool:
    """Registers ``fn`` for the GPU kernel's cache misses (``None`` unregisters); False,
    and nothing registered, when the op library has no GPU kernel."""
    if not gpu_kernel_built():
        return False
    lib = launch._lib().c
    with _lock:
        cb = _trampoline(fn) if fn is not None else GPU_COMPILE_CALLBACK()
        _callbacks.append(cb)
    lib.TfjitSetGpuCompileCallback.argtypes = [GPU_COMPILE_CALLBACK]
    lib.TfjitSetGpuCompileCallback.restype = None
    lib.TfjitSetGpuCompileCallback(cb)
    return True
