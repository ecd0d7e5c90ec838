"""Fusion: group instructions into kernels that each read inputs once.

Mechanism and policy are separate.  The mechanism (``Fusion``) is a set of
instructions computed by one loop nest, its roots (the values it writes to
memory), its iteration space and the reductions it *hoists* (computes once per
row, before the row's inner loop).  The policy (``fuse``) walks the module from
outputs to inputs and puts a producer into its consumers' kernel when all its
consumers are in one kernel and that kernel can compute it; every "no" is
recorded with a reason (``Fusion.notes``), in the spirit of XLA's
FusionDecision.

Two kernel kinds:
* ``loop``   roots share one shape; a parallel loop over rows (all dims but the
             last) and an inner, vectorisable loop over the last dim.
* ``reduce`` roots are reductions of one operand shape; a parallel loop over
             output elements and an inner loop over the reduced dims.

Cheap instructions (constants, iota, data movement of parameters) are never
materialised: every kernel that needs them recomputes them from the source.
"""
from __future__ import annotations

import dataclasses
import math

from tfjit.ir.indexing import operand_index
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Kind, Op

SPLIT_MIN_ELEMENTS = 1 << 15    # reductions this large with few outputs split into chunks
SPLIT_MAX_OUTPUTS = 8
FLAT_BLOCK = 4096               # elements per row of a flattened elementwise kernel
COLUMN_BLOCK = 512              # outputs per row of a column-reduction kernel


@dataclasses.dataclass(eq=False)
class Fusion:
    name: str
    kind: str                       # "loop" | "reduce"
    roots: list
    instrs: list                    # computed inside, roots included (module order)
    shape: tuple                    # iteration space
    outer: int                      # leading dims run by the parallel row loop
    hoisted: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    flat: bool = False              # loop kernel over the flattened shape (pure elementwise)
    split: int = 1                  # reduce kernel: chunks per output element (2 phases when > 1)
    column: bool = False            # reduce kernel: inputs are contiguous along the last output dim


    @property
    def rows(self) -> int:
        if self.flat:
            return math.ceil(math.prod(self.shape) / FLAT_BLOCK)
        if self.column:
            out = self.shape[:self.outer]
            return math.prod(out[:-1]) * math.ceil(out[-1] / COLUMN_BLOCK)
        return math.prod(self.shape[:self.outer]) * self.split

    def __repr__(self) -> str:
        return f"Fusion({self.name}, {self.kind}, roots={self.roots})"


def is_cheap(i: Instr) -> bool:
    """Recomputed wherever used rather than written to memory."""
    if i.op in (Op.CONSTANT, Op.IOTA):
        return True
    if i.op in (Op.BROADCAST, Op.RESHAPE, Op.TRANSPOSE, Op.SLICE, Op.CONVERT):
        return all(o.op is Op.PARAMETER or is_cheap(o) for o in i.operands)
    return False


def _row_names(n: int) -> tuple:
    return tuple(f"d{k}" for k in range(n))


