"""The element types tfjit compiles, and how each maps to TF, numpy and LLVM.

One table, read by every stage: the graph importer maps TF ``DataType`` enums to
IR dtype names, the code generator maps IR dtype names to LLVM types, and the
runtime hands TF enums to the launch op.  float16/bfloat16 are storage types:
lowering converts them to float32 on load and back on store.  complex64/complex128
exist only at the edges: lowering computes a complex tensor as two real ones
(``part``: f32/f64, lower/complex.py), and a complex buffer of shape S is read and
written as its real view of shape S + [2] (interleaved re, im).  The quantized types
(qint8, quint8, qint16, quint16, qint32) are plain integers in memory: tfjit computes
none of them, but the data-movement ops TF's CPU kernels run on them pass them through
as their ``storage`` integer type (lower/registry.py ``quantized=``); only the cluster's
edges (what the launch op sees) carry the quantized type.
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class DType:
    name: str          # IR spelling: f32, i64, pred, ...
    tf_enum: int       # tensorflow.DataType value
    np_name: str       # numpy dtype name (bfloat16 via ml_dtypes)
    bits: int
    kind: str          # "float" | "int" | "uint" | "bool" | "complex"

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex"

    @property
    def part(self) -> "DType":
        """The real type of a complex type's real and imaginary parts."""
        if not self.is_complex:
            raise ValueError(f"{self.name} is not a complex type")
        return F32 if self.bits == 64 else F64

    @property
    def is_quantized(self) -> bool:
        return self.kind == "quantized"

    @property
    def storage(self) -> "DType":
        """The integer type a quantized type is stored as (itself for every other type)."""
        return _STORAGE.get(self.name, self)

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def compute(self) -> "DType":
        """The type arithmetic happens in (half precision computes in f32)."""
        return F32 if self.name in ("f16", "bf16") else self

    def numpy(self):
        if self.name == "bf16":
            import ml_dtypes
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.np_name)

    def __repr__(self) -> str:
        return self.name


F16 = DType("f16", 19, "float16", 16, "float")
BF16 = DType("bf16", 14, "bfloat16", 16, "float")
F32 = DType("f32", 1, "float32", 32, "float")
F64 = DType("f64", 2, "float64", 64, "float")
I8 = DType("i8", 6, "int8", 8, "int")
I16 = DType("i16", 5, "int16", 16, "int")
I32 = DType("i32", 3, "int32", 32, "int")
I64 = DType("i64", 9, "int64", 64, "int")
U8 = DType("u8", 4, "uint8", 8, "uint")
U16 = DType("u16", 17, "uint16", 16, "uint")
U32 = DType("u32", 22, "uint32", 32, "uint")
U64 = DType("u64", 23, "uint64", 64, "uint")
PRED = DType("pred", 10, "bool", 8, "bool")
C64 = DType("c64", 8, "complex64", 64, "complex")
C128 = DType("c128", 18, "complex128", 128, "complex")

QINT8 = DType("qint8", 11, "int8", 8, "quantized")
QUINT8 = DType("quint8", 12, "uint8", 8, "quantized")
QINT32 = DType("qint32", 13, "int32", 32, "quantized")
QINT16 = DType("qint16", 15, "int16", 16, "quantized")
QUINT16 = DType("quint16", 16, "uint16", 16, "quantized")
QUANTIZED = (QINT8, QUINT8, QINT16, QUINT16, QINT32)   # never an IR element type
_STORAGE = {"qint8": I8, "quint8": U8, "qint16": I16, "quint16": U16, "qint32": I32}
QUANTIZED_BY_TF_ENUM = {d.tf_enum: d for d in QUANTIZED}

ALL = (F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, PRED)   # the IR's element types
COMPLEX = (C64, C128)
BY_NAME = {d.name: d for d in ALL + COMPLEX}
BY_TF_ENUM = {d.tf_enum: d for d in ALL + COMPLEX}


def from_tf_enum(value: int) -> DType | None:
    """The dtype of a TF DataType enum (complex ones included), or None when tfjit
    cannot compile it."""
    return BY_TF_ENUM.get(int(value))


def edge_from_tf_enum(value: int) -> DType | None:
    """As ``from_tf_enum``, quantized types included: the types a cluster's inputs and
    outputs may have (a quantized one is its storage type inside the cluster)."""
    return BY_TF_ENUM.get(int(value)) or QUANTIZED_BY_TF_ENUM.get(int(value))


def from_name(name: str) -> DType:
    if name in BY_NAME:
        return BY_NAME[name]
    for d in QUANTIZED:
        if d.name == name:
            return d
    raise KeyError(name)


def complex_view(x: np.ndarray) -> np.ndarray:
    """The real view (shape + [2], interleaved re, im) of complex array ``x``."""
    x = np.asarray(x)
    x = x if x.flags.c_contiguous else x.copy()     # (ascontiguousarray makes 0-d 1-d)
    return x.reshape(x.shape + (1,)).view(x.real.dtype)


def complex_of_view(x: np.ndarray, dtype: DType) -> np.ndarray:
    """The ``dtype`` (complex) array whose real view is ``x`` (last dim 2)."""
    x = np.asarray(x, dtype=dtype.part.numpy())
    x = x if x.flags.c_contiguous else x.copy()
    if x.shape[-1:] != (2,):
        raise ValueError(f"a real view of {dtype.name} needs a last dim of 2, got {list(x.shape)}")
    return x.view(dtype.numpy()).reshape(x.shape[:-1])   # view: last dim 2 -> 1
