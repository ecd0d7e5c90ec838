"""InTopKV2 and InTopK (tfjit/lower/nn.py) against TF's CPU kernel: ties with the
target (counted for it), NaN and inf predictions, out-of-range targets, k of 0,
1, the class count and past it, one class, int32 and int64 targets."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

R = tf.raw_ops


def _case(rng):
    p = rng.integers(-3, 4, (16, 7)).astype(np.float32)     # small integers: many ties
    p[1, 2] = np.nan                                        # the target's prediction NaN
    p[2, 5] = np.inf                                        # a non-finite anywhere: false
    p[3, 0] = np.inf                                        # the target's prediction inf
    p[4, 6] = np.nan
    p[5, 3] = -np.inf
    t = np.array([0, 2, 1, 0, 3, 3, -1, 7, 6, 0, 1, 2, 3, 4, 5, 6])  # -1 and 7: out of range
    p[8, :] = p[0, :]                                       # a finite row with ties at the target
    p[8, 6] = p[8].max()
    return p, t


@pytest.mark.parametrize("tdtype", [tf.int32, tf.int64])
def test_in_top_k_v2_matches_tf(tdtype, rng):
    p, t = _case(rng)
    preds, targets = tf.constant(p), tf.constant(t, tdtype)
    fn = lambda p, t, k: R.InTopKV2(predictions=p, targets=t, k=k)  # noqa: E731
    compiled = tfjit.function(fn)
    for k in (0, 1, 2, 3, 7, 9, -1):
        k = tf.constant(k, tdtype)
        assert_matches(compiled(preds, targets, k).numpy(), fn(preds, targets, k).numpy(), what=f"k={k}")


@pytest.mark.parametrize("shape", [(1, 1), (5, 1), (3, 13)], ids=str)
def test_in_top_k_v1_matches_tf(shape, rng):
    p = tf.constant(rng.standard_normal(shape), tf.float32)
    t = tf.constant(rng.integers(0, shape[1], shape[0]), tf.int32)
    for k in (1, 2):
        fn = lambda p, t, k=k: R.InTopK(predictions=p, targets=t, k=k)  # noqa: E731
        assert_matches(tfjit.function(fn)(p, t).numpy(), fn(p, t).numpy())


@pytest.mark.parametrize("shape", [(0, 4), (3, 0)], ids=str)
def test_empty_batch_or_classes(shape):
    p, t = tf.zeros(shape), tf.zeros(shape[:1], tf.int32)
    fn = lambda p, t: R.InTopKV2(predictions=p, targets=t, k=1)  # noqa: E731
    assert_matches(tfjit.function(fn)(p, t).numpy(), fn(p, t).numpy())
