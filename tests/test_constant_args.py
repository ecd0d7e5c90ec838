"""Constant arguments (issue 16): operands a lowering needs at compile time, fed at run time.

A Reshape's shape, reduction axes, slice bounds, paddings, ... that come from
outside the cluster are read by the launch op, keyed with the signature and
compiled once per value (graph/const_args.py, api/service.py).  Every row runs
two values through the same compiled function and compares both with TF's
executor; the bound (--tfjit_max_constant_argument_variants) falls back in auto
mode and is an error in must-compile.
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
import tensorflow as tf

from oracle import assert_matches
import tfjit
from tfjit import config
from tfjit.api import autojit
from tfjit.api.service import SERVICE
from tfjit.api.tracing import tensor_info
from tfjit.graph import auto

RNG = np.random.default_rng(16)
X2 = RNG.standard_normal((4, 6)).astype(np.float32)
X3 = RNG.standard_normal((2, 3, 4)).astype(np.float32)
X4 = RNG.standard_normal((1, 5, 6, 2)).astype(np.float32)       # NHWC images
W = RNG.standard_normal((3, 3, 2, 3)).astype(np.float32)        # a Conv2D filter
G = RNG.standard_normal((1, 3, 3, 3)).astype(np.float32)        # its output's gradient
WD = RNG.standard_normal((3, 3, 2, 2)).astype(np.float32)       # a depthwise filter
GD = RNG.standard_normal((1, 3, 3, 4)).astype(np.float32)       # its output's gradient
R = tf.raw_ops
S2 = [1, 2, 2, 1]
KEY, COUNTER = np.array([7], np.uint64), np.array([3, 0], np.uint64)


def i32(*v):
    return np.asarray(v if len(v) != 1 else v[0], np.int32)


@dataclasses.dataclass
class Case:
    name: str
    fn: object          # fn(x, *constants)
    x: np.ndarray
    values: tuple       # two tuples of constant arguments (same shapes: one trace)
    oracle: str = "tf"      # "xla": TF's XLA (tf.function(jit_compile=True)) where TF has no kernel


CASES = [
    Case("Sum axes", lambda x, a: tf.reduce_sum(x * 2.0, a), X2, ((i32(0),), (i32(1),))),
    Case("Max axes keepdims", lambda x, a: tf.reduce_max(x + 1.0, a, keepdims=True), X3,
         ((i32(-1, 0),), (i32(0, 2),))),
    Case("Mean axes", lambda x, a: tf.reduce_mean(x - 1.0, a), X3, ((i32(1),), (i32(2),))),
    Case("ArgMax axis", lambda x, a: tf.argmax(x * 3.0, a), X2, ((i32(0),), (i32(1),))),
    Case("Slice begin/size", lambda x, b, s: tf.slice(x + 1.0, b, s), X2,
         ((i32(0, 1), i32(2, 3)), (i32(1, 0), i32(-1, 6)))),
    Case("StridedSlice begin/end/strides", lambda x, b, e, s: tf.strided_slice(x * 2.0, b, e, s), X2,
         ((i32(0, 0), i32(4, 6), i32(1, 2)), (i32(3, 5), i32(0, 0), i32(-1, -2)))),
    Case("Pad paddings", lambda x, p: tf.pad(x + 1.0, p), X2,
         ((i32([1, 0], [0, 2]),), (i32([0, 3], [1, 1]),))),
    Case("MirrorPad REFLECT", lambda x, p: tf.pad(x * 2.0, p, mode="REFLECT"), X2,
         ((i32([1, 2], [0, 3]),), (i32([3, 0], [2, 2]),))),
    Case("MirrorPad SYMMETRIC", lambda x, p: tf.pad(x * 2.0, p, mode="SYMMETRIC"), X2,
         ((i32([4, 0], [0, 6]),), (i32([1, 1], [2, 0]),))),
    Case("Reshape shape", lambda x, s: tf.reshape(x * 2.0, s), X2, ((i32(6, 4),), (i32(2, -1),))),
    Case("Tile multiples", lambda x, m: tf.tile(x + 1.0, m), X2, ((i32(1, 2),), (i32(3, 1),))),
    Case("Transpose perm", lambda x, p: tf.transpose(x * 2.0, p), X3,
         ((i32(2, 0, 1),), (i32(1, 2, 0),))),
    Case("Fill dims", lambda x, d: tf.fill(d, x[0, 0] * 2.0), X2, ((i32(2, 3),), (i32(5, 1),))),
    Case("Range int", lambda x, s, l, d: tf.range(s, l, d) * 2, X2,
         ((i32(0), i32(7), i32(2)), (i32(10), i32(-3), i32(-3)))),
    Case("Range float", lambda x, s, l, d: tf.range(s, l, d) + x[0, 0], X2,
         ((np.float32(0.5), np.float32(3.0), np.float32(0.75)),
          (np.float32(2.0), np.float32(-1.0), np.float32(-0.5)))),
    Case("BroadcastTo shape", lambda x, s: tf.broadcast_to(x[0] * 2.0, s), X2,
         ((i32(3, 6),), (i32(1, 6),))),
    Case("Split axis", lambda x, a: tf.split(x * 2.0, 2, axis=a), X2, ((i32(0),), (i32(1),))),
    Case("SplitV sizes/axis", lambda x, s, a: tf.split(x + 1.0, s, axis=a), X2,
         ((i32(1, 3), i32(0)), (i32(4, -1), i32(1)))),
    Case("computed shape", lambda x, n: tf.reshape(x * 2.0, tf.stack([n * 2, -1])), X2,
         ((i32(1),), (i32(3),))),
]


def _broadcast_gradient_args(x, s):
    r0, r1 = R.BroadcastGradientArgs(s0=tf.shape(x), s1=s)
    return r0, r1, tf.reduce_sum(x * 2.0, r1)


def _max_pool_grad_v2(x, k, s):
    y = R.MaxPoolV2(input=x, ksize=k, strides=s, padding="VALID")
    return R.MaxPoolGradV2(orig_input=x, orig_output=y, grad=y * 0.5 + 1.0, ksize=k, strides=s,
                           padding="VALID")


def _tensor_array(x, n):
    return tf.TensorArray(tf.float32, size=n, element_shape=[6]).write(1, x[0] * 2.0).stack()


def _cond(x, a):
    return tf.cond(tf.reduce_sum(x) > 0, lambda: tf.reduce_sum(x * 2.0, a),
                   lambda: tf.reduce_max(x + 1.0, a))


def _while(x, a):
    """``a`` is a loop invariant (the body passes it on): sunk into the body."""
    init = tf.zeros_like(tf.reduce_sum(x, a))
    return tf.while_loop(lambda i, acc: i < 3,
                         lambda i, acc: (i + 1, acc + tf.reduce_sum(x * tf.cast(i, tf.float32), a)),
                         (0, init))[1]


_reshape = tf.function(lambda y, s: tf.reshape(y + 1.0, s))


# The ops that read operands at compile time beyond the basic ones, and control flow.
CASES += [
    Case("ConcatOffset concat_dim/shape", lambda x, a, s: R.ConcatOffset(concat_dim=a, shape=[tf.shape(x), s]),
         X2, ((i32(0), i32(3, 6)), (i32(1), i32(4, 2)))),
    Case("InvertPermutation", lambda x, p: (tf.math.invert_permutation(p),
                                            tf.transpose(x * 2.0, tf.math.invert_permutation(p))),
         X3, ((i32(2, 0, 1),), (i32(1, 2, 0),))),
    Case("BroadcastGradientArgs s1", _broadcast_gradient_args, X2, ((i32(1, 6),), (i32(4, 1),))),
    Case("DynamicStitch indices", lambda x, i, j: tf.dynamic_stitch([i, j], [x[:2] * 2.0, x[2:] + 1.0]),
         X2, ((i32(0, 2), i32(1, 3)), (i32(2, 0), i32(0, 4)))),     # later wins; row 3 is 0
    Case("DynamicStitch data as a shape", lambda x, n: tf.reshape(
        x * 2.0, tf.dynamic_stitch([[1], [0]], [tf.reshape(n, [1]), [-1]])), X2, ((i32(2),), (i32(3),))),
    Case("MaxPoolV2 ksize/strides", lambda x, k, s: R.MaxPoolV2(input=x * 2.0, ksize=k, strides=s,
                                                               padding="SAME"),
         X4, ((i32(1, 2, 2, 1), i32(1, 2, 2, 1)), (i32(1, 3, 2, 1), i32(1, 1, 2, 1)))),
    Case("MaxPoolGradV2 ksize/strides", _max_pool_grad_v2, X4,
         ((i32(1, 2, 2, 1), i32(1, 2, 2, 1)), (i32(1, 3, 2, 1), i32(1, 1, 3, 1)))),
    Case("AvgPoolGrad orig_input_shape", lambda x, s: R.AvgPoolGrad(
        orig_input_shape=s, grad=x[:, :2, :3] * 2.0, ksize=S2, strides=S2, padding="VALID"),
         X4, ((i32(1, 4, 6, 2),), (i32(1, 5, 7, 2),))),
    Case("Conv2DBackpropInput input_sizes", lambda x, s: R.Conv2DBackpropInput(
        input_sizes=s, filter=W, out_backprop=x * 2.0, strides=S2, padding="SAME"),
         G, ((i32(1, 6, 6, 2),), (i32(1, 5, 5, 2),))),
    Case("Conv2DBackpropFilter filter_sizes", lambda x, s: R.Conv2DBackpropFilter(
        input=x * 2.0, filter_sizes=s, out_backprop=G, strides=S2, padding="SAME"),
         X4, ((i32(3, 3, 2, 3),), (i32(2, 1, 2, 3),))),
    Case("DepthwiseBackpropInput input_sizes", lambda x, s: R.DepthwiseConv2dNativeBackpropInput(
        input_sizes=s, filter=WD, out_backprop=x * 2.0, strides=S2, padding="SAME"),
         GD, ((i32(1, 6, 6, 2),), (i32(1, 5, 5, 2),))),
    Case("DepthwiseBackpropFilter filter_sizes", lambda x, s: R.DepthwiseConv2dNativeBackpropFilter(
        input=x * 2.0, filter_sizes=s, out_backprop=GD, strides=S2, padding="SAME"),
         X4, ((i32(3, 3, 2, 2),), (i32(2, 1, 2, 2),))),
    Case("ResizeNearestNeighbor size", lambda x, s: R.ResizeNearestNeighbor(images=x * 2.0, size=s),
         X4, ((i32(7, 3),), (i32(2, 8),))),
    Case("ResizeNearestNeighborGrad size", lambda x, s: R.ResizeNearestNeighborGrad(grads=x * 2.0, size=s),
         X4, ((i32(3, 4),), (i32(8, 9),))),
    Case("ResizeBilinear size", lambda x, s: R.ResizeBilinear(images=x * 2.0, size=s,
                                                             half_pixel_centers=True),
         X4, ((i32(7, 3),), (i32(3, 9),))),
    Case("ScatterNd shape", lambda x, s: tf.scatter_nd([[1], [3]], x[:2] * 2.0, s), X2,
         ((i32(4, 6),), (i32(5, 6),))),
    Case("UnsortedSegmentMax num_segments", lambda x, n: tf.math.unsorted_segment_max(
        x * 2.0, [0, 2, 0, 1], n), X2, ((i32(3),), (i32(5),))),     # 3, 4 empty: lowest
    Case("SegmentSumV2 num_segments", lambda x, n: R.SegmentSumV2(
        data=x * 2.0, segment_ids=[0, 0, 1, 3], num_segments=n), X2, ((i32(4),), (i32(2),)),
         oracle="xla"),     # TF has no CPU kernel for it; ids past num_segments are dropped
    Case("CumulativeLogsumexp axis", lambda x, a: tf.math.cumulative_logsumexp(x * 2.0, a), X2,
         ((i32(0),), (i32(1),))),
    Case("StatelessRandomUniformV2 shape", lambda x, s: tf.random.stateless_uniform(s, [1, 2]) + x[0, 0],
         X2, ((i32(2, 3),), (i32(4, 1),))),
    Case("StatelessRandomNormalV2 shape/alg", lambda x, s, alg: R.StatelessRandomNormalV2(
        shape=s, key=KEY, counter=COUNTER, alg=alg), X2, ((i32(2, 3), i32(1)), (i32(3, 5), i32(3)))),
    Case("StatelessRandomUniformInt shape", lambda x, s: R.StatelessRandomUniformInt(
        shape=s, seed=[3, 4], minval=-5, maxval=9), X2, ((i32(3, 2),), (i32(1, 7),))),
    Case("TensorListReserve num_elements", _tensor_array, X2, ((i32(2),), (i32(4),))),
    Case("If branch operand", _cond, X2, ((i32(0),), (i32(1),))),
    Case("While loop invariant", _while, X2, ((i32(0),), (i32(1),))),
    Case("function call operand", lambda x, s: _reshape(x * 2.0, s), X2, ((i32(6, 4),), (i32(3, 8),))),
]


def compare(got, want, what):
    got, want = tf.nest.flatten(got), tf.nest.flatten(want)
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        assert_matches(np.asarray(g), np.asarray(w), what=what)


def only_entry(f):
    (entry,) = f._entries.values()
    return entry


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_must_compile_compiles_once_per_value(tfjit, case):
    f, ref = tfjit.function(case.fn), tf.function(case.fn, jit_compile=case.oracle == "xla")
    x = tf.constant(case.x)
    for values in case.values + case.values[:1]:        # the first value again: no compile
        consts = [tf.constant(v) for v in values]
        compare(f(x, *consts), ref(x, *consts), f"{case.name} {values}")
    entry = only_entry(f)
    assert entry.spec.constant_args, "no constant argument found"
    assert SERVICE.compile_counts[entry.spec.key] == 2      # the launch compiled both values
    assert len(SERVICE.variants[entry.spec.key]) == 2


def test_a_run_time_index_of_a_strided_slice_is_not_a_constant_argument(tfjit):
    """x[i] takes its index at run time (a dynamic slice): one compile for every i."""
    fn = lambda x, i: x[i] * 2.0    # noqa: E731
    f = tfjit.function(fn)
    for i in (0, 3, -1):
        compare(f(tf.constant(X2), tf.constant(i)), fn(tf.constant(X2), i), str(i))
    entry = only_entry(f)
    assert entry.spec.constant_args == ()
    assert SERVICE.compile_counts[entry.spec.key] == 1


def test_a_loop_variable_the_body_changes_is_not_a_constant_argument(tfjit):
    """Only a loop invariant can be sunk into a body as a constant (XLA's rule too): an
    axis the body changes stays refused, with the lowering's reason and the body."""
    def fn(x, a):
        return tf.while_loop(lambda i, a, acc: i < 3,
                             lambda i, a, acc: (i + 1, 1 - a, acc + tf.reduce_sum(tf.reduce_sum(x, a))),
                             (0, a, 0.0))[2]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"reduction axes \(input 1\) must be a compile-time constant; in while_body"):
        tfjit.function(fn)(tf.constant(X2), tf.constant(0))


