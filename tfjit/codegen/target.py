"""What code is made for: the one description codegen is handed, never looks up.

``pipeline.emit(optimized, target)`` is the only road from optimised IR to LLVM
IR, and everything it needs to know about where the code will run is here:

* ``triple``/``data_layout``: the LLVM module's, from the machine that compiles
  (the compile server's for the JIT; the requested one for AOT);
* ``runtime_calls``: the code may call the op library (``runtime/tf_kernels.cc``:
  ``tfjit_rt_parallel_for``, through which loop drivers shard their big steps).
  The JIT's code runs inside the launch op, so it may; an AOT object ships without
  TensorFlow, so it may not;
* ``library_prefix``: the names of the dot and convolution entry points its library
  kernels call (``<prefix><kind>_<dtype>``, codegen/library.py): the op library's
  ``tfjit_rt_`` (TF's kernels) for the JIT, the AOT runtime's ``tfjit_aot_rt_``
  (linalg.cc's Eigen code in a static library, runtime/aot_runtime.cc) for AOT;
* ``onednn``: TF runs oneDNN's kernels on this CPU, so library calls take them
  (otherwise each call times both over its first calls; ``codegen/library.py``);
* ``native_bf16``: the CPU computes bf16 products itself (AVX512-BF16's vdpbf16ps, or
  AMX-BF16), so a bf16 library call takes TF's oneDNN bf16 kernel where ``onednn``;
  elsewhere it widens to f32 (codegen/library.py ``tf_kernel``).  From the compile
  server's features (``llvm_target.native_bf16``);
* ``gpu_arch``: code for an NVIDIA GPU of this compute capability ("sm_90"), made
  by codegen/nvptx.py: kernel entries over the same kernels, PTX, no library;
* ``compiler``: for the JIT, where LLVM runs (``Compiler``: the compile server or
  this process, with MCJIT); None for AOT, whose object is written, not loaded;
* ``verify_sharing``: kernels that share a body found by key (codegen/body_sharing.py)
  emit theirs too, to check it is the same code (``--tfjit_verify_ir``: the tests).
* ``vector_ldexp``: the CPU scales by a power of two in one vector instruction
  (AVX-512's ``vscalefps``), so mathlib's exp ends in ``llvm.ldexp``; elsewhere LLVM
  makes that a scalar libm call per element, and exp builds 2^n from integer ops
  (bit-identical results either way: tests/test_mathlib.py).  Decided from the
  features the code is compiled for (``llvm_target.vector_ldexp``: the compile
  server's for the JIT), or for tfjit-aot by asking its target machine
  (``machine_vector_ldexp``: ``--target_cpu`` may name a CPU without its features).

The choices that once came from globals (flags, TF's oneDNN switch) are made
once, by whoever builds the Target (``pipeline.jit_target()`` for the JIT,
``aot/compile.py`` for tfjit-aot), so that the same optimised module emits the same code for the
same Target wherever it is compiled.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Compiler:
    """Where the JIT's LLVM runs (codegen/llvm_cpu.py): in the compile server
    (codegen/jit_server.py; ``timeout`` seconds a request may take; a big module in
    parts across ``processes`` servers at once, codegen/ir_split.py), or in this
    process with MCJIT (``in_process``).  Where the server cannot run or its code
    cannot load, llvm_cpu moves to in-process LLVM for the rest of the run and
    says why: that is what happened, not a choice, so it is not here."""
    in_process: bool = False
    timeout: float = 300.0
    processes: int = 1          # compile servers a big module is split across (ir_split)


@dataclasses.dataclass(frozen=True)
class Target:
    name: str                   # "cpu-jit" | "cpu-aot" | "nvptx-sm_90": shown in errors
    triple: str
    data_layout: str
    runtime_calls: bool         # may call the op library (see above)
    onednn: bool = False
    native_bf16: bool = False           # bf16 products in hardware (see above)
    library_prefix: str = "tfjit_rt_"   # dot/convolution entry points (see above)
    compiler: Compiler | None = None    # the JIT's LLVM (see above); None: AOT
    gpu_arch: str = ""                  # "sm_90": an NVPTX target (see above)
    verify_sharing: bool = False        # re-emit shared bodies and compare (see above)
    vector_ldexp: bool = False          # AVX-512 vscalef for exp's 2^n (see above)


class NotForTarget(Exception):
    """The module needs what the target lacks (e.g. a library call in an AOT object)."""

    def __init__(self, instr, reason: str):
        super().__init__(reason)
        self.instr = instr
        self.reason = reason
