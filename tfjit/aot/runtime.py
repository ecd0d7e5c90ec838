"""tfjit-aot's runtime library: dot and convolution for AOT objects, without TensorFlow.

An object whose graph has a MatMul or a convolution calls ``tfjit_aot_rt_*``
(codegen/library.py, Target.library_prefix).  ``build(output, cpu)`` writes the
static library that defines them: runtime/aot_runtime.cc and linalg.cc (Eigen,
header-only, from TensorFlow's include directory), compiled with the host
library's flags for an x86-64 level the target CPU has (``level_for_cpu``: the
fixed list of runtime/build.py, never AVX-512, whose Eigen does not compile).
The program links it after the object; it needs libstdc++ and libm, not
TensorFlow or Python.  Objects are cached by source text and flags (runtime/build.py).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from tfjit.aot.config import AotError
from tfjit.runtime import build

SOURCES = build.HOST_SOURCES + build.AOT_SOURCES

# the compiler macros each level of build.HOST_LEVELS needs, best first
_LEVEL_MACROS = (("x86-64-v3", ("__AVX2__", "__FMA__", "__BMI2__", "__F16C__")),
                 ("x86-64-v2", ("__SSE4_2__", "__POPCNT__", "__SSSE3__")),
                 ("x86-64", ()))


def level_for_cpu(cpu: str) -> str:
    """The best x86-64 level (of build.HOST_LEVELS) that ``cpu`` (an LLVM/GCC CPU name)
    has, by the macros g++ defines for ``-march=cpu``; "x86-64" when g++ does not know it."""
    if cpu in {level for level, _ in build.HOST_LEVELS}:
        return cpu
    proc = subprocess.run([build.find_compiler(), f"-march={cpu}", "-dM", "-E", "-x", "c++", "-"],
                          input="", capture_output=True, text=True)
    macros = {ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("#define ")}
    return next(level for level, need in _LEVEL_MACROS if set(need) <= macros)


def build_library(output: str, cpu: str, cache_root: str | None = None) -> str:
    """Writes the static library to ``output`` for target ``cpu``; returns its level."""
    level = level_for_cpu(cpu)
    cache_root = cache_root or build.default_cache_root()
    # the host library's objects at this level: one compile serves both
    _, objects = build.object_specs([os.path.join(build.HERE, name) for name in SOURCES], level)
    directory = os.path.join(cache_root, "objects")
    os.makedirs(directory, exist_ok=True)
    try:
        paths = build.compile_objects(build.find_compiler(), directory, objects)
    except build.BuildError as e:
        raise AotError(f"building the AOT runtime library failed: {e}") from None
    ar = shutil.which("ar") or shutil.which("gcc-ar")
    if ar is None:
        raise AotError("no 'ar' on PATH (binutils): it packs the AOT runtime library")
    out_dir = os.path.dirname(os.path.abspath(output))
    fd, tmp = tempfile.mkstemp(prefix=".runtime-", suffix=".a", dir=out_dir)
    os.close(fd)
    os.unlink(tmp)                  # ar creates it
    proc = subprocess.run([ar, "rcs", tmp, *paths], capture_output=True, text=True)
    if proc.returncode != 0:
        raise AotError(f"ar failed packing the AOT runtime library: {proc.stderr[-2000:]}")
    os.replace(tmp, output)
    return level
