"""Builds the TfjitLaunch op library against the installed TensorFlow.

The shared library is compiled once per (TensorFlow version, source, flags) and
cached under ``cache_root``; concurrent builders (threads or processes) are
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


def op_library_path(cache_root: str | None = None) -> str:
    """Returns the path of the built op library, building it if needed."""
    cache_root = cache_root or default_cache_root()
    files = sources()
    source = b""
    for path in files:
        with open(path, "rb") as f:
            source += os.path.basename(path).encode() + b"\0" + f.read()
    version, compile_flags, link_flags = _tf_flags()
    flags = _BASE_FLAGS + compile_flags + link_flags
    digest = hashlib.sha256(source + "\0".join(flags).encode()).hexdigest()[:16]
    directory = os.path.join(cache_root, f"tf{version}-{digest}")
    library = os.path.join(directory, LIBRARY_NAME)
    if os.path.exists(library):
        return library
    os.makedirs(directory, exist_ok=True)
    with _thread_lock, open(os.path.join(directory, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(library):     # another process may have built it meanwhile
            compile_library(find_compiler(), files, library, _BASE_FLAGS + compile_flags,
                            link_flags)
    return library


def compile_library(cxx: str, files: list[str], output: str, compile_flags: list[str],
                    link_flags: list[str]) -> None:
    """Compiles ``files`` into ``output`` atomically; raises BuildError on failure."""
    directory = os.path.dirname(output)
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=directory)
    os.close(fd)
    # Link flags must follow the source so the linker resolves against them.
    cmd = [cxx, *compile_flags, *files, "-o", tmp, *link_flags]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise BuildError(
                f"building the TfjitLaunch op failed (exit {result.returncode}):\n"
                f"  {' '.join(cmd)}\n{result.stderr[-_STDERR_TAIL:]}")
        os.chmod(tmp, 0o755)    # mkstemp creates 0600
        os.replace(tmp, output)
    except OSError as e:
        raise BuildError(f"building the TfjitLaunch op failed: {e}") from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