class _Builder:
    """The state of one policy run: which kernel owns which instruction."""

    def __init__(self, m: Module):
        self.m = m
        self.users = m.users()
        self.order = {i: n for n, i in enumerate(m.instrs)}
        self.owner: dict = {}
        self.sym: dict = {}           # instr -> set of symbolic indices it is read at
        self.fusions: list = []

    def start(self, root: Instr, why: str) -> Fusion:
        kind = "reduce" if root.op.kind is Kind.REDUCE else "loop"
        if kind == "reduce":
            operand = root.operands[0]
            shape, outer = operand.shape, root.rank
        else:
            shape, outer = root.shape, max(root.rank - 1, 0)
        f = Fusion(f"fusion.{len(self.fusions)}", kind, [root], [root], shape, outer)
        f.notes.append(f"{root!r} starts a {kind} kernel: {why}")
        self.fusions.append(f)
        self.owner[root] = f
        idx = _row_names(root.rank)
        self.sym[root] = {idx}
        self._propagate(root, f)
        return f

    def _propagate(self, i: Instr, f: Fusion) -> None:
        """Records the symbolic indices at which i's operands are read inside f."""
        for idx in self.sym[i]:
            for k, o in enumerate(i.operands):
                if idx == "opaque":
                    mapped = None
                elif i.op.kind is Kind.REDUCE:
                    extra = i.attrs.get("ndims", 1)
                    mapped = idx + tuple(f"r{o.rank - extra + n}" for n in range(extra))
                else:
                    mapped = operand_index(i, k, idx)
                self.sym.setdefault(o, set()).add(mapped if mapped is not None else "opaque")

    def join(self, i: Instr, f: Fusion) -> None:
        self.owner[i] = f
        f.instrs.append(i)
        self._propagate(i, f)

    def hoistable(self, i: Instr, f: Fusion) -> str | None:
        """None when reduction i can be computed once per row of f, else why not."""
        wanted = _row_names(i.rank)
        if i.rank > f.outer:
            return f"{i!r} has more dims ({i.rank}) than {f.name}'s rows ({f.outer})"
        if self.sym.get(i) != {wanted}:
            return f"{i!r} is read at indices that are not a prefix of {f.name}'s rows"
        return None


def fuse(m: Module) -> list:
    """Partitions the module's non-cheap instructions into kernels, in execution order."""
    b = _Builder(m)
    outputs = set(m.outputs)
    for i in reversed(m.instrs):
        if i.op is Op.PARAMETER or (is_cheap(i) and i not in outputs):
            continue
        if i in outputs:        # checked first: a cheap output's users may be cheap (no kernel)
            b.start(i, "it is a module output")
            continue
        owners = {b.owner[u] for u in b.users[i]}
        if len(owners) != 1:
            b.start(i, f"its users are in {len(owners)} kernels")
            continue
        (f,) = owners
        if i.op.kind is Kind.REDUCE:
            why = b.hoistable(i, f)
            if why:
                b.start(i, why)
                continue
            f.hoisted.insert(0, i)
            f.notes.append(f"{i!r} hoisted into {f.name}: computed once per row")
        b.join(i, f)
    for f in b.fusions:
        f.instrs.sort(key=b.order.get)
        f.hoisted.sort(key=b.order.get)
    fusions = _merge_siblings(b)
    for f in fusions:
        _choose_iteration(f)
    return _schedule(fusions, b.order)


def reads(f: Fusion) -> set:
    """Instructions outside f whose memory f reads (params or other kernels' roots)."""
    inside = set(f.instrs)
    out, stack, seen = set(), list(f.instrs), set()
    while stack:
        i = stack.pop()
        for o in i.operands:
            if o in inside or o in seen:
                continue
            seen.add(o)
            if o.op is Op.PARAMETER or not is_cheap(o):
                out.add(o)
            else:
                stack.append(o)
    return out


def _depends(a: Fusion, b: Fusion, owner: dict) -> bool:
    """True when kernel a (transitively) reads something kernel b writes."""
    stack, seen = [a], set()
    while stack:
        f = stack.pop()
        if f is b:
            return True
        if f in seen:
            continue
        seen.add(f)
        stack.extend(owner[r] for r in reads(f) if r in owner)
    return False


def _merge_siblings(b: _Builder) -> list:
    """Merges loop kernels of one shape that read a common input (multi-output kernels)."""
    fusions = list(b.fusions)
    merged = True
    while merged:
        merged = False
        for x in fusions:
            for y in fusions:
                if x is y or x.kind != "loop" or y.kind != "loop" or x.shape != y.shape:
                    continue
                if x.hoisted or y.hoisted or not (reads(x) & reads(y)):
                    continue
                if _depends(x, y, b.owner) or _depends(y, x, b.owner):
                    continue
                x.roots += y.roots
                x.instrs += [i for i in y.instrs if i not in x.instrs]
                x.notes += y.notes + [f"{y.name} merged into {x.name}: siblings reading a common input"]
                for i in y.instrs:
                    b.owner[i] = x
                fusions.remove(y)
                merged = True
                break
            if merged:
                break
    for f in fusions:
        f.instrs.sort(key=b.order.get)
    return fusions


