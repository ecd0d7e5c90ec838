"""Debug dumps of compiled clusters, with XLA's file naming (see DESIGN.md "Dumps").

With ``--tfjit_dump_to=DIR`` (or ``tfjit.config.set_dump_dir``) every compiled
cluster writes, in compile order (NNNN is a process-wide counter)::

    module_NNNN.<name>.before_optimizations.txt   IR as lowered
    module_NNNN.<name>.after_optimizations.txt    IR after the passes + the kernels and
                                                  their fusion decisions (with reasons)
    module_NNNN.<name>.ir-no-opt.ll               LLVM IR as emitted
    module_NNNN.<name>.ir-with-opt.ll             LLVM IR after O3
    module_NNNN.<name>.s                          host assembly

Dumping is a debugging aid: a failure here is logged and never fails a compile.
"""
from __future__ import annotations

import itertools
import logging
import os
import re
import threading

from tfjit import config

log = logging.getLogger("tfjit")

_counter = itertools.count()
_counter_lock = threading.Lock()
_MAX_NAME = 100


def safe_name(name: str) -> str:
    """A file-name component: only [A-Za-z0-9_.-], no leading dots, at most 100 chars.

    Graph names come from user code; "../../x" must not leave the dump directory."""
    s = re.sub(r"[^A-Za-z0-9_.-]", "_", str(name))[:_MAX_NAME].lstrip(".")
    return s or "module"


def kernels_section(compiled) -> str:
    """The kernels of ``compiled`` as an IR comment block: name, kind, roots and the
    fusion decisions with their reasons."""
    lines = [f"// {len(compiled.fusions)} kernel(s)"]
    for f in compiled.fusions:
        roots = ", ".join(repr(r) for r in f.roots)
        lines.append(f"// kernel {f.name}: kind={f.kind} roots=({roots}) "
                     f"instrs={len(f.instrs)} shape={list(f.shape)}")
        lines += [f"//   {note}" for note in f.notes]
    return "\n".join(lines) + "\n"


def files_for(compiled) -> dict:
    """{suffix: text} of everything dumped for one compiled cluster."""
    code = compiled.code
    return {
        "before_optimizations.txt": compiled.module_before,
        "after_optimizations.txt": compiled.module_after + "\n" + kernels_section(compiled),
        "ir-no-opt.ll": code.llvm_ir,
        "ir-with-opt.ll": code.optimized_ir,
        "s": code.asm(),
    }


def dump_compiled(compiled, directory: str, name: str | None = None) -> list:
    """Writes the dump files of one compiled cluster into ``directory`` (created if
    missing); returns the paths written."""
    os.makedirs(directory, exist_ok=True)
    with _counter_lock:
        number = next(_counter)
    prefix = f"module_{number:04d}.{safe_name(compiled.name if name is None else name)}"
    root = os.path.realpath(directory)
    paths = []
    for suffix, content in files_for(compiled).items():
        path = os.path.join(root, f"{prefix}.{suffix}")
        if os.path.dirname(os.path.realpath(path)) != root:   # belt and braces over safe_name
            raise ValueError(f"dump path {path!r} escapes {root!r}")
        with open(path, "w") as fh:
            fh.write(content)
        paths.append(path)
    return paths


def maybe_dump(compiled) -> None:
    """Dumps ``compiled`` if a dump directory is set; logs (never raises) on failure."""
    directory = config.flags().tfjit_dump_to
    if not directory:
        return
    try:
        dump_compiled(compiled, directory)
    except Exception as e:   # a broken dump must never break compilation
        log.warning("tfjit: could not dump %s to %s: %s", getattr(compiled, "name", "?"),
                    directory, e)


# -- graphviz ---------------------------------------------------------------------------

def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ir_dot(compiled) -> str:
    """The optimized IR as graphviz dot: one node per instruction, edges operand → user,
    each kernel's instructions grouped in a ``subgraph cluster_<kernel>``."""
    owner: dict = {}
    for f in compiled.fusions:
        for i in f.instrs:
            owner.setdefault(i, f)
    nodes, stack = [], [i for f in compiled.fusions for i in f.instrs]
    seen = set()
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        nodes.append(i)
        stack.extend(i.operands)
    ids = {i: f"n{k}" for k, i in enumerate(nodes)}

    def node(i) -> str:
        shape = f"{i.dtype.name}[{','.join(str(d) for d in i.shape)}]"
        return f"{ids[i]} [label={_quote(f'{i!r} = {i.op.spelling}  {shape}')}];"

    lines = [f"digraph {_quote(safe_name(compiled.name))} {{", "  node [shape=box];"]
    for f in compiled.fusions:
        lines.append(f"  subgraph {_quote('cluster_' + safe_name(f.name))} {{")
        lines.append(f"    label={_quote(f'{f.name} ({f.kind})')};")
        lines += [f"    {node(i)}" for i in nodes if owner.get(i) is f]
        lines.append("  }")
    lines += [f"  {node(i)}" for i in nodes if i not in owner]
    for i in nodes:
        for o in dict.fromkeys(i.operands):
            lines.append(f"  {ids[o]} -> {ids[i]};")
    lines.append("}")
    return "\n".join(lines) + "\n"
