"""Builds tfjit's C++ libraries against the installed TensorFlow.

Two libraries, each built only when something needs it:
- the op library (``tfjit_launch_op.so``: the TfjitLaunch op, the graph pass,
  the runtime library that runs TF's kernels) -- every compiled cluster needs
  it.  ``pip install`` prebuilds it into the package (setup.py) when the build
  environment has TensorFlow; otherwise the first compile builds it (~20 s on
  two cores, said on stderr).
- the host library (``tfjit_linalg.so``: linalg.cc's Eigen matmul and
  convolutions) -- only the host runner (runtime/host.py: tools, tests, runs
  without a TfjitLaunch) needs it.

Nothing is built for "this CPU": the op library takes TensorFlow's own flags
(TF's wheels are built for baseline x86-64, and TF's bundled Eigen does not
compile with every -march: AVX512-FP16's headers fail on Sapphire Rapids,
AVX-512 GEMM's double packer on any AVX-512 CPU); the host library is built
for one x86-64 level of a fixed list (``HOST_LEVELS``, no AVX-512), the best
the running CPU has, chosen at run time.  tests/test_build_targets.py compiles
every source for a matrix of CPUs.

Each source compiles to an object cached by its own text and flags; objects
link into the library, cached under ``cache_root`` by (TensorFlow version,
sources, flags).  Concurrent builders (threads or processes) are serialised by
a file lock, and results are published by atomic rename, so a reader never
sees a half-written library.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
PREBUILT = os.path.join(HERE, "prebuilt")     # what pip install built (setup.py)

LIBRARY_NAME = "tfjit_launch_op.so"
HOST_LIBRARY_NAME = "tfjit_linalg.so"
HOST_SOURCES = ("linalg.cc", "linalg_decompositions.cc", "linalg_spectral.cc")
AOT_SOURCES = ("aot_runtime.cc",)    # with linalg.cc: tfjit-aot's static runtime (aot/runtime.py)
# TfjitLaunch's DEVICE_GPU kernel: part of the op library only when TensorFlow is a CUDA
# build (it needs GOOGLE_CUDA, TF's stream_executor and CUDA's cuda.h); not run on a
# GPU yet.  tools/check_gpu_launch_build.py compiles it against the CUDA wheel's headers.
GPU_SOURCES = ("launch_op_gpu.cc",)


def sources() -> list[str]:
    """Every C++ file that builds against any TensorFlow (the GPU kernel is not one)."""
    return sorted(os.path.join(HERE, f) for f in os.listdir(HERE)
                  if f.endswith(".cc") and f not in GPU_SOURCES)


def gpu_sources() -> list[str]:
    return [os.path.join(HERE, f) for f in GPU_SOURCES]


def launch_sources(cuda: bool = False) -> list[str]:
    """The op library's sources; with ``cuda``, also the GPU kernel (a CUDA TensorFlow)."""
    own = [p for p in sources() if os.path.basename(p) not in HOST_SOURCES + AOT_SOURCES]
    return own + (gpu_sources() if cuda else [])


def host_sources() -> list[str]:
    return [os.path.join(HERE, f) for f in HOST_SOURCES]


def _headers() -> bytes:
    """The text of tfjit's own headers, part of every object's cache key."""
    out = b""
    for name in sorted(f for f in os.listdir(HERE) if f.endswith(".h")):
        with open(os.path.join(HERE, name), "rb") as f:
            out += name.encode() + b"\0" + f.read()
    return out


_BASE_FLAGS = ["-shared", "-fPIC", "-O2"]
_STDERR_TAIL = 4000

_thread_lock = threading.Lock()   # flock is per open file, not per thread


class BuildError(RuntimeError):
    """A tfjit C++ library could not be built."""


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


def tensorflow_has_cuda() -> bool:
    """Whether the installed TensorFlow is a CUDA build (its op library then gets the
    GPU kernel)."""
    import tensorflow as tf
    return bool(tf.test.is_built_with_cuda())


def gpu_kernel_note(cuda: bool | None = None) -> str:
    """One line on the GPU kernel of TfjitLaunch for this TensorFlow (``python -m tfjit
    build`` prints it)."""
    cuda = tensorflow_has_cuda() if cuda is None else cuda
    if not cuda:
        return ("tfjit: this TensorFlow is not a CUDA build: the TfjitLaunch op has its CPU "
                "kernel only")
    return ("tfjit: this TensorFlow is a CUDA build: the op library includes TfjitLaunch's "
            "GPU kernel (launch_op_gpu.cc, opt-in per node, not yet run on a GPU)")


def cuda_flags(compile_flags: list[str]) -> list[str]:
    """What the GPU kernel needs beyond TF's flags: GOOGLE_CUDA, and cuda.h (the CUDA
    headers TF's wheel carries under third_party/gpus, else CUDA_HOME's or nvcc's)."""
    includes = [f[2:] for f in compile_flags if f.startswith("-I")]
    candidates = [os.path.join(i, "third_party", "gpus", "cuda", "include") for i in includes]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))),
                                       "include"))
    candidates.append("/usr/local/cuda/include")
    found = next((c for c in candidates if os.path.exists(os.path.join(c, "cuda.h"))), None)
    if found is None:
        raise BuildError("building TfjitLaunch's GPU kernel needs CUDA's cuda.h; none in "
                         + ", ".join(candidates))
    return ["-DGOOGLE_CUDA=1", f"-I{found}"]


