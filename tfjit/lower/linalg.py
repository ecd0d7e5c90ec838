"""Lowerings of TF's matrix products: MatMul, BatchMatMul(V2/V3), Einsum; MatrixBandPart
and TridiagonalMatMul (elementwise, fused).

Each becomes one IR ``dot`` (a runtime-library call that runs TF's MatMul or
BatchMatMulV2 kernel) on operands arranged as ``[batch, rows, contraction]`` /
``[batch, contraction, cols]``; the rearranging transposes and reshapes are ordinary IR movement that
fusion folds into the producers' kernels (or, for a reshape, reads in place).
Transposed operands (``transpose_a``, ``adj_x``) are passed as flags, not moved.
Half-precision operands compute in f32, as TF's CPU kernels accumulate in f32.
"""
from __future__ import annotations

import dataclasses
import math
import string

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.lower import registry
from tfjit.lower.registry import Unsupported, broadcast_shapes, broadcast_to, register

_DTYPES = (dt.F16, dt.BF16, dt.F32, dt.F64)


@register("MatMul", dtypes=_DTYPES, half_in_f32=True)
def _matmul(ctx):
    a, b = ctx.inputs
    if a.rank != 2 or b.rank != 2:
        raise Unsupported(f"MatMul needs matrices, got ranks {a.rank} and {b.rank}")
    return ctx.m.dot(a, b, bool(ctx.attr("transpose_a")), bool(ctx.attr("transpose_b")))


@register("SparseMatMul", dtypes=(dt.F32, dt.BF16), type_attr="Ta")
def _sparse_matmul(ctx):
    """SparseMatMul: MatMul of f32 (or bfloat16, widened) matrices into f32; the
    ``a_is_sparse``/``b_is_sparse`` attributes only pick TF's algorithm."""
    a, b = (ctx.m.convert(x, dt.F32) if x.dtype is dt.BF16 else x for x in ctx.inputs)
    if a.dtype is not dt.F32 or b.dtype is not dt.F32:
        raise Unsupported(f"SparseMatMul of {a.dtype} and {b.dtype}")
    return _matmul(dataclasses.replace(ctx, inputs=[a, b]))


@register("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", dtypes=_DTYPES, half_in_f32=True)
def _batch_matmul(ctx):
    a, b = ctx.inputs
    if ctx.node.op == "BatchMatMulV3":
        out = ctx.attr("Tout")
        if out is not None and out.ir is not ctx.attr("Ta").ir:
            raise Unsupported("BatchMatMulV3 with an output type other than its inputs'")
    if a.rank < 2 or b.rank < 2:
        raise Unsupported(f"{ctx.node.op} needs rank >= 2 operands, got {a.rank} and {b.rank}")
    if ctx.node.op == "BatchMatMul" and a.shape[:-2] != b.shape[:-2]:
        raise Unsupported("BatchMatMul (v1) needs equal batch dimensions")
    return batched_dot(ctx.m, a, b, bool(ctx.attr("adj_x")), bool(ctx.attr("adj_y")))


def batched_dot(m: Module, a: Instr, b: Instr, ta: bool = False, tb: bool = False) -> Instr:
    """``a @ b`` over broadcast leading batch dims (numpy's matmul), as one dot."""
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    rows, cols = (a.shape[-1] if ta else a.shape[-2]), (b.shape[-2] if tb else b.shape[-1])
    if not batch:
        return m.dot(a, b, ta, tb)
    n = math.prod(batch)
    # Not flattened into one [B*T, K] x [K, N] product where b is one matrix (as XLA
    # does): with oneDNN's kernels that measured 1.00-1.01x on the encoder block and
    # SwiGLU forwards and 0.89-0.92x on SwiGLU's train step (p10, shuffled rounds,
    # 2026-12-04).  ONEDNN_VERBOSE shows TF's MatMul on oneDNN's sgemm API and its
    # batched products on oneDNN's brgemm matmul.
    out = m.dot(_as_batch(m, a, batch, n), _as_batch(m, b, batch, n), ta, tb)
    return m.reshape(out, batch + (rows, cols))


