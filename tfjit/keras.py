"""Keras with tfjit: ``model.compile(..., jit_compile=True)`` compiles Keras's steps with tfjit.

Importing tfjit installs the hook: at once when Keras is already imported,
otherwise when Keras's TensorFlow trainer module is first imported (so
``import tfjit`` stays cheap, and an unmodified program run with ``TFJIT_FLAGS``,
whose import hook imports tfjit, gets it too).  How it works: tfjit/api/keras.py.

    tfjit.keras.disable()          # Keras's own behaviour again (TF's XLA for jit_compile=True)
    tfjit.keras.enable()
    tfjit.keras.step_functions(model)   # {"train": tfjit.Function, ...} tfjit made for it
"""
from __future__ import annotations

import importlib.abc
import sys

TRAINER_MODULE = "keras.src.backend.tensorflow.trainer"

_wanted = False     # enable() asked for; acted on when Keras's trainer is imported


def enable() -> None:
    """Installs the hook now (imports Keras)."""
    global _wanted
    _wanted = True
    from tfjit.api import keras as hook
    hook.enable()


def disable() -> None:
    """Removes the hook: Keras behaves exactly as without tfjit (see tfjit/api/keras.py)."""
    global _wanted
    _wanted = False
    if "tfjit.api.keras" in sys.modules:
        sys.modules["tfjit.api.keras"].disable()


def is_enabled() -> bool:
    hook = sys.modules.get("tfjit.api.keras")
    return hook is not None and hook.is_enabled()


def step_functions(model) -> dict:
    """{"train" | "test" | "predict": tfjit.Function} that tfjit made for ``model``."""
    from tfjit.api import keras as hook
    return hook.step_functions(model)


def install_on_import() -> None:
    """What ``import tfjit`` does: enable now if Keras's trainer is loaded, else when it is."""
    global _wanted
    _wanted = True
    if TRAINER_MODULE in sys.modules:
        enable()
    elif not any(isinstance(f, _Watcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _Watcher())


class _Watcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the trainer module's loader to enable the hook after it."""

    def find_spec(self, name, path, target=None):
        if name != TRAINER_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_enable(module):
            exec_module(module)
            if _wanted:
                enable()

        spec.loader.exec_module = exec_then_enable
        return spec
