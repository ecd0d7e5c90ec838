"""TF's special functions: Igamma, Igammac, Betainc, Zeta, Polygamma (f32 and f64,
the dtypes TF's CPU kernels register), and the unary Lgamma, Digamma, BesselI0e,
BesselI1e (f16, f32, f64), Ndtri and Erfinv (f32, f64).

Each becomes one elementwise IR op whose semantics are Eigen's scalar code, NaN and
infinity rules included (ir/interp_special.py, codegen/special.py).  Igamma,
Igammac, Zeta and Polygamma are TF BinaryOps (numpy broadcasting); Betainc
broadcasts only scalars: its non-scalar operands must have one shape, as TF's
kernel checks.  TF's f16 kernels of the unary ones compute in f32 and round once
(Eigen's ``half(f(float(x)))``, and its half packets convert to float packets).
"""
from __future__ import annotations

from tfjit import dtypes as dt
from tfjit.ir.ops import Op
from tfjit.lower.registry import Unsupported, broadcast_all, broadcast_to, register

REAL = (dt.F32, dt.F64)
_UNARY = {"Lgamma": (Op.LGAMMA, True), "Digamma": (Op.DIGAMMA, True),
          "BesselI0e": (Op.BESSEL_I0E, True), "BesselI1e": (Op.BESSEL_I1E, True),
          "Ndtri": (Op.NDTRI, False), "Erfinv": (Op.ERFINV, False)}   # (op, has an f16 kernel)
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


for _tf, (_op, _half) in _UNARY.items():
    register(_tf, dtypes=REAL + ((dt.F16,) if _half else ()), half_in_f32=_half)(
        lambda ctx, _op=_op: ctx.m.elementwise(_op, ctx.inputs[0]))
