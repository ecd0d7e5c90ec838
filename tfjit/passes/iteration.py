"""How each kernel iterates, decided after fusion: a loop kernel as one flat array or
by rows; a reduction by output (split into chunks where it has few outputs) or as a
column reduction, its outputs innermost and vectorised where its reads are contiguous
along them (``symbolic_reads``: the index at which each buffer is read, in the names
of the kernel's output and reduced dims).
"""
from __future__ import annotations

import math

from tfjit.ir.indexing import ZERO, operand_index, split_owners
from tfjit.ir.module import Instr
from tfjit.ir.ops import Kind, Op
from tfjit.passes.kernels import FLAT_BLOCK, Fusion, KernelKind, is_cheap, reductions, row_names
from tfjit.passes.own_rows import topk_merges

SPLIT_MIN_ELEMENTS = 1 << 15    # reductions this large with few outputs split into chunks
SPLIT_MAX_OUTPUTS = 8
COLUMN_WHOLE_ROW = 4096         # a column row takes all outputs up to this many (else COLUMN_BLOCK)
COLUMN_SPLIT_ROWS = 8           # column reductions with fewer rows split their first reduced dim
COLUMN_SPLIT_CHUNKS = 16        # ... into at most this many chunks,
COLUMN_CHUNK_MIN = 1 << 14      # ... each reading at least this many elements
COLUMN_ROWS = 4                 # reduced rows per pass over the outputs (1 kept [8192, 2048] at 38%)


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
    """{buffer instr: set of symbolic indices}, read from every root of a loop kernel or
    a reduction (whose roots, sibling reductions included, reduce one shape).

    Indices are tuples of ``d<k>`` (output dims), ``r<k>`` (reduced dims) and
    0, or "opaque" where a mapping needs arithmetic.
    """
    stack = []
    for root in f.roots:
        if root.op.kind is Kind.REDUCE:
            x = root.operands[0]
            stack.append((x, row_names(f.outer) + tuple(f"r{k}" for k in range(x.rank - f.outer))))
        else:       # (a column kernel's elementwise roots: at the point its loops visit)
            stack.append((root, f.elementwise_at or row_names(root.rank)))
    inside, out, seen, sizes = set(f.instrs), {}, set(), {}
    while stack:
        i, idx = stack.pop()
        if (i, idx) in seen:
            continue
        seen.add((i, idx))
        if idx != "opaque":     # each name's range: the size of a dim it indexes
            sizes.update((c, n) for c, n in zip(idx, i.shape) if isinstance(c, str))
        if _buffer(i, inside) or (i.op is Op.RESHAPE and _buffer(i.operands[0], inside)
                                  and split_owners(i.operands[0].shape, i.shape) is None):
            # (a reshape that merges a buffer's dims, passes/collapse.py's: its own index
            # names the buffer's bytes, row-major; one that only splits maps below)
            out.setdefault(i, set()).add(idx)
            continue
        for k, o in enumerate(i.operands):
            if i.op is Op.REDUCE and idx != "opaque":    # one computed where it is read
                extra = i.operands[0].rank - i.rank      # (fusion ``inlined``): dims of its own
                stack.append((o, idx + tuple(f"{i.name}.r{n}" for n in range(extra))))
                continue
            mapped = operand_index(i, k, idx) if idx != "opaque" and i.op.kind is not Kind.REDUCE else None
            if mapped is None and idx != "opaque" and i.op is Op.RESHAPE:
                mapped = _reshape_index(o, i, idx, sizes)
            stack.append((o, mapped if mapped is not None else "opaque"))
    return out


def _buffer(i: Instr, inside: set) -> bool:
    return i.op is Op.PARAMETER or (i not in inside and not is_cheap(i))


def _reshape_index(x: Instr, y: Instr, idx: tuple, sizes: dict) -> tuple | None:
    """x's symbolic index for index ``idx`` of y = reshape(x), in mixed radix: y's index
    as a row-major run of named digits (``sizes``: each name's range; a split dim's
    component is the tuple of its parts, the last innermost) regrouped into x's dims.  A
    digit that straddles two x dims is split in two named digits, ``n>b`` (n // b) and
    ``n%b`` (n % b).  Group normalisation's [B, H, W, G, C/G] view of its operand reads
    channel (g, c); the gradient of a nearest 2x upsampling, [N, 96, 48, 2, C] of a
    [N, 24, 4, 24, 4, C] repeat, reads the repeat at (n, (h>4, h%4), (w>2, (w%2, r)), c).
    None where sizes do not divide (a [2, 3] read as [3, 2]) or a digit is not named."""
    digits = []
    for c, n in zip(idx, y.shape):
        parts = c if isinstance(c, tuple) else (c,)
        if n == 1:
            continue
        if not all(isinstance(p, str) and p in sizes for p in parts) \
                or math.prod(sizes[p] for p in parts) != n:
            return None
        digits += [[p, sizes[p]] for p in parts if sizes[p] > 1]
    out = []
    for n in x.shape:
        got = []
        while n > 1 and digits:
            name, size = digits[0]
            if n % size == 0:           # the whole digit
                got.append(name)
                digits.pop(0)
                n //= size
            elif size % n == 0:         # its high part here, its low part next
                low = size // n
                got.append(f"{name}>{low}")
                digits[0] = [f"{name}%{low}", low]
                sizes[got[-1]], sizes[digits[0][0]] = n, low
                n = 1
            else:
                return None
        if n > 1:
            return None
        out.append(ZERO if not got else got[0] if len(got) == 1 else tuple(got))
    return None if digits else tuple(out)


