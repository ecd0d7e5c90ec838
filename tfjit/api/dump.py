"""Debug dumps of compiled clusters, with XLA's file naming (see DESIGN.md "Dumps").

With ``--tfjit_dump_to=DIR`` (or ``tfjit.config.set_dump_dir``) every compiled
cluster writes, in compile order (NNNN is a process-wide counter)::

    module_NNNN.<name>.before_optimizations.txt   IR as lowered
    module_NNNN.<name>.after_optimizations.txt    IR after the passes + the kernels and
                                                  their fusion decisions (with reasons)
    module_NNNN.<name>.ir-no-opt.ll               LLVM IR as emitted
    module_NNNN.<name>.ir-with-opt.ll             LLVM IR after O3
    module_NNNN.<name>.s                          host assembly
    module_NNNN.<name>.cluster.pbtxt              the TF cluster it came from, self-contained
                                                  (tfjit-run-module --reference=tf runs it)

and, with ``--tfjit_dump_ir_as_dot``, ``module_NNNN.<name>.after_optimizations.dot``;
with ``--tfjit_dump_ptx=sm_90`` (the GPU target chosen for the dumps: this TF runs on
the CPU), ``module_NNNN.<name>.ptx``, the module's PTX for that arch, or a line
saying why the GPU cannot run it;
with ``--tfjit_dump_pass_re=REGEX``, ``module_NNNN.<name>.<seq>.<pass>.txt`` for every
pass whose name the regex matches anywhere (``re.search``; passes: cse, dce,
collapse-dims, flatten-reductions, fusion, buffer-assignment, concurrency, see pipeline.PIPELINE), the IR
after that pass plus the kernels, the buffer plan or the concurrent groups it produced.  ``--tfjit_bug_report=DIR`` dumps the same
into ``DIR/modules`` and keeps ``DIR/README.md`` current (api/bug_report.py).

Dumping is a debugging aid: a failure here is logged and never fails a compile.
"""
from __future__ import annotations

import itertools
import logging
import os
import re
import threading

from tfjit import settings

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
    return fusions_section(compiled.fusions)


def fusions_section(fusions: list, indent: str = "") -> str:
    """``kernels_section`` of a list of ``fusion.Fusion``; the kernels of a while's or
    conditional's computations follow it, indented."""
    lines = [f"//{indent} {len(fusions)} kernel(s)"]
    for f in fusions:
        roots = ", ".join(repr(r) for r in f.roots)
        lines.append(f"//{indent} kernel {f.name}: kind={f.kind} roots=({roots}) "
                     f"instrs={len(f.instrs)} shape={list(f.shape)}")
        lines += [f"//{indent}   {note}" for note in f.notes]
        for computation, called in zip(f.instrs[0].called if f.instrs else (), f.called):
            lines.append(f"//{indent}   computation {computation.name}:")
            lines.append(fusions_section(called, indent + "    ").rstrip("\n"))
    return "\n".join(lines) + "\n"


def files_for(compiled) -> dict:
    """{suffix: text} of everything dumped for one compiled cluster."""
    code = compiled.code
    files = {
        "before_optimizations.txt": compiled.module_before,
        "after_optimizations.txt": compiled.module_after + "\n" + kernels_section(compiled),
        "ir-no-opt.ll": code.llvm_ir,
        "ir-with-opt.ll": code.optimized_ir,
        "s": code.asm(),
    }
    if settings.flags().tfjit_dump_ir_as_dot:
        files["after_optimizations.dot"] = ir_dot(compiled)
    if settings.flags().tfjit_dump_ptx:
        files["ptx"] = ptx_text(compiled, settings.flags().tfjit_dump_ptx)
    if getattr(compiled, "cluster_def", b""):
        files[CLUSTER_SUFFIX] = cluster_pbtxt(compiled)
    return files


CLUSTER_SUFFIX = "cluster.pbtxt"


