"""Cost analysis of a compiled module: flops, transcendentals and bytes per kernel.

An analysis, not a transformation: it reads the kernels (``fusion.fuse``) and
the buffer plan (``buffers.assign``) and changes nothing.  Counting follows
XLA's HloCostAnalysis so numbers compare with ``jax...compile().cost_analysis()``:

* flops: one per result element of every elementwise op a kernel evaluates
  (arithmetic, comparisons, select, convert), except the transcendental ones
  below; a reduction costs one per combined element (operand elements minus
  result elements); data movement (broadcast, reshape, transpose, slice, pad,
  concatenate), parameters, constants and iota cost nothing; a dot or
  convolution costs two per multiply-add; a scatter costs one per data element it
  combines, a scan one per result element, a top-k one per operand element
  (the comparison against the heap's root; sifting is not counted); a gather
  is movement (free).
* transcendentals: one per result element of exp, log, tanh, erf, pow, sqrt ...
  (``TRANSCENDENTAL``), counted apart as XLA does.
* bytes: a kernel reads every buffer it reads (parameters, other kernels'
  results) once in full and writes each of its roots to every slot the plan
  gives it; a split reduction also writes and re-reads its partial results.
  Outputs that are plain inputs cost nothing (no kernel runs for them).

A kernel evaluates its own instructions plus the cheap ones (``fusion.is_cheap``:
converts/movement of parameters) it recomputes from the source; those count
once per kernel that recomputes them, since each does that work again.
"""
from __future__ import annotations

import dataclasses
import math

from tfjit.ir.library_calls import conv3d_shapes
from tfjit.ir.ops import CONV3D_OPS, LIBM, SOLVER_ATTRS, SPECIAL, SPECTRAL_ATTRS, Kind, Op
from tfjit.passes import fusion as fusion_mod
from tfjit.passes import kernel_order
from tfjit.passes.kernels import reductions

TRANSCENDENTAL = frozenset({
    Op.EXP, Op.EXPM1, Op.LOG, Op.LOG1P, Op.SIN, Op.COS, Op.TANH, Op.LOGISTIC,
    Op.SOFTPLUS, Op.ERF, Op.POW, Op.ATAN2, Op.SQRT, Op.RSQRT,
    Op.ASIN, Op.ACOS, Op.ATAN, Op.ATANH, Op.TRUNCATED_NORMAL,
}) | LIBM | SPECIAL


# Rough CPU cycles per element of the special functions, against 1 for any other
# instruction: what ``element_cycles`` weighs a kernel's instructions by for the
# launch op's cost per row (estimated cycles), which decides whether a step is
# sharded over TF's threads.  Counted as one instruction, a special function
# looked like an add: a kernel of 64K igammas read as ~130K cycles, which TF's
# ParallelFor runs on one thread (1M elements were sharded either way).  Order of
# magnitude only: a C library call or a vectorised polynomial with divisions
# (~50-100), loops of series terms (~1000).
_SPECIAL_CYCLES = {Op.LGAMMA: 100, Op.DIGAMMA: 100, Op.NDTRI: 50, Op.ERFINV: 50,
                   Op.BESSEL_I0E: 50, Op.BESSEL_I1E: 50, Op.IGAMMA: 1000, Op.IGAMMAC: 1000,
                   Op.BETAINC: 1000, Op.ZETA: 1000, Op.POLYGAMMA: 1000}


def element_cycles(instrs) -> int:
    """Estimated cycles to evaluate ``instrs`` once each (one element of each): 1 per
    instruction, a special function's ``_SPECIAL_CYCLES``; at least 1."""
    return max(sum(_SPECIAL_CYCLES[i.op] if i.op in SPECIAL else 1 for i in instrs), 1)


@dataclasses.dataclass
class KernelCost:
    name: str
    kind: str
    flops: int
    transcendentals: int
    bytes_read: int
    bytes_written: int

    @property
    def bytes_accessed(self) -> int:
        return self.bytes_read + self.bytes_written

    def as_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "flops": self.flops,
                "transcendentals": self.transcendentals, "bytes accessed": self.bytes_accessed,
                "bytes read": self.bytes_read, "bytes written": self.bytes_written}


def evaluated(f) -> list:
    """The instructions kernel ``f`` computes: its own plus the cheap ones it recomputes."""
    if f.kind == "library":        # reads its operands from memory
        return list(f.roots)
    inside = set(f.instrs)
    out, stack, seen = list(f.instrs), list(f.instrs), set(f.instrs)
    while stack:
        for o in stack.pop().operands:
            if o in seen:
                continue
            seen.add(o)
            if o not in inside and o.op is not Op.PARAMETER and fusion_mod.is_cheap(o):
                out.append(o)
                stack.append(o)
    return out


def instr_cost(i) -> tuple:
    """(flops, transcendentals) of evaluating ``i`` over its whole result."""
    if i.op.kind is Kind.ELEMENTWISE:
        return (0, i.size) if i.op in TRANSCENDENTAL else (i.size, 0)
    if i.op.kind is Kind.REDUCE:
        return max(i.operands[0].size - i.size, 0), 0
    if i.op.kind is Kind.LIBRARY:
        return library_flops(i), 0
    if i.op.kind in (Kind.SCATTER, Kind.SCAN, Kind.SORT):
        return i.operands[0].size, 0
    return 0, 0