def _as_batch(m: Module, x: Instr, batch: tuple, n: int) -> Instr:
    """x's batch dims flattened to one: [1, r, c] when it has no real batch (the dot
    broadcasts it), else [n, r, c] (broadcast first if x has fewer batch elements)."""
    own = x.shape[:-2]
    if math.prod(own) == 1:
        return m.reshape(x, (1,) + x.shape[-2:])
    if own != batch:
        aligned = (1,) * (len(batch) - len(own)) + own
        x = m.broadcast(m.reshape(x, aligned + x.shape[-2:]), batch + x.shape[-2:],
                        range(len(batch) + 2))
    return m.reshape(x, (n,) + x.shape[-2:])


# -- Einsum ---------------------------------------------------------------------------

@register("Einsum", dtypes=_DTYPES, half_in_f32=True)
def _einsum(ctx):
    equation = ctx.attr("equation")
    equation = registry.text(equation)
    inputs, out = _parse_equation(equation, [x.rank for x in ctx.inputs])
    if len(inputs) == 1:
        return _einsum_one(ctx.m, ctx.inputs[0], inputs[0], out)
    if len(inputs) != 2:
        raise Unsupported(f"Einsum with {len(inputs)} operands")
    return _einsum_two(ctx.m, ctx.inputs, inputs, out)


