"""The import hook behind unmodified programs: ``TFJIT_FLAGS=... python prog.py``.

Installing tfjit puts ``tfjit-autoload.pth`` into site-packages; Python runs
its one line at start-up, which calls ``install()``.  Without ``TFJIT_FLAGS``
in the environment that is all that happens (no import, nothing to pay).
With it, the first ``import tensorflow`` is watched, and when TensorFlow has
finished importing, tfjit's auto mode is activated (api/autojit.py).  A bad
flag is reported then, as an error that lists the valid flags.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

ENV = "TFJIT_FLAGS"
MARKER = "_tfjit_startup_hook"   # tfjit-autoload.pth sets sys.<MARKER> before importing tfjit


def install() -> None:
    if not os.environ.get(ENV):
        return
    if "tensorflow" in sys.modules:
        _activate()
    elif not any(isinstance(f, _Watcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _Watcher())


def _activate() -> None:
    from tfjit.api import autojit
    autojit.activate()


class _Watcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps TensorFlow's loader to activate tfjit after it."""

    def find_spec(self, name, path, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_activate(module):
            exec_module(module)
            _activate()

        spec.loader.exec_module = exec_then_activate
        return spec


def check_hook() -> None:
    """Called by ``import tfjit``: where TFJIT_FLAGS is set but the start-up hook did
    not run (an install that left out tfjit-autoload.pth, or a Python started with
    -S), says so once and activates auto mode from here, so a program that imports
    tfjit still gets what its flags ask for."""
    if not os.environ.get(ENV) or getattr(sys, MARKER, False):
        return
    import warnings
    warnings.warn(f"tfjit: {ENV} is set but tfjit's start-up hook (tfjit-autoload.pth) did not "
                  "run in this Python, so programs that do not import tfjit are not clustered; "
                  "reinstall tfjit into this environment (pip install .)", RuntimeWarning,
                  stacklevel=3)
    install()
