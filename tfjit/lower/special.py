"""TF's special functions: Igamma, Igammac, Betainc, Zeta, Polygamma (f32 and f64,
the dtypes TF's CPU kernels register).

Each becomes one elementwise IR op whose semantics are Eigen's scalar code, NaN and
infinity rules included (ir/interp_special.py, codegen/special.py).  Igamma,
Igammac, Zeta and Polygamma are TF BinaryOps (numpy broadcasting); Betainc
broadcasts only scalars: its non-scalar operands must have one shape, as TF's
kernel checks.
"""
from __future__ import annotations

from tfjit import dtypes as dt
from tfjit.ir.ops import Op
from tfjit.lower.registry import Unsupported, broadcast_all, broadcast_to, register

REAL = (dt.F32, dt.F64)
_BINARY = {"Igamma": Op.IGAMMA, "Igammac": Op.IGAMMAC, "Zeta": Op.ZETA, "Polygamma": Op.POLYGAMMA}

for _tf, _op in _BINARY.items():
    register(_tf, dtypes=REAL)(
        lambda ctx, _op=_op: ctx.m.elementwise(_op, *broadcast_all(ctx.m, *ctx.inputs)))


@register("Betainc", dtypes=REAL)
def _betainc(ctx):
    shapes = {x.shape for x in ctx.inputs if x.rank > 0}
    if len(shapes) > 1:
        a, b, x = (list(i.shape) for i in ctx.inputs)
        raise Unsupported(f"Betainc: shapes of a {a}, b {b} and x {x} are inconsistent "
                          "(TF broadcasts only scalars)")
    shape = shapes.pop() if shapes else ()
    return ctx.m.elementwise(Op.BETAINC, *(broadcast_to(ctx.m, x, shape) for x in ctx.inputs))