def _parse_equation(equation: str, ranks: list) -> tuple:
    """(['ij', 'jk'], 'ik') with '...' expanded to letters no term uses."""
    if "->" not in equation:
        raise Unsupported(f"Einsum equation {equation!r} without '->' (implicit output)")
    lhs, out = equation.replace(" ", "").split("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise Unsupported(f"Einsum equation {equation!r} names {len(terms)} operands, got {len(ranks)}")
    spare = [c for c in string.ascii_letters if c not in equation]
    ellipsis = ""
    expanded = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            k = rank - (len(term) - 3)
            if k < 0:
                raise Unsupported(f"Einsum term {term!r} is longer than its operand's rank {rank}")
            if len(ellipsis) < k:
                ellipsis = "".join(spare[:k])
            term = term.replace("...", ellipsis[len(ellipsis) - k:])
        if len(term) != rank or len(set(term)) != len(term):
            raise Unsupported(f"Einsum term {term!r} does not match rank {rank} "
                              "(repeated indices are not compiled)")
        expanded.append(term)
    out = out.replace("...", ellipsis)
    if len(set(out)) != len(out) or any(c not in "".join(expanded) for c in out):
        raise Unsupported(f"Einsum output {out!r} is invalid")
    return expanded, out


def _sum_unused(m: Module, x: Instr, term: str, keep: str) -> tuple:
    """Sums away indices of x that neither the other operand nor the output use."""
    drop = [c for c in term if c not in keep]
    if not drop:
        return x, term
    kept = [c for c in term if c in keep]
    x = m.transpose(x, [term.index(c) for c in kept + drop])
    shape = x.shape
    x = m.reshape(x, shape[:len(kept)] + (math.prod(shape[len(kept):]),))
    return m.reduce(x, "sum", 1), "".join(kept)


def _einsum_one(m: Module, x: Instr, term: str, out: str) -> Instr:
    x, term = _sum_unused(m, x, term, out)
    return m.transpose(x, [term.index(c) for c in out])


def _einsum_two(m: Module, xs: list, terms: list, out: str) -> Instr:
    (a, b), (ta, tb) = xs, terms
    a, ta = _sum_unused(m, a, ta, tb + out)
    b, tb = _sum_unused(m, b, tb, ta + out)
    batch = [c for c in out if c in ta and c in tb]
    contract = [c for c in ta if c in tb and c not in out]
    rows = [c for c in out if c in ta and c not in tb]
    cols = [c for c in out if c in tb and c not in ta]
    size = {**dict(zip(ta, a.shape)), **dict(zip(tb, b.shape))}
    for c in set(ta) & set(tb):
        if dict(zip(ta, a.shape))[c] != dict(zip(tb, b.shape))[c]:
            raise Unsupported(f"Einsum index {c!r} has different sizes in its operands")

    def arrange(x, term, first, second):
        x = m.transpose(x, [term.index(c) for c in batch + first + second])
        dims = (math.prod(size[c] for c in batch), math.prod(size[c] for c in first),
                math.prod(size[c] for c in second))
        return m.reshape(x, dims)

    product = m.dot(arrange(a, ta, rows, contract), arrange(b, tb, contract, cols))
    product = m.reshape(product, tuple(size[c] for c in batch + rows + cols))
    order = batch + rows + cols
    return m.transpose(product, [order.index(c) for c in out])


@register("MatrixBandPart", dtypes=registry.ALL)
def _band_part(ctx):
    """Keeps x[..., i, j] where (lower < 0 or i - j <= lower) and (upper < 0 or
    j - i <= upper), else 0: index comparisons in the consumer's loop.  The band
    limits may be run-time values."""
    x, lower, upper = ctx.inputs
    if x.rank < 2:
        raise Unsupported(f"MatrixBandPart needs a matrix, got rank {x.rank}")
    m, shape, t = ctx.m, x.shape, lower.dtype
    for limit, what, n in ((lower, "num_lower", shape[-2]), (upper, "num_upper", shape[-1])):
        if limit.op is Op.CONSTANT and int(limit.value) > n:      # TF's check and words
            raise Unsupported(f"{what} must be negative or less or equal to number of "
                              f"{'rows' if what == 'num_lower' else 'columns'} ({n}) got: "
                              f"{int(limit.value)}")
    rows, cols = m.iota(t, shape, x.rank - 2), m.iota(t, shape, x.rank - 1)
    zero = broadcast_to(m, m.scalar(0, t), shape)

    def within(limit: Instr, a: Instr, b: Instr) -> Instr:
        limit = broadcast_to(m, limit, shape)
        return m.elementwise(Op.OR, m.elementwise(Op.LT, limit, zero),
                             m.elementwise(Op.LE, m.elementwise(Op.SUB, a, b), limit))
    keep = m.elementwise(Op.AND, within(lower, rows, cols), within(upper, cols, rows))
    return m.elementwise(Op.SELECT, keep, x, broadcast_to(m, m.scalar(0, x.dtype), shape))


@register("TridiagonalMatMul", dtypes=(dt.F32, dt.F64))
def _tridiagonal_matmul(ctx):
    """out[i] = maindiag[i] * rhs[i] + subdiag[i] * rhs[i-1] + superdiag[i] * rhs[i+1],
    rows of [..., M, N]: shifted reads, one fused loop.  The terms are added in TF's
    kernel's order (main, then sub, then super), and the first row gets no sub term
    and the last no super term at all (adding a zero would turn -0 into +0, and
    subdiag[0] or superdiag[M-1] being inf or NaN must not matter), as TF's.  Batch
    dims must be equal (TF's kernel does not broadcast them either)."""
    m, (sup, main, sub, rhs) = ctx.m, ctx.inputs
    if rhs.rank < 2:
        raise Unsupported(f"TridiagonalMatMul needs rhs of rank >= 2, got {rhs.rank}")
    batch, (rows, cols) = rhs.shape[:-2], rhs.shape[-2:]
    for x, what in ((sup, "superdiag"), (main, "maindiag"), (sub, "subdiag")):
        if x.shape != batch + (1, rows):
            raise Unsupported(f"TridiagonalMatMul: {what} must have shape "
                              f"{list(batch + (1, rows))} for rhs {list(rhs.shape)}, got {list(x.shape)}")

    def column(d):          # [..., 1, M] -> [..., M, N]
        d = m.reshape(d, batch + (rows,))
        return m.broadcast(d, rhs.shape, range(len(batch) + 1))

    def rows_of(x, start, n):
        return m.slice(x, (0,) * len(batch) + (start, 0), batch + (n, cols))
    out = m.elementwise(Op.MUL, column(main), rhs)
    if rows < 2:
        return out
    lower = m.elementwise(Op.MUL, rows_of(column(sub), 1, rows - 1), rows_of(rhs, 0, rows - 1))
    out = m.concat([rows_of(out, 0, 1), m.elementwise(Op.ADD, rows_of(out, 1, rows - 1), lower)],
                   len(batch))
    upper = m.elementwise(Op.MUL, rows_of(column(sup), 0, rows - 1), rows_of(rhs, 1, rows - 1))
    return m.concat([m.elementwise(Op.ADD, rows_of(out, 0, rows - 1), upper), rows_of(out, rows - 1, 1)],
                    len(batch))
