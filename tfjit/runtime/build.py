"""Builds the TfjitLaunch op library against the installed TensorFlow.

The shared library is compiled once per (TensorFlow version, source, flags, CPU)
and cached under ``cache_root`` (each source's object file too); concurrent builders (threads or processes) are
serialised by a file lock, and the result is published with an atomic rename,
so a reader never sees a half-written library.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))


def sources() -> list[str]:
    """Every C++ file of the op library (launch op, graph pass, runtime library)."""
    return sorted(os.path.join(HERE, f) for f in os.listdir(HERE) if f.endswith(".cc"))


def _headers() -> bytes:
    """The text of tfjit's own headers, part of every object's cache key."""
    out = b""
    for name in sorted(f for f in os.listdir(HERE) if f.endswith(".h")):
        with open(os.path.join(HERE, name), "rb") as f:
            out += name.encode() + b"\0" + f.read()
    return out


LIBRARY_NAME = "tfjit_launch_op.so"
_BASE_FLAGS = ["-shared", "-fPIC", "-O2"]
_STDERR_TAIL = 4000

_thread_lock = threading.Lock()   # flock is per open file, not per thread


class BuildError(RuntimeError):
    """The TfjitLaunch op library could not be built."""


def default_cache_root() -> str:
    """``~/.cache/tfjit/ops``: used when the caller passes no cache root.

    tfjit/config.py owns environment variables (XDG_CACHE_HOME); callers that
    honour it pass ``cache_root`` explicitly.
    """
    return os.path.join(os.path.expanduser("~"), ".cache", "tfjit", "ops")


def find_compiler() -> str:
    for name in ("g++", "c++"):
        path = shutil.which(name)
        if path:
            return path
    raise BuildError("no C++ compiler (g++/c++) found on PATH; tfjit needs one to build "
                     "its TfjitLaunch op against your TensorFlow")


def _tf_flags() -> tuple[str, list[str], list[str]]:
    import tensorflow as tf
    return tf.__version__, list(tf.sysconfig.get_compile_flags()), list(tf.sysconfig.get_link_flags())


# Extra flags per source file.  The runtime library's own Eigen code (linalg.cc: the
# matmul and convolutions run where there is no TF kernel to call) is tuned for this
# machine's CPU -- the library is built where it runs, and the CPU is part of the cache
# key -- with its template instances kept private, so they never bind to TensorFlow's
# own (differently compiled) copies.  Eigen's AVX-512 GEMM kernels are off: their
# double-precision packer has no specialisation for the image-patch mappers of the
# convolutions, so linalg.cc does not compile on an AVX-512 CPU with them (TensorFlow
# itself is built without AVX-512 and never instantiates them).
_FILE_FLAGS = {"linalg.cc": ["-O3", "-march=native", "-DEIGEN_USE_AVX512_GEMM_KERNELS=0",
                             "-fvisibility=hidden", "-fvisibility-inlines-hidden", "-w"]}


def _cpu_key() -> str:
    """What -march=native code depends on: the CPU model and its feature flags."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))]
        return "".join(sorted(set(lines)))
    except OSError:
        import platform
        return platform.machine() + platform.processor()


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def op_library_path(cache_root: str | None = None) -> str:
    """Returns the path of the built op library, building it if needed.

    Each source compiles to an object cached by its own text and flags, so a
    change to one file (say, the launch op) does not recompile the others (the
    Eigen runtime library takes minutes); the objects then link into the library.
    """
    cache_root = cache_root or default_cache_root()
    files = sources()
    version, compile_flags, link_flags = _tf_flags()
    cpu, headers = _cpu_key(), _headers()
    objects = []
    for path in files:
        with open(path, "rb") as f:
            text = f.read()
        flags = _BASE_FLAGS + compile_flags + _FILE_FLAGS.get(os.path.basename(path), [])
        objects.append((path, flags, _digest(version, os.path.basename(path), text, headers, *flags, cpu)))
    digest = _digest(*(d for _, _, d in objects), *link_flags)
    directory = os.path.join(cache_root, f"tf{version}-{digest}")
    library = os.path.join(directory, LIBRARY_NAME)
    if os.path.exists(library):
        return library
    os.makedirs(directory, exist_ok=True)
    with _thread_lock, open(os.path.join(directory, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(library):     # another process may have built it meanwhile
            cxx = find_compiler()
            object_dir = os.path.join(cache_root, "objects")
            os.makedirs(object_dir, exist_ok=True)
            paths = _compile_objects(cxx, object_dir, objects)
            link_library(cxx, paths, library, link_flags)
    return library


def _compile_objects(cxx: str, directory: str, objects: list) -> list[str]:
    """Compiles the sources whose objects are not cached yet, in parallel; returns the
    object paths.  Objects are published atomically (rename), like the library."""
    jobs, paths = [], []
    for path, flags, digest in objects:
        obj = os.path.join(directory, f"{os.path.basename(path)}-{digest}.o")
        paths.append(obj)
        if not os.path.exists(obj):
            fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".o", dir=directory)
            os.close(fd)
            cmd = [cxx, *[f for f in flags if f != "-shared"], "-c", path, "-o", tmp]
            jobs.append((cmd, tmp, obj, subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                                         stderr=subprocess.PIPE, text=True)))
    failure = None
    for cmd, tmp, obj, proc in jobs:
        _, err = proc.communicate()
        if proc.returncode == 0 and failure is None:
            os.replace(tmp, obj)
        elif failure is None:
            failure = BuildError(f"building the TfjitLaunch op failed (exit {proc.returncode}):\n"
                                 f"  {' '.join(cmd)}\n{_error_text(err)}")
        if os.path.exists(tmp):
            os.unlink(tmp)
    if failure is not None:
        raise failure
    return paths


def _error_text(stderr: str) -> str:
    """The compiler's first error line (a template error's cause; its tail is only the
    instantiation stack) and the tail of its output."""
    first = next((ln for ln in stderr.splitlines() if "error" in ln), "")
    return f"{first[:_STDERR_TAIL]}\n...\n{stderr[-_STDERR_TAIL:]}" if first else stderr[-_STDERR_TAIL:]


def link_library(cxx: str, objects: list[str], output: str, link_flags: list[str]) -> None:
    """Links ``objects`` into the shared library ``output`` atomically."""
    _run_atomically(output, lambda tmp: [cxx, "-shared", "-fPIC", *objects, "-o", tmp,
                                         *link_flags])


def compile_library(cxx: str, files: list[str], output: str, compile_flags: list[str],
                    link_flags: list[str]) -> None:
    """Compiles and links ``files`` into ``output`` in one step, atomically; raises
    BuildError on failure."""
    # Link flags must follow the source so the linker resolves against them.
    _run_atomically(output, lambda tmp: [cxx, *compile_flags, *files, "-o", tmp, *link_flags])


def _run_atomically(output: str, command) -> None:
    """Runs ``command(tmp)`` writing a temporary next to ``output``, then renames it."""
    directory = os.path.dirname(output)
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=directory)
    os.close(fd)
    cmd = command(tmp)
    try:
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise BuildError(
                f"building the TfjitLaunch op failed (exit {result.returncode}):\n"
                f"  {' '.join(cmd)}\n{_error_text(result.stderr)}")
        os.chmod(tmp, 0o755)    # mkstemp creates 0600
        os.replace(tmp, output)
    except OSError as e:
        raise BuildError(f"building the TfjitLaunch op failed: {e}") from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