def ptx_text(compiled, arch: str) -> str:
    """The module's PTX for ``arch``, or why the GPU target refuses it (as a PTX comment)."""
    from tfjit import pipeline
    from tfjit.codegen.target import NotForTarget
    try:
        return pipeline.ptx_of(compiled, arch).ptx
    except NotForTarget as e:
        return f"// no PTX: {e.reason}" + (f" ({e.instr})\n" if e.instr is not None else "\n")


def cluster_pbtxt(compiled) -> str:
    """The cluster's GraphDef as text, headed by comments (``#``, which the text format
    skips) giving the signature it was compiled for."""
    from google.protobuf import text_format
    from tensorflow.core.framework import graph_pb2
    gd = graph_pb2.GraphDef()
    gd.ParseFromString(compiled.cluster_def)
    sig = ", ".join(f"{d.name}[{','.join(str(x) for x in s)}]" for d, s in compiled.signature)
    header = (f"# tfjit cluster {safe_name(compiled.name)}: placeholders _arg_<k> are the module's "
              f"parameters p<k>, identities _retval_<j> its ROOT values, in order\n"
              f"# signature: ({sig})\n")
    return header + text_format.MessageToString(gd)


def dump_compiled(compiled, directory: str, name: str | None = None, extra=(),
                  number: int | None = None) -> list:
    """Writes the dump files of one compiled cluster into ``directory`` (created if
    missing); returns the paths written.  ``extra``: more (suffix, text) pairs (the
    pass dumps); ``number``: the NNNN to use (default: the next of the process)."""
    os.makedirs(directory, exist_ok=True)
    if number is None:
        number = next_number()
    prefix = f"module_{number:04d}.{safe_name(compiled.name if name is None else name)}"
    root = os.path.realpath(directory)
    paths = []
    for suffix, content in list(files_for(compiled).items()) + list(extra):
        path = os.path.join(root, f"{prefix}.{suffix}")
        if os.path.dirname(os.path.realpath(path)) != root:   # belt and braces over safe_name
            raise ValueError(f"dump path {path!r} escapes {root!r}")
        with open(path, "w") as fh:
            fh.write(content)
        paths.append(path)
    return paths


def next_number() -> int:
    with _counter_lock:
        return next(_counter)


def dump_dirs() -> list:
    """Where compiled modules are dumped: ``--tfjit_dump_to`` and the bug report's
    ``modules`` folder (both, with one NNNN, when both are set)."""
    f = settings.flags()
    dirs = [f.tfjit_dump_to] if f.tfjit_dump_to else []
    if f.tfjit_bug_report:
        dirs.append(os.path.join(f.tfjit_bug_report, "modules"))
    return dirs


def maybe_dump(compiled, passes=None) -> None:
    """Dumps ``compiled`` (and the pass dumps ``passes``, a PassRecorder, recorded while
    compiling it) if dumping is on; logs (never raises) on failure."""
    dirs = dump_dirs()
    if not dirs:
        return
    from tfjit.codegen import tiering
    tiering.wait(compiled)      # dump the code later calls run, not a quick first tier's
    number = next_number()
    extra = passes.files if passes is not None else ()
    for directory in dirs:
        try:
            dump_compiled(compiled, directory, extra=extra, number=number)
        except Exception as e:   # a broken dump must never break compilation
            log.warning("tfjit: could not dump %s to %s: %s", getattr(compiled, "name", "?"),
                        directory, e)
    if settings.flags().tfjit_bug_report:
        from tfjit.api import bug_report
        try:
            bug_report.write_readme(settings.flags().tfjit_bug_report)
        except Exception as e:
            log.warning("tfjit: could not write the bug report README: %s", e)


def clustering_dump_dir() -> str | None:
    """Where the clustering dumps go (decided once, in graph/debug.py): ``DIR/clustering``
    with ``--tfjit_bug_report=DIR``, else ``TF_DUMP_GRAPH_PREFIX`` with
    ``--tfjit_clustering_debug``, else None (no dumps)."""
    from tfjit.graph import debug
    return debug.dump_dir()


