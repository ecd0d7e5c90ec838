"""Compiles TfjitLaunch's GPU kernel (tfjit/runtime/launch_op_gpu.cc) against the CUDA
build of TensorFlow, on a machine that has neither a GPU nor that TensorFlow.

    python tools/check_gpu_launch_build.py /tmp/tfwheel/tensorflow-2.21.0-*.whl
    python tools/check_gpu_launch_build.py /tmp/tfgpu/tensorflow/include   # extracted

The wheel (``pip download --no-deps tensorflow==X``; this tool downloads nothing) or
the ``tensorflow/include`` folder unzipped from it.  The source is compiled (``-c``)
with the op library's flags (runtime/build.py: ``-shared -fPIC -O2``, TensorFlow's
compile flags with this wheel's include folder, and the GPU source's ``-DGOOGLE_CUDA=1``
and CUDA's include folder: the wheel's own ``third_party/gpus/cuda/include`` unless
``--cuda-include`` says otherwise).  Given the wheel, the object is then linked
alone against the wheel's ``libtensorflow_framework.so.2`` with ``--no-undefined``:
every TensorFlow symbol the kernel calls must be one the framework exports (the op
library links with that library only; the CUDA driver is dlopen'd).

Prints what it ran and "ok", or the compiler's first error and its tail; exits 1 on
failure.  What it cannot check: that the kernel runs.  It has not run on a GPU.
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tfjit.runtime import build  # noqa: E402

# TensorFlow's compile flags but the -I (tf.sysconfig.get_compile_flags() of TF 2.21's
# Linux wheels, CUDA or not); used where no TensorFlow is installed to ask.
DEFAULT_TF_FLAGS = ["-D_GLIBCXX_USE_CXX11_ABI=1", "--std=c++17", "-DEIGEN_MAX_ALIGN_BYTES=64"]
FRAMEWORK = "tensorflow/libtensorflow_framework.so.2"


def tf_flags(include: str) -> list[str]:
    """TensorFlow's compile flags for a TensorFlow whose headers are in ``include``: the
    installed TensorFlow's (the same for its CPU and CUDA wheels), with ``include``."""
    try:
        _, flags, _ = build._tf_flags()
    except ImportError:
        flags = DEFAULT_TF_FLAGS
    return [f"-I{include}"] + [f for f in flags if not f.startswith("-I")]


def extract(wheel: str, into: str) -> tuple[str, str | None]:
    """Unzips the wheel's headers (and its framework library) under ``into``; returns the
    include folder and the library's path (None if the wheel has none)."""
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.startswith("tensorflow/include/")]
        if not names:
            raise SystemExit(f"{wheel} has no tensorflow/include/ (not a TensorFlow wheel?)")
        z.extractall(into, names)
        framework = FRAMEWORK if FRAMEWORK in z.namelist() else None
        if framework:
            z.extract(framework, into)
    return os.path.join(into, "tensorflow", "include"), (
        os.path.join(into, framework) if framework else None)


def compile_command(include: str, cuda_include: str | None, output: str) -> list[str]:
    source = build.gpu_sources()[0]
    flags = build._BASE_FLAGS + tf_flags(include)
    gpu = build.cuda_flags(flags) if cuda_include is None else ["-DGOOGLE_CUDA=1",
                                                                 f"-I{cuda_include}"]
    return [build.find_compiler(), *[f for f in flags if f != "-shared"], *gpu, "-c", source,
            "-o", output]


def link_command(obj: str, framework: str, output: str) -> list[str]:
    return [build.find_compiler(), "-shared", obj, "-o", output,
            f"-L{os.path.dirname(framework)}", f"-l:{os.path.basename(framework)}",
            "-Wl,--no-undefined", "-Wl,--allow-shlib-undefined"]


def run(cmd: list[str], what: str) -> bool:
    print(f"{what}: {' '.join(cmd)}", flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{what} FAILED (exit {r.returncode}):\n{build._error_text(r.stderr)}")
        return False
    print(f"{what}: ok")
    return True


def check(source: str, cuda_include: str | None = None) -> bool:
    """Compiles (and, given a wheel, links) the GPU kernel; True when it all passed."""
    with tempfile.TemporaryDirectory(prefix="tfjit-gpu-check-") as tmp:
        if os.path.isdir(source):
            include, framework = source, None
            wheel_root = os.path.dirname(os.path.dirname(os.path.abspath(source)))
            candidate = os.path.join(wheel_root, FRAMEWORK)
            if os.path.exists(candidate):       # an unzipped wheel, library and all
                framework = candidate
        else:
            include, framework = extract(source, tmp)
        if not os.path.exists(os.path.join(include, "tensorflow", "core", "framework",
                                           "op_kernel.h")):
            raise SystemExit(f"{include} holds no TensorFlow headers")
        obj = os.path.join(tmp, "launch_op_gpu.o")
        if not run(compile_command(include, cuda_include, obj), "compile"):
            return False
        if framework is None:
            print("link: skipped (no libtensorflow_framework.so.2 beside these headers; "
                  "pass the wheel to check the symbols)")
            return True
        return run(link_command(obj, framework, os.path.join(tmp, "check.so")), "link")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", help="the CUDA tensorflow wheel, or its extracted "
                                   "tensorflow/include folder")
    ap.add_argument("--cuda-include", help="CUDA's include folder (default: the wheel's "
                                           "third_party/gpus/cuda/include)")
    args = ap.parse_args(argv)
    return 0 if check(args.source, args.cuda_include) else 1


if __name__ == "__main__":
    sys.exit(main())
