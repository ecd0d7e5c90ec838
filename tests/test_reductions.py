"""Reductions over leading dims (column kernels) against TF, and the kernel shape each gets.

A reduction that keeps the last dim (batch-norm statistics over N, H, W; a sum
over the batch) reads its input contiguously along its outputs: a column kernel.
With few outputs it has too few rows to keep every core busy, so it splits its
first reduced dim into chunks and adds them in a second phase (passes/fusion.py
``_split_columns``).  The sums are compared with TF's within a bound on any
order of float additions: n * eps * sum|x| per output.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

# (id, shape, axes, chunks the first reduced dim is split into: 0 for no split)
CASES = [
    ("bn-statistics", (128, 26, 26, 32), (0, 1, 2), 16),
    ("batch-sum", (64, 1000), (0,), 3),
    ("two-dims", (300, 7, 16), (0, 1), 2),
    ("narrow", (4096, 24), (0,), 6),
    ("small", (2, 3, 40), (0, 1), 0),          # too little work to split
    ("whole-row", (512, 4096), (0,), 16),      # one row of outputs: the cores split the rows
    ("whole-row-prime", (601, 4093), (0,), 16),
    ("over-whole-row", (300, 4097), (0,), 0),  # 9 blocks of 512: rows enough
    ("two-input-rows", (2, 2048), (0,), 0),    # (one row is a reshape, no kernel)
    ("three-input-rows", (3, 1500), (0,), 0),
    ("five-input-rows", (5, 37), (0,), 0),     # 4 rows per pass over the outputs, then 1
    ("odd-inner-dim", (6, 5, 40), (0, 1), 0),  # the innermost reduced dim: 4 + 1 per pass
]
DTYPES = [np.float32, np.float64, np.int32]


def reductions(axes):
    return lambda x: (tf.reduce_sum(x, axes), tf.reduce_max(x, axes), tf.reduce_min(x * 3, axes))


def _inputs(shape, dtype, rng):
    if dtype is np.int32:
        return rng.integers(-1000, 1000, shape).astype(np.int32)
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    flat[5], flat[-7] = np.nan, np.inf             # output 5 is NaN, output -7 mostly inf
    return x


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_column_reduction(case, dtype):
    name, shape, axes, chunks = case
    x = tf.constant(_inputs(shape, dtype, np.random.default_rng(3)))
    f = tfjit.function(reductions(list(axes)))
    got, want = f(x), tf.function(reductions(list(axes)))(x)
    n = int(np.prod([shape[a] for a in axes]))
    for k, (g, w) in enumerate(zip(got, want)):
        kw = {}
        if dtype is not np.int32 and k == 0:
            magnitude = tf.reduce_sum(tf.abs(tf.where(tf.math.is_finite(x), x, 0)), axes).numpy()
            kw = {"rtol": 0, "atol": n * np.finfo(dtype).eps * magnitude.max()}
        assert_matches(g.numpy(), w.numpy(), what=f"{name} output {k}", **kw)
    splits = {fu.split for fu in f.compiled(x).fusions if fu.column}
    assert splits, "no column kernel"
    assert splits == ({1} if chunks == 0 else {chunks}), splits


# -- two-pass column statistics ------------------------------------------------------------

@pytest.mark.parametrize("shape", [(8192, 64), (1, 64), (300, 1), (97, 131), (3, 4096), (64, 33, 17)],
                         ids=lambda s: "x".join(map(str, s)))
def test_two_pass_column_statistic_runs_both_passes_column_wise(shape):
    # variance over axis 0: the mean was hoisted into the second reduction, which then
    # walked every column with a stride of a row, both passes (128 ms against XLA's 14
    # on [8192, 2048]); kept apart, both run the column layout where it applies
    x = tf.constant(np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32))

    def var0(x):
        return tf.reduce_mean(tf.square(x - tf.reduce_mean(x, 0, keepdims=True)), 0)
    f = tfjit.function(var0, jit_compile=True)
    assert_matches(f(x).numpy(), tf.function(var0)(x).numpy(), rtol=2e-5, atol=1e-6)
    reductions = [k for k in f.compiled(x).fusions if k.kind == "reduce"]
    if shape[-1] >= 16 and shape[0] > 1:
        assert len(reductions) == 2 and all(k.column for k in reductions), f.compiled(x).fusions
        assert any("gets a kernel of its own" in n for k in f.compiled(x).fusions for n in k.notes)


@pytest.mark.parametrize("shape, axes, block", [
    ((512, 4096), (0,), 4096), ((601, 4093), (0,), 4093), ((300, 4097), (0,), 512),
    ((64, 300, 1024), (1,), 512),      # outputs in several rows: blocks of 512
    ((8192, 2048), (0,), 2048)])
def test_a_statistic_over_axis_0_reads_whole_rows(shape, axes, block):
    """Outputs that are one row of the input take a kernel row each (each reduced row
    read as one contiguous run), up to iteration.COLUMN_WHOLE_ROW outputs."""
    x = tf.constant(np.random.default_rng(5).standard_normal(shape).astype(np.float32))
    f = tfjit.function(lambda x: tf.reduce_sum(x, list(axes)))
    got = f(x)
    assert_matches(got.numpy(), tf.reduce_sum(x, list(axes)).numpy(), rtol=1e-4, atol=1e-3)
    blocks = [fu.column_block for fu in f.compiled(x).fusions if fu.column]
    assert blocks == [block]


# -- column max/min: NaNs flagged apart ------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, tf.bfloat16.as_numpy_dtype],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape, axes", [
    ((5, 37), (0,)),               # 4 rows per pass, then 1
    ((7, 3, 40), (0, 1)),          # the innermost reduced dim: 4 + 3 rows
    ((64, 512, 24), (1,)),         # 3-D middle axis
    ((4096, 24), (0,)),            # split into chunks, combined by a second phase
    ((1, 9), (0,)), ((9, 1), (0,))], ids=lambda v: "x".join(map(str, v)))
def test_column_max_min_nans_and_infinities_in_every_position(shape, axes, dtype):
    """A CPU column row's float max/min compares and selects and keeps a NaN flag per
    output (codegen/reduction.py _flags_nans): a NaN anywhere in a column (first row,
    inside a pass of 4, the rows after the passes, the last row; beside +-inf, or
    alone among -inf) makes that output NaN, as in TF."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape).astype(dtype)
    rows = int(np.prod([shape[a] for a in axes]))
    cols = x.size // rows
    flat = np.moveaxis(x, axes, range(len(axes))).reshape(rows, cols).copy()
    for c in range(cols):
        kind = c % 6
        if kind == 0:
            flat[(c * 7) % rows, c] = np.nan                  # a NaN at a varying row
        elif kind == 1:
            flat[:, c] = -np.inf
            flat[rows - 1, c] = np.nan                        # alone among -inf, last row
        elif kind == 2:
            flat[0, c], flat[rows - 1, c] = np.inf, -np.inf   # infinities only
        elif kind == 3 and rows > 1:
            flat[1, c], flat[rows // 2, c] = np.nan, np.inf   # NaN beside +inf
        elif kind == 4:
            flat[:, c] = -np.inf                              # all -inf: the max is -inf
    moved = flat.reshape([shape[a] for a in axes] + [s for i, s in enumerate(shape) if i not in axes])
    x = tf.constant(np.moveaxis(moved, range(len(axes)), axes))

    def f(x):
        return tf.reduce_max(x, list(axes)), tf.reduce_min(x, list(axes))
    compiled = tfjit.function(f, jit_compile=True)
    for k, (got, want) in enumerate(zip(compiled(x), tf.function(f)(x))):
        assert_matches(got.numpy(), want.numpy(), rtol=0, atol=0, what=f"output {k}",
                       check_zero_sign=False)
    if rows > 1 and cols > 1:
        assert any(fu.column for fu in compiled.compiled(x).fusions), compiled.compiled(x).fusions


def test_a_whole_tensor_statistic_is_not_recomputed_by_every_row():
    """x * min(1, c / norm(x)) and tf.clip_by_global_norm: the norm is a kernel of its
    own (each row of the scaling kernel recomputed all of it: 3.6 s on [4096, 4096]),
    and the results are TF's."""
    rng = np.random.default_rng(11)
    x = tf.constant(rng.standard_normal((300, 200)).astype(np.float32))
    y = tf.constant(rng.standard_normal((50, 7)).astype(np.float32))

    def scale(x):
        return x * tf.minimum(1.0, 5.0 / tf.norm(x))

    def clip(x, y):
        return tf.clip_by_global_norm([x, y], 3.0)[0]
    for fn, args in ((scale, (x,)), (clip, (x, y))):
        jit = tfjit.function(fn, jit_compile=True)
        for got, want in zip(tf.nest.flatten(jit(*args)), tf.nest.flatten(fn(*args))):
            assert_matches(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
        fusions = jit.compiled(*args).fusions
        # (a scalar kernel may hoist one: the sum of the two squared norms)
        assert not any(h.size == 1 for f in fusions if f.kind == "loop" and f.shape
                       for h in f.hoisted), [f.notes for f in fusions]
