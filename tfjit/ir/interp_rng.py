"""numpy semantics of the IR ops that reproduce TensorFlow's CPU random kernels.

* ``libm(name, x)``: the C library's logf/log, sinf/sin, cosf/cos on every
  element (through ctypes: the very functions TF's kernels and tfjit's compiled
  code call, so the three agree bit for bit); ``complex_libm``: one part of the C
  library's csinf/csin ... (TF's complex sin, cos, tanh ... kernels) the same way.
* ``truncated_normal``: TF's TruncatedNormalDistribution over the Philox
  stream (see ``Op.TRUNCATED_NORMAL``), vectorised over elements and looping
  over trials until every element has found its sample.

Philox4x32-10 here is the reference of lower/random.py's IR construction and of
codegen/random.py's loop; all three follow tensorflow/core/lib/random/philox_random.h.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57          # Philox multipliers (lanes 0 and 2)
W0, W1 = 0x9E3779B9, 0xBB67AE85          # Weyl key increments
ROUNDS = 10
TRUNCATE = 2.0                           # TF keeps |x| < 2


@functools.lru_cache(maxsize=None)
def _libm_fn(name: str):
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    fn = getattr(lib, name)
    t = ctypes.c_float if name.endswith("f") else ctypes.c_double
    fn.restype, fn.argtypes = t, [t]
    return np.frompyfunc(fn, 1, 1)


def libm(name: str, x: np.ndarray) -> np.ndarray:
    """The C library's one-argument ``name`` (log, sin, tan, sinh...) of every element:
    logf... for f32, log... for f64; no DAZ or FTZ, as TF's scalar kernels call it."""
    symbol = name + ("f" if x.dtype == np.float32 else "")
    return np.asarray(_libm_fn(symbol)(x), dtype=object).astype(x.dtype).reshape(x.shape)


class _Complex(ctypes.Structure):
    """A float _Complex / double _Complex by value (the x86-64 ABI passes both as a
    struct of two parts)."""


@functools.lru_cache(maxsize=None)
def _complex_fn(symbol: str):
    t = ctypes.c_float if symbol.endswith("f") else ctypes.c_double
    pair = type(f"{symbol}_pair", (_Complex,), {"_fields_": [("re", t), ("im", t)]})
    fn = getattr(ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6"), symbol)
    fn.restype, fn.argtypes = pair, [pair]
    return pair, fn


def complex_libm(name: str, part: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Part ``part`` (0 real, 1 imaginary) of the C library's complex ``name`` (csinf...
    for f32, csin... for f64) of x + iy, element by element."""
    pair, fn = _complex_fn(f"c{name}" + ("f" if x.dtype == np.float32 else ""))
    out = np.empty(x.shape, x.dtype)
    flat = out.reshape(-1)
    for k, (a, b) in enumerate(zip(x.reshape(-1), y.reshape(-1))):
        r = fn(pair(a, b))
        flat[k] = r.im if part else r.re
    return out


def philox(key: tuple, counter: tuple) -> tuple:
    """The four u32 lanes of Philox4x32-10 (arrays of u32, broadcasting)."""
    k0, k1 = (np.asarray(k, np.uint64) for k in key)
    c0, c1, c2, c3 = (np.asarray(c, np.uint64) for c in counter)
    mask = np.uint64(0xFFFFFFFF)
    for r in range(ROUNDS):
        p0 = np.uint64(M0) * c0
        p1 = np.uint64(M1) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & mask,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & mask)
        k0, k1 = (k0 + np.uint64(W0)) & mask, (k1 + np.uint64(W1)) & mask
    return tuple(c.astype(np.uint32) for c in (c0, c1, c2, c3))


def add_counter(counter: tuple, n) -> tuple:
    """The 128-bit counter (four u32 lanes, low first) plus ``n`` (u64)."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint64) for c in counter)
    n = np.asarray(n, np.uint64)
    lo = (c0 | (c1 << np.uint64(32))) + n
    hi = (c2 | (c3 << np.uint64(32))) + (lo < n).astype(np.uint64)
    mask = np.uint64(0xFFFFFFFF)
    return tuple((v & mask).astype(np.uint32) for v in (lo, lo >> np.uint64(32), hi, hi >> np.uint64(32)))


def uniform_f32(x: np.ndarray) -> np.ndarray:
    """TF's Uint32ToFloat: 23 random mantissa bits, [0, 1)."""
    bits = (x.astype(np.uint32) & np.uint32(0x7FFFFF)) | np.uint32(0x3F800000)
    return bits.view(np.float32) - np.float32(1)


def uniform_f64(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """TF's Uint64ToDouble: 20 bits of ``hi`` and 32 of ``lo``, [0, 1)."""
    bits = ((hi.astype(np.uint64) & np.uint64(0xFFFFF)) << np.uint64(32)) | lo.astype(np.uint64)
    return (bits | np.uint64(1023 << 52)).view(np.float64) - 1.0


def box_muller(lanes: tuple, wide: bool) -> tuple:
    """TF's BoxMullerFloat (two lanes) or BoxMullerDouble (four lanes): (sin, cos) samples."""
    if wide:
        u1, u = uniform_f64(lanes[0], lanes[1]), uniform_f64(lanes[2], lanes[3])
        u1 = np.where(u1 < 1e-7, 1e-7, u1)
        v1 = 2 * np.pi * u
        u2 = np.sqrt(-2.0 * libm("log", u1))
    else:
        u1, u = uniform_f32(lanes[0]), uniform_f32(lanes[1])
        eps = np.float32(1e-7)
        u1 = np.where(u1 < eps, eps, u1)
        v1 = (2 * np.pi * u.astype(np.float64)).astype(np.float32)   # TF: 2.0f * M_PI is a double
        u2 = np.sqrt(np.float32(-2) * libm("log", u1))
    return libm("sin", v1) * u2, libm("cos", v1) * u2


def truncated_normal(operands: list, dtype: np.dtype) -> np.ndarray:
    k0, k1, c0, c1, c2, c3, j = np.broadcast_arrays(*operands)
    wide = dtype == np.float64
    out = np.zeros(j.shape, dtype)
    count = np.zeros(j.shape, np.int64)
    active = np.ones(j.shape, bool)
    trial = 0
    while active.any():
        # f32: a trial takes two u32 samples, half a Philox block; f64: a whole block
        block = add_counter((c0, c1, c2, c3), trial if wide else trial // 2)
        lanes = philox((k0, k1), block)
        if not wide:
            lanes = lanes[2 * (trial % 2):2 * (trial % 2) + 2]
        for sample in box_muller(lanes, wide):
            accepted = active & (np.abs(sample) < TRUNCATE)
            take = accepted & (count == j)
            out = np.where(take, sample, out)
            count += accepted
            active &= ~take
        trial += 1
    return out
