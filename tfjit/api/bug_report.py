"""``--tfjit_bug_report=DIR``: one folder that reproduces what tfjit compiled.

    DIR/README.md       versions, CPU, the flags in effect, and the exact commands that
                        re-run every module against the IR interpreter and against TF
    DIR/modules/        the module dumps of api/dump.py (with each cluster's GraphDef)
    DIR/clustering/     the clustering dumps (dump.clustering_dump_dir), when written

The README is rewritten after every module dump and once more at exit, so it
always lists everything in the folder; it is written to a temporary file and
renamed, so a reader never sees half of it.
"""
from __future__ import annotations

import atexit
import dataclasses
import os
import platform
import shlex
import threading

from tfjit import settings

_lock = threading.Lock()
_at_exit: set = set()
BEFORE = ".before_optimizations.txt"


def flags_text() -> str:
    """The flags in effect as a TFJIT_FLAGS value: every flag that differs from its
    default, whether it came from the environment or from ``settings.set_flags``."""
    current, default = settings.flags(), settings.Flags()
    parts = []
    for f in dataclasses.fields(settings.Flags):
        value = getattr(current, f.name)
        if value != getattr(default, f.name):
            text = str(value).lower() if isinstance(value, bool) else str(value)
            parts.append(shlex.quote(f"--{f.name}={text}"))
    return " ".join(parts)


def _cpu() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        from llvmlite import binding as llvm
        host = llvm.get_host_cpu_name()
    except Exception:   # the README is still useful without LLVM's name for the CPU
        host = "?"
    return f"{model or platform.processor() or '?'} (LLVM host CPU {host}), {os.cpu_count()} logical cores"


def _versions() -> list:
    import numpy
    import tfjit
    out = [f"tfjit {tfjit.__version__}"]
    try:
        import tensorflow as tf
        out.append(f"TensorFlow {tf.__version__}")
    except ImportError:
        out.append("TensorFlow (not importable)")
    try:
        import llvmlite
        from llvmlite import binding as llvm
        out.append(f"llvmlite {llvmlite.__version__} (LLVM {'.'.join(map(str, llvm.llvm_version_info))})")
    except ImportError:
        out.append("llvmlite (not importable)")
    out += [f"numpy {numpy.__version__}", f"Python {platform.python_version()}"]
    return out


def _listing(directory: str) -> list:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def readme(directory: str) -> str:
    """The README text for the bug report in ``directory``, from what is in it now."""
    modules = [n[:-len(BEFORE)] for n in _listing(os.path.join(directory, "modules"))
               if n.endswith(BEFORE)]
    lines = ["# tfjit bug report", "",
             "Written by tfjit (`--tfjit_bug_report`). Every module tfjit compiled in the",
             "reporting process is in `modules/`; the commands below re-run each one on",
             "random inputs and compare the compiled code with a reference.", "",
             "## Environment", ""]
    lines += [f"- {v}" for v in _versions()]
    lines += [f"- CPU: {_cpu()}", f"- OS: {platform.platform()}",
              f"- TFJIT_FLAGS in effect: `{flags_text()}`", "",
              "## Re-running the modules", "",
              "Run from this folder, with tfjit importable (`pip install tfjit` or",
              "`PYTHONPATH=<tfjit checkout>`) and TFJIT_FLAGS unset. `tfjit-run-module` is the",
              "same program as `python3 -m tfjit.api.run_module`. Exit status 1 means a run",
              "miscompared.", ""]
    if not modules:
        lines += ["No module was compiled.", ""]
    for prefix in modules:
        files = [n for n in _listing(os.path.join(directory, "modules")) if n.startswith(prefix + ".")]
        run = f"python3 -m tfjit.api.run_module {shlex.quote(f'modules/{prefix}{BEFORE}')} --iterations 5"
        lines += [f"### {prefix}", "", "Files: " + ", ".join(f"`{n}`" for n in files), "",
                  "Against the IR interpreter (normal floats, then many magnitudes with Inf/NaN):",
                  "", "```", run, run + " --use_large_float_range", "```", ""]
        if f"{prefix}.cluster.pbtxt" in files:
            lines += ["Against TensorFlow running the cluster graph:", "", "```",
                      run + " --reference=tf", "```", ""]
        else:
            lines += ["(No TF cluster was recorded for this module, so it cannot be compared with TF.)", ""]
    clustering = _listing(os.path.join(directory, "clustering"))
    lines += ["## Clustering dumps", ""]
    if clustering:
        lines += ["The graphs before and after tfjit's marking and clustering passes (`.pbtxt`:",
                  "GraphDef text, loadable in TensorBoard; `.dot`/`.svg`: the clusters drawn):", ""]
        lines += [f"- `clustering/{n}`" for n in clustering]
    else:
        lines.append("None were written (`clustering/` is empty).")
    return "\n".join(lines) + "\n"


def write_readme(directory: str) -> str:
    """(Re)writes ``directory``/README.md; returns its path.  Also registers one rewrite
    at exit so dumps written after the last compile are listed too."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "README.md")
    with _lock:
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as fh:
            fh.write(readme(directory))
        os.replace(tmp, path)
        if directory not in _at_exit:
            _at_exit.add(directory)
            atexit.register(_rewrite_quietly, directory)
    return path


def _rewrite_quietly(directory: str) -> None:
    if not os.path.isdir(directory):    # removed since (a test's temporary folder)
        return
    try:
        write_readme(directory)
    except Exception:   # at exit there is no one left to tell
        pass