# x86-64 micro-architecture levels (the psABI's) the host library is built for, best
# first, with the /proc/cpuinfo flags a CPU needs for each.  No AVX-512 level:
# TF's bundled Eigen does not compile for it (see the module docstring), and TF's
# own wheels never run Eigen with it.  v3 (AVX2 + FMA) is where Eigen's GEMM gets
# its speed; every x86-64 CPU runs the plain level.
HOST_LEVELS = (
    ("x86-64-v3", frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe",
                             "xsave", "cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2",
                             "ssse3"})),
    ("x86-64-v2", frozenset({"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"})),
    ("x86-64", frozenset()),
)


def cpu_flags() -> frozenset:
    """This CPU's feature flags, as /proc/cpuinfo names them (empty where unknown)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def host_level(flags: frozenset | None = None, machine: str | None = None) -> str | None:
    """The x86-64 level the host library is built for on a CPU with ``flags`` (this
    one's by default); None off x86-64, where the compiler's default target is used."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64"):
        return None
    flags = cpu_flags() if flags is None else flags
    return next(level for level, need in HOST_LEVELS if need <= flags)


def source_flags(path: str, level: str | None, compile_flags: list[str] = ()) -> list[str]:
    """tfjit's own flags for one source (after TF's): the host library's Eigen code is
    optimised for ``level``, its template instances kept private so they never bind
    to TensorFlow's own (differently compiled) copies; the GPU kernel gets
    ``cuda_flags(compile_flags)``."""
    if os.path.basename(path) in GPU_SOURCES:
        return cuda_flags(list(compile_flags))
    if os.path.basename(path) not in HOST_SOURCES + AOT_SOURCES:
        return []
    march = [f"-march={level}", "-mtune=generic"] if level else []
    return ["-O3", *march, "-fvisibility=hidden", "-fvisibility-inlines-hidden", "-w"]


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _key_flags(flags: list[str]) -> list[str]:
    """Flags as cache key: without TF's include and library paths (the TF version names
    the headers), so a library built in pip's build environment is found from the
    installed TensorFlow."""
    return [f for f in flags if not f.startswith(("-I", "-L"))]


def op_library_path(cache_root: str | None = None, prebuilt: bool = True) -> str:
    """The op library (TfjitLaunch and the runtime library), building it if needed;
    ``prebuilt``: take the one pip install put into the package, where it matches."""
    return _library(launch_sources(cuda=tensorflow_has_cuda()), LIBRARY_NAME, None, cache_root,
                    "the TfjitLaunch op", prebuilt)


def host_library_path(cache_root: str | None = None, level: str | None = "host") -> str:
    """The host library (linalg.cc) for x86-64 ``level`` (this CPU's best by default),
    building it if needed."""
    level = host_level() if level == "host" else level
    return _library(host_sources(), HOST_LIBRARY_NAME, level, cache_root,
                    f"the host runtime library ({level or 'default target'})", prebuilt=True)


def _library(files: list[str], name: str, level: str | None, cache_root: str | None,
             what: str, prebuilt: bool) -> str:
    """``name`` built from ``files``: a prebuilt one, a cached one, or built now."""
    cache_root = cache_root or default_cache_root()
    _, _, link_flags = _tf_flags()
    version, objects = object_specs(files, level)
    subdir = f"tf{version}-{_digest(*(d for _, _, d in objects), *_key_flags(link_flags))}"
    shipped = os.path.join(PREBUILT, subdir, name)
    if prebuilt and os.path.exists(shipped):
        return shipped
    directory = os.path.join(cache_root, subdir)
    library = os.path.join(directory, name)
    if os.path.exists(library):
        return library
    os.makedirs(directory, exist_ok=True)
    with _thread_lock, open(os.path.join(directory, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(library):     # another process may have built it meanwhile
            cxx = find_compiler()
            print(f"tfjit: building {what} for TensorFlow {version} (once; cached in "
                  f"{directory})", file=sys.stderr, flush=True)
            object_dir = os.path.join(cache_root, "objects")
            os.makedirs(object_dir, exist_ok=True)
            paths = compile_objects(cxx, object_dir, objects)
            link_library(cxx, paths, library, link_flags)
    return library


def object_specs(files: list[str], level: str | None) -> tuple[str, list]:
    """TensorFlow's version and ``(path, flags, digest)`` of each source's object for
    x86-64 ``level``.  The digest is the source's text, tfjit's headers and the flags
    that matter, so an object is shared by every library that needs it: linalg.cc at
    one level is compiled once for the host library and tfjit-aot's runtime alike
    (each compile is about a minute of -O3 Eigen on one core)."""
    version, compile_flags, _ = _tf_flags()
    headers = _headers()
    objects = []
    for path in files:
        with open(path, "rb") as f:
            text = f.read()
        flags = _BASE_FLAGS + compile_flags + source_flags(path, level, compile_flags)
        objects.append((path, flags, _digest(version, os.path.basename(path), text, headers,
                                             *_key_flags(flags))))
    return version, objects


def object_path(directory: str, path: str, digest: str) -> str:
    """Where the object of ``path`` with ``digest`` (object_specs) is cached."""
    return os.path.join(directory, f"{os.path.basename(path)}-{digest}.o")


def cached_object(path: str, level: str | None, cache_root: str | None = None) -> str | None:
    """The cached object of ``path`` for x86-64 ``level`` where a build compiled it with
    exactly today's text, headers and flags (an object is published only when its
    compile succeeded), else None."""
    _, [(_, _, digest)] = object_specs([path], level)
    obj = object_path(os.path.join(cache_root or default_cache_root(), "objects"), path, digest)
    return obj if os.path.exists(obj) else None


def compile_objects(cxx: str, directory: str, objects: list) -> list[str]:
    """Compiles the sources whose objects are not cached yet, in parallel; returns the
    object paths.  Objects are published atomically (rename), like the library."""
    jobs, paths = [], []
    for path, flags, digest in objects:
        obj = object_path(directory, path, digest)
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
