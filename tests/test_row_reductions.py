"""Reductions over the last axis of short rows against TF, and their vector code.

A row kernel computes one output per row of its loop (codegen/reduction.py).  Rows
of at most ``SHORT_ROW`` elements (and ``ACROSS_ROW_BYTES``) are vectorised across
rows: a vector of outputs at a time, from consecutive rows transposed into lanes.
A float sum over a longer row of fixed length keeps its loop over the row so that
LLVM's loop vectoriser adds whole vectors: unrolled first, it was one serial chain
of scalar adds per output.  The rows here run from 1 element to past where LLVM
stops unrolling, in row counts of 1, 5, 37, 4099 and 65536, for every reduce kind,
behind fused producers and in the two-pass form.
Sums are compared with TF's within a bound on any order of float additions:
n * eps * sum|x| per output (each side within it of the exact sum, so twice it).
"""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit.codegen import reduction

LENGTHS = [1, 2, 3, 7, 8, 9, 16, 17, 63, 64, 65, 127, 256, 257]   # SHORT_ROW = 8
ROW_COUNTS = [1, 5, 37]            # taken in turn: a row count per length
DTYPES = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16, "i32": np.int32}
SUM_KINDS = ("sum", "mean", "sum-of-product", "two-pass")


def _inputs(shape, d, rng):
    """Quarter steps in [-4, 4] (exact in every float dtype); NaN, +inf and -inf in
    rows 1-3 when there are that many: a NaN beside an inf, and a NaN last in its row."""
    if d == "i32":
        return rng.integers(-1000, 1000, shape).astype(np.int32)
    x = (rng.integers(-16, 17, shape) / 4).astype(DTYPES[d])
    rows, n = shape
    if rows >= 4:
        x[1, n // 2] = np.inf
        x[1, -1] = np.nan
        x[2, 0] = -np.inf
        x[3, n // 3] = np.inf
    return x


def _fn(d):
    """Every reduce kind over the last axis: bare, keepdims, behind a fused producer
    (x * y + z) and the two-pass form (x - mean(x)); prod of 1 + x / 64 (f32, f64) or of +-1."""
    def fn(x, y, z):
        if d in ("f32", "f64"):
            unit = 1 + x / 64
        else:       # exact: TF multiplies bf16 in bf16, one rounding per step
            unit = tf.where(x > 0, tf.ones_like(x), -tf.ones_like(x))
        centred = x - tf.reduce_mean(x, -1, keepdims=True)
        return {
            "sum": tf.reduce_sum(x, -1),
            "mean": tf.reduce_mean(x, -1, keepdims=True),
            "sum-of-product": tf.reduce_sum(x * y + z, -1),
            "two-pass": tf.reduce_sum(centred * centred, -1),
            "max": tf.reduce_max(x, -1),
            "min": tf.reduce_min(x, -1, keepdims=True),
            "prod": tf.reduce_prod(unit, -1),
        }
    return fn


def _sum_tolerance(kind, x, y, z, d):
    """atol of a float sum of ``kind``: 2 n eps sum|terms| (any order, either side)."""
    n = x.shape[-1]
    x, y, z = (np.where(np.isfinite(v), v, 0).astype(np.float64) for v in (x, y, z))
    if kind == "sum-of-product":
        terms = np.abs(x * y) + np.abs(z)
    elif kind == "two-pass":
        terms = (np.abs(x) + np.abs(x).mean(-1, keepdims=True)) ** 2
    else:
        terms = np.abs(x)
    eps = float(ml_dtypes.finfo(DTYPES[d]).eps)
    scale = 1 / n if kind == "mean" else 1
    return 2 * n * eps * terms.sum(-1).max() * scale + (0 if d == "f32" or d == "f64" else 1e-2)


def _check(shape, d, seed):
    rng = np.random.default_rng(seed)
    x, y, z = (_inputs(shape, d, rng) for _ in range(3))
    args = [tf.constant(v) for v in (x, y, z)]
    got = tfjit.function(_fn(d), jit_compile=True)(*args)
    want = tf.function(_fn(d))(*args)
    for kind in want:
        g, w = got[kind].numpy(), want[kind].numpy()
        what = f"{kind} of {d}{list(shape)}"
        if d != "i32" and kind in SUM_KINDS:
            assert_matches(g, w, rtol=0, atol=_sum_tolerance(kind, x, y, z, d), what=what)
        else:
            assert_matches(g, w, what=what)


@pytest.mark.parametrize("d", DTYPES)
@pytest.mark.parametrize("length", LENGTHS)
def test_short_rows(length, d):
    rows = ROW_COUNTS[LENGTHS.index(length) % len(ROW_COUNTS)]
    _check((rows, length), d, seed=length)


@pytest.mark.parametrize("shape", [(65536, 64), (4099, 17)], ids=lambda s: "x".join(map(str, s)))
def test_tall_short_rows(shape):
    # many rows, split over the cores: 65536 of 64 (the reduce_sweep row), and a row
    # count and length that divide nothing
    _check(shape, "f32", seed=shape[1])


def _vector_fadds(f, *args) -> int:
    ir = f.compiled(*args).code.optimized_ir
    return len(re.findall(r"fadd reassoc <\d+ x (?:float|double)>|llvm\.vector\.reduce\.fadd", ir))


@pytest.mark.parametrize("dtype, length", [(np.float32, 64), (np.float32, 17), (np.float64, 16),
                                           (np.float32, reduction.SHORT_ROW + 1)])
def test_short_row_float_sums_are_vectorised(dtype, length):
    """LLVM unrolled these rows into a serial chain of scalar adds (64 vaddss per output
    of [65536, 64], 10 GB/s); kept a loop, they are vector adds (any x86-64 has them)."""
    x = tf.constant(np.ones((256, length), dtype))
    f = tfjit.function(lambda x: tf.reduce_sum(x, -1), jit_compile=True)
    assert_matches(f(x).numpy(), np.full(256, length, dtype))
    assert _vector_fadds(f, x) > 0, f.compiled(x).code.optimized_ir


@pytest.mark.parametrize("length", [1, 3, 8, 9, 64])
def test_short_rows_of_bools(length):
    x = tf.constant(np.random.default_rng(length).random((37, length)) < 0.7)

    def fn(x):
        return tf.reduce_any(x, -1), tf.reduce_all(x, -1, keepdims=True)
    for g, w in zip(tfjit.function(fn, jit_compile=True)(x), tf.function(fn)(x)):
        assert_matches(g.numpy(), w.numpy())


@pytest.mark.parametrize("op", [tf.reduce_max, tf.reduce_sum, tf.reduce_prod],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype, length", [(np.float32, 4), (np.float32, 8), (np.int32, 3),
                                           (ml_dtypes.bfloat16, 7), (np.float64, 4)])
def test_very_short_rows_store_a_vector_of_outputs(op, dtype, length):
    """Rows this short are vectorised across rows: each vector op computes a block of
    outputs, stored as one vector (the row-at-a-time kernel stores them one by one)."""
    x = tf.constant(_inputs((1000, length), {np.float32: "f32", np.float64: "f64", np.int32: "i32",
                                             ml_dtypes.bfloat16: "bf16"}[dtype],
                            np.random.default_rng(length)))
    f = tfjit.function(lambda x: op(x, -1), jit_compile=True)
    exact = op is tf.reduce_max or dtype is not np.float32
    assert_matches(f(x).numpy(), tf.function(lambda x: op(x, -1))(x).numpy(),
                   **({} if exact else {"rtol": 1e-5, "atol": 1e-5}))
    ir = f.compiled(x).code.optimized_ir
    # (bf16 reduces in f32, the reduce kernel's outputs; a loop kernel converts them)
    assert re.search(r"store <\d+ x (?:float|double|i32)>", ir), ir
