"""Transposes that cancel: elementwise work done in the operand's own layout.

TF computes a softmax (or log-softmax) over a non-last axis as a transpose that
moves the axis last, the softmax, and the inverse transpose (``_wrap_2d_function``
in nn_ops.py).  Lowered, that is

    t = transpose(x, p)     m = reduce_max(t)     e = exp(t - broadcast(m))
    s = reduce_sum(e)       y = transpose(e * broadcast(1 / s), inverse(p))

and every kernel between the two transposes walks x in the transposed order: for
softmax over axis 0 of a [4096, 1024] matrix each row of t reads 4096 elements 4 KB
apart (36.5 ms, TF graph 8.0, XLA 6.3).  The same values in x's layout are

    m = reduce_max(t)       e' = exp(x - broadcast'(m))
    s = reduce_sum(transpose(e', p))        y = e' * broadcast'(1 / s)

where the reductions read x and e' as column reductions (vectorised along x's
contiguous dim) and y needs no transpose at all.  ``CancelTransposes`` makes that
rewrite: starting from ``t = transpose(x, p)`` it follows the elementwise
instructions that read t (and values so derived), each of whose other operands can
be had in x's layout: a broadcast (its dims mapped through p; where they would not
stay increasing, its operand reordered first), a constant (its value transposed), a
transpose by the same p (its operand: the incoming gradient of a softmax's backward
pass), or an elementwise value of such operands, which joins the region.  The
users where the region ends get the value in the order they read it: a reduction
reads ``transpose(v', p)``, or, where the dims it keeps would be out of x's order
(softmax over the channels of NCHW swaps dims 1 and 3), reduces in x's order and
reorders its small result; a transpose reads v' under the composed permutation, or
v' itself where the two cancel.  Done only where a transpose is reached (something
cancels or composes); where the region would end anywhere else (an output, a dot, a
movement op) nothing changes, since those would read a transposed value as before
and the rewrite would only move the work.

Measured (2026-12-06, 2 cores, medians of 20, old and new code in turn): softmax
over axis 1 of [64, 512, 64] 5.3 -> 1.7 ms (TF graph 2.5-3.1), over axis 0 of
[4096, 1024] 27.7 -> 5.1 (graph 7.7), its gradient over axis 1 11.4 -> 4.2 (graph
9.4), over the channels of [16, 128, 56, 56] 16.5 -> 10.7 (graph 14.5-16.8).
"""
from __future__ import annotations

import heapq
import math

import numpy as np

from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Kind, Op
from tfjit.passes.simplify import substitute


PULL_DEPTH = 8      # elementwise levels outside a region that may join it


class CancelTransposes:
    """Rebuilds the elementwise region below ``transpose(x, p)`` in x's layout where it
    ends in reductions and transposes, at least one transpose (module docstring)."""
    name = "cancel-transposes"
    ROUNDS = 4

    def run(self, m: Module) -> bool:
        return any([self._run(c) for c in m.computations() + [m]])

    def _run(self, c: Module) -> bool:
        """Rounds over the transposes until one changes nothing (at most ROUNDS): a
        rewrite can leave a statistic's reordering and its inverse, taken in the next
        round, around the statistic's own elementwise work (1 / sum)."""
        changed = False
        if not any(i.op is Op.TRANSPOSE for i in c.instrs):
            return False
        for _ in range(self.ROUNDS):
            index, again = _Index(c), False
            for t in [i for i in c.instrs if i.op is Op.TRANSPOSE]:
                if t in index.pos:      # not dropped by an earlier rewrite of this round
                    region = _region(index, t, set(c.outputs))
                    if region is not None:
                        _rewrite(c, t, region)
                        again, index = True, _Index(c)
            changed |= again
            if not again:
                break
        return changed


class _Index:
    """Positions and live users of a computation's instructions, built once per walk
    (and again after a rewrite, which is rare): a walk looks at every transpose.  A
    dead user (CSE's leftovers, before DCE) neither ends a region nor is reached."""

    def __init__(self, c: Module):
        self.pos = {i: k for k, i in enumerate(c.instrs)}
        self.users = c.live_users()


def _inverse(p) -> tuple:
    inv = [0] * len(p)
    for i, d in enumerate(p):
        inv[d] = i
    return tuple(inv)


def _laid_out(o: Instr, p: tuple) -> bool:
    """Whether a non-region operand of a region instruction can be had in the
    untransposed layout: a constant (its value transposed), a broadcast (its dims
    mapped, its operand transposed where they would not stay increasing), or a
    transpose by the same permutation (its operand)."""
    if o.op is Op.CONSTANT:
        return o.value.size == o.size
    if o.op is Op.TRANSPOSE:
        return o.attrs["perm"] == p
    return o.op is Op.BROADCAST


