"""Loads machine code from an object file, without LLVM: link it, then dlopen it.

``codegen/jit_server.py`` generates position-independent object files; this
turns one into a shared library with the system linker (``ld``, which tfjit's
op build needs anyway) and maps it with ``dlopen``.  The library names the op
library it calls into (its runtime functions: dot, convolution, parallel_for)
as a dependency, so the dynamic linker binds those calls to the copy this
process has loaded; math functions bind to the process's libm.  The files are
deleted once mapped.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile


class LinkError(RuntimeError):
    """The object file could not be linked or loaded."""


def linker() -> str | None:
    """The system linker's path, or None when there is none."""
    return shutil.which("ld")


def load(obj: bytes, symbols: list, libraries: list = ()) -> tuple:
    """(handle, {symbol: address}) for object file ``obj``; keep the handle alive while
    the addresses are in use.  ``libraries``: shared libraries it calls into."""
    ld = linker()
    if ld is None:
        raise LinkError("no system linker (ld) on PATH")
    with tempfile.TemporaryDirectory(prefix="tfjit-code-") as tmp:
        src, lib = os.path.join(tmp, "code.o"), os.path.join(tmp, "code.so")
        with open(src, "wb") as f:
            f.write(obj)
        cmd = [ld, "-shared", "-z", "noexecstack", "-o", lib, src, *libraries]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise LinkError(f"linking compiled code failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
        try:
            handle = ctypes.CDLL(lib, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as e:
            raise LinkError(f"loading compiled code failed: {e}") from None
    addresses = {}
    for s in symbols:
        try:
            addresses[s] = ctypes.cast(getattr(handle, s), ctypes.c_void_p).value
        except AttributeError:
            raise LinkError(f"compiled code lacks the symbol {s}") from None
    return handle, addresses


def combine(objects: list) -> bytes:
    """One relocatable object file of several (``ld -r``): the parts of one module that
    LLVM compiled in parallel (codegen/ir_split.py), merged so that the persistent cache
    and ``load`` see one object, as from an unsplit compile."""
    if len(objects) == 1:
        return objects[0]
    ld = linker()
    if ld is None:
        raise LinkError("no system linker (ld) on PATH")
    with tempfile.TemporaryDirectory(prefix="tfjit-code-") as tmp:
        names = []
        for k, obj in enumerate(objects):
            names.append(os.path.join(tmp, f"part{k}.o"))
            with open(names[-1], "wb") as f:
                f.write(obj)
        out = os.path.join(tmp, "code.o")
        cmd = [ld, "-r", "-o", out, *names]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise LinkError(f"merging compiled parts failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
        with open(out, "rb") as f:
            return f.read()
