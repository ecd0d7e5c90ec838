"""GatherNd, ScatterNd, TensorScatter* and ResourceScatterNd* (tfjit/lower/indexing_nd.py)
against TF's CPU kernels: bit for bit (NaN and the sign of zero included), duplicate
indices combined in input order, and TF's InvalidArgumentError for an index vector
with a component outside its dim."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

R = tf.raw_ops
DTYPES = {"f32": tf.float32, "f64": tf.float64, "i32": tf.int32, "i64": tf.int64}
# (name, shape, indices): index vectors of length 1 .. rank, duplicates, an empty batch
CASES = [
    ("rows", (5, 3), [[0], [4], [0], [2]]),
    ("elements", (4, 3), [[0, 1], [3, 2], [0, 1], [1, 0]]),
    ("rank3-k2", (3, 4, 2), [[[2, 3], [0, 0]], [[2, 3], [1, 2]]]),
    ("rank3-full", (2, 3, 4), [[1, 2, 3], [0, 0, 0], [1, 2, 3]]),
    ("empty", (3, 2), np.zeros([0, 1], np.int32)),
]


def _values(rng, d, shape):
    if d[0] == "i":
        return rng.integers(-9, 10, shape).astype(DTYPES[d].as_numpy_dtype)
    x = rng.standard_normal(shape) * 3
    x = np.where(rng.random(shape) < 0.25, rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0], shape), x)
    return x.astype(DTYPES[d].as_numpy_dtype)


def _updates_shape(shape, idx):
    return idx.shape[:-1] + tuple(shape[idx.shape[-1]:])


def _both(fn, *args):
    got = tfjit.function(fn)(*args)
    want = tf.function(fn)(*args)
    return got, want


@pytest.mark.parametrize("d", sorted(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gather_nd(case, d):
    name, shape, idx = case
    rng = np.random.default_rng(zlib.crc32(f"g{name}{d}".encode()))
    params = tf.constant(_values(rng, d, shape))
    for itype in (np.int32, np.int64):
        got, want = _both(lambda p, i: tf.gather_nd(p, i) * 1, params, tf.constant(np.asarray(idx, itype)))
        assert_matches(got.numpy(), want.numpy())


@pytest.mark.parametrize("op", ["ScatterNd", "Update", "Add", "Sub", "Min", "Max"])
@pytest.mark.parametrize("d", sorted(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_scatter_nd_and_tensor_scatter(case, d, op):
    name, shape, idx = case
    idx = np.asarray(idx, np.int32)
    rng = np.random.default_rng(zlib.crc32(f"s{name}{d}{op}".encode()))
    tensor = tf.constant(_values(rng, d, shape))
    updates = tf.constant(_values(rng, d, _updates_shape(shape, idx)))
    if op == "ScatterNd":
        def fn(i, u):
            return tf.scatter_nd(i, u, shape) * 1
        got, want = _both(fn, tf.constant(idx), updates)
    else:
        def fn(t, i, u):
            return getattr(R, f"TensorScatter{op}")(tensor=t, indices=i, updates=u) * 1
        got, want = _both(fn, tensor, tf.constant(idx), updates)
    assert_matches(got.numpy(), want.numpy())


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_tensor_scatter_update_of_bools(case):
    """TF's CPU kernel takes bool (Keras's mixed_float16 train step scatters a mask):
    duplicates' last update wins."""
    name, shape, idx = case
    idx = np.asarray(idx, np.int32)
    rng = np.random.default_rng(zlib.crc32(f"b{name}".encode()))
    tensor = tf.constant(rng.random(shape) < 0.5)
    updates = tf.constant(rng.random(_updates_shape(shape, idx)) < 0.5)

    def fn(t, i, u):
        return tf.logical_not(tf.tensor_scatter_nd_update(t, i, u))
    got, want = _both(fn, tensor, tf.constant(idx), updates)
    assert got.dtype == tf.bool
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("op", ["Update", "Add", "Sub", "Min", "Max"])
@pytest.mark.parametrize("d", ["f32", "i64"])
@pytest.mark.parametrize("case", CASES[:4], ids=[c[0] for c in CASES[:4]])
def test_resource_scatter_nd(case, d, op):
    name, shape, idx = case
    idx = np.asarray(idx, np.int64)
    rng = np.random.default_rng(zlib.crc32(f"r{name}{d}{op}".encode()))
    start = _values(rng, d, shape)
    updates = tf.constant(_values(rng, d, _updates_shape(shape, idx)))
    results = []
    for jit in (True, False):
        v = tf.Variable(start)

        def step(i, u, v=v):
            getattr(R, f"ResourceScatterNd{op}")(ref=v.handle, indices=i, updates=u)
            return v.read_value() * 1
        fn = tfjit.function(step) if jit else tf.function(step)
        results.append((fn(tf.constant(idx), updates).numpy(), v.numpy()))
        if jit:
            assert fn.experimental_get_compile_count() == 1
    (got, got_var), (want, want_var) = results
    assert_matches(got, want)
    assert_matches(got_var, want_var)


@pytest.mark.parametrize("bad", [[[0, 3]], [[4, 0]], [[-1, 0]], [[1, 1], [0, -2]]])
def test_an_index_out_of_range_is_tfs_error(bad):
    params = tf.reshape(tf.range(12.0), [4, 3])
    idx = tf.constant(bad, tf.int32)
    upd = tf.ones([len(bad)])
    for fn in (lambda p, i, u: tf.gather_nd(p, i),
               lambda p, i, u: tf.tensor_scatter_nd_add(p, i, u),
               lambda p, i, u: tf.scatter_nd(i, u, [4, 3])):
        with pytest.raises(tf.errors.InvalidArgumentError) as want:
            tf.function(fn)(params, idx, upd)
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[\d+\]") as got:
            tfjit.function(fn)(params, idx, upd)
        assert "node" in got.value.message, (got.value.message, want.value.message)