def _region(index: _Index, t: Instr, outputs: set) -> list | None:
    """The values of the region below t, in instruction order (t first), or None where
    the rewrite does not apply: an exit other than a reduction or a transpose, an
    operand that cannot be laid out like x, or no transpose reached.  Candidates are
    taken in instruction order (a heap of positions; every user comes after what it
    reads), so an instruction's operands are settled before it is looked at."""
    p = t.attrs["perm"]
    region, heap, queued = {t}, [], set()

    def queue(v):
        for u in index.users[v]:
            if u not in queued:
                queued.add(u)
                heapq.heappush(heap, (index.pos[u], id(u), u))

    def pulled(o, into: set, depth: int = 0) -> bool:
        """Whether o is in the region or laid out, or an elementwise value of such
        operands, which then joins ``into`` (the subtract of ``g^T - broadcast(s)``
        in a softmax's gradient, whose operands are both outside the region); up to
        PULL_DEPTH deep (a long chain outside stays outside, and Python's stack
        bounded)."""
        if o in region or o in into or _laid_out(o, p):
            return True
        if o.op.kind is Kind.ELEMENTWISE and depth < PULL_DEPTH \
                and all(pulled(q, into, depth + 1) for q in o.operands):
            into.add(o)
            return True
        return False
    queue(t)
    while heap:
        *_, i = heapq.heappop(heap)
        joined: set = set()
        if i.op.kind is Kind.ELEMENTWISE and all(pulled(o, joined) for o in i.operands):
            region |= joined | {i}
            for v in joined | {i}:
                queue(v)
    order = sorted(region, key=index.pos.__getitem__)
    reached = False
    for v in order:
        if v in outputs:
            return None
        for u in index.users[v]:
            if u.op is Op.TRANSPOSE:
                reached = True
            elif u not in region and u.op.kind is not Kind.REDUCE:
                return None
    return order if reached else None


def _rewrite(c: Module, t: Instr, order: list) -> None:
    """Builds the region in x's layout and points its exits at it (module docstring)."""
    x, p = t.operands[0], t.attrs["perm"]
    inv = _inverse(p)
    made = {t: x}               # region value -> the same value in x's layout
    transposed: dict = {}       # (region value, perm) -> transpose(made[v], perm)
    replace: dict = {}
    out = []

    def operand(o: Instr) -> Instr:
        if o in made:
            return made[o]
        if o.op is Op.TRANSPOSE:
            return o.operands[0]
        if o.op is Op.CONSTANT:
            k = Instr(Op.CONSTANT, o.dtype, x.shape, value=np.ascontiguousarray(
                np.transpose(o.value.reshape(o.shape), inv)), name=f"{o.name}.x", source=o.source)
            out.append(k)
            return k
        a, dims = o.operands[0], [p[d] for d in o.attrs["dims"]]
        order = sorted(range(len(dims)), key=dims.__getitem__)
        if order != list(range(len(dims))):       # a's dims in x's order first
            a = Instr(Op.TRANSPOSE, a.dtype, tuple(a.shape[k] for k in order), (a,),
                      {"perm": tuple(order)}, name=f"{a.name}.x", source=a.source)
            out.append(a)
        k = Instr(Op.BROADCAST, o.dtype, x.shape, (a,), {"dims": tuple(sorted(dims))},
                  name=f"{o.name}.x", source=o.source)
        out.append(k)
        return k

    def seen(v: Instr, perm: tuple) -> Instr:
        """made[v] as a reduction reads it: transposed by perm (t itself for p)."""
        if v is t and perm == p:
            return t
        if (v, perm) not in transposed:
            transposed[v, perm] = Instr(Op.TRANSPOSE, v.dtype, tuple(x.shape[d] for d in perm),
                                        (made[v],), {"perm": perm}, name=f"{v.name}.t",
                                        source=v.source)
            out.append(transposed[v, perm])
        return transposed[v, perm]

    region = set(order)
    for i in c.instrs:
        i.operands = tuple(replace.get(o, o) for o in i.operands)
        if i in region and i is not t:
            made[i] = Instr(i.op, i.dtype, x.shape, tuple(operand(o) for o in i.operands),
                            dict(i.attrs), name=f"{i.name}.x", source=i.source)
            out.append(made[i])
        elif i.op.kind is Kind.REDUCE and i.operands[0] in region:
            v, n = i.operands[0], i.attrs.get("ndims", 1)
            kept, gone = p[:len(p) - n], p[len(p) - n:]
            if list(kept) == sorted(kept):
                i.operands = (seen(v, p),)
            else:   # kept dims out of x's order: reduce in x's order, reorder the result
                at_x = tuple(sorted(kept))
                r = Instr(i.op, i.dtype, tuple(x.shape[d] for d in at_x), (seen(v, at_x + gone),),
                          dict(i.attrs), name=f"{i.name}.x", source=i.source)
                back = Instr(Op.TRANSPOSE, i.dtype, i.shape, (r,),
                             {"perm": tuple(at_x.index(d) for d in kept)}, name=i.name,
                             source=i.source)
                out.extend([r, back])
                replace[i] = back
                continue
        elif i.op is Op.TRANSPOSE and i.operands[0] in region and i not in region:
            v = i.operands[0]
            q = tuple(p[d] for d in i.attrs["perm"])
            if q == tuple(range(len(q))):
                replace[i] = made[v]
                continue
            i.operands, i.attrs = (made[v],), {**i.attrs, "perm": q}
        out.append(i)
    c.instrs = out
    c.outputs = [replace.get(o, o) for o in c.outputs]


