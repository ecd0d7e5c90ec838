"""What a runtime-library call reads in place rather than as a copy.

A library kernel (a dot, a convolution, its gradients) hands TF's kernel dense
buffers.  Fusion gives an operand a kernel of its own ("an operand of a
runtime-library call") unless the call can read it where it lies:

* a reshape of a buffer: a row-major reshape moves no data;
* a window of whole rows of a parameter (``library_window``): a dynamic slice whose
  sizes are 1 down to one dim and whole after it is contiguous memory at an offset,
  which the call computes from the slice's start (codegen/library.py) where the start
  is integer arithmetic over values in memory and constants (``start_leaves``), and
  which is a multiple of the 64 bytes TF's kernels assume of a tensor.  A recurrent
  layer's gradient loop reads each step's saved activations and filter slices so; as
  copies, 2.7 MB a step of ConvLSTM2D(64)'s gradient loop ran in series before its
  convolutions.

``Fusion.aliases`` maps each value read in place to what it reads; ``library_source``
follows the map to the buffer.
"""
from __future__ import annotations

import math

from tfjit.ir.module import Instr
from tfjit.ir.ops import Op
from tfjit.passes.kernels import Fusion, in_memory

WINDOW_ALIGN = 64               # bytes: TF's kernels take a tensor as 64-byte aligned (abi.ALIGN)


def library_source(f: Fusion, x: Instr) -> Instr:
    """The buffer a library kernel reads for its operand ``x`` (reshapes and windows seen
    through)."""
    while x in f.aliases:
        x = f.aliases[x]
    return x


def library_window(i: Instr) -> bool:
    """Whether a library call may read dynamic slice ``i`` in place: a window of whole rows
    of a parameter (what a recurrent layer's gradient reads of its saved activations and
    of its filters' slices, once a step; as a copy, 2 MB a step in ConvLSTM2D(64)), at
    a start the call computes from memory and constants (``start_leaves``), and at a
    multiple of the 64 bytes TF's kernels assume of a tensor."""
    if i.op is not Op.DYNAMIC_SLICE or not in_memory(i.operands[0]):
        return False
    x, sizes = i.operands[0], i.shape
    cut = next((d for d, (n, dim) in enumerate(zip(sizes, x.shape)) if n < dim), x.rank)
    if any(n != 1 for n in sizes[:cut]):
        return False
    row = math.prod(x.shape[cut + 1:]) * x.dtype.itemsize if cut < x.rank else 0
    if cut < x.rank and row % WINDOW_ALIGN:
        return False
    return all(start_leaves(s) is not None for s in i.operands[1:])


START_OPS = {Op.ADD, Op.SUB, Op.MUL, Op.CONVERT, Op.RESHAPE, Op.SELECT,
             Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE}


def start_leaves(s: Instr, depth: int = 0) -> set | None:
    """The values in memory scalar start ``s`` is computed from (parameters, results of
    control flow), or None when it is more than integer arithmetic (sums, differences,
    products, comparisons and selects: TF's index of a Python-style ``x[i]`` wraps a
    negative i) over those and constants; codegen/library.py computes it."""
    if s.size != 1 or not (s.dtype.is_int or s.dtype.kind == "bool"):
        return None
    if s.op is Op.CONSTANT:
        return set()
    if in_memory(s):
        return {s}
    if depth > 8 or s.op not in START_OPS:
        return None
    out = set()
    for o in s.operands:
        leaves = start_leaves(o, depth + 1)
        if leaves is None:
            return None
        out |= leaves
    return out
