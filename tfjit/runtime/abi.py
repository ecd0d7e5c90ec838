"""The ABI between tfjit's Python side and the op library, mirrored from abi.h.

The structs the launch op reads (``TfjitExecutable`` and its ``TfjitStep``s), the
status block kernels report errors in, and the alignment every buffer has are
defined once in C++ (``abi.h``) and once here, with ctypes.  ``check(lib)`` runs
when the library loads: it asks the library for the layout it was built with
(``TfjitAbiLayout``) and refuses one that differs from this file's, so a struct
changed on one side only is a clear error at load, not a launch reading fields at
the wrong offsets.  Change both files together and bump ``VERSION``.
"""
from __future__ import annotations

import ctypes

VERSION = 3
ALIGN = 64                 # bytes: every buffer a kernel gets (its loads assume it)
STATUS_BYTES = 64          # TfjitStatus: int32 code, then int64 detail[7] from byte 8
STATUS_DETAIL_OFFSET = 8
STATUS_DETAILS = 7


class TfjitStep(ctypes.Structure):
    _fields_ = [("fn", ctypes.c_void_p), ("rows", ctypes.c_int64),
                ("cost_per_row", ctypes.c_int64), ("group", ctypes.c_int32),
                ("task", ctypes.c_int32)]


class TfjitExecutable(ctypes.Structure):
    _fields_ = [
        ("num_inputs", ctypes.c_int32), ("input_dtypes", ctypes.POINTER(ctypes.c_int32)),
        ("num_outputs", ctypes.c_int32), ("output_dtypes", ctypes.POINTER(ctypes.c_int32)),
        ("output_ranks", ctypes.POINTER(ctypes.c_int32)),
        ("output_dims", ctypes.POINTER(ctypes.c_int64)),
        ("output_source", ctypes.POINTER(ctypes.c_int32)),
        ("output_forward", ctypes.POINTER(ctypes.c_int32)),
        ("num_temps", ctypes.c_int32), ("temp_bytes", ctypes.POINTER(ctypes.c_int64)),
        ("num_steps", ctypes.c_int32), ("steps", ctypes.POINTER(TfjitStep)),
        ("num_messages", ctypes.c_int32), ("messages", ctypes.POINTER(ctypes.c_char_p)),
        ("num_updates", ctypes.c_int32), ("update_input", ctypes.POINTER(ctypes.c_int32)),
        ("update_in_place", ctypes.POINTER(ctypes.c_int32)),
        ("temp_offsets", ctypes.POINTER(ctypes.c_int64)), ("arena_bytes", ctypes.c_int64),
        ("num_counts", ctypes.c_int32), ("output_rows", ctypes.POINTER(ctypes.c_int32)),
    ]


def layout() -> tuple:
    """This side's answer to TfjitAbiLayout (abi.h lists the fields)."""
    return (VERSION, ALIGN, STATUS_BYTES, STATUS_DETAIL_OFFSET, ctypes.sizeof(TfjitStep),
            ctypes.sizeof(TfjitExecutable), TfjitExecutable.output_rows.offset)


class AbiMismatch(RuntimeError):
    """The op library was built from another version of tfjit's runtime."""


def check(lib: ctypes.CDLL, path: str) -> None:
    """Refuses an op library whose ABI layout is not this file's."""
    try:
        fn = lib.TfjitAbiLayout
    except AttributeError:
        theirs = None
    else:
        out = (ctypes.c_int64 * 7)()
        fn.argtypes, fn.restype = [ctypes.POINTER(ctypes.c_int64)], None
        fn(out)
        theirs = tuple(out)
    if theirs != layout():
        raise AbiMismatch(f"tfjit: the op library {path} was built for another tfjit runtime "
                          f"(ABI layout {theirs}, this tfjit's {layout()}); delete it, or "
                          "rebuild with `python -m tfjit build`")


# -- The GPU executable (gpu_abi.h), run by TfjitLaunch's DEVICE_GPU kernel ------------

GPU_VERSION = 1


class TfjitGpuStep(ctypes.Structure):
    _fields_ = [("entry", ctypes.c_char_p), ("rows", ctypes.c_int64), ("block", ctypes.c_int32),
                ("max_blocks_per_sm", ctypes.c_int32)]


class TfjitGpuExecutable(ctypes.Structure):
    _fields_ = [("host", TfjitExecutable), ("image", ctypes.c_char_p),
                ("image_bytes", ctypes.c_int64), ("arch", ctypes.c_int32),
                ("num_steps", ctypes.c_int32), ("steps", ctypes.POINTER(TfjitGpuStep))]


def gpu_layout() -> tuple:
    """This side's answer to TfjitGpuAbiLayout (gpu_abi.h lists the fields)."""
    return (GPU_VERSION, ctypes.sizeof(TfjitGpuStep), ctypes.sizeof(TfjitGpuExecutable),
            TfjitGpuExecutable.image.offset, TfjitGpuExecutable.steps.offset)


def check_gpu(lib: ctypes.CDLL, path: str) -> None:
    """Refuses an op library whose GPU kernel's ABI layout is not this file's (a library
    without the GPU kernel passes: it never reads a GPU executable)."""
    try:
        fn = lib.TfjitGpuAbiLayout
    except AttributeError:
        return
    out = (ctypes.c_int64 * 5)()
    fn.argtypes, fn.restype = [ctypes.POINTER(ctypes.c_int64)], None
    fn(out)
    if tuple(out) != gpu_layout():
        raise AbiMismatch(f"tfjit: the op library {path} has a GPU kernel built for another "
                          f"tfjit runtime (GPU ABI layout {tuple(out)}, this tfjit's "
                          f"{gpu_layout()}); delete it, or rebuild with `python -m tfjit build`")
