"""Dot rewrites: shapes of library calls that TF's kernels run faster.

``MergeSiblingDots``: matrix products of one operand with several weight matrices
(an attention block's Q, K and V projections, SwiGLU's gate and up projections) are
one product with the weights side by side, sliced after.  oneDNN's GEMM on 2 cores
ran [1024, 256] x [256, 768] in 4.5 ms against 3 x 2.1 ms for the three
[256, 256] products, and [256, 2048] in 11.1 ms against 2 x 5.9 ms (p10 of 60
interleaved runs, TF graph mode; a wider N keeps both cores on full tiles).  XLA's
DotMerger does the same on GPU.  Only weights that are parameters (possibly
reshaped) are merged: their concatenation is a small copy that can run before the
first product, so the merged product takes the first one's place in the schedule
and no order between the products and their users' producers has to change.

``FoldBatchIntoContraction``: a batched dot summed over its batch dim is one dot
whose contraction runs over the batch too.  TF's gradient of ``x @ w`` for a
batched ``x`` [B, T, K] and a matrix ``w`` is ``reduce_sum(x^T @ g, axis=0)``:
B products of [K, T] x [T, N], written as a [B, K, N] temporary (8 MB for the
encoder block's MLP weights), then summed by a column reduction.  With x^T stored
transposed (``transpose_lhs``) and g not, the batches of both operands are
consecutive rows, so reshapes (no data moves) give x as [B*T, K] and g as
[B*T, N], and ``x^T @ g`` over B*T rows is the sum: one matrix product with a
longer contraction, no temporary, no reduction kernel.  This is what XLA's
DotDecomposer would need a layout change for; here the operands are already in
that layout.  Measured in A/B pairs on 2 cores (tools/train_bench.py, the
encoder block's weight gradients [8,128,K] x [8,128,N]): see docs/performance.md.
The sum's order changes (TF adds the B products last); results agree within float
tolerance, as any two GEMM blockings do.
"""
from __future__ import annotations

from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op


class FoldBatchIntoContraction:
    """``reduce_sum(transpose(dot(a, b, transpose_lhs=1, transpose_rhs=0), (1, 2, 0)))``
    over the batch dim, with neither operand broadcast and the dot and transpose read
    by nothing else, becomes ``dot(reshape(a, [B*K, M]), reshape(b, [B*K, N]),
    transpose_lhs=1)``.  The old dot and transpose are left for DCE."""
    name = "fold-batch-into-contraction"

    def run(self, m: Module) -> bool:
        return any([self._run(c) for c in m.computations() + [m]])

    def _run(self, m: Module) -> bool:
        users, outputs = m.users(), set(m.outputs)
        replace, out = {}, []
        for i in m.instrs:
            i.operands = tuple(replace.get(o, o) for o in i.operands)
            folded = _folded(i, users, outputs)
            if folded is not None:
                out.extend(folded)
                replace[i] = folded[-1]
            else:
                out.append(i)
        if not replace:
            return False
        m.instrs = out
        m.outputs = [replace.get(o, o) for o in m.outputs]
        return True


def _source(x: Instr) -> Instr:
    """What a chain of reshapes reshapes: a new reshape reads it directly, since fusion
    reads a library operand in place through one reshape, not through two."""
    while x.op is Op.RESHAPE:
        x = x.operands[0]
    return x


def _only_user(x: Instr, user: Instr, users: dict, outputs: set) -> bool:
    return x not in outputs and users[x] == [user]


def _folded(r: Instr, users: dict, outputs: set) -> list | None:
    """[reshape of a, reshape of b, the dot] replacing reduction ``r``, or None."""
    if r.op is not Op.REDUCE or r.attrs.get("kind") != "sum" or r.attrs.get("ndims") != 1:
        return None
    t = r.operands[0]
    if t.op is not Op.TRANSPOSE or t.attrs["perm"] != (1, 2, 0) or not _only_user(t, r, users, outputs):
        return None
    d = t.operands[0]
    if d.op is not Op.DOT or d.rank != 3 or not _only_user(d, t, users, outputs):
        return None
    if (d.attrs["transpose_lhs"], d.attrs["transpose_rhs"]) != (1, 0):
        return None
    a, b = d.operands
    batch = d.shape[0]
    if a.shape[0] != batch or b.shape[0] != batch:      # a broadcast operand: not a sum of products
        return None
    rows = batch * a.shape[1]
    a2 = Instr(Op.RESHAPE, a.dtype, (rows, a.shape[2]), (_source(a),), name=f"{r.name}.lhs",
               source=d.source)
    b2 = Instr(Op.RESHAPE, b.dtype, (rows, b.shape[2]), (_source(b),), name=f"{r.name}.rhs",
               source=d.source)
    dot = Instr(Op.DOT, d.dtype, r.shape, (a2, b2), {"transpose_lhs": 1, "transpose_rhs": 0},
                name=r.name, source=d.source)
    return [a2, b2, dot]