# -- per-pass dumps (--tfjit_dump_pass_re) ---------------------------------------------------

class PassRecorder:
    """``after_pass`` hook for pipeline.compile_module: keeps the text of the module after
    every pass whose name ``pattern`` matches, as (suffix, text) dump files."""

    def __init__(self, pattern: re.Pattern):
        self.pattern = pattern
        self.files: list = []

    def __call__(self, seq: int, pass_name: str, m, result) -> None:
        if not self.pattern.search(pass_name):
            return
        try:
            self.files.append((f"{seq:04d}.{safe_name(pass_name)}.txt",
                               pass_text(pass_name, m, result)))
        except Exception as e:   # as every dump: never break compilation
            log.warning("tfjit: could not record the IR after pass %s: %s", pass_name, e)


def pass_hook() -> PassRecorder | None:
    """A PassRecorder when dumping is on and ``--tfjit_dump_pass_re`` is set, else None.
    An invalid regex is logged and dumps no pass."""
    pattern = settings.flags().tfjit_dump_pass_re
    if not pattern or not dump_dirs():
        return None
    try:
        return PassRecorder(re.compile(pattern))
    except re.error as e:
        log.warning("tfjit: --tfjit_dump_pass_re=%r is not a valid regex (%s); no pass dumps",
                    pattern, e)
        return None


def pass_text(pass_name: str, m, result) -> str:
    """The module after a pass, with what the pass produced: the kernels (fusion), the
    buffer plan (buffer assignment) or whether it changed the module (simplify passes)."""
    from tfjit.ir.text import module_str
    from tfjit.passes.buffers import BufferPlan
    from tfjit.passes.concurrency import Schedule
    body = module_str(m) + "\n"
    if isinstance(result, BufferPlan):
        return body + plan_section(m, result)
    if isinstance(result, Schedule):
        return body + schedule_section(result)
    if isinstance(result, list):
        return body + fusions_section(result)
    return f"// after pass {pass_name}: {'changed' if result else 'unchanged'}\n" + body


def schedule_section(s) -> str:
    """The concurrent groups (passes/concurrency.py) as an IR comment block."""
    groups = s.concurrent()
    lines = [f"// concurrent groups: {len(groups)}, with "
             f"{sum(len(t) for g in groups for t in g)} of {len(s.fusions)} kernels"]
    for n, g in enumerate(groups):
        lines.append(f"// group {n}: " + "; ".join(
            f"task {k}: " + ", ".join(f.name for f in t) for k, t in enumerate(g)))
    return "\n".join(lines) + "\n"


def plan_section(m, plan) -> str:
    """The buffer plan as an IR comment block: what every launch-op slot holds."""
    from tfjit.ir.text import shape_str
    held: dict = {}
    for instr, slots in plan.slots.items():
        for k in slots:
            held.setdefault(k, []).append(instr)
    lines = [f"// buffer plan: {plan.num_inputs} input(s), {plan.num_outputs} output(s), "
             f"{len(plan.temp_bytes)} temp(s) in a {plan.arena_bytes}-byte arena, "
             f"status in slot {plan.status_slot}"]
    for k in range(plan.status_slot):
        if k < plan.num_inputs:
            what = f"input {k}"
        elif k < plan.num_inputs + plan.num_outputs:
            what = f"output {k - plan.num_inputs}"
        else:
            t = k - plan.num_inputs - plan.num_outputs
            what = f"temp, {plan.temp_bytes[t]} bytes at arena offset {plan.temp_offsets[t]}"
        values = ", ".join(f"{i!r} {shape_str(i)}" for i in held.get(k, []))
        lines.append(f"// slot {k}: {what}" + (f" <- {values}" if values else ""))
    for f, k in plan.scratch.items():
        lines.append(f"// {f.name}: partial results in slot {k}")
    for o, src in enumerate(plan.output_source):
        if src >= 0:
            lines.append(f"// output {o} is input {src} (no kernel writes it)")
    return "\n".join(lines) + "\n"


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
