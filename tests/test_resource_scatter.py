"""ResourceScatter{Add,Sub,Mul,Div,Min,Max,Update}: compiled into the cluster as an IR
scatter that starts from the variable's value (tfjit/lower/indexing.py), against TF's
kernels -- bit for bit, NaN and the sign of zero included: rows combine in input
order, min/max keep the variable's value on ties and NaNs as TF's cwiseMax(acc, v)
does.  They stopped Keras models with an Embedding trained by SGD (the sparse
update is ResourceScatterSub)."""
from __future__ import annotations

import re
import zlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

R = tf.raw_ops
OPS = ("Add", "Sub", "Mul", "Div", "Min", "Max", "Update")
DTYPES = {"f32": tf.float32, "f64": tf.float64, "i32": tf.int32, "i64": tf.int64, "f16": tf.float16}


def _values(rng, d, shape, specials=True):
    if d[0] == "i":
        return rng.integers(-9, 10, shape).astype(DTYPES[d].as_numpy_dtype)
    x = rng.standard_normal(shape) * 3
    if specials:
        x = np.where(rng.random(shape) < 0.25, rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0], shape), x)
    return x.astype(DTYPES[d].as_numpy_dtype)


def _run(op, var_value, ids, updates, jit):
    v = tf.Variable(var_value)

    def step(i, u):
        getattr(R, f"ResourceScatter{op}")(resource=v.handle, indices=i, updates=u)
        return v.read_value() * 1     # (x + zeros_like(x) would meet grappler: -0 + 0 is -0 in TF)
    fn = tfjit.function(step, jit_compile=True) if jit else tf.function(step)
    out = fn(tf.constant(ids), tf.constant(updates))
    return out.numpy(), v.numpy()


# (name, variable shape, indices) -- updates are indices.shape + var.shape[1:]
SHAPES = [("rows", (5, 3), [0, 2, 0, 4, 2, 2]), ("vector", (6,), [5, 0, 5, 1]),
          ("rank3-2d-ids", (4, 2, 3), [[1, 3], [1, 0]]), ("no-ids", (3, 2), np.zeros([0], np.int32))]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("d", sorted(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_resource_scatter_matches_tf(op, d, shape):
    if op == "Div" and d[0] == "i":
        pytest.skip("integer ResourceScatterDiv: tfjit refuses it (TF divides unchecked)")
    if d == "f16" and op in ("Mul", "Div"):
        pytest.skip("not needed: half rounding is covered by Add/Sub")
    name, var_shape, ids = shape
    rng = np.random.default_rng(zlib.crc32(f"{op}{d}{name}".encode()))
    ids = np.asarray(ids, np.int32)
    updates = _values(rng, d, ids.shape + var_shape[1:], specials=op != "Div")
    if op == "Div":      # TF refuses a 0 (tested below); keep clear of it
        updates = np.where(np.abs(updates) < 0.5, updates + 2, updates).astype(updates.dtype)
    start = _values(rng, d, var_shape)
    got, want = _run(op, start, ids, updates, jit=True), _run(op, start, ids, updates, jit=False)
    for g, w, what in zip(got, want, ("result", "variable")):
        assert_matches(g, w, rtol=0, atol=0, what=f"{op} {d} {name}: {what}")


def test_scalar_updates_apply_to_every_indexed_row():
    start = np.arange(8, dtype=np.float32).reshape(4, 2)
    got = _run("Add", start, [1, 1, 3], np.float32(0.5), jit=True)
    want = _run("Add", start, [1, 1, 3], np.float32(0.5), jit=False)
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("ids", [[1, 4], [-1, 0], [[0, 5]]], ids=["past-end", "negative", "2d"])
def test_an_index_out_of_range_is_tfs_error(ids):
    start, upd = np.zeros([4, 2], np.float32), np.ones(np.shape(ids) + (2,), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError) as tf_error:
        _run("Add", start, ids, upd, jit=False)
    want = re.search(r"indices\[[\d,]+\] = -?\d+ is not in \[0, 4\)", tf_error.value.message).group(0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(want)):
        _run("Add", start, ids, upd, jit=True)


def test_a_zero_divisor_is_tfs_error():
    start, upd = np.ones([3, 2], np.float32), np.array([[1.0, 0.0]], np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="updates must not contain 0"):
        _run("Div", start, [1], upd, jit=False)
    with pytest.raises(tf.errors.InvalidArgumentError, match="updates must not contain 0"):
        _run("Div", start, [1], upd, jit=True)


def test_keras_embedding_trained_by_sgd_compiles_and_matches():
    def build():
        keras.utils.set_random_seed(5)
        tokens = keras.Input((6,), dtype="int32")
        h = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(30, 8)(tokens))
        return keras.Model(tokens, keras.layers.Dense(2)(h))
    rng = np.random.default_rng(5)
    x, y = rng.integers(0, 30, (32, 6)).astype(np.int32), rng.integers(0, 2, 32).astype(np.int32)
    runs = {}
    for jit in (False, True):
        model = build()
        model.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=jit,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        hist = model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
        runs[jit] = (hist.history["loss"], [w.numpy() for w in model.weights], model)
    np.testing.assert_allclose(runs[True][0], runs[False][0], rtol=1e-5)
    for a, b in zip(runs[True][1], runs[False][1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    train = tfjit.keras.step_functions(runs[True][2])["train"]
    (entry,) = [e for e in train._entries.values()]
    assert "scatter(" in entry.latest().module_after      # the sparse update, compiled
