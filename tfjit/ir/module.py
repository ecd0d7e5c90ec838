"""IR containers: ``Instr`` (one typed value) and ``Module`` (a computation).

A module is a list of instructions in topological order, a list of parameters
(the cluster's inputs, in order) and a list of outputs.  Builders check shapes
as they add instructions, so a lowering that produces a malformed module fails
at the offending instruction with a readable message instead of in codegen.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.ops import COMPARISONS, LIBM, SHIFTS, TYPED_RESULT, Kind, Op, REDUCE_KINDS

MAX_ELEMENTS = 2**62   # a tensor larger than this is refused before allocation
FOLD_MAX_ELEMENTS = 1 << 12   # constant-fold results up to this size while building


class IRError(ValueError):
    """A malformed instruction (wrong shapes, types or attributes)."""


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

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def is_scalar_constant(self) -> bool:
        return self.op is Op.CONSTANT and self.value.size == 1

    def __repr__(self) -> str:
        return f"%{self.name}"


def _check_types(op: Op, operand: dt.DType, result: dt.DType | None) -> None:
    """Element types the bit-level, libm and RNG ops accept (others are checked by their users)."""
    if op in SHIFTS and not operand.is_int:
        raise IRError(f"{op.spelling} needs integer operands, not {operand}")
    if op is Op.XOR and not (operand.is_int or operand is dt.PRED):
        raise IRError(f"xor needs integer or pred operands, not {operand}")
    if op in LIBM and operand not in (dt.F32, dt.F64):
        raise IRError(f"{op.spelling} needs f32 or f64 operands, not {operand}")
    if op is Op.BITCAST and (result is None or dt.PRED in (operand, result) or operand.bits != result.bits):
        raise IRError(f"bitcast-convert from {operand} to {result}: widths differ or a type is pred")
    if op is Op.TRUNCATED_NORMAL and (operand is not dt.U32 or result not in (dt.F32, dt.F64)):
        raise IRError(f"truncated-normal takes u32 operands and gives f32 or f64, not {operand} -> {result}")


class Module:
    def __init__(self, name: str):
        self.name = name
        self.params: list[Instr] = []
        self.instrs: list[Instr] = []
        self.outputs: list[Instr] = []
        self._ids = itertools.count()
        self.source = ""                 # stamped on instructions added next
        self.folder = None               # folder(instr, operand_values) -> ndarray | None

    # -- bookkeeping --------------------------------------------------------
    def _add(self, instr: Instr) -> Instr:
        if instr.size > MAX_ELEMENTS or any(d < 0 for d in instr.shape):
            raise IRError(f"shape {list(instr.shape)} of {instr.op.spelling} is too large or negative")
        if self.folder and instr.operands and instr.size <= FOLD_MAX_ELEMENTS \
                and all(o.op is Op.CONSTANT for o in instr.operands):
            value = self.folder(instr, [o.value for o in instr.operands])
            if value is not None:
                instr = Instr(Op.CONSTANT, instr.dtype, instr.shape, value=value, source=instr.source)
        instr.name = instr.name or f"{instr.op.spelling.split('-')[0]}.{next(self._ids)}"
        instr.source = instr.source or self.source
        self.instrs.append(instr)
        return instr

    def users(self) -> dict:
        users = {i: [] for i in self.instrs}
        for i in self.instrs:
            for o in i.operands:
                if i not in users[o]:
                    users[o].append(i)
        return users

    def renumber(self) -> None:
        """Drops unreachable instructions and renames the rest densely."""
        live, stack = set(), list(self.outputs) + list(self.params)
        while stack:
            i = stack.pop()
            if i not in live:
                live.add(i)
                stack.extend(i.operands)
        self.instrs = [i for i in self.instrs if i in live]
        counter = itertools.count()
        for i in self.instrs:
            i.name = "p%d" % i.index if i.op is Op.PARAMETER else f"{i.op.spelling.split('-')[0]}.{next(counter)}"

    # -- builders -----------------------------------------------------------
    def parameter(self, dtype: dt.DType, shape) -> Instr:
        p = self._add(Instr(Op.PARAMETER, dtype, tuple(shape), index=len(self.params)))
        p.name = f"p{p.index}"
        self.params.append(p)
        return p

    def constant(self, value, dtype: dt.DType) -> Instr:
        arr = np.asarray(value, dtype=dtype.numpy())
        return self._add(Instr(Op.CONSTANT, dtype, tuple(arr.shape), value=arr))

    def scalar(self, value, dtype: dt.DType) -> Instr:
        return self.constant(np.asarray(value), dtype)

    def iota(self, dtype: dt.DType, shape, dim: int) -> Instr:
        return self._add(Instr(Op.IOTA, dtype, tuple(shape), attrs={"dim": dim}))

    def elementwise(self, op: Op, *operands: Instr, dtype: dt.DType | None = None) -> Instr:
        if op.kind is not Kind.ELEMENTWISE or len(operands) != op.arity:
            raise IRError(f"{op.spelling} is not an elementwise op of arity {len(operands)}")
        shapes = {o.shape for o in operands}
        if len(shapes) != 1:
            raise IRError(f"{op.spelling}: operand shapes differ: {[list(o.shape) for o in operands]}")
        value_operands = operands[1:] if op is Op.SELECT else operands
        if op is not Op.CONVERT and len({o.dtype for o in value_operands}) != 1:
            raise IRError(f"{op.spelling}: operand types differ: {[o.dtype for o in value_operands]}")
        if op is Op.SELECT and operands[0].dtype is not dt.PRED:
            raise IRError("select: predicate must be pred")
        if op in TYPED_RESULT and dtype is None:
            raise IRError(f"{op.spelling} needs its result type")
        _check_types(op, operands[0].dtype, dtype)
        if dtype is None:
            pred_result = op in COMPARISONS or op in (Op.IS_NAN, Op.IS_INF, Op.IS_FINITE)
            dtype = dt.PRED if pred_result else value_operands[0].dtype
        return self._add(Instr(op, dtype, operands[0].shape, tuple(operands)))

    def convert(self, x: Instr, dtype: dt.DType) -> Instr:
        return x if x.dtype is dtype else self.elementwise(Op.CONVERT, x, dtype=dtype)

    def bitcast(self, x: Instr, dtype: dt.DType) -> Instr:
        return x if x.dtype is dtype else self.elementwise(Op.BITCAST, x, dtype=dtype)

    def broadcast(self, x: Instr, shape, dims) -> Instr:
        shape, dims = tuple(shape), tuple(dims)
        if len(dims) != x.rank or any(shape[d] != s and s != 1 for d, s in zip(dims, x.shape)) \
                or list(dims) != sorted(set(dims)) or any(d >= len(shape) for d in dims):
            raise IRError(f"broadcast of {list(x.shape)} to {list(shape)} with dims {list(dims)} is invalid")
        if shape == x.shape:
            return x
        return self._add(Instr(Op.BROADCAST, x.dtype, shape, (x,), {"dims": dims}))

    def reshape(self, x: Instr, shape) -> Instr:
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) != x.size:
            raise IRError(f"cannot reshape {list(x.shape)} to {list(shape)}")
        if shape == x.shape:
            return x
        return self._add(Instr(Op.RESHAPE, x.dtype, shape, (x,)))

    def transpose(self, x: Instr, perm) -> Instr:
        perm = tuple(int(p) for p in perm)
        if sorted(perm) != list(range(x.rank)):
            raise IRError(f"transpose of rank {x.rank} with invalid perm {list(perm)}")
        if perm == tuple(range(x.rank)):
            return x
        shape = tuple(x.shape[p] for p in perm)
        return self._add(Instr(Op.TRANSPOSE, x.dtype, shape, (x,), {"perm": perm}))

    def slice(self, x: Instr, starts, sizes, strides=None) -> Instr:
        strides = tuple(strides or (1,) * x.rank)
        starts, sizes = tuple(starts), tuple(sizes)
        for d, (b, n, s) in enumerate(zip(starts, sizes, strides)):
            last = b + (n - 1) * s
            if n < 0 or s == 0 or (n > 0 and not (0 <= b < x.shape[d] and 0 <= last < x.shape[d])):
                raise IRError(f"slice dim {d}: start {b} size {n} stride {s} out of bounds {x.shape[d]}")
        if starts == (0,) * x.rank and sizes == x.shape and strides == (1,) * x.rank:
            return x
        return self._add(Instr(Op.SLICE, x.dtype, sizes, (x,), {"starts": starts, "strides": strides}))

    def pad(self, x: Instr, value: Instr, low, high) -> Instr:
        low, high = tuple(low), tuple(high)
        if value.shape != () or value.dtype is not x.dtype:
            raise IRError("pad value must be a scalar of the operand's type")
        shape = tuple(s + a + b for s, a, b in zip(x.shape, low, high))
        if any(a < 0 or b < 0 for a, b in zip(low, high)):
            raise IRError("negative padding")
        if shape == x.shape:
            return x
        return self._add(Instr(Op.PAD, x.dtype, shape, (x, value), {"low": low, "high": high}))

    def concat(self, xs, dim: int) -> Instr:
        xs = [x for x in xs]
        base = xs[0]
        for x in xs:
            if x.rank != base.rank or x.dtype is not base.dtype or \
                    any(a != b for d, (a, b) in enumerate(zip(x.shape, base.shape)) if d != dim):
                raise IRError("concatenate: operands disagree in rank, type or non-concat dims")
        if len(xs) == 1:
            return base
        shape = list(base.shape)
        shape[dim] = sum(x.shape[dim] for x in xs)
        return self._add(Instr(Op.CONCAT, base.dtype, tuple(shape), tuple(xs), {"dim": dim}))

    def reduce(self, x: Instr, kind: str, ndims: int) -> Instr:
        """Reduces the trailing ``ndims`` dimensions of ``x``."""
        if kind not in REDUCE_KINDS or not 0 <= ndims <= x.rank:
            raise IRError(f"reduce kind={kind} ndims={ndims} on rank {x.rank}")
        if ndims == 0:
            return x
        shape = x.shape[:x.rank - ndims]
        return self._add(Instr(Op.REDUCE, x.dtype, shape, (x,), {"kind": kind, "ndims": ndims}))

    def argreduce(self, x: Instr, kind: str, dtype: dt.DType) -> Instr:
        """Index of the first max/min along the last dimension (NaN never wins, as TF)."""
        if kind not in ("max", "min") or x.rank == 0 or x.shape[-1] == 0:
            raise IRError(f"argreduce kind={kind} needs a non-empty last dimension")
        return self._add(Instr(Op.ARGREDUCE, dtype, x.shape[:-1], (x,), {"kind": kind}))
