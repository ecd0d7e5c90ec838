"""tfjit's configuration, from code: the public face of ``tfjit.settings``.

    tfjit.config.set_jit("autoclustering")      # as tf.config.optimizer.set_jit
    tfjit.config.set_flags(tfjit_dump_to="/tmp/dump")

The flags themselves, and everything read from the environment, live in
``tfjit/settings.py``, which tfjit's modules import; this module is for users
and may reach into the API (``set_jit`` activates the graph pass), which
nothing inside tfjit imports back.
"""
from __future__ import annotations

import os
import sys

from tfjit.settings import (  # noqa: F401  (the public names)
    FlagError, Flags, cache_root, flags, onednn_enabled, parse_flags, set_flags,
    tf_dump_graph_prefix)


_JIT_MODES = {"autoclustering": 2, True: 2, False: -1, None: 0}


def set_jit(mode) -> None:
    """``"autoclustering"`` (or True) clusters every graph TensorFlow runs from now on,
    like ``--tfjit_auto_jit=2 --tfjit_cpu_global_jit``; ``False`` turns auto mode off;
    ``None`` follows each Session's ConfigProto (the default)."""
    if mode not in _JIT_MODES:
        raise ValueError(f"set_jit expects 'autoclustering', True, False or None, got {mode!r}")
    set_flags(tfjit_auto_jit=_JIT_MODES[mode])
    if _JIT_MODES[mode] > 0:
        set_flags(tfjit_cpu_global_jit=True)
    if _JIT_MODES[mode] >= 0:
        from tfjit.api import autojit   # loads TensorFlow and the op library
        autojit.activate()


def get_jit():
    """``"autoclustering"`` when auto mode is on, else False (as tf.config.optimizer.get_jit).
    On means the flags ask for it and the graph pass runs in this process: TFJIT_FLAGS
    put into os.environ after start-up, with neither the start-up hook nor set_jit to
    act on it, clusters nothing, and get_jit says so."""
    if flags().tfjit_auto_jit <= 0:
        return False
    autojit = sys.modules.get("tfjit.api.autojit")
    return "autoclustering" if autojit is not None and autojit.is_active() else False


def set_dump_dir(path: str | None) -> None:
    """Dumps every cluster compiled from now on into ``path`` (``--tfjit_dump_to``);
    ``None`` or ``""`` turns dumping off."""
    set_flags(tfjit_dump_to=os.fspath(path) if path else "")
