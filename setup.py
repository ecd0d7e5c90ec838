import os

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

PTH = "tfjit-autoload.pth"


class build_py_with_pth(build_py):
    """Also installs tfjit-autoload.pth into site-packages: the import hook that lets
    ``TFJIT_FLAGS=... python prog.py`` cluster an unmodified program (it does nothing
    when TFJIT_FLAGS is unset; see tfjit/_autoload.py)."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, PTH)
        self.copy_file(os.path.join("tfjit", "autoload.pth.in"), target, preserve_mode=0)

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


CMDCLASS = {"build_py": build_py_with_pth}
try:   # pip install -e (PEP 660): setuptools builds an editable wheel without build_py's files
    from setuptools.command.editable_wheel import editable_wheel

    class editable_wheel_with_pth(editable_wheel):
        """Puts the same .pth into the editable wheel (next to setuptools' own .pth)."""

        def _install_namespaces(self, installation_dir, pth_prefix):
            super()._install_namespaces(installation_dir, pth_prefix)
            self.copy_file(os.path.join("tfjit", "autoload.pth.in"),
                           os.path.join(installation_dir, PTH), preserve_mode=0)

    CMDCLASS["editable_wheel"] = editable_wheel_with_pth
except ImportError:   # older setuptools: `pip install -e` uses develop; the hook is then manual
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
    extras_require={"test": ["pytest", "nbclient", "nbformat", "ipykernel", "matplotlib"]},
    entry_points={"console_scripts": ["tfjit-run-module=tfjit.api.run_module:main",
                                      "tfjit-aot=tfjit.aot.cli:main"]},
)