BAD_VALUES = [
    ("ConcatOffset", lambda x, s: R.ConcatOffset(concat_dim=0, shape=[tf.shape(x), s]), i32(3, 5),
     "input 1 with shape \\[3, 5\\] doesn't match input 0"),
    ("DynamicStitch", lambda x, i: tf.dynamic_stitch([i], [x[:2] * 2.0]), i32(0, -1),
     "indices\\[0\\] holds -1, which is out of range"),
    ("InvertPermutation", lambda x, p: tf.transpose(x, tf.math.invert_permutation(p)), i32(1, 1, 0),
     "is not a permutation"),
]


@pytest.mark.parametrize("op, fn, value, words", BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_a_bad_constant_argument_value_is_an_error_naming_the_op(tfjit, op, fn, value, words):
    x = tf.constant(X3 if op == "InvertPermutation" else X2)
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.function(fn)(x, tf.constant(value))
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{op} \\(.*{words}"):
        tfjit.function(fn)(x, tf.constant(value))


def test_must_compile_past_the_bound_is_a_clear_error(tfjit, flags):
    config.set_flags(tfjit_max_constant_argument_variants=2)
    fn = lambda x, s: tf.reshape(x + 1.0, s)     # noqa: E731
    f, x = tfjit.function(fn), tf.constant(X2)
    for s in ((4, 6), (6, 4)):
        compare(f(x, tf.constant(s)), fn(x, s), str(s))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="more than 2 values.*tfjit_max_constant_argument_variants"):
        f(x, tf.constant([2, 12]))
    compare(f(x, tf.constant([6, 4])), fn(x, [6, 4]), "a compiled value still runs")


@pytest.fixture
def auto_function(flags):
    """jit_compile=None: every compilable op clusters, every signature compiles at once."""
    config.set_flags(tfjit_min_cluster_size=1, tfjit_enable_lazy_compilation=False)
    return flags


AUTO_CASES = [c for c in CASES if c.name in ("Sum axes", "StridedSlice begin/end/strides",
                                              "MirrorPad REFLECT", "SplitV sizes/axis",
                                              "ResizeBilinear size", "If branch operand")]


@pytest.mark.parametrize("case", AUTO_CASES, ids=[c.name for c in AUTO_CASES])
def test_auto_clustering_compiles_once_per_value(tfjit, auto_function, case):
    f, ref = tfjit.function(case.fn, jit_compile=None), tf.function(case.fn)
    x = tf.constant(case.x)
    for values in case.values:
        consts = [tf.constant(v) for v in values]
        compare(f(x, *consts), ref(x, *consts), f"{case.name} {values}")
    (spec,) = only_entry(f).specs
    assert spec.constant_args
    assert len(SERVICE.variants[spec.key]) == 2 and SERVICE.fallbacks[spec.key] == 0


def test_auto_mode_past_the_bound_runs_in_tensorflow_and_warns_once(tfjit, auto_function, caplog):
    config.set_flags(tfjit_max_constant_argument_variants=2)
    fn = lambda x, p: tf.transpose(x * 2.0 + 1.0, p)    # noqa: E731
    f, x = tfjit.function(fn, jit_compile=None), tf.constant(X3)
    perms = [(0, 1, 2), (2, 1, 0), (1, 0, 2), (0, 2, 1), (2, 1, 0)]
    with caplog.at_level(logging.WARNING, logger="tfjit"):
        for p in perms:
            compare(f(x, tf.constant(p)), fn(x, p), str(p))
    (spec,) = only_entry(f).specs
    assert len(SERVICE.variants[spec.key]) == 2
    assert SERVICE.fallbacks[spec.key] == 2          # the third and fourth perms
    warnings = [r for r in caplog.records if "tfjit_max_constant_argument_variants" in r.getMessage()]
    assert len(warnings) == 1


def test_graph_pass_and_session_give_the_launch_its_constant_arguments(tfjit, flags):
    """The auto-clustering pass (TF1 Session with global_jit_level): the launch node of
    the rewritten graph carries constant_args and compiles per fed value."""
    config.set_flags(tfjit_auto_jit=2, tfjit_cpu_global_jit=True, tfjit_min_cluster_size=1,
                     tfjit_enable_lazy_compilation=False)
    autojit.activate()
    autojit.recent.clear()
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4, 6])
        shape = tf.compat.v1.placeholder(tf.int32, [2])
        y = tf.reduce_sum(tf.reshape(tf.exp(x) * 2.0 + x, shape), axis=1)
    with tf.compat.v1.Session(graph=g) as sess:
        for s in ((3, 8), (12, 2)):
            got = sess.run(y, {x: X2, shape: s})
            assert_matches(got, np.sum(np.reshape(np.exp(X2) * 2.0 + X2, s), axis=1),
                           rtol=1e-5, what=str(s))
    result = next(r for r in reversed(autojit.recent) if any("Reshape" in n for n in r.graph.nodes))
    (spec,) = result.specs
    assert spec.constant_args and len(SERVICE.variants[spec.key]) == 2
    (node,) = [n for n in result.graph_def.node if n.op == "TfjitLaunch"]
    assert list(node.attr["constant_args"].list.i) == list(spec.constant_args)