def _flat_ok(f: Fusion) -> bool:
    """True when every value f evaluates per element is read at the root's own index.

    The walk follows elementwise edges from the roots; what lies behind a broadcast
    of a scalar is read at () whatever the flat index (an RNG key, a seed's Philox
    block), and a rank-1 iota is the flat index itself.  Hoisted reductions need the
    row loop."""
    if f.hoisted:
        return False
    inside, stack, seen = set(f.instrs), list(f.roots), set()
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if i.op in (Op.PARAMETER, Op.CONSTANT) or (i not in inside and not is_cheap(i)):
            continue
        if (i.op is Op.BROADCAST and i.operands[0].rank == 0) or (i.op is Op.IOTA and i.rank == 1):
            continue
        if i.op.kind is not Kind.ELEMENTWISE:
            return False
        stack.extend(i.operands)
    return True


def symbolic_reads(f: Fusion) -> dict:
    """{buffer instr: set of symbolic indices} for a single-root kernel.

    Indices are tuples of ``d<k>`` (output dims), ``r<k>`` (reduced dims) and
    0, or "opaque" where a mapping needs arithmetic.
    """
    root = f.roots[0]
    if root.op.kind is Kind.REDUCE:
        x = root.operands[0]
        start = (x, _row_names(f.outer) + tuple(f"r{k}" for k in range(x.rank - f.outer)))
    else:
        start = (root, _row_names(root.rank))
    inside, out, seen, stack = set(f.instrs), {}, set(), [start]
    while stack:
        i, idx = stack.pop()
        if (i, idx) in seen:
            continue
        seen.add((i, idx))
        if i.op is Op.PARAMETER or (i not in inside and not is_cheap(i)):
            out.setdefault(i, set()).add(idx)
            continue
        for k, o in enumerate(i.operands):
            mapped = operand_index(i, k, idx) if idx != "opaque" and i.op.kind is not Kind.REDUCE else None
            stack.append((o, mapped if mapped is not None else "opaque"))
    return out


def _contiguous_along_output(f: Fusion) -> bool:
    """Is every input of this reduction read contiguously along the last output dim?"""
    last = f"d{f.outer - 1}"
    reads_ = symbolic_reads(f)
    return bool(reads_) and all(idx != "opaque" and (len(idx) == 0 or idx[-1] == last)
                                for idxs in reads_.values() for idx in idxs)


def _choose_iteration(f: Fusion) -> None:
    if f.kind == "loop":
        if f.shape and math.prod(f.shape) > 0 and _flat_ok(f):
            f.flat = True
            f.notes.append(f"{f.name} is purely elementwise: iterated as one flat array")
        return
    root = f.roots[0]
    if root.op is Op.REDUCE and not f.hoisted and f.outer and root.shape[-1] >= 16 \
            and _contiguous_along_output(f):
        f.column = True
        f.notes.append(f"{f.name} reduces across rows of contiguous memory: iterated with the "
                       f"last output dim innermost (vectorised over {COLUMN_BLOCK} outputs at a time)")
        return
    if root.op is Op.REDUCE and root.size <= SPLIT_MAX_OUTPUTS and not f.hoisted:
        reduced = f.shape[f.outer:]
        total = math.prod(reduced)
        if total >= SPLIT_MIN_ELEMENTS:
            f.split = reduced[0] if len(reduced) > 1 else math.ceil(total / FLAT_BLOCK)
            f.notes.append(f"{f.name} reduces {total} elements to {root.size}: split into "
                           f"{f.split} chunks per output, combined in a second phase")


def _schedule(fusions: list, order: dict) -> list:
    owner = {r: f for f in fusions for r in f.roots}
    done, out = set(), []

    def visit(f):
        if f in done:
            return
        done.add(f)
        for r in sorted(reads(f), key=order.get):
            if r in owner:
                visit(owner[r])
        out.append(f)

    for f in sorted(fusions, key=lambda f: min(order[r] for r in f.roots)):
        visit(f)
    return out