class ScatterBetweenTransposes:
    """A segment sum along a middle dim, done where the values lie.

    TF's gradient of a gather along axis k > 0 (``_GatherV2Grad``) moves dim k of the
    incoming gradient g first, sums segments of its rows and moves the result's first
    dim back:

        t = transpose(g, (k, 0, .., k-1, k+1, ..))      s = scatter(reshape(t, [N, C]), ids)
        y = transpose(reshape(s, [S] + t.shape[1:]), inverse)

    Both transposes are passes over memory of their own (y's, 32 MB for the gradient
    of a gather from [64, 1024, 128]), and the scatter reads each row of the first one
    B = prod(g.shape[k+1:]) floats at a time through a division per element, which
    keeps its column loop scalar.  The same sums are A = prod(g.shape[:k]) scatters
    side by side of g read as [A, N, B] (``Module.scatter`` on rank 3): each adds
    contiguous rows of B into a result already in y's layout,

        y = reshape(scatter(reshape(g, [A, N, B]), ids), y.shape)

    in the same order of ids, so every sum is TF's, bit for bit.  Measured
    (2026-12-07, AMD EPYC Zen 4, 2 cores, tools/op_sweep.py): the gradient of a
    gather of 512 of [64, 1024, 128] along axis 1, 9.6 -> 1.9 ms (XLA 6.1, graph 9.5)."""
    name = "scatter-between-transposes"

    def run(self, m: Module) -> bool:
        return any([self._run(c) for c in m.computations() + [m]])

    @staticmethod
    def _run(c: Module) -> bool:
        users, outputs = c.live_users(), set(c.outputs)
        found = {}      # the transpose back -> the scatter it ends
        for s in c.instrs:
            y = _scatter_sandwich(s, users, outputs)
            if y is not None:
                found[y] = s
        return bool(found) and substitute(c, lambda i: _side_by_side(found[i], i) if i in found else None)


def _side_by_side(s: Instr, y: Instr) -> list:
    """The instructions replacing transpose y: g read as [A, N, B], A scatters of it by
    s's ids, read as y's shape (each reshape only where the shapes differ)."""
    t = s.operands[0].operands[0]
    g, k = t.operands[0], t.attrs["perm"][0]
    rows = (math.prod(g.shape[:k]), g.shape[k], math.prod(g.shape[k + 1:]))
    made, data = [], g
    if g.shape != rows:
        data = Instr(Op.RESHAPE, g.dtype, rows, (g,), name=f"{g.name}.rows", source=t.source)
        made.append(data)
    made.append(Instr(Op.SCATTER, s.dtype, (rows[0], s.shape[0], rows[2]), (data, s.operands[1]),
                      dict(s.attrs), name=f"{s.name}.x", source=s.source))
    if y.shape != made[-1].shape:
        made.append(Instr(Op.RESHAPE, y.dtype, y.shape, (made[-1],), name=f"{y.name}.x", source=y.source))
    return made


def _scatter_sandwich(s: Instr, users: dict, outputs: set) -> Instr | None:
    """The transpose y that ends ``ScatterBetweenTransposes``'s pattern around the
    scatter s, or None: s rank 2 without an initial value, its data a reshape of a
    transpose moving one dim k > 0 first (the rest in order), s read only by a reshape
    back to the transposed dims, that read only by the inverse transpose; nothing of
    zero size (an empty scatter still checks its ids)."""
    if s.op is not Op.SCATTER or s.rank != 2 or len(s.operands) != 2 or s in outputs:
        return None
    d = s.operands[0]
    t = d.operands[0] if d.op is Op.RESHAPE else None
    if t is None or t.op is not Op.TRANSPOSE or not t.size or not s.size:
        return None
    p = t.attrs["perm"]
    k = p[0]
    if k == 0 or p[1:] != tuple(q for q in range(t.rank) if q != k):
        return None
    (r,) = users[s] if len(users[s]) == 1 else (None,)
    if r is None or r.op is not Op.RESHAPE or r in outputs or r.shape != (s.shape[0],) + t.shape[1:]:
        return None
    (y,) = users[r] if len(users[r]) == 1 else (None,)
    if y is None or y.op is not Op.TRANSPOSE or y.attrs["perm"] != _inverse(p):
        return None
    return y
