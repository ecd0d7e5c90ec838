"""What a kernel is: the data model the fusion pass (passes/fusion.py) fills in and
buffer assignment, scheduling and codegen read.

``Fusion`` is one kernel: its kind, its roots (the values it writes) and the
instructions it computes, its iteration space and how it iterates (set by
passes/iteration.py).  ``is_cheap`` says which values no kernel writes (every kernel
that needs them recomputes them from memory).  The kinds and the policy that makes
kernels are described in passes/fusion.py.
"""
from __future__ import annotations

import dataclasses
import enum
import math

from tfjit.ir.module import Instr
from tfjit.ir.ops import Kind, Op
from tfjit.passes.own_rows import COLUMN_BLOCK, own_kernel_rows

FLAT_BLOCK = 4096               # elements per row of a flattened elementwise kernel


class KernelKind(str, enum.Enum):
    """What a kernel is (passes/fusion.py's docstring describes each).  Codegen dispatches on it through one table,
    ``codegen/llvm_cpu.py``'s EMITTERS; a str enum, so a kind prints, and compares
    equal to, its name ("loop")."""
    LOOP = "loop"
    REDUCE = "reduce"
    LIBRARY = "library"
    UPDATE = "update"
    WHILE = "while"
    CONDITIONAL = "conditional"
    SCATTER = "scatter"
    SCAN = "scan"
    SORT = "sort"

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__


@dataclasses.dataclass(eq=False)
class Fusion:
    name: str
    kind: KernelKind
    roots: list
    instrs: list                    # computed inside, roots included (module order)
    shape: tuple                    # iteration space
    outer: int                      # leading dims run by the parallel row loop
    hoisted: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    flat: bool = False              # loop kernel over the flattened shape (pure elementwise)
    split: int = 1                  # reduce kernel: chunks per output element (2 phases when > 1)
    column: bool = False            # reduce kernel: inputs are contiguous along the last output dim
    column_block: int = COLUMN_BLOCK   # column kernel: outputs per row
    column_rows: int = 1               # ... and reduced rows per pass over them
    # column kernel with elementwise roots (a producer merged in): the index, in the
    # names of its output and reduced dims, at which it computes and writes them
    elementwise_at: tuple = ()
    aliases: dict = dataclasses.field(default_factory=dict)   # library: reshape -> its operand
    called: list = dataclasses.field(default_factory=list)    # while/conditional: [[Fusion]] per computation

    @property
    def rows(self) -> int:
        if self.kind in SINGLE_ROW:
            return 1
        if self.kind in OWN_KERNEL.values():
            return own_kernel_rows(self)
        if self.flat:
            return math.ceil(math.prod(self.shape) / FLAT_BLOCK)
        if self.column:
            out = self.shape[:self.outer]
            return math.prod(out[:-1]) * math.ceil(out[-1] / self.column_block) * self.split
        return math.prod(self.shape[:self.outer]) * self.split

    def __repr__(self) -> str:
        return f"Fusion({self.name}, {self.kind}, roots={self.roots})"


CONTROL = (KernelKind.WHILE, KernelKind.CONDITIONAL)
SINGLE_ROW = (KernelKind.LIBRARY, KernelKind.UPDATE) + CONTROL    # run as one row (one call)


def in_memory(i: Instr) -> bool:
    """Values that are buffers without a kernel of their own: parameters and the
    elements of while/conditional results."""
    return i.op in (Op.PARAMETER, Op.GET_TUPLE_ELEMENT)


# Instruction kinds that root a kernel of their own (with their operands fused in).
OWN_KERNEL = {Kind.SCATTER: KernelKind.SCATTER, Kind.SCAN: KernelKind.SCAN, Kind.SORT: KernelKind.SORT}


# integer scalar arithmetic recomputed wherever read (no division: it checks its divisor)
INDEX_ARITHMETIC = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.MAX, Op.MIN, Op.NEG, Op.SELECT, Op.CONVERT,
                              Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.AND, Op.OR, Op.NOT})


def is_cheap(i: Instr) -> bool:
    """Recomputed wherever used rather than written to memory."""
    if i.op in (Op.CONSTANT, Op.IOTA):
        return True
    if i.rank == 0 and i.op in INDEX_ARITHMETIC and (i.dtype.is_int or i.dtype.kind == "bool"):
        # A scalar index, such as a dynamic slice's start: a recurrent layer's gradient
        # reads each step's saved activations at the counter minus one.  As a kernel's
        # root, the slice it starts could not be recomputed, and its window was copied
        # wherever two kernels read it (2 MB a gate a step in ConvLSTM2D(64)).
        return all(in_memory(o) or is_cheap(o) for o in i.operands)
    if i.op in (Op.BROADCAST, Op.RESHAPE, Op.TRANSPOSE, Op.SLICE, Op.CONVERT, Op.DYNAMIC_SLICE):
        return all(in_memory(o) or is_cheap(o) for o in i.operands)
    return False


def reductions(f: Fusion) -> list:
    """A reduce kernel's reductions: its roots but the elementwise ones a column kernel
    writes along the way (``Fusion.elementwise_at``), which follow them."""
    return [r for r in f.roots if r.op.kind is Kind.REDUCE]


def row_names(n: int) -> tuple:
    """The symbolic names of an n-dim kernel index: d0, d1, ..."""
    return tuple(f"d{k}" for k in range(n))
