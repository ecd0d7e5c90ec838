"""Elementwise arithmetic with TF's rounding for float16/bfloat16.

TF's kernels compute on Eigen::half / bfloat16 values: every operation widens
to f32, computes, and rounds back to the half type, so overflow to inf and the
rounding of each intermediate are the half type's.  ``registry``'s
``half_in_f32`` computes a whole rule in f32 and rounds once, which is closer
to the exact result but not to TF where a rule chains several operations
(SigmoidGrad's ``dy * (y * (1 - y))`` overflows f16 in TF for large dy).
``Arith`` reproduces TF: values are held in f32, each op's result is rounded
to the half type, and constants are rounded to it first (``static_cast<T>``).
For other types it is plain IR arithmetic.
"""
from __future__ import annotations

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import COMPARISONS, Op

HALVES = (dt.F16, dt.BF16)


class Arith:
    def __init__(self, m: Module, dtype: dt.DType):
        self.m, self.dtype = m, dtype
        self.compute = dtype.compute

    def load(self, x: Instr) -> Instr:
        """x in the compute type (f32 for halves; exact)."""
        return self.m.convert(x, self.compute)

    def store(self, x: Instr) -> Instr:
        return self.m.convert(x, self.dtype)

    def round(self, x: Instr) -> Instr:
        if self.dtype in HALVES and x.dtype is self.compute:
            return self.m.convert(self.m.convert(x, self.dtype), self.compute)
        return x

    def op(self, op: Op, *xs: Instr) -> Instr:
        r = self.m.elementwise(op, *xs)
        if op in COMPARISONS or op is Op.SELECT:
            return r
        return self.round(r)

    def const(self, value, shape: tuple) -> Instr:
        """``static_cast<T>(value)`` broadcast to ``shape``, in the compute type."""
        if self.dtype.is_float:
            value = np.asarray(value, np.float64).astype(self.dtype.numpy()).astype(self.compute.numpy())
        scalar = self.m.scalar(value, self.compute)
        return self.m.broadcast(scalar, tuple(shape), ())

    def like(self, value, x: Instr) -> Instr:
        return self.const(value, x.shape)