def test_a_variable_read_that_must_be_constant_stays_in_tensorflow(tfjit, auto_function):
    v = tf.Variable([3, 8])

    def fn(x):
        return tf.reshape(x * 2.0 + 1.0, v.read_value())
    cf = tf.function(fn).get_concrete_function(tf.TensorSpec([4, 6], tf.float32))
    result = auto.cluster_graph(cf.graph.as_graph_def(), tensor_info(cf.graph),
                                auto.Options(min_size=1))
    (read,) = [n for n, node in result.graph.nodes.items() if node.op == "ReadVariableOp"]
    assert "reads a variable" in result.marks[read]
    assert [s.constant_args for s in result.specs] == [(1,)]
    f = tfjit.function(fn, jit_compile=None)
    for shape in ([3, 8], [2, 12]):
        v.assign(shape)
        compare(f(tf.constant(X2)), np.reshape(X2 * 2.0 + 1.0, shape), str(shape))


def test_the_gradient_through_a_constant_argument(tfjit):
    """The backward of a launch is a must-compile function of the same inputs: it gets
    the constant argument too, and compiles per value."""
    fn = lambda x, a: tf.reduce_sum(tf.sin(x) * x, a)    # noqa: E731
    f, x = tfjit.function(fn), tf.constant(X2)
    for a in (0, 1):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x, tf.constant(a))
        got = tape.gradient(y, x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            want = tape.gradient(fn(x, a), x)
        compare(y, fn(x, a), f"value, axis {a}")
        compare(got, want, f"gradient, axis {a}")


def test_compiler_ir_of_a_constant_argument_needs_its_value(tfjit):
    f = tfjit.function(lambda x, s: tf.reshape(x * 2.0, s))
    with pytest.raises(ValueError, match="once per value of its inputs \\[1\\].*not TensorSpecs"):
        f.experimental_get_compiler_ir(tf.TensorSpec([4, 6], tf.float32), tf.TensorSpec([2], tf.int32))
    x = tf.constant(X2)
    for shape in ([6, 4], [3, 8]):
        ir = f.experimental_get_compiler_ir(x, tf.constant(shape))()
        assert f"i32[2] constant({{{shape[0]}, {shape[1]}}})" in ir        # the value, folded in
        assert f"f32[{shape[0]},{shape[1]}] reshape" in ir
        assert f.compiled(x, tf.constant(shape)).constants[1].tolist() == shape
