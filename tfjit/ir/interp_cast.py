"""The interpreter's float rules of x86-64 (interp.py): denormals flushed as TF's
threads' MXCSR (DAZ+FTZ) does, and CONVERT, TF's Cast as its x86-64 kernels compute it."""
from __future__ import annotations

import numpy as np

from tfjit import dtypes as dt


def flush(x: np.ndarray) -> np.ndarray:
    """Denormals to signed zero, as DAZ/FTZ do (f32/f64 only)."""
    if x.dtype not in (np.float32, np.float64):
        return x
    return np.where(np.abs(x) < np.finfo(x.dtype).tiny, np.copysign(x.dtype.type(0), x), x)


def to_signed(x: np.ndarray, bits: int) -> np.ndarray:
    """cvttsd2si to a ``bits``-wide int: truncation, or INT_MIN for NaN/inf/out of range."""
    lo = -2.0 ** (bits - 1)
    ok = (x >= lo) & (x < -lo)
    return np.where(ok, np.trunc(np.where(ok, x, 0.0)), lo).astype(np.int64)


def float_to_int(x: np.ndarray, source: dt.DType, target: dt.DType) -> np.ndarray:
    """TF's Cast as its vector path computes it.  TF's Eigen kernel runs whole packets
    through vector code and the rest (a tensor's last n % 8..32 elements, and block
    ends when it splits the work over threads) through scalar C++ casts, and the two
    disagree on NaN and out-of-range values; where an element falls depends on the
    tensor's size and TF's thread count.  tfjit gives the vector path's value, which
    is TF's for almost every element of a real tensor, on every element.  The rules
    were measured on TF 2.21's x86-64 wheel (tests/test_ops.py checks them):
    8/16-bit: the i32 conversion (INT_MIN for NaN/out of range) saturated, except
    f64/f16 -> u8, which goes through u16 read back as i16 first; u32: the i32
    conversion below 2**31, above it that of x - 2**31 with the top bit set."""
    x = x.astype(np.float64)        # exact for every float type
    if target in (dt.I32, dt.I64):
        return to_signed(x, target.bits).astype(target.numpy())
    if target is dt.U64:
        a, b = to_signed(x, 64), to_signed(x - 2.0 ** 63, 64)
        return (((a >> 63) & b) | a).astype(np.uint64)
    c = to_signed(x, 32)
    if target is dt.U32:
        high = to_signed(x - 2.0 ** 31, 32) | (1 << 31)
        return np.where(x < 2.0 ** 31, c, high).astype(np.int64).astype(np.uint32)
    if target is dt.U8 and source in (dt.F64, dt.F16):
        c = np.clip(c, 0, 0xFFFF).astype(np.uint16).view(np.int16).astype(np.int64)
    info = np.iinfo(target.numpy())
    return np.clip(c, info.min, info.max).astype(target.numpy())


def convert(x: np.ndarray, source: dt.DType, target: dt.DType) -> np.ndarray:
    if source in (dt.F16, dt.BF16) and target is dt.PRED:
        return x.astype(np.float32) != 0    # Eigen tests the bits: a bf16 denormal is true
    if source.is_float and target.is_int:
        return float_to_int(x, source, target)
    if source in (dt.F16, dt.BF16):         # Eigen widens half types to f32 (exactly) first
        return convert(x.astype(np.float32), dt.F32, target)
    if target is dt.PRED:
        return flush(x) != 0
    if target in (dt.F16, dt.BF16):         # via f32 as Eigen does (double rounding from f64)
        if source is not dt.F32:
            x = convert(x, source, dt.F32)
        return x.astype(target.numpy())
    if source.is_float and target.is_float:
        return flush(flush(x).astype(target.numpy()))
    return x.astype(target.numpy())         # ints wrap, int->float rounds to nearest, bool -> 0/1
