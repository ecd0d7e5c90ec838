"""The NVPTX target: the same kernels as the CPU's, as PTX for an NVIDIA GPU.

``pipeline.emit(optimized, nvptx.target("sm_90"))`` runs the shared emitter
(``llvm_cpu.EMITTERS``, the kernels' row bodies ``void k(bufs, row_begin,
row_end)``) and then this module adds what differs on a GPU:

* **a kernel entry per step** (``add_entries``): a ``ptx_kernel`` function
  ``(bufs, rows)`` whose threads take rows in a grid-stride loop, with 64-bit
  row indices, each calling the row body (inlined) for one row.  Rows are
  independent on every target (the CPU launch shards them over threads), so
  any thread may take any row, and there are no atomics: a reduction's result
  does not depend on the launch shape (deterministic, as the CPU's).  Where
  threads share a row (codegen/lanes.py) the entry strides over their groups;
* **one element per row in flat loops, no row buffers, no prefetch**
  (``KernelEmitter(gpu=True)``, codegen/emitter.py);
* **what is refused** (``refuse``, ``check_calls``), with a reason, never run
  on the host instead: kernel kinds without a GPU emitter yet (library calls,
  control flow, scatter/scan/top-k, variable updates), TF's special functions
  (igamma, betainc, zeta, polygamma, lgamma, ndtri, bessel_i0e...: libm's CPU code,
  and x86's approximation tables), and code that calls what
  a GPU has no copy of: the C library (float64 transcendentals, sincos) or an
  LLVM intrinsic NVPTX cannot lower (LLVM aborts on those, so they are caught
  here, before the PTX is made).  Float32 transcendentals are tfjit's own
  polynomials (codegen/mathlib.py), so the CPU's ulp bounds hold here too; not
  libdevice, which is a file of the CUDA toolkit and not on every machine.

Address spaces: buffers are generic pointers (the entry's parameters are
global memory, which NVPTX infers); constants become ``.global`` data
(LLVM's NVPTXGenericToNVVM).  Rows of 8 elements or more are shared by part of a
warp, a warp or a block, combined with shuffles and shared memory (codegen/lanes.py);
shorter ones run a row per thread.

PTX comes from LLVM in the compile server (codegen/jit_server.py: an LLVM
abort there is an error here) or in-process when the Compiler says so.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile

from llvmlite import ir

from tfjit.codegen import lanes, llvm_cpu, llvm_target
from tfjit.codegen.llvm_types import I64, PTR, VOID
from tfjit.codegen.target import Compiler, NotForTarget, Target
from tfjit.ir.ops import COMPLEX_LIBM, SPECIAL, Op
from tfjit.passes.fusion import KernelKind
from tfjit.passes.kernel_order import walk

TRIPLE = "nvptx64-nvidia-cuda"
# LLVM's NVPTX layout for 64-bit pointers (tests/test_nvptx.py checks it against the
# target machine's, so it cannot drift from the LLVM that makes the PTX)
DATA_LAYOUT = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
ARCHS = ("sm_80", "sm_90")

# The kinds the GPU emits; the others say why not (a reason per kind, as explain shows).
GPU_KINDS = {KernelKind.LOOP, KernelKind.REDUCE}
_NOT_YET = {
    KernelKind.LIBRARY: "dot, convolution, QR and the solvers call a runtime library (cuBLAS/cuDNN/"
                        "cuSOLVER calls are not written yet)",
    KernelKind.WHILE: "loops run on the host driver, which GPU code lacks",
    KernelKind.CONDITIONAL: "conditionals run on the host driver, which GPU code lacks",
    KernelKind.SCATTER: "scatter kernels have no GPU emitter yet",
    KernelKind.SCAN: "scan kernels have no GPU emitter yet",
    KernelKind.SORT: "top-k kernels have no GPU emitter yet",
    KernelKind.UPDATE: "variable updates have no GPU emitter yet",
}
assert set(_NOT_YET) | GPU_KINDS == set(KernelKind), "a kernel kind without a GPU answer"

# LLVM intrinsics the NVPTX backend lowers to instructions (others, like llvm.exp or
# llvm.pow, become C library calls that do not exist on a GPU).
_INTRINSICS = {"fabs", "copysign", "fptosi.sat", "fptoui.sat", "maximum", "minimum",
               "maxnum", "minnum", "sqrt", "floor", "ceil", "trunc", "rint", "round",
               "roundeven", "nearbyint", "fma", "fmuladd", "smax", "smin", "umax", "umin",
               "abs", "ctpop", "ctlz", "cttz", "bswap", "sadd.with.overflow",
               "uadd.with.overflow", "ssub.with.overflow", "usub.with.overflow",
               "smul.with.overflow", "umul.with.overflow", "assume", "expect"}
_SUFFIX = re.compile(r"(\.(i\d+|f16|f32|f64|bf16|v\d+\w+|p0))+$")


def target(arch: str = "sm_90") -> Target:
    if arch not in ARCHS:
        raise ValueError(f"tfjit's GPU target knows {', '.join(ARCHS)}, not {arch!r}")
    return Target(f"nvptx-{arch}", TRIPLE, DATA_LAYOUT, runtime_calls=False,
                  library_prefix="", gpu_arch=arch)


def arch_for(device_arch: str) -> str:
    """The newest of ARCHS a GPU of ``device_arch`` ("sm_89") runs: the driver compiles
    PTX for its own device, so PTX for an older arch runs on a newer GPU."""
    number = int(device_arch[3:]) if device_arch[3:].isdigit() else -1
    fits = [a for a in ARCHS if int(a[3:]) <= number]
    if not device_arch.startswith("sm_") or not fits:
        raise ValueError(f"tfjit's GPU code needs {ARCHS[0]} or newer; this GPU is {device_arch}")
    return max(fits, key=lambda a: int(a[3:]))


def refuse(fusions: list, t: Target) -> None:
    """NotForTarget for the first kernel whose kind the GPU does not emit yet, or
    that computes one of TF's special functions (codegen/special.py: Eigen's code
    over the C library's lgamma, log, exp, pow, which a GPU has no copy of; in f32,
    ndtri/erfinv/bessel also take x86's rcpps/rsqrtps tables, codegen/special_unary.py)."""
    for f in walk(fusions):
        if f.kind not in GPU_KINDS:
            raise NotForTarget(f.roots[0], f"{t.name}: {_NOT_YET[f.kind]}")
        for i in f.instrs:
            if i.op in _LIBM_ONLY:
                raise NotForTarget(i, f"{t.name}: {i.op.spelling} is the C library's on the CPU, "
                                      "as TF's kernel calls it (bit-identical), and a GPU has no copy of it")
            if i.op in SPECIAL:
                raise NotForTarget(i, f"{t.name}: {i.op.spelling} is TF's CPU code "
                                      f"({_SPECIAL_WHY.get(i.op, _SERIES)}), which has no GPU version yet")