# Merging stops at this many columns: past it a GEMM is wide enough already, and the
# concatenated weights (a copy per call) grow.
MAX_MERGED_COLUMNS = 4096


class MergeSiblingDots:
    """Rank-2 dots with the same lhs (and ``transpose_lhs``) and parameter rhs with the
    same ``transpose_rhs`` become ``dot(lhs, concat(rhs...))`` and one slice per dot.
    The old dots are left for DCE."""
    name = "merge-sibling-dots"

    def run(self, m: Module) -> bool:
        return any([self._run(c) for c in m.computations() + [m]])

    def _run(self, m: Module) -> bool:
        groups: dict = {}
        for i in m.instrs:
            if _mergeable(i):
                key = (id(i.operands[0]), i.attrs["transpose_lhs"], i.attrs["transpose_rhs"],
                       i.dtype, _rhs_rows(i))
                groups.setdefault(key, []).append(i)
        merged = {}
        for dots in groups.values():
            while len(dots) > 1:
                take, cols = [], 0
                for d in dots:
                    if cols + d.shape[1] <= MAX_MERGED_COLUMNS:
                        take.append(d)
                        cols += d.shape[1]
                dots = [d for d in dots if d not in take]
                if len(take) > 1:
                    merged[take[0]] = (take, _merge(take))
        if not merged:
            return False
        replace, out = {}, []
        for i in m.instrs:
            if i in merged:
                take, new = merged[i]
                out.extend(new)
                replace.update(zip(take, new[-len(take):]))
            i.operands = tuple(replace.get(o, o) for o in i.operands)
            out.append(i)
        m.instrs = out
        m.outputs = [replace.get(o, o) for o in m.outputs]
        return True


def _is_weight(x: Instr) -> bool:
    return _source(x).op is Op.PARAMETER


def _mergeable(i: Instr) -> bool:
    return i.op is Op.DOT and i.rank == 2 and _is_weight(i.operands[1])


def _rhs_rows(d: Instr) -> int:
    """The contraction size (the rhs's dim that is not the result's columns)."""
    return d.operands[1].shape[1 if d.attrs["transpose_rhs"] else 0]


def _merge(dots: list) -> list:
    """[concat of the weights, the merged dot, one slice per dot (in ``dots`` order)]."""
    first = dots[0]
    lhs, tr = first.operands[0], first.attrs["transpose_rhs"]
    rows, dim = first.shape[0], 0 if tr else 1
    out, ws = [], []
    for k, d in enumerate(dots):     # a reshape of a weight may come after the first dot:
        w, base = d.operands[1], _source(d.operands[1])     # read the parameter through a new one
        if base is not w:
            w = Instr(Op.RESHAPE, w.dtype, w.shape, (base,), name=f"{first.name}.w{k}", source=d.source)
            out.append(w)
        ws.append(w)
    cols = sum(d.shape[1] for d in dots)
    wshape = (cols, _rhs_rows(first)) if tr else (_rhs_rows(first), cols)
    cat = Instr(Op.CONCAT, first.dtype, wshape, tuple(ws), {"dim": dim}, name=f"{first.name}.weights",
                source=first.source)
    dot = Instr(Op.DOT, first.dtype, (rows, cols), (lhs, cat), dict(first.attrs),
                name=f"{first.name}.merged", source=first.source)
    out, start = out + [cat, dot], 0
    for d in dots:
        out.append(Instr(Op.SLICE, d.dtype, d.shape, (dot,), {"starts": (0, start), "strides": (1, 1)},
                         name=d.name, source=d.source))
        start += d.shape[1]
    return out
