"""tfjit.function called while another function is traced, with partly unknown shapes.

The launch op is a node of the outer graph and compiles lazily, once per
concrete signature (DESIGN.md, "Execution").  Results are compared with the
same outer function around a plain tf.function.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit.api.function import Function
from tfjit.api.service import SERVICE


def body(x, y):
    return tf.nn.softmax(x * y) + tf.reduce_max(x, axis=-1, keepdims=True), tf.reduce_sum(x, axis=0)


def outer_around(inner):
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)] * 2)
    def outer(x, y):
        a, b = inner(x, y)
        return a * 2.0, b
    return outer


def test_unknown_dims_compile_per_concrete_signature(rng):
    inner = tfjit.function(body)
    jit, ref = outer_around(inner), outer_around(tf.function(body))
    shapes = [(3, 5), (8, 2), (3, 5), (1, 7)]
    for s in shapes:
        x, y = (tf.constant(rng.standard_normal(s).astype(np.float32)) for _ in range(2))
        for g, w in zip(jit(x, y), ref(x, y)):
            assert_matches(g.numpy(), w.numpy(), what=str(s))
    (entry,) = inner._entries.values()
    assert entry.lazy and entry.compiled is None
    assert SERVICE.compile_counts[entry.spec.key] == 3          # one per distinct shape
    graph = jit.get_concrete_function().graph
    (node,) = [op for op in graph.get_operations() if op.type == "TfjitLaunch"]
    assert node.get_attr("cluster_def") == entry.spec.graph_def   # the node is self-contained
    assert [o.shape.as_list() for o in node.outputs] == [[None, None], [None]]


def test_a_capture_of_the_outer_graph_is_passed_in_that_graph(rng):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def outer(x):
        offset = tf.reduce_sum(x)                     # a tensor of the outer graph
        return tfjit.function(lambda v: v * 2.0 + offset)(x)
    x = tf.constant(rng.standard_normal(6).astype(np.float32))
    assert_matches(outer(x).numpy(), (x * 2.0 + tf.reduce_sum(x)).numpy())


def counted_range(x):
    n = tf.cast(tf.reduce_sum(x), tf.int32)
    return tf.cast(tf.range(n), tf.float32)     # the error must name this line


RANGE_LINE = counted_range.__code__.co_firstlineno + 2


def test_a_lowering_error_at_run_time_is_the_ops_invalid_argument_error():
    inner = tfjit.function(counted_range)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def outer(x):
        return inner(x) + 1.0
    for _ in range(2):                          # must-compile: never falls back
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            outer(tf.constant([1.0, 2.0]))
        msg = str(info.value)
        assert "Detected unsupported operations when trying to compile graph" in msg
        assert "Range (Range's limit (input 1) must be a compile-time constant) {{node range}}" in msg
        assert f'test_function_in_graphs.py", line {RANGE_LINE}, in counted_range' in msg


def test_fall_back_runs_the_traced_function_when_a_signature_fails(caplog):
    inner = Function(counted_range, fall_back=True)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def outer(x):
        return inner(x) + 1.0
    with caplog.at_level(logging.WARNING, logger="tfjit"):
        for x in ([1.0, 2.0], [2.0, 2.0], [1.0, 2.0]):
            assert_matches(outer(tf.constant(x)).numpy(),
                           (tf.range(int(sum(x)), dtype=tf.float32) + 1.0).numpy())
    failed = [r for r in caplog.records if "compilation failed" in r.getMessage()]
    assert len(failed) == 1, [r.getMessage() for r in caplog.records]


def test_a_function_passed_as_a_default_argument_is_still_compiled(rng):
    # TensorFlow follows ``__wrapped__`` for such objects: with it, the Python function
    # ran uncompiled and nothing said so
    jit = tfjit.function(lambda x: tf.exp(x) * 2.0)
    assert not hasattr(jit, "__wrapped__") and jit.__name__ == "<lambda>"
    outer = tf.function(lambda x, f=jit: f(x) + 1.0)
    x = tf.constant(rng.standard_normal((4, 5)), tf.float32)
    assert_matches(outer(x).numpy(), (tf.exp(x) * 2.0 + 1.0).numpy(), rtol=1e-6)
    assert jit.experimental_get_compile_count() == 1


def test_a_callable_object_whose_attributes_share_tfjits_names_is_wrapped(rng):
    class Scaled:                       # a Keras layer has _lock; objects may have any of these
        _lock, _entries, _fn, name = True, "mine", None, "scaled"

        def __call__(self, x):
            return x * 3.0
    obj = Scaled()
    jit = tfjit.function(obj)
    x = tf.constant(rng.standard_normal(4), tf.float32)
    assert_matches(jit(x).numpy(), x.numpy() * 3.0, rtol=1e-6)
    assert obj._lock is True and obj._entries == "mine"


def test_variable_updates_run_in_program_order_inside_a_tf_while_loop(rng):
    # TfjitLaunch was registered stateless: the loop body did not wait for a launch, so
    # iterations ran their launches out of order (1 then 2..6 became 2..6 then 1); with
    # 64-element steps that was rare, with 4096 most loops.
    n = 4096
    v = tf.Variable(tf.zeros([n]))

    def step(x):
        v.assign(v * 1.5 + x)           # the order of the steps shows in the value
        return tf.reduce_sum(v)

    def loop_of(inner):
        @tf.function
        def loop(xs):
            s = tf.constant(0.0)
            for i in tf.range(tf.shape(xs)[0]):
                s = inner(xs[i])
            return s
        return loop

    jit, ref = loop_of(tfjit.function(step, jit_compile=True)), loop_of(tf.function(step))
    for trial in range(5):
        xs = tf.constant(rng.standard_normal((16, n)).astype(np.float32))
        v.assign(tf.zeros([n]))
        want_sum = ref(xs).numpy()
        want = v.numpy()
        v.assign(tf.zeros([n]))
        got_sum = jit(xs).numpy()
        assert_matches(v.numpy(), want, what=f"variable after the loop, trial {trial}")
        assert_matches(got_sum, want_sum, what=f"last step's sum, trial {trial}")


def test_a_launch_whose_only_effect_is_a_variable_update_is_not_pruned():
    v = tf.Variable(tf.zeros([4]))

    def update(x):
        v.assign(v * 3.0 + x)           # no outputs: only the update says it ran

    def outer_around(inner):
        @tf.function
        def outer(x):
            inner(x)
            inner(x * 2.0)
            return tf.constant(1.0)
        return outer

    values = []
    for inner in (tf.function(update), tfjit.function(update, jit_compile=True)):
        v.assign(tf.ones([4]))
        outer_around(inner)(tf.range(4, dtype=tf.float32))
        values.append(v.numpy())
    assert_matches(values[1], values[0], what="variable after two updates")
    assert not np.array_equal(values[0], np.ones(4, np.float32))    # TF did update it
