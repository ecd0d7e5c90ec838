"""The IR's text form, HLO-like, one instruction per line.

    module cluster_0 {
      %p0 = f32[4096,4096] parameter(0)
      %add.1 = f32[4096,4096] add(%p0, %p1)
      %reduce.2 = f32[] reduce(%add.1), kind=sum, ndims=2
      ROOT (%reduce.2)
    }

A complex edge (lower/complex.py) shows as the real view's parameter with
``complex=c64`` and as ``ROOT (%concatenate.9 complex=c64)`` for an output; a
quantized edge as its storage type with ``quantized=qint8`` (``ROOT (%p0 quantized=qint8)``).
An output of a data-dependent shape names the output holding its row count:
``ROOT (%scatter.7 rows=1, %reduce.5)``.

Constants print their values in full (row-major) so a dumped module can be
re-run exactly.  ``parse_module`` (parse.py) reads this form back.

The computations a module calls (while condition and body, conditional
branches) print before it, callees first, as HLO's named computations; a
while or conditional names them and has a tuple type:

    computation body.1 {
      %p0 = i32[] parameter(0)
      ...
      ROOT (%add.2)
    }

    module cluster_0 {
      %while.3 = (i32[]) while(%p0), body=body.1, condition=cond.0
      %get.4 = i32[] get-tuple-element(%while.3), index=0
      ROOT (%get.4)
    }
"""
from __future__ import annotations

import numpy as np

from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.ir.parse import parse_module  # noqa: F401  (re-exported)


def _type_str(dtype, shape) -> str:
    return f"{dtype.name}[{','.join(str(d) for d in shape)}]"


def shape_str(i: Instr) -> str:
    if i.is_tuple:
        return "(" + ", ".join(_type_str(d, s) for d, s in i.results) + ")"
    return _type_str(i.dtype, i.shape)


def _literal(value: np.ndarray) -> str:
    flat = value.reshape(-1)      # tolist(): Python scalars at C speed (large constants)
    if value.dtype == np.bool_:
        items = ["true" if v else "false" for v in flat.tolist()]
    elif value.dtype.kind == "f" or value.dtype.name == "bfloat16":
        items = list(map(repr, flat.astype(np.float64).tolist()))
    else:
        items = list(map(str, flat.tolist()))
    return items[0] if value.ndim == 0 else "{" + ", ".join(items) + "}"


def _attr(value) -> str:
    if isinstance(value, tuple):
        return "{" + ",".join(str(v) for v in value) + "}"
    return str(value)


def instr_str(i: Instr) -> str:
    if i.op is Op.PARAMETER:
        args = str(i.index)
    elif i.op is Op.CONSTANT:
        args = _literal(i.value)
    else:
        args = ", ".join(repr(o) for o in i.operands)
    attrs = "".join(f", {k}={_attr(v)}" for k, v in sorted(i.attrs.items()))
    return f"%{i.name} = {shape_str(i)} {i.op.spelling}({args}){attrs}"


def _block(keyword: str, m: Module) -> list:
    lines = [f"{keyword} {m.name} {{"]
    lines += ["  " + instr_str(i) for i in m.instrs]
    views = {j: f" complex={d.name}" for j, d in m.complex_outputs.items()}
    views.update({j: f" quantized={d.name}" for j, d in m.quantized_outputs.items()})
    views.update({j: f" rows={c}" for j, c in m.output_rows.items()})
    lines.append("  ROOT (" + ", ".join(repr(o) + views.get(j, "") for j, o in enumerate(m.outputs))
                 + ")")
    lines.append("}")
    return lines


def module_str(m: Module) -> str:
    lines = []
    for c in m.computations():
        lines += _block("computation", c) + [""]
    return "\n".join(lines + _block("module", m)) + "\n"
