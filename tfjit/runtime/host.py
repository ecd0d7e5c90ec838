"""Runs an executable on numpy arrays in this process, without TensorFlow's op.

A host-side twin of the TfjitLaunch kernel (launch_op.cc) for tools and tests:
same buffer ABI (``[inputs..., outputs..., temps..., status, device]``; no
device, so runtime-library calls run the host library's Eigen code on this
thread instead of TF's kernels; it is built and loaded on the first run that
calls it), same step order, but
single-threaded and without input forwarding.  Like launch.py it
must not import the compiler; it reads only the executable's plain data.

Unlike TF's threads this one does not set MXCSR DAZ/FTZ, so kernels that rely
on the hardware flushing denormals may differ from TF on denormal values.
"""
from __future__ import annotations

import ctypes

import numpy as np

from tfjit import dtypes as dt
from tfjit.runtime import launch
from tfjit.runtime import abi
from tfjit.runtime.abi import STATUS_BYTES
from tfjit.runtime.launch import Executable, status_text

_KERNEL = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64, ctypes.c_int64)
ALIGN = abi.ALIGN


def aligned_empty(nbytes: int) -> np.ndarray:
    """A uint8 buffer of ``nbytes`` (at least 1) whose data is 64-byte aligned."""
    raw = np.empty(max(int(nbytes), 1) + ALIGN, np.uint8)
    skip = (-raw.ctypes.data) % ALIGN
    return raw[skip:skip + max(int(nbytes), 1)]


def run_compiled(compiled, inputs: list) -> list:
    """Runs ``compiled.executable`` (a ``pipeline.Compiled``) on ``inputs``."""
    return run_executable(compiled.executable, inputs)


def as_tf_outputs(output_rows: dict, outputs: list) -> list:
    """The module's ``outputs`` as TF sees them: each of a data-dependent shape
    (``Module.output_rows``: {output: its row count's output}) cut to its count, and the
    count outputs (the last ones) left out, as the launch op does (abi.h)."""
    counts = set(output_rows.values())
    return [o[:int(outputs[output_rows[j]])] if j in output_rows else o
            for j, o in enumerate(outputs) if j not in counts]


def run_executable(exe: Executable, inputs: list) -> list:
    """The executable's outputs for ``inputs``; ValueError carries a kernel's runtime error.
    A complex input may be given as its real view (shape + [2]); complex outputs come
    back as complex arrays.  Outputs of a data-dependent shape come back as the module
    computes them: their whole bound, then their row counts (``as_tf_outputs`` cuts them)."""
    s = exe._struct
    if exe.needs_host_library:
        launch.host_library_in_use()
    if len(inputs) != s.num_inputs:
        raise ValueError(f"executable takes {s.num_inputs} inputs, got {len(inputs)}")
    args = []
    for k, x in enumerate(inputs):
        d = dt.edge_from_tf_enum(s.input_dtypes[k])
        want = d.numpy()
        x = np.asarray(x)
        if d.is_complex and x.dtype == d.part.numpy():
            x = dt.complex_of_view(x, d)      # given as its real view (an IR parameter's type)
        if x.dtype != want:
            raise ValueError(f"input {k}: expected {want}, got {x.dtype}")
        copy = aligned_empty(x.nbytes)[:x.nbytes].view(want).reshape(x.shape)
        copy[...] = x
        args.append(copy)
    outputs, pos = [], 0
    for o in range(s.num_outputs):
        shape = tuple(s.output_dims[pos:pos + s.output_ranks[o]])
        pos += s.output_ranks[o]
        dtype = dt.edge_from_tf_enum(s.output_dtypes[o]).numpy()
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        outputs.append(aligned_empty(nbytes)[:nbytes].view(dtype).reshape(shape))
    arena = aligned_empty(s.arena_bytes)
    temps = [arena.ctypes.data + s.temp_offsets[t] for t in range(s.num_temps)]
    status = aligned_empty(STATUS_BYTES)
    status[:] = 0
    code, details = status[:4].view(np.int32), status[8:].view(np.int64)
    pointers = [b.ctypes.data for b in args + outputs] + temps + [status.ctypes.data]
    bufs = (ctypes.c_void_p * (len(pointers) + 1))(*pointers, None)
    for i in range(s.num_steps):
        step = s.steps[i]
        if step.rows > 0:
            _KERNEL(step.fn)(bufs, 0, step.rows)
        if code[0] != 0:
            messages = [s.messages[m].decode() for m in range(s.num_messages)]
            raise ValueError(status_text(int(code[0]), details, messages))
    for o in range(s.num_outputs):
        if s.output_source[o] >= 0:
            outputs[o] = np.array(args[s.output_source[o]])
    return outputs
