"""The compiler driver: cluster definition → machine code, top to bottom.

    lower  (graph → IR)            lower/graph_to_ir.py
    passes (simplify, fusion,      passes/
            buffer assignment)
    codegen (IR → LLVM → code)     codegen/llvm_cpu.py
    runtime (executable for the    runtime/launch.py
             TfjitLaunch op)

Each stage consumes only what the previous one produced.
"""
from __future__ import annotations

import dataclasses
import itertools
import time

from tfjit import dtypes as dt
from tfjit.codegen import control, library, llvm_cpu, objcache
from tfjit.codegen.elemental import MESSAGES
from tfjit.graph.graphdef import Graph
from tfjit.ir import text
from tfjit.ir.module import Module
from tfjit.lower.graph_to_ir import lower_cluster
from tfjit.passes import buffers, fusion
from tfjit.passes.simplify import CSE, DCE
from tfjit.runtime import launch

PASSES = [CSE(), DCE()]   # run in this order on the lowered module


@dataclasses.dataclass
class Compiled:
    """Everything one compilation produced, for execution and introspection."""
    name: str
    signature: list
    module_before: str          # IR text as lowered
    module_after: str           # IR text after the passes
    fusions: list
    plan: buffers.BufferPlan
    code: llvm_cpu.MachineCode
    executable: object          # runtime.launch.Executable
    seconds: float
    cluster_def: bytes = b""    # the TF cluster it was lowered from (empty for a parsed module)

    @property
    def num_kernels(self) -> int:
        return len(self.fusions)


def compile_cluster(cluster_def: bytes, signature: list, name: str, after_pass=None) -> Compiled:
    """Compiles one cluster for one input signature [(DType, shape)]."""
    start = time.perf_counter()
    m = lower_cluster(Graph.from_bytes(cluster_def), signature, name)
    compiled = compile_module(m, name, after_pass)
    compiled.signature = signature
    compiled.cluster_def = cluster_def
    compiled.seconds = time.perf_counter() - start
    return compiled


def compile_module(m: Module, name: str, after_pass=None) -> Compiled:
    """Passes, fusion, buffers, codegen and executable for a lowered (or parsed) module.

    ``m`` is changed in place; its parameters are the executable's inputs.
    ``after_pass(seq, pass_name, module, result)``, when given, sees the module after
    every pass (``result``: changed-or-not, the fusions, the buffer plan); the debug
    dumps (api/dump.py, --tfjit_dump_pass_re) hook in here.
    """
    start = time.perf_counter()
    signature = [(p.dtype, p.shape) for p in m.params]
    before = text.module_str(m)
    seq = itertools.count()

    def done(pass_name: str, result):
        if after_pass is not None:
            after_pass(next(seq), pass_name, m, result)
        return result

    for p in PASSES:
        done(p.name, p.run(m))
    fusions = done("fusion", fusion.fuse(m))
    plan = done("buffer-assignment", buffers.assign(m, fusions))
    messages = list(MESSAGES)        # kernels add theirs (a gather's bound, ...)
    llmod, steps = llvm_cpu.emit_module(name, fusions, plan, messages, parallel=True)
    kinds = {f.kind for f in fusion.walk(fusions)}
    runtime = []             # op library functions the code calls
    if "library" in kinds:   # dot/conv call the op library (TF's kernels)
        runtime += library.runtime_symbols()
    if kinds & set(fusion.CONTROL):   # loop drivers shard big steps through the op library
        runtime.append(control.PARALLEL_FOR)
    code = objcache.compile_module(llmod, [s for s, _, _ in steps], runtime=runtime)
    executable = launch.make_executable(
        input_dtypes=[launch.DT_RESOURCE if k in m.variable_params else d.tf_enum
                      for k, (d, _) in enumerate(signature)],
        output_dtypes=[o.dtype.tf_enum for o in m.outputs],
        output_shapes=[o.shape for o in m.outputs],
        output_source=plan.output_source,
        output_forward=[-1] * len(m.outputs),
        temp_bytes=plan.temp_bytes,
        temp_offsets=plan.temp_offsets,
        steps=[(code.addresses[s], rows, cost) for s, rows, cost in steps],
        messages=messages,
        update_inputs=list(m.updates),
        update_in_place=plan.update_in_place,
        keepalive=code,
        runtime=runtime)
    return Compiled(name, signature, before, text.module_str(m), fusions, plan, code, executable,
                    time.perf_counter() - start)


def signature_of(dtypes_enums: list, shapes: list) -> list:
    """[(DType, shape)] from the launch op's signature; a resource variable input
    signs with its value's dtype + 100 and its value's shape (launch_op.cc)."""
    out = []
    for e, s in zip(dtypes_enums, shapes):
        if e > launch.VARIABLE_DTYPE_OFFSET:
            e -= launch.VARIABLE_DTYPE_OFFSET
        d = dt.from_tf_enum(e)
        if d is None:
            raise TypeError(f"tfjit cannot compile inputs of TF dtype enum {e}")
        out.append((d, tuple(int(x) for x in s)))
    return out