_LIBM_ONLY = frozenset({Op.TAN, Op.SINH, Op.COSH, Op.ASINH, Op.ACOSH, Op.EXPM1_LIBM, *COMPLEX_LIBM})
_SERIES = "Eigen's series over the C library's lgamma, log, exp and pow"
_APPROX = ("Eigen's code over the C library's log in f64, over x86's rcpps/rsqrtps "
           "approximations in f32")
_SPECIAL_WHY = {Op.LGAMMA: "the C library's lgamma_r",
                Op.DIGAMMA: "Cephes' psi over the C library's log and tan",
                Op.NDTRI: _APPROX, Op.ERFINV: _APPROX, Op.BESSEL_I0E: _APPROX, Op.BESSEL_I1E: _APPROX}


def _calls(fn: ir.Function):
    for block in fn.blocks:
        for instr in block.instructions:
            if isinstance(instr, ir.CallInstr) and isinstance(instr.callee, ir.Function):
                yield instr.callee


def check_calls(module: ir.Module, fusions: list, t: Target) -> None:
    """NotForTarget naming the kernel (fusion ``k<n>``) that calls what a GPU lacks."""
    for fn in module.functions:
        if not fn.blocks:
            continue
        for callee in _calls(fn):
            if callee.blocks or callee.name.startswith("llvm.nvvm."):
                continue
            base = _SUFFIX.sub("", callee.name[5:]) if callee.name.startswith("llvm.") else None
            if base in _INTRINSICS:
                continue
            why = (f"LLVM's NVPTX backend cannot lower {callee.name}" if base is not None else
                   f"calls the C library's {callee.name}, which a GPU has no copy of "
                   "(float64 transcendentals are libm's on the CPU)")
            m = re.search(r"\.k(\d+)(\.|$)", fn.name)
            at = fusions[int(m.group(1))].roots[0] if m and int(m.group(1)) < len(fusions) \
                else None
            raise NotForTarget(at, f"{t.name}: {why}")


