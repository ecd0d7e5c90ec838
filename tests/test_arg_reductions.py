"""ArgMax/ArgMin of every layout against TF's kernels, exactly, and the kernel each gets.

codegen/argreduce.py computes TF's rule (start at index 0 and the dtype's lowest
value, take only a strictly better element) in three shapes: blocks along a row
(a row per output, or chunks of a long row combined in chunk order), and block
updates across contiguous outputs (axis 0, a middle axis), also split into chunks
of the reduced rows.  Every line along the reduced axis of the inputs here gets a
pattern that one of those could get wrong: all equal (ties, across chunks too), NaN
first / in the middle / last, NaN then the lowest value (TF answers 0), -inf only,
alternating ±0, the extreme repeated in two chunks, int min and max.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit.ir.ops import Op

# (id, shape, axis, kernel: "row" | "row-split" | "column" | "column-split"); a split kernel
# has few outputs (passes/fusion.py: SPLIT_MAX_OUTPUTS, COLUMN_SPLIT_ROWS)
CASES = [
    ("rows", (37, 1000), 1, "row"),
    ("rows-prime", (7, 257), 1, "row"),
    ("one-row", (1, 5), 1, "row"),
    ("one-column", (600, 1), 0, "row"),
    ("long-rows", (2, 70001), 1, "row-split"),      # fewer outputs than cores
    ("vector", (100003,), 0, "row-split"),
    ("columns-prime", (97, 131), 0, "column"),
    ("column-split", (8192, 24), 0, "column-split"),
    ("whole-row-split", (601, 4093), 0, "column-split"),
    ("middle", (16, 50, 40), 1, "column"),
    ("middle-split", (6, 200, 40), 1, "column-split"),   # 6 kernel rows: chunks of 200
    ("one-input-row", (1, 40), 0, "column"),
]


def _info(dtype):
    return ml_dtypes.finfo(dtype) if np.dtype(dtype).kind == "f" or dtype == ml_dtypes.bfloat16 \
        else np.iinfo(dtype)


def _lines(shape, axis, dtype, rng):
    """Random values with a special pattern on each of the first lines along ``axis``."""
    is_float = _info(dtype).__class__ is not np.iinfo
    if is_float:
        x = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    else:
        x = rng.integers(-5, 6, shape).astype(dtype)          # many ties
    lines = np.moveaxis(x, axis, -1).reshape(-1, shape[axis]).copy()
    n, info = lines.shape[1], _info(dtype)
    patterns = [lambda v: v.fill(3)]
    if is_float:
        patterns += [
            lambda v: v.__setitem__(0, np.nan),
            lambda v: (v.__setitem__(n // 2, np.nan), v.__setitem__(n - 1, 9)),
            lambda v: v.__setitem__(n - 1, np.nan),
            lambda v: v.fill(-np.inf),
            lambda v: (v.fill(info.min), v.__setitem__(0, np.nan)),
            lambda v: (v.fill(info.max), v.__setitem__(0, np.nan), v.__setitem__(n - 1, np.inf)),
            lambda v: (v.fill(-1), v.__setitem__(slice(0, None, 2), -0.0), v.__setitem__(slice(1, None, 2), 0.0)),
            lambda v: v.fill(np.nan),
        ]
    else:
        patterns += [lambda v: v.fill(info.min), lambda v: v.fill(info.max),
                     lambda v: v.__setitem__(n - 1, info.max)]
    patterns.append(lambda v: (v.__setitem__(n // 3, 100), v.__setitem__(n - 1, 100)))  # two chunks
    for line, pattern in zip(lines, patterns):
        pattern(line)
    moved = list(np.moveaxis(x, axis, -1).shape)
    return np.moveaxis(lines.reshape(moved), -1, axis)


def _kernel(f, x) -> list:
    out = []
    for k in f.compiled(x).fusions:
        if k.roots and k.roots[0].op is Op.ARGREDUCE:
            layout = "column" if k.column else "row"
            out.append(layout + ("-split" if k.split > 1 else ""))
    return out


def _check(fn, x, what):
    got, want = tfjit.function(fn, jit_compile=True)(x), tf.function(fn)(x)
    for name in want:
        assert_matches(got[name].numpy(), want[name].numpy(), what=f"{what} {name}")


@pytest.mark.parametrize("dtype", [np.float32, np.int32], ids=lambda d: d.__name__)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_argmax_argmin_match_tf(case, dtype):
    name, shape, axis, kernel = case
    x = tf.constant(_lines(shape, axis, dtype, np.random.default_rng(len(shape) * 1000 + shape[axis])))

    def fn(x):
        out = {"argmax": tf.argmax(x, axis), "argmin i32": tf.argmin(x, axis, output_type=tf.int32)}
        if x.dtype == tf.float32:      # behind a fused producer, and after a statistic
            out["argmax of an expression"] = tf.argmax(tf.exp(x) * 0.5 + x, axis)
            centred = x - tf.reduce_mean(x, axis, keepdims=True)
            out["argmin two-pass"] = tf.argmin(centred * centred, axis)
        return out
    _check(fn, x, name)
    f = tfjit.function(lambda x: tf.argmax(x, axis), jit_compile=True)
    f(x)
    assert _kernel(f, x) == [kernel], f.compiled(x).fusions


@pytest.mark.parametrize("dtype", [np.float64, np.float16, ml_dtypes.bfloat16, np.uint8, np.int64],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", [c for c in CASES if c[0] in ("rows-prime", "long-rows", "column-split")],
                         ids=lambda c: c[0])
def test_other_dtypes_match_tf(case, dtype):
    """Halves keep their own start value (TF's: -65504 for f16), compared in f32."""
    name, shape, axis, _ = case
    x = tf.constant(_lines(shape, axis, dtype, np.random.default_rng(7)))
    _check(lambda x: {"argmax": tf.argmax(x, axis), "argmin": tf.argmin(x, axis)}, x, name)


def test_bool_and_folded_constants_match_tf():
    """Bools (False < True) and a constant input (folded by the IR interpreter)."""
    rng = np.random.default_rng(3)
    b = tf.constant(rng.random((50, 40)) < 0.1)
    c = _lines((9, 300), 1, np.float32, rng)

    def fn(b):
        k = tf.constant(c)
        return {"bool axis 0": tf.argmax(b, 0), "bool axis 1": tf.argmin(b, 1),
                "folded max": tf.argmax(k, 1), "folded min": tf.argmin(k, 0)}
    _check(fn, b, "bool/folded")


def test_plain_operand_is_not_copied_per_block():
    """A row argmax of an input read as stored searches a block by reading it again: the
    stack buffer it used before became a call to memcpy per 256 elements, at twice the
    CPU time of the same max on [8192, 2048].  A computed operand keeps the buffer."""
    x = tf.constant(np.random.default_rng(0).standard_normal((64, 2048)).astype(np.float32))
    def plain_fn(x):
        return tf.argmax(x, 1)

    def computed_fn(x):
        return tf.argmax(tf.exp(x) * 0.5 + x, 1)
    for fn in (plain_fn, computed_fn):
        assert_matches(tfjit.function(fn, jit_compile=True)(x).numpy(), tf.function(fn)(x).numpy(),
                       what=fn.__name__)
    plain = tfjit.function(plain_fn, jit_compile=True)
    plain(x)
    assert "memcpy" not in plain.compiled(x).code.asm()
