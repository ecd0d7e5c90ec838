"""tfjit's flags and environment: the only module that reads environment variables.

What tfjit's own modules read.  Users set these through ``tfjit.config`` (which
re-exports them, and adds what reaches into the API: ``set_jit``, ``get_jit``,
``set_dump_dir``), so that no compiler module imports the public API back.

Flags come from ``TFJIT_FLAGS`` (never from ``TF_XLA_FLAGS``/``XLA_FLAGS``,
which belong to TensorFlow's XLA and abort the process on unknown flags).
Flag names mirror TF's; the TF spellings (``--tf_xla_auto_jit`` ...) are
accepted as aliases.  An unknown flag is an error that lists the valid ones.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import shlex


class FlagError(ValueError):
    """A malformed or unknown flag in TFJIT_FLAGS."""


@dataclasses.dataclass
class Flags:
    tfjit_auto_jit: int = 0                  # -1 off, 0 follow ConfigProto, 1/2 on
    tfjit_cpu_global_jit: bool = False
    tfjit_min_cluster_size: int = 4
    tfjit_max_cluster_size: int = 0          # 0: unbounded
    tfjit_ops_to_cluster: str = ""
    tfjit_cluster_exclude_ops: str = ""
    tfjit_clustering_debug: bool = False
    tfjit_enable_lazy_compilation: bool = True
    tfjit_deterministic_cluster_names: bool = False
    tfjit_fallback: bool = True
    tfjit_dump_to: str = ""                  # directory for per-cluster dumps (api/dump.py)
    tfjit_dump_ir_as_dot: bool = False       # also dump the optimised IR as graphviz .dot
    tfjit_dump_ptx: str = ""                 # also dump PTX for this GPU arch (sm_80, sm_90)
    tfjit_dump_pass_re: str = ""             # dump the IR after every pass whose name matches
    tfjit_bug_report: str = ""               # directory for a self-contained bug report
    tfjit_persistent_cache_directory: str = ""   # on-disk compile cache (off when empty)
    tfjit_compile_cache_size: int = 256      # compiled signatures kept in memory (LRU)
    tfjit_max_constant_argument_variants: int = 16   # values of a cluster's constant args compiled
    tfjit_compile_in_process: bool = False   # run LLVM in this process (not the compile server)
    tfjit_compile_timeout: float = 300.0     # seconds a compile server request may take
    tfjit_compile_processes: int = 0         # compile servers per module (0: up to 4 cores)
    tfjit_tiered_compile: bool = True        # big modules: quick code first, optimised behind
    tfjit_auto_max_kernels: int = 2000       # auto mode: a cluster with more kernels runs in TF
    tfjit_concurrent_groups: bool = True     # kernels sharing no memory may run at once
                                             # (passes/concurrency.py)
    tfjit_verify_ir: bool = False            # the IR verifier after every pass, and shared kernel
                                             # bodies re-emitted and compared (Target.verify_sharing;
                                             # the tests turn it on)


_ALIASES = {"tf_xla_" + f.name[len("tfjit_"):]: f.name for f in dataclasses.fields(Flags)}


def _convert(field: dataclasses.Field, text: str):
    if field.type in ("bool", bool):
        if text.lower() in ("", "1", "true", "yes"):
            return True
        if text.lower() in ("0", "false", "no"):
            return False
        raise FlagError(f"--{field.name} expects true/false, got {text!r}")
    if field.type in ("int", int):
        try:
            return int(text)
        except ValueError:
            raise FlagError(f"--{field.name} expects an integer, got {text!r}") from None
    if field.type in ("float", float):
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not value > 0:
            raise FlagError(f"--{field.name} expects a positive number, got {text!r}")
        return value
    return text


def parse_flags(text: str) -> Flags:
    flags = Flags()
    fields = {f.name: f for f in dataclasses.fields(Flags)}
    for token in shlex.split(text or ""):
        if not token.startswith("--"):
            raise FlagError(f"TFJIT_FLAGS: expected --name[=value], got {token!r}")
        name, eq, value = token[2:].partition("=")
        name = _ALIASES.get(name, name)
        if name not in fields:
            valid = ", ".join("--" + f for f in fields)
            raise FlagError(f"TFJIT_FLAGS: unknown flag --{name}. Valid flags: {valid}")
        field = fields[name]
        if not eq and field.type not in ("bool", bool):
            raise FlagError(f"--{name} needs a value (--{name}=...)")
        setattr(flags, name, _convert(field, value))
    return flags


_flags: Flags | None = None


def flags() -> Flags:
    """The process's flags, parsed from TFJIT_FLAGS on first use."""
    global _flags
    if _flags is None:
        _flags = parse_flags(os.environ.get("TFJIT_FLAGS", ""))
        if not _flags.tfjit_persistent_cache_directory:
            _flags.tfjit_persistent_cache_directory = os.environ.get("TFJIT_CACHE_DIR", "")
    return _flags


def set_flags(**values) -> None:
    """Overrides flags from code (tests, notebooks)."""
    f = flags()
    for k, v in values.items():
        if not hasattr(f, k):
            raise FlagError(f"unknown flag {k}")
        setattr(f, k, v)


def cache_root() -> str:
    """Where built artefacts (the launch op library) are cached."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tfjit")


def tf_dump_graph_prefix() -> str:
    """TensorFlow's ``TF_DUMP_GRAPH_PREFIX``: where graph dumps go (clustering debug)."""
    return os.environ.get("TF_DUMP_GRAPH_PREFIX", "")


@functools.lru_cache(maxsize=1)
def onednn_enabled() -> bool:
    """Does TensorFlow rewrite graphs to its oneDNN kernels (``TF_ENABLE_ONEDNN_OPTS``,
    which TF turns on by itself on CPUs with AVX512_VNNI/BF16 or AMX)?"""
    try:
        from tensorflow.python.util import _pywrap_util_port
        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return False


def tiered_compile() -> bool:
    """Quick code first for big modules (--tfjit_tiered_compile, codegen/tiering.py), but
    never where TF is asked for deterministic ops: the quick code's reductions may round
    differently from the optimised code that replaces it, so the same call's results
    would change once the swap happens."""
    if not flags().tfjit_tiered_compile:
        return False
    try:
        from tensorflow.python.framework import config as tf_config
        return not tf_config.is_op_determinism_enabled()
    except (ImportError, AttributeError):
        return True