def _sreg(b: ir.IRBuilder, name: str):
    full = f"llvm.nvvm.read.ptx.sreg.{name}"
    fn = b.module.globals.get(full) or ir.Function(
        b.module, ir.FunctionType(ir.IntType(32), []), name=full)
    return b.zext(b.call(fn, []), I64)


def entry_name(module_name: str, n: int) -> str:
    """A PTX identifier for step ``n`` (PTX names have no dots; LLVM would rename them)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", module_name) + f"_s{n}"


def add_entries(module: ir.Module, steps: list) -> list:
    """A grid-stride ``ptx_kernel`` entry per step; returns [(entry, rows, cost)].  A step
    whose warps share rows (codegen/lanes.py) counts threads, and its entry strides
    over warps: each warp's lanes call the row body for the same row."""
    out = []
    for n, (symbol, rows, cost) in enumerate(steps):
        threads = lanes.threads(module, symbol)
        body = module.globals[symbol]
        body.linkage = "internal"
        body.attributes.add("alwaysinline")
        name = entry_name(module.name, n)
        fn = ir.Function(module, ir.FunctionType(VOID, [PTR, I64]), name=name)
        fn.calling_convention = "ptx_kernel"
        bufs, count = fn.args
        bufs.add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        first = b.add(b.mul(_sreg(b, "ctaid.x"), _sreg(b, "ntid.x")), _sreg(b, "tid.x"))
        stride = b.mul(_sreg(b, "nctaid.x"), _sreg(b, "ntid.x"))
        if threads > 1:     # groups of ``threads`` (whole in a block), their count, rows
            shift = ir.Constant(I64, threads.bit_length() - 1)
            first, stride, count = b.lshr(first, shift), b.lshr(stride, shift), b.lshr(count, shift)
            lanes.mark(module, name, threads)
        if threads > lanes.WARP:      # a row per block: the driver refuses another size
            module.add_named_metadata("nvvm.annotations", [
                fn, ir.MetaDataString(module, "reqntidx"), ir.Constant(ir.IntType(32), threads)])
        loop, done = fn.append_basic_block("rows"), fn.append_basic_block("done")
        b.cbranch(b.icmp_signed("<", first, count), loop, done)
        b.position_at_end(loop)
        row = b.phi(I64, "row")
        row.add_incoming(first, fn.entry_basic_block)
        b.call(body, [bufs, row, b.add(row, ir.Constant(I64, 1))])
        following = b.add(row, stride)
        row.add_incoming(following, loop)
        b.cbranch(b.icmp_signed("<", following, count), loop, done)
        b.position_at_end(done)
        b.ret_void()
        out.append((name, rows, cost))
    return out


def to_ptx(llvm_ir: str, arch: str, compiler: Compiler) -> tuple:
    """(PTX, optimised IR) for ``arch``: in the compile server unless ``compiler`` says
    in-process."""
    client = llvm_cpu.server(compiler)
    if client is not None:
        return client.request("ptx", llvm_ir, arch)
    return llvm_target.emit_ptx(llvm_ir, arch)


class PtxasError(RuntimeError):
    """ptxas refused the PTX (its own message)."""


def ptxas() -> str | None:
    """The path of CUDA's ptxas, or None where there is none."""
    return shutil.which("ptxas")


def assemble(ptx: str, arch: str) -> bytes:
    """A cubin of ``ptx`` for ``arch`` with ptxas (how tests check the PTX without a GPU)."""
    tool = ptxas()
    if tool is None:
        raise PtxasError("no ptxas on PATH (CUDA's toolkit)")
    with tempfile.TemporaryDirectory() as d:
        src, out = f"{d}/k.ptx", f"{d}/k.cubin"
        with open(src, "w") as f:
            f.write(ptx)
        done = subprocess.run([tool, f"-arch={arch}", src, "-o", out],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise PtxasError(done.stderr.strip() or f"ptxas exited {done.returncode}")
        with open(out, "rb") as f:
            return f.read()
