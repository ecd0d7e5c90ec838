import os
import subprocess
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.develop import develop

PTH = "tfjit-autoload.pth"
HERE = os.path.dirname(os.path.abspath(__file__))


def prebuild_op_library(into: str) -> None:
    """Builds the TfjitLaunch op library against the build environment's TensorFlow
    into ``into`` (tfjit/runtime/prebuilt), so the first compile needs no C++ build.
    Skipped, with a line on stderr, where TensorFlow or a compiler is missing: tfjit
    then builds it at first use (TFJIT_SKIP_PREBUILD=1 skips it on purpose)."""
    if os.environ.get("TFJIT_SKIP_PREBUILD"):
        return
    cmd = [sys.executable, "-m", "tfjit", "build", "--no-host", "--into", into]
    result = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        print("tfjit: the op library was not prebuilt (it builds at first use): "
              + " | ".join(tail), file=sys.stderr)


class build_py_with_pth(build_py):
    """Also installs tfjit-autoload.pth into site-packages (the import hook that lets
    ``TFJIT_FLAGS=... python prog.py`` cluster an unmodified program; it does nothing
    when TFJIT_FLAGS is unset; see tfjit/_autoload.py), and prebuilds the op library.
    In an editable build the library goes into the source tree, which is what the
    editable install imports."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, PTH)
        self.copy_file(os.path.join("tfjit", "autoload.pth.in"), target, preserve_mode=0)
        root = HERE if getattr(self, "editable_mode", False) else self.build_lib
        prebuild_op_library(os.path.join(root, "tfjit", "runtime", "prebuilt"))

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


class develop_with_pth(develop):
    """``setup.py develop`` (the legacy editable install): the same hook and library."""

    def run(self):
        super().run()
        self.copy_file(os.path.join("tfjit", "autoload.pth.in"),
                       os.path.join(self.install_dir, PTH), preserve_mode=0)
        prebuild_op_library(os.path.join(HERE, "tfjit", "runtime", "prebuilt"))


CMDCLASS = {"build_py": build_py_with_pth, "develop": develop_with_pth}
try:   # pip install -e (PEP 660): setuptools builds an editable wheel without build_py's files
    from setuptools.command.editable_wheel import editable_wheel

    class editable_wheel_with_pth(editable_wheel):
        """Puts the same .pth into the editable wheel (next to setuptools' own .pth)."""

        def _install_namespaces(self, installation_dir, pth_prefix):
            super()._install_namespaces(installation_dir, pth_prefix)
            self.copy_file(os.path.join("tfjit", "autoload.pth.in"),
                           os.path.join(installation_dir, PTH), preserve_mode=0)

    CMDCLASS["editable_wheel"] = editable_wheel_with_pth
except ImportError:   # setuptools < 64: `pip install -e` runs develop (above)
    pass


setup(
    name="tfjit",
    version="0.1.0",
    description="An XLA-style JIT compiler for TensorFlow, written in Python",
    packages=find_packages(include=["tfjit", "tfjit.*"]),
    package_data={"tfjit.runtime": ["*.cc", "*.h"], "tfjit": ["autoload.pth.in"]},
    cmdclass=CMDCLASS,
    include_package_data=True,
    python_requires=">=3.10",
    install_requires=["tensorflow-cpu>=2.16; platform_machine=='x86_64'",
                      "tensorflow>=2.16; platform_machine!='x86_64'",
                      "numpy", "llvmlite>=0.45", "protobuf"],
    # nbclient, nbformat, ipykernel, matplotlib: tests/test_notebooks.py runs colab/*.ipynb
    # gpu: the CUDA driver API for runtime/cuda.py (NVIDIA's cuda-python bindings)
    extras_require={"test": ["pytest", "nbclient", "nbformat", "ipykernel", "matplotlib"],
                    "gpu": ["cuda-python>=12"]},
    entry_points={"console_scripts": ["tfjit-run-module=tfjit.api.run_module:main",
                                      "tfjit-aot=tfjit.aot.cli:main"]},
)
