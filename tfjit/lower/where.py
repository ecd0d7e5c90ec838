"""``Where`` with one operand (``tf.where(x)``, ``tf.boolean_mask``): the coordinates of
x's non-zero elements (NaN and true are non-zero, -0.0 is not), int64 [count, rank] in
row-major order, as TF's CPU kernel gives them.

count depends on x's values, and tfjit compiles static shapes only, as XLA bounds
Where's result by x's size (tf2xla's where_op.cc).  The IR computes the coordinates
into that bound, ``x.size`` rows (those past count are zeros), and count as an i64
scalar: an exclusive running sum of the mask gives each non-zero element its row, a
segment scatter writes its coordinates there (the zero elements' ids are -1: dropped).
The value is marked ``Module.bounded`` with its count; lower_cluster makes the count an
output of its own (``Module.output_rows``) and the launch op hands TF the first count
rows.  So a Where compiles only as a cluster output: any other consumer would see the
bound as the shape (graph_to_ir refuses it, naming the node, and auto clustering cuts
after a Where, graph/cluster.py).
"""
from __future__ import annotations

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.lower import complex_math as cm
from tfjit.lower.registry import (ALL, InvalidArgument, Unsupported, register, register_complex,
                                  scalar_like)

# Past this many elements TF's kernel is faster: the scan and the scatter run on one
# thread and the bound is written in full.  `tf.where(x > 0.5)` on f32, tfjit.function
# against tf.function, medians (2026-12-04, 2-core EPYC, load ~1): 4096 elements 0.05
# against 0.22 ms, 65536 0.14-0.36 against 0.35-0.51, 262144 0.54-1.48 against
# 0.44-1.28 (0.8x), 1M 2.0-6.1 against 1.0-4.6 (0.5-0.7x), at 1% and 50% non-zero.
MAX_ELEMENTS = 131072

# The ops a data-dependent value may pass through inside a cluster: they return it as is.
PASS_THROUGH = frozenset({"Identity", "IdentityN", "StopGradient", "PreventGradient", "Snapshot"})


def nonzero_coordinates(m: Module, mask: Instr) -> Instr:
    """The coordinates of ``mask``'s true elements in their bound [mask.size, rank],
    marked bounded by their count (see the module docstring)."""
    n, rank = mask.size, mask.rank
    if not 1 <= rank <= 8:      # TF's CPU kernel's ranks
        raise InvalidArgument(f"WhereOp : Unhandled input dimensions: {rank}")
    if n > MAX_ELEMENTS:
        raise Unsupported(f"Where of {n} elements: tfjit's is a serial scan and scatter into "
                          f"its bound, slower than TF's kernel past {MAX_ELEMENTS} elements")
    if n == 0:                  # nothing to scan
        coords, count = m.constant(np.zeros((0, rank), np.int64), dt.I64), m.scalar(0, dt.I64)
    else:
        flat = m.reshape(mask, (n,))
        index = dt.I32 if n < 2**31 else dt.I64     # half the scan's memory traffic
        row = m.scan(m.convert(flat, index), "sum", 0, exclusive=True)
        ids = m.elementwise(Op.SELECT, flat, row, scalar_like(m, -1, row))
        columns = [m.reshape(m.iota(dt.I64, mask.shape, d), (n, 1)) for d in range(rank)]
        data = columns[0] if rank == 1 else m.concat(columns, 1)
        coords = m.scatter(data, ids, "sum", n)
        last = [m.reshape(m.slice(v, (n - 1,), (1,)), ()) for v in (row, flat)]
        count = m.elementwise(Op.ADD, *(m.convert(v, dt.I64) for v in last))   # no pass of its own
    m.bounded[coords] = count
    return coords


# TF's CPU kernel takes every type but half ("No WhereOp available for float16")
@register("Where", dtypes=tuple(d for d in ALL if d is not dt.F16), half_in_f32=True)
def _where(ctx):
    x = ctx.inputs[0]
    mask = x if x.dtype is dt.PRED else ctx.m.elementwise(Op.NE, x, scalar_like(ctx.m, 0, x))
    return nonzero_coordinates(ctx.m, mask)


@register_complex("Where")
def _where_complex(ctx):
    m = ctx.m
    return nonzero_coordinates(m, m.elementwise(Op.NOT, cm.is_zero(m, ctx.inputs[0])))