def _contiguous_along_output(f: Fusion, idxs: list) -> bool:
    """Is every input of this reduction read contiguously along the last output dim, or
    at an index that does not move with it (a per-row statistic broadcast over the
    outputs: layernorm's rsqrt in its scale's gradient), not all of them the latter?"""
    last = f"d{f.outer - 1}"
    invariant = [idx != "opaque" and len(idx) > 0 and not any(_moves_with(c, last) for c in idx)
                 for idx in idxs]
    return bool(idxs) and not all(invariant) and all(
        idx != "opaque" and (len(idx) == 0 or _innermost(idx[-1]) == last) or still
        for idx, still in zip(idxs, invariant))


def _moves_with(c, name: str) -> bool:
    """Does index component c (a name, or a tuple of parts) change with ``name``: is
    it, or one of its parts, that name or a digit of it (``_reshape_index``)?"""
    return any(p == name or isinstance(p, str) and p.startswith((name + ">", name + "%"))
               for p in (c if isinstance(c, tuple) else (c,)))


def _innermost(c):
    """The name a (possibly split: a tuple of parts) index component moves fastest with."""
    return c[-1] if isinstance(c, tuple) else c


def _contiguous_outputs(f: Fusion, idxs: list) -> int:
    """How many outputs a column row finds next to each other in every read that moves
    with them: the trailing output dims whose names end the read's index in order
    (split dims' parts included), the last output dim at least.  Group normalisation's
    [B, G, C/G] statistics of a [B, H, W, C] operand have C outputs side by side, not
    C/G."""
    out, names = f.roots[0].shape, row_names(f.outer)
    runs = []
    for idx in idxs:
        if idx == "opaque" or not idx:
            continue
        flat = [n for c in idx for n in (c if isinstance(c, tuple) else (c,))]
        m = 0
        while m < min(len(names), len(flat)) and flat[-1 - m] == names[-1 - m]:
            m += 1
        if m:                   # (none: the read does not move with the outputs)
            runs.append(math.prod(out[len(out) - m:]))
    return min(runs) if runs else out[-1]


REDUCTIONS = (Op.REDUCE, Op.ARGREDUCE)    # the roots of column and split kernels


def column_candidate(f: Fusion) -> bool:
    """Can this reduction kernel iterate with the last output dim innermost (before any
    reduction is hoisted into it)?"""
    if f.kind != KernelKind.REDUCE or not f.outer or any(r.op not in REDUCTIONS for r in reductions(f)):
        return False
    idxs = [idx for idxs in symbolic_reads(f).values() for idx in idxs]     # walked once
    return _contiguous_along_output(f, idxs) and _contiguous_outputs(f, idxs) >= 16


def choose_iteration(f: Fusion) -> None:
    if f.kind == "sort":
        root = f.roots[0]
        how = "a merge sort of each vector" if topk_merges(root) else f"a heap of the best {root.attrs['k']}"
        f.notes.append(f"{f.name} selects by {how}, in {f.rows} chunks of vectors")
    if f.kind not in ("loop", "reduce"):
        return
    if f.kind == "loop":
        if f.shape and math.prod(f.shape) > 0 and _flat_ok(f):
            f.flat = True
            f.notes.append(f"{f.name} is purely elementwise: iterated as one flat array")
        return
    root = f.roots[0]
    if not f.hoisted and column_candidate(f):
        f.column = True
        out = root.shape
        if math.prod(out[:-1]) == 1 and out[-1] <= COLUMN_WHOLE_ROW:
            # The outputs are one row of the input (a statistic over axis 0): a row of the
            # kernel takes all of them, so each reduced row is read as one contiguous run,
            # and the cores split the reduced rows instead.  Blocks of 512 of a 2048-wide
            # row read 2 KB runs 8 KB apart: 8.9 ms for [8192, 2048], 4.3 ms whole.
            f.column_block = out[-1]
        f.column_rows = COLUMN_ROWS
        f.notes.append(f"{f.name} reduces across rows of contiguous memory: iterated with the "
                       f"last output dim innermost (vectorised over {min(f.column_block, out[-1])} "
                       f"outputs at a time, {f.column_rows} reduced rows per pass)")
        _split_columns(f)
        return
    if root.op in REDUCTIONS and root.size <= SPLIT_MAX_OUTPUTS and not f.hoisted:
        reduced = f.shape[f.outer:]
        total = math.prod(reduced)
        if total >= SPLIT_MIN_ELEMENTS:
            # chunks of at least FLAT_BLOCK elements; with several reduced dims, each
            # chunk is a range of the first (65536 x 64 made 65536 chunks of 64)
            chunks = math.ceil(total / FLAT_BLOCK)
            f.split = min(reduced[0], chunks) if len(reduced) > 1 else chunks
            f.notes.append(f"{f.name} reduces {total} elements to {root.size}: split into "
                           f"{f.split} chunks per output, combined in a second phase")


def _split_columns(f: Fusion) -> None:
    """A column reduction with too few rows to keep every core busy (batch-norm
    statistics: 32 channels over N*H*W) splits its first reduced dim into chunks:
    each row sums its chunk, a second phase adds the chunks."""
    rows = f.rows
    if rows >= COLUMN_SPLIT_ROWS:
        return
    first, total = f.shape[f.outer], math.prod(f.shape)
    chunks = min(first, COLUMN_SPLIT_CHUNKS, total // COLUMN_CHUNK_MIN)
    if chunks >= 2:
        f.split = chunks
        f.notes.append(f"{f.name} has {rows} row(s) for {total} elements: its first reduced dim "
                       f"is split into {chunks} chunks, combined in a second phase")
