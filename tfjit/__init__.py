"""tfjit: an XLA-style JIT compiler for TensorFlow, written in Python.

    import tfjit

    @tfjit.function(jit_compile=True)
    def f(x, y, z):
        return tf.reduce_sum(x + y * z)

Public names load lazily, so ``import tfjit.runtime`` (all a deployed artefact
needs) does not pull in the compiler.  Importing tfjit installs the Keras hook
(tfjit/keras.py), which does nothing until Keras's TensorFlow trainer is imported.
"""
import importlib

from tfjit import _autoload, keras

__version__ = "0.1.0"
__all__ = ["Function", "function", "config", "explain", "kernel_profile", "keras"]

keras.install_on_import()
_autoload.check_hook()

_LAZY = {"Function": "tfjit.api.function", "function": "tfjit.api.function",
         "explain": "tfjit.api.explain", "kernel_profile": "tfjit.api.kernel_profile"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name == "config":
        return importlib.import_module("tfjit.config")
    raise AttributeError(f"module 'tfjit' has no attribute {name!r}")
