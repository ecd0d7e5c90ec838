from setuptools import find_packages, setup

setup(
    name="tfjit",
    version="0.1.0",
    description="An XLA-style JIT compiler for TensorFlow, written in Python",
    packages=find_packages(include=["tfjit", "tfjit.*"]),
    package_data={"tfjit.runtime": ["*.cc"]},
    include_package_data=True,
    python_requires=">=3.10",
    install_requires=["tensorflow-cpu>=2.16; platform_machine=='x86_64'",
                      "tensorflow>=2.16; platform_machine!='x86_64'",
                      "numpy", "llvmlite>=0.45", "protobuf"],
    extras_require={"test": ["pytest"]},
    entry_points={"console_scripts": ["tfjit-run-module=tfjit.api.run_module:main",
                                      "tfjit-aot=tfjit.aot.cli:main"]},
)
