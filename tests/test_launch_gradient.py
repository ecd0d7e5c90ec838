"""The gradient of TfjitLaunch: tf.GradientTape over a tfjit.function (issue 4).

Every gradient is compared with the same tape over the same function as a plain
tf.function: values within float tolerance, and None exactly where TF gives None.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit.api import gradient
from tfjit.lower.registry import RULES


def same(got, want, what="gradient", rtol=1e-5, atol=1e-6):
    got, want = tf.nest.flatten(got), tf.nest.flatten(want)
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        assert (g is None) == (w is None), f"{what} {k}: {g!r} vs TF's {w!r}"
        if w is not None:
            assert_matches(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol, what=f"{what} {k}")


def tape_gradients(f, args, watch, loss_of, sources=()):
    """d loss_of(f(*args)) / d (watched args + sources)."""
    with tf.GradientTape() as tape:
        for a in watch:
            tape.watch(a)
        loss = loss_of(f(*args))
    return tape.gradient(loss, list(watch) + list(sources))


CASES = {   # name: (fn, shapes of its float arguments for a batch of n); loss = sum(out0 * w)
    "elementwise": (lambda x, y: tf.reduce_sum(tf.exp(x * 0.5) * y + tf.sin(x * y), axis=-1),
                    lambda n: [(n, 5), (n, 5)]),
    "broadcast": (lambda x, b: tf.reduce_sum(tf.square(x - b), axis=1) / (1.0 + tf.abs(tf.reduce_sum(b))),
                  lambda n: [(n, 3), (3,)]),
    "softmax": (lambda x, y: tf.nn.softmax(x * y), lambda n: [(n, 6), (n, 6)]),
    "reductions": (lambda x, y: tf.reduce_max(x, axis=1) + tf.reduce_mean(y * x, axis=1),
                   lambda n: [(n, 4), (n, 4)]),
    "division_and_log": (lambda x, y: tf.math.log(x * x + 1.0) / (1.0 + tf.abs(y)),
                         lambda n: [(n,), (n,)]),
}
if "MatMul" in RULES:      # the runtime library's dot: its gradient is two more MatMuls
    CASES["matmul"] = (lambda x, w: tf.matmul(x, w) / (1.0 + tf.abs(tf.matmul(x, w))),
                       lambda n: [(n, 5), (5, 3)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_tf_function_over_calls_and_shapes(name, rng):
    fn, shapes = CASES[name]
    jit, ref = tfjit.function(fn, jit_compile=True), tf.function(fn)
    for n in (3, 3, 7):                      # first call, second call, a new shape
        args = [tf.constant(rng.standard_normal(s).astype(np.float32)) for s in shapes(n)]
        weights = tf.constant(rng.standard_normal(ref(*args).shape).astype(np.float32))

        def loss(out):
            return tf.reduce_sum(out * weights)
        same(tape_gradients(jit, args, args, loss), tape_gradients(ref, args, args, loss),
             what=f"{name} n={n}")
    keys = {e.spec.key for e in jit._entries.values()}
    assert len(keys) == 2 and all(any(k == key for k, _ in gradient._backwards) for key in keys)


def test_the_backward_is_compiled_by_tfjit():
    f = tfjit.function(lambda x: tf.reduce_sum(tf.exp(x) * x))
    x = tf.constant([0.5, 1.5, -2.0])
    tape_gradients(f, [x], [x], lambda y: y)
    (key,) = [e.spec.key for e in f._entries.values()]
    backward = next(fn for (k, _), fn in gradient._backwards.items() if k == key)
    assert backward.jit_compile is True
    compiled = next(iter(backward._entries.values())).latest()
    assert compiled is not None and compiled.num_kernels >= 1


def test_captured_variables_get_gradients_and_untrainable_ones_none(rng):
    w = tf.Variable(rng.standard_normal((4, 3)).astype(np.float32))
    b = tf.Variable(rng.standard_normal((3,)).astype(np.float32))
    frozen = tf.Variable(rng.standard_normal((3,)).astype(np.float32), trainable=False)

    def fn(x):
        return tf.reduce_sum(tf.expand_dims(x, 2) * tf.expand_dims(w, 0), axis=1) * frozen + b

    jit, ref = tfjit.function(fn), tf.function(fn)
    for n in (2, 2, 5):
        x = tf.constant(rng.standard_normal((n, 4)).astype(np.float32))

        def loss(out):
            return tf.reduce_sum(tf.square(out))
        same(tape_gradients(jit, [x], [], loss, [w, b, frozen]),
             tape_gradients(ref, [x], [], loss, [w, b, frozen]), what=f"variables n={n}")
        same(tape_gradients(jit, [x], [x], loss, [w]), tape_gradients(ref, [x], [x], loss, [w]))


def test_unused_outputs_integer_outputs_and_integer_inputs():
    def fn(x, y, n, unused):
        return x * 2.0, tf.sin(y) * 3.0, n * 2, tf.reduce_sum(x * y)

    jit, ref = tfjit.function(fn), tf.function(fn)
    x, y, u = tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0]), tf.constant([9.0])
    n = tf.constant([1, 2])
    for pick in (0, 2, 3):     # one float output, the integer output, the scalar output
        def loss(outs):
            return tf.reduce_sum(tf.cast(outs[pick], tf.float32))
        got = tape_gradients(jit, [x, y, n, u], [x, y, n, u], loss)
        same(got, tape_gradients(ref, [x, y, n, u], [x, y, n, u], loss), what=f"output {pick}")
        assert got[2] is None                       # integer input: no gradient


def test_second_order_gradients_match(rng):
    def fn(x):
        return tf.reduce_sum(tf.sin(x) * x * x)

    x = tf.constant(rng.standard_normal(7).astype(np.float32))
    results = []
    for f in (tfjit.function(fn), tf.function(fn)):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = f(x)
            g = inner.gradient(y, x)
        results.append((g, outer.gradient(g, x)))
    same(results[0], results[1], rtol=1e-4, atol=1e-5)


def test_tape_inside_an_outer_function_with_unknown_batch(rng):
    v = tf.Variable(rng.standard_normal(3).astype(np.float32))

    def fn(x):
        return tf.reduce_sum(tf.exp(x * v) * 0.5, axis=1), x * 3.0

    def make(f):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                a, b = f(x)
                loss = tf.reduce_sum(a * a) + tf.reduce_sum(b)
            return tape.gradient(loss, [x, v])
        return step

    jit_step, ref_step = make(tfjit.function(fn)), make(tf.function(fn))
    for n in (2, 5, 2):
        x = tf.constant(rng.standard_normal((n, 3)).astype(np.float32) * 0.5)
        same(jit_step(x), ref_step(x), what=f"batch {n}")
    ops = [op.type for op in jit_step.get_concrete_function().graph.get_operations()]
    assert ops.count("TfjitLaunch") == 2, ops      # the forward and its backward


def test_auto_clustered_functions_are_differentiable(rng):
    def fn(x):
        y = tf.exp(x) * 2.0 + tf.sin(x) * x - 1.0
        y = tf.debugging.check_numerics(y, "y")          # stays in TensorFlow: two clusters
        return tf.reduce_sum(tf.square(y) * 0.5 + y * x - tf.abs(y))

    auto = tfjit.function(fn, jit_compile=None)
    x = tf.constant(rng.standard_normal(10).astype(np.float32))
    same(tape_gradients(auto, [x], [x], lambda y: y), tape_gradients(tf.function(fn), [x], [x],
                                                                        lambda y: y))
    assert len(auto.clusters(x)) == 2


def test_a_cluster_that_assigns_a_variable_is_not_differentiable():
    v = tf.Variable([1.0, 2.0])

    def fn(x):
        v.assign_add(x)
        return tf.reduce_sum(v * x)

    f = tfjit.function(fn)
    x = tf.constant([0.5, 0.25])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="not differentiable.*AssignAddVariableOp"):
        tape.gradient(y, x)


@pytest.mark.parametrize("forward,op", [(tf.tanh, "TanhGrad"), (tf.sigmoid, "SigmoidGrad")])
def test_a_gradient_op_without_lowering_is_a_must_compile_error(forward, op, monkeypatch):
    monkeypatch.delitem(RULES, op)    # as if tfjit had no lowering for the gradient op
    f = tfjit.function(lambda x: tf.reduce_sum(forward(x)))
    x = tf.constant([0.5, 2.0])
    assert f(x).shape == ()           # the forward compiles ...
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{op} .*{{{{node "):
        tape.gradient(y, x)           # ... its backward does not, and says why
