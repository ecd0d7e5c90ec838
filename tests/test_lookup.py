"""Bucketize, LowerBound/UpperBound and ListDiff (lower/lookup.py), compiled by tfjit and compared with TF's
executor exactly (integer results), and their errors in TF's words.

ListDiff's operands are constant inputs: fed at run time, each value compiles once
(constant arguments), as XLA needs them constant too (listdiff_op_test).
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

R = tf.raw_ops
_RNG = np.random.default_rng(3)
FLOATS = np.concatenate([_RNG.uniform(-5, 15, 40),
                         [np.nan, -0.0, 0.0, 3.0, 11.0, np.inf, -np.inf]]).astype(np.float32)

# (id, fn, operands)
CASES = [
    ("Bucketize-f32", lambda x: R.Bucketize(input=x, boundaries=[0., 3., 8., 11.]), [FLOATS]),
    ("Bucketize-f64", lambda x: R.Bucketize(input=x, boundaries=[0.1, 3., 8., 11.]),
     [FLOATS.astype(np.float64)]),
    ("Bucketize-i32-2d", lambda x: R.Bucketize(input=x, boundaries=[0, 3, 8, 11]),
     [np.arange(-5, 15, dtype=np.int32).reshape(4, 5)]),
    # int64 compares in f32, as TF's kernel: 16777217 rounds to 16777216
    ("Bucketize-i64-f32-rounding", lambda x: R.Bucketize(input=x, boundaries=[-1e10, 2.5, 16777217.0]),
     [np.array([-2**40, 2, 3, 16777216, 16777217, 2**40], np.int64)]),
    ("Bucketize-no-boundaries", lambda x: R.Bucketize(input=x, boundaries=[]), [FLOATS]),
    ("Bucketize-repeated-boundary", lambda x: R.Bucketize(input=x, boundaries=[1., 3., 3., 8.]),
     [FLOATS]),
    ("Bucketize-scalar", lambda x: R.Bucketize(input=x[3], boundaries=[0., 1.]), [FLOATS]),
    ("LowerBound-f32", lambda s, v: R.LowerBound(sorted_inputs=s, values=v),
     [np.sort(_RNG.integers(-9, 9, (3, 12)).astype(np.float32), axis=1),
      np.concatenate([_RNG.integers(-10, 10, (3, 9)), np.full((3, 1), np.nan)], 1).astype(np.float32)]),
    ("UpperBound-f32", lambda s, v: R.UpperBound(sorted_inputs=s, values=v),
     [np.sort(_RNG.integers(-9, 9, (3, 12)).astype(np.float32), axis=1),
      np.concatenate([_RNG.integers(-10, 10, (3, 9)), np.full((3, 1), np.nan)], 1).astype(np.float32)]),
    ("LowerBound-i32-out-i64", lambda s, v: R.LowerBound(sorted_inputs=s, values=v, out_type=tf.int64),
     [np.sort(_RNG.integers(-9, 9, (2, 7)), axis=1).astype(np.int32),
      _RNG.integers(-10, 10, (2, 5)).astype(np.int32)]),
    ("UpperBound-empty-rows", lambda s, v: R.UpperBound(sorted_inputs=s, values=v),
     [np.zeros((2, 0), np.float64), np.ones((2, 3), np.float64)]),
    ("ListDiff-duplicates", lambda x, y: R.ListDiff(x=x, y=y, out_idx=tf.int64),
     [np.int32([1, 2, 4, 3, 2, 3, 3, 1]), np.int32([4, 2])]),
    ("ListDiff-floats", lambda x, y: R.ListDiff(x=x, y=y),
     [np.float32([1., np.nan, -0.0, 2., 0.0]), np.float32([0.0, np.nan])]),
    ("ListDiff-all-removed", lambda x, y: R.ListDiff(x=x, y=y),
     [np.int64([5, 5, 7]), np.int64([7, 5, 1])]),
    ("ListDiff-empty-y", lambda x, y: R.ListDiff(x=x, y=y),
     [np.int32([3, 1]), np.zeros([0], np.int32)]),
]


@pytest.mark.parametrize("fn, operands", [pytest.param(f, o, id=i) for i, f, o in CASES])
def test_matches_tf_exactly(fn, operands):
    xs = [tf.constant(o) for o in operands]
    want = tf.nest.flatten(tf.function(fn)(*xs))
    got = tf.nest.flatten(tfjit.function(fn, jit_compile=True)(*xs))
    for g, w in zip(got, want):
        assert_matches(g.numpy(), w.numpy(), rtol=0, atol=0)


def test_list_diff_fed_values_compile_once_each():
    f = tfjit.function(lambda x, y: R.ListDiff(x=x, y=y), jit_compile=True)
    for x, y in (([1, 2, 3], [2]), ([4, 4, 1, 0], [4]), ([1, 2, 3], [2])):
        x, y = tf.constant(x), tf.constant(y)
        for g, w in zip(f(x, y), R.ListDiff(x=x, y=y)):
            assert_matches(g.numpy(), w.numpy(), rtol=0, atol=0)


def test_bucketize_unsorted_boundaries_is_tfs_error():
    fn = lambda x: R.Bucketize(input=x * 2, boundaries=[3., 1.])  # noqa: E731
    x = tf.constant([1, 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="Expected sorted boundaries"):
        tf.function(fn)(x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Expected sorted boundaries"):
        tfjit.function(fn, jit_compile=True)(x)
