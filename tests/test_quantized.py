"""Quantized types (qint8, quint8, qint16, quint16, qint32) in pure data movement
(dtypes.py, lower/registry.py ``quantized=``): compiled as their storage integers, handed
to TF as the quantized type, bit for bit with TF's CPU kernels; every op TF's CPU kernel
does not run on a type, and every op with arithmetic, keeps refusing it."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit.ir import interp
from tfjit.ir.text import module_str, parse_module

R = tf.raw_ops
QTYPES = {"qint8": tf.qint8, "quint8": tf.quint8, "qint16": tf.qint16, "quint16": tf.quint16,
          "qint32": tf.qint32}
ALL_Q = tuple(QTYPES)
Q_8_32 = ("qint8", "quint8", "qint32")
# (name, fn of a [4, 6] quantized tensor, the types TF's CPU kernel runs it on)
MOVES = [
    ("Identity", lambda x: tf.identity(x), ALL_Q),
    ("IdentityN", lambda x: R.IdentityN(input=[x, x])[1], ALL_Q),
    ("StopGradient", lambda x: tf.stop_gradient(x), ALL_Q),
    ("Reshape", lambda x: tf.reshape(x, [3, -1]), ALL_Q),
    ("ExpandDims+Squeeze", lambda x: (tf.expand_dims(x, 1), tf.squeeze(tf.reshape(x, [1, 4, 1, 6]))), ALL_Q),
    ("ConcatV2", lambda x: (tf.concat([x, tf.gather(x, [2, 0])], 0), tf.concat([x, x], 1)), ALL_Q),
    ("GatherV2", lambda x: (tf.gather(x, [3, 0, 3]), tf.gather(x, [[5], [1]], axis=1)), ALL_Q),
    ("Slice", lambda x: tf.slice(x, [1, 2], [2, 3]), Q_8_32),
    ("StridedSlice", lambda x: (x[1:, ::2], x[::-1, 3]), Q_8_32),
    ("GatherNd", lambda x: tf.gather_nd(x, [[3, 5], [0, 0], [3, 5]]), Q_8_32),
    ("Pad", lambda x: tf.pad(x, [[1, 0], [2, 1]]), Q_8_32),
]
# (name, fn, a type) TF's CPU kernel refuses, or an op with arithmetic
REFUSED = [
    ("Transpose", lambda x: tf.transpose(x), "qint8"),
    ("Slice", lambda x: tf.slice(x, [1, 2], [2, 3]), "qint16"),
    ("GatherNd", lambda x: tf.gather_nd(x, [[0, 1]]), "quint16"),
    ("Cast", lambda x: tf.cast(x, tf.int32), "qint8"),
    ("Sum", lambda x: tf.reduce_sum(x, 0), "qint32"),
]


STORAGE = {"qint8": np.int8, "quint8": np.uint8, "qint16": np.int16, "quint16": np.uint16,
           "qint32": np.int32}


def _value(qname: str) -> tf.Tensor:
    """A seeded [4, 6] tensor of ``qname`` spanning its storage range (both ends included)."""
    info = np.iinfo(STORAGE[qname])
    rng = np.random.default_rng(zlib.crc32(qname.encode()))
    x = rng.integers(info.min, info.max, (4, 6), endpoint=True)
    x.flat[:2] = info.min, info.max
    return tf.constant(x.astype(info.dtype), dtype=QTYPES[qname])


CASES = [(name, fn, q) for name, fn, qs in MOVES for q in qs]


@pytest.mark.parametrize("name, fn, q", CASES, ids=[f"{n}-{q}" for n, _, q in CASES])
def test_data_movement_is_tfs_bit_for_bit(name, fn, q):
    x = _value(q)
    f = tfjit.function(fn, jit_compile=True)
    got, want = f(x), tf.function(fn)(x)
    got, want = tf.nest.flatten(got), tf.nest.flatten(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype == QTYPES[q]
        assert_matches(g.numpy(), w.numpy(), what=f"{name} on {q}")
    assert f.experimental_get_compile_count() == 1


@pytest.mark.parametrize("name, fn, q", REFUSED, ids=[f"{n}-{q}" for n, _, q in REFUSED])
def test_what_tf_does_not_run_or_computes_is_refused(name, fn, q):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"tfjit does not compile {q} tensors"):
        tfjit.function(fn, jit_compile=True)(_value(q))


def test_auto_mode_compiles_the_movement_and_leaves_the_rest():
    x = _value("quint8")

    def fn(x, i):
        y = tf.concat([tf.gather(x, i), x[1:3]], 0)
        return tf.reshape(y, [-1]), tf.quantization.dequantize(tf.pad(y, [[0, 1], [0, 0]]), 0.0, 6.0)
    f = tfjit.function(fn, jit_compile=None)
    i = tf.constant([2, 2, 0])
    got, want = f(x, i), tf.function(fn)(x, i)
    for g, w in zip(got, want):
        assert_matches(g.numpy(), w.numpy())
    text = str(tfjit.explain(f, verbose=False)(x, i))
    assert "1 cluster(s)" in text and "GatherV2" in text and "Pad" in text, text
    assert "no tfjit lowering for 'Dequantize'" in text, text


def test_module_text_round_trips_and_interprets():
    x = _value("qint16")
    fn = MOVES[6][1]    # GatherV2
    compiled = tfjit.function(fn, jit_compile=True).compiled(x)
    assert "quantized=qint16" in compiled.module_before
    m = parse_module(compiled.module_before)
    assert module_str(m) == compiled.module_before
    assert [d.name for d, _ in m.boundary_params()] == ["qint16"]
    assert [d.name for d, _ in m.boundary_outputs()] == ["qint16", "qint16"]
    got = interp.evaluate(m, [x.numpy()])
    for g, w in zip(got, tf.function(fn)(x)):
        assert_matches(np.asarray(g), w.numpy())
