"""The IR's value type, ``Instr`` (one typed value: an instruction of a ``Module``), its
error and its size limits; ``tfjit.ir.module`` re-exports them."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.ops import Op

MAX_ELEMENTS = 2**62   # a tensor larger than this is refused before allocation
FOLD_MAX_ELEMENTS = 1 << 12   # constant-fold results up to this size while building
LIBRARY_DTYPES = (dt.F32, dt.F64)   # what the runtime library computes in (runtime/tf_kernels.cc)
INDEX_DTYPES = (dt.I32, dt.I64)     # element types of gather indices, scatter ids, top-k results


class IRError(ValueError):
    """A malformed instruction (wrong shapes, types or attributes)."""


# The type of while/conditional results: a tuple, whose elements (``Instr.results``)
# are read by get-tuple-element.  Not a tensor type (no TF enum, never in memory).
TUPLE = dt.DType("tuple", -1, "void", 0, "tuple")


@dataclasses.dataclass(eq=False)
class Instr:
    op: Op
    dtype: dt.DType
    shape: tuple
    operands: tuple = ()
    attrs: dict = dataclasses.field(default_factory=dict)
    name: str = ""
    value: np.ndarray | None = None      # CONSTANT only
    index: int = -1                      # PARAMETER only
    source: str = ""                     # TF node that produced it (for messages)
    called: tuple = ()                   # WHILE: (condition, body); CONDITIONAL: branches
    results: tuple = ()                  # tuple-typed (dtype is TUPLE): ((DType, shape), ...)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_tuple(self) -> bool:
        return self.dtype is TUPLE

    def is_scalar_constant(self) -> bool:
        return self.op is Op.CONSTANT and self.value.size == 1

    def __repr__(self) -> str:
        return f"%{self.name}"


def reshaped_source(x: Instr) -> Instr:
    """What ``x`` reshapes, through any chain of reshapes (row-major: the same bytes);
    ``x`` itself when it is no reshape."""
    while x.op is Op.RESHAPE:
        x = x.operands[0]
    return x


def _type_list(values) -> str:
    return "(" + ", ".join(f"{v.dtype.name}{list(v.shape)}" for v in values) + ")"