def library_flops(i) -> int:
    """A dot or convolution: two flops per multiply-add, as XLA counts them; a
    convolution's gradient makes as many as the convolution itself."""
    if i.op is Op.DOT:
        lhs = i.operands[0]
        return 2 * i.size * (lhs.shape[-2] if i.attrs["transpose_lhs"] else lhs.shape[-1])
    if i.op in (Op.CONV, Op.CONV_BIAS):
        kh, kw, c, _ = i.operands[1].shape
        return 2 * i.size * kh * kw * c
    if i.op is Op.QR:     # Householder (LAPACK's count): 2 l k^2 - 2 k^3 / 3 for R, about as many for Q
        b, m, n = i.operands[0].shape
        k = min(m, n)
        return b * 2 * (2 * max(m, n) * k * k - 2 * k ** 3 // 3)
    if i.op is Op.FFT:        # 5 n log2 n per transform of n complex points (Cooley-Tukey's count)
        n = math.prod(i.attrs["fft_length"])
        return i.shape[0] * 5 * n * max(n.bit_length() - 1, 1)
    if i.op in SOLVER_ATTRS:     # LAPACK's counts: LU 2/3 m^3, Cholesky 1/3 m^3, a solve m^2 per column
        b, m, _ = i.operands[0].shape
        columns = i.operands[1].shape[2] if len(i.operands) > 1 else m
        factor = {Op.TRIANGULAR_SOLVE: 0, Op.CHOLESKY: m ** 3 // 3}.get(i.op, 2 * m ** 3 // 3)
        solve = 2 * m * m * columns if i.op in (Op.TRIANGULAR_SOLVE, Op.MATRIX_SOLVE,
                                                Op.MATRIX_INVERSE) else 0
        return b * (factor + solve)
    if i.op is Op.LU:     # LAPACK's count: 2/3 m^3
        b, m, _ = i.operands[0].shape
        return b * 2 * m ** 3 // 3
    if i.op is Op.MATRIX_SOLVE_LS:   # TF's kernel's count: max(m, n) min(m, n) (min(m, n) + k)
        b, m, n = i.operands[0].shape
        return b * 2 * max(m, n) * min(m, n) * (min(m, n) + i.operands[1].shape[2])
    if i.op in SPECTRAL_ATTRS:   # LAPACK's counts: tridiagonal/bidiagonal reduction and, for
        b, m, n = i.operands[0].shape    # the vectors, their accumulation (about 9 m^3 and 4 m^2 n + 8 m n^2 in all)
        k, vectors = min(m, n), i.attrs.get("compute_v", i.attrs.get("compute_uv"))
        values = 4 * m ** 3 // 3 if i.op is Op.SELF_ADJOINT_EIG else 4 * max(m, n) * k * k - 4 * k ** 3 // 3
        return b * (values + (8 * m ** 3 if i.op is Op.SELF_ADJOINT_EIG else 4 * m * m * n + 8 * m * n * n)
                    * vectors)
    if i.op in CONV3D_OPS or i.op is Op.CONV3D_BIAS:   # 2 flops per filter tap and output, as 2-D
        _, w, y = conv3d_shapes(i)
        return 2 * math.prod(y) * math.prod(w[:4])
    grad = i.operands[1]
    kh, kw, c, _ = i.operands[0].shape if i.op in (Op.CONV_BACKPROP_INPUT,
                                                   Op.DEPTHWISE_BACKPROP_INPUT) else i.shape
    per_output = kh * kw if i.op in (Op.DEPTHWISE_BACKPROP_INPUT, Op.DEPTHWISE_BACKPROP_FILTER) \
        else kh * kw * c
    return 2 * grad.size * per_output


def _nbytes(i) -> int:
    return i.size * i.dtype.itemsize


def kernel_cost(f, plan) -> KernelCost:
    flops = transcendentals = 0
    for i in evaluated(f):
        a, b = instr_cost(i)
        flops, transcendentals = flops + a, transcendentals + b
    read = sum(_nbytes(b) for b in kernel_order.reads(f))
    written = sum(_nbytes(r) * len(plan.slots.get(r, [None])) for r in f.roots)
    if f in plan.scratch:        # partials: written by phase 1, read back by phase 2
        partials = sum(r.size * f.split * r.dtype.itemsize for r in reductions(f))
        read, written = read + partials, written + partials
    return KernelCost(f.name, f.kind, flops, transcendentals, read, written)


def analyze(fusions: list, plan) -> dict:
    """XLA-style totals plus one entry per kernel, in execution order::

        {"flops": ..., "transcendentals": ..., "bytes accessed": ...,
         "kernels": [{"name", "kind", "flops", "transcendentals",
                      "bytes accessed", "bytes read", "bytes written"}, ...]}
    """
    kernels = [kernel_cost(f, plan) for f in fusions]
    return {"flops": sum(k.flops for k in kernels),
            "transcendentals": sum(k.transcendentals for k in kernels),
            "bytes accessed": sum(k.bytes_accessed for k in kernels),
            "kernels": [k.as_dict() for k in kernels]}
