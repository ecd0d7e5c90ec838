"""Arguments bind and outputs come back as in ``tf.function`` (tfjit/api/binding.py).

Each row calls one function both ways, ``tfjit.function(jit_compile=True)`` and
``tf.function``, with the same arguments, and compares the results.  Rows give
keywords out of parameter order (they were bound alphabetically, which swapped
``y - x`` into ``x - y``), defaults (a default tensor failed with IndexError),
numpy scalars and arrays, keyword-only and ``**kwargs`` parameters, nested
structures, Python values that retrace, and tf.Variable arguments.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

C = tf.constant


def sub(y, x):
    return y - x


def loss(y_true, y_pred):
    return tf.reduce_sum(tf.square(y_true - y_pred))


def scaled(x, s=C(2.0), shift=1.0):
    return x * s + shift


def keyword_only(a, *, b, c=C(1.0), **rest):
    return a * b + c + tf.add_n([rest[k] * (i + 1) for i, k in enumerate(sorted(rest))] or [0.0])


def varargs(a, *more):
    return a - tf.add_n(list(more)) if more else a


def nested(d, pair):
    return {"sum": d["a"] + pair[1], "diff": d["b"] - pair[0], "echo": (pair[0], d["a"])}


def python_value(x, power, flag=False):
    return (x ** power) * (-1.0 if flag else 1.0)


ROWS = {
    "keywords-swapped": (sub, (), dict(x=C(1.0), y=C(10.0))),
    "keywords-swapped-shapes": (sub, (), dict(x=C([1.0, 2.0]), y=C([[10.0], [20.0]]))),
    "loss-y_pred-first": (loss, (), dict(y_pred=C([3.0, 4.0, 5.0]), y_true=C([1.0, 2.0, 3.0]))),
    "positional-and-keyword": (sub, (C(5.0),), dict(x=C(2.0))),
    "default-tensor": (scaled, (C([1.0, 3.0]),), {}),
    "default-overridden": (scaled, (C([1.0, 3.0]),), dict(shift=-4.0, s=C(0.5))),
    "numpy-scalar": (scaled, (C([1.0, 3.0]), np.float32(4.0)), {}),
    "numpy-array": (sub, (np.arange(4, dtype=np.float32),), dict(x=np.ones(4, np.float32))),
    "numpy-int-scalar": (sub, (np.int32(7), np.int32(3)), {}),
    "keyword-only": (keyword_only, (C(2.0),), dict(c=C(5.0), b=C(3.0))),
    "var-keyword": (keyword_only, (C(2.0),), dict(zeta=C(100.0), b=C(3.0), eta=C(1000.0))),
    "var-positional": (varargs, (C(10.0), C(1.0), C(2.0)), {}),
    "nested-dict-and-list": (nested, ({"b": C(2.0), "a": C(1.0)}, [C(5.0), C(7.0)]), {}),
    "nested-keywords": (nested, (), dict(pair=(C(5.0), C(7.0)), d={"a": C(1.0), "b": C(-3.0)})),
    "python-values": (python_value, (C([2.0, 3.0]),), dict(flag=True, power=3)),
}


@pytest.mark.parametrize("row", sorted(ROWS))
def test_arguments_bind_as_in_tf_function(row):
    fn, args, kwargs = ROWS[row]
    got = tfjit.function(fn, jit_compile=True)(*args, **kwargs)
    want = tf.function(fn)(*args, **kwargs)
    tf.nest.assert_same_structure(got, want)
    for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
        assert_matches(np.asarray(g), np.asarray(w), what=row)


def test_keyword_order_and_python_values_key_the_signature():
    f = tfjit.function(python_value, jit_compile=True)
    x = C([2.0, 3.0])
    np.testing.assert_array_equal(f(x, 2), [4.0, 9.0])
    np.testing.assert_array_equal(f(x, power=3), [8.0, 27.0])
    np.testing.assert_array_equal(f(power=2, x=x, flag=True), [-4.0, -9.0])
    np.testing.assert_array_equal(f(x, 2, False), [4.0, 9.0])     # same as the first call
    assert f.experimental_get_compile_count() == 3


def test_list_and_tuple_are_different_signatures():
    f = tfjit.function(lambda p: p[0] * 2.0 + p[1], jit_compile=True)
    assert float(f([C(1.0), C(2.0)])) == 4.0
    assert float(f((C(1.0), C(2.0)))) == 4.0
    assert f.experimental_get_compile_count() == 2


def test_a_call_python_refuses_is_its_type_error():
    f = tfjit.function(sub, jit_compile=True)
    with pytest.raises(TypeError, match="multiple values for argument 'y'"):
        f(C(1.0), y=C(2.0))
    with pytest.raises(TypeError, match="missing a required argument: 'x'"):
        f(C(1.0))


def test_variable_arguments_are_read_and_written():
    v = tf.Variable([1.0, 2.0])
    w = tf.Variable([1.0, 2.0])

    def step(var, x):
        var.assign_add(x)
        return var.read_value() * 2.0

    f = tfjit.function(step, jit_compile=True)
    got = f(v, C([1.0, 1.0]))
    want = tf.function(step)(w, C([1.0, 1.0]))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(v.numpy(), w.numpy())
    other = tf.Variable([10.0, 20.0])
    np.testing.assert_array_equal(f(other, C([1.0, 1.0])), [22.0, 42.0])   # its own variable
    np.testing.assert_array_equal(v.numpy(), [2.0, 3.0])


def test_composite_arguments_are_refused_clearly():
    f = tfjit.function(lambda r: r.values * 2.0, jit_compile=True)
    with pytest.raises(TypeError, match="does not take RaggedTensor arguments"):
        f(tf.ragged.constant([[1.0], [2.0, 3.0]]))


# -- outputs ---------------------------------------------------------------------------

P = tf.Variable(tf.reshape(tf.range(15.0), [5, 3]))


def sparse_gradient(i):
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.gather(P, i) ** 2)
    return tape.gradient(y, P), y


def mixed_outputs(x):
    sparse = tf.SparseTensor(indices=[[0, 0], [1, 1]], values=tf.stack([x[0, 0], x[1, 1]]) * 3.0,
                             dense_shape=[2, 2])
    ragged = tf.RaggedTensor.from_row_lengths(tf.reshape(x, [-1]) + 1.0, [1, 3], validate=False)
    return {"sparse": sparse, "t": (x * 2.0, None, 3), "ragged": ragged, "last": x - 1.0}


@pytest.mark.parametrize("fn, arg", [(sparse_gradient, C([0, 2, 2])),
                                     (mixed_outputs, C([[1.0, -2.0], [0.0, 4.0]]))],
                         ids=["indexed-slices-then-tensor", "sparse-ragged-none-python-in-a-dict"])
def test_composite_outputs_round_trip(fn, arg):
    # An IndexedSlices output shifted every later output by its component count: y came
    # back as the slices' values and g.values was a symbolic graph tensor
    got, want = tfjit.function(fn, jit_compile=True)(arg), tf.function(fn)(arg)
    tf.nest.assert_same_structure(got, want, expand_composites=True)
    for g, w in zip(tf.nest.flatten(got, expand_composites=True),
                    tf.nest.flatten(want, expand_composites=True)):
        assert hasattr(g, "numpy") or not isinstance(g, tf.Tensor), g     # eager, not symbolic
        assert_matches(np.asarray(g), np.asarray(w), what=fn.__name__)


def test_composite_outputs_round_trip_in_auto_mode():
    got, want = tfjit.function(sparse_gradient, jit_compile=None)(C([1, 4])), tf.function(sparse_gradient)(C([1, 4]))
    assert isinstance(got[0], tf.IndexedSlices)
    np.testing.assert_array_equal(got[0].values, want[0].values)
    np.testing.assert_array_equal(got[0].indices, want[0].indices)
    assert float(got[1]) == float(want[1])
