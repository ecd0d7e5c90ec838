"""Stateful random ops (issue 16): tfjit against TensorFlow's executor, bit for bit, call after call.

TF's RandomUniform, RandomStandardNormal, TruncatedNormal and RandomUniformInt
keep a Philox counter per kernel that every run advances by 256 blocks per
output element (RandomShuffle: by its rows - 1 samples).  tfjit splits each node
into TfjitRandomReserve (the same state, kept by TF) and the stateless op it
compiles (graph/random_state.py), so every
call of a seeded graph must give TF's numbers to the bit: three successive calls
of one tfjit.function (several output sizes in one graph, so each node's counter
skips by its own amount), of a Session (two random nodes, and a run of another
fetch set in between, which TF serves with the same kernels) and of an auto-mode
tf.function, whose random node must be inside a cluster.  Unseeded nodes draw
their key per kernel, so only their range and moments are checked.
"""
from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from tfjit import config
from tfjit.api import autojit

from test_random_ops import assert_bits_equal

R = tf.raw_ops
CALLS = 3
# 1 element, groups of 4 (2 for f64) ending mid-group, empty, and a size whose
# truncated normal rejects in many groups
SHAPES = [(1,), (7,), (3, 5), (2, 0), (1031,)]
SEEDS = (3, 11)          # a row's seed/seed2; one row uses wide and negative ones


@dataclasses.dataclass(frozen=True)
class Row:
    op: str
    dtypes: tuple
    seeds: tuple = SEEDS

    def draw(self, shape, dtype, k: int):
        """The op's node number k of a graph (seed2 differs per node)."""
        seed, seed2 = self.seeds[0], self.seeds[1] + k
        if self.op == "RandomUniformInt":
            lo, hi = (-5, 1000) if dtype == tf.int32 else (-2**40, 2**50 + 3)
            return R.RandomUniformInt(shape=shape, minval=tf.constant(lo, dtype), maxval=tf.constant(hi, dtype),
                                      seed=seed, seed2=seed2)
        return getattr(R, self.op)(shape=shape, dtype=dtype, seed=seed, seed2=seed2)


ROWS = [
    Row("RandomUniform", (tf.float16, tf.bfloat16, tf.float32, tf.float64)),
    Row("RandomStandardNormal", (tf.float16, tf.float32, tf.float64)),
    Row("TruncatedNormal", (tf.bfloat16, tf.float32, tf.float64), seeds=(2**40 + 3, -5)),
    Row("RandomUniformInt", (tf.int32, tf.int64)),
]
CASES = [(r, d) for r in ROWS for d in r.dtypes]


@pytest.mark.parametrize("row,dtype", CASES, ids=[f"{r.op}-{d.name}" for r, d in CASES])
def test_successive_calls_match_tf_bits(row, dtype):
    def fn():
        return [row.draw(s, dtype, k) for k, s in enumerate(SHAPES)]
    compiled, reference = tfjit.function(fn, jit_compile=True), tf.function(fn)
    for call in range(CALLS):
        for shape, g, w in zip(SHAPES, compiled(), reference()):
            assert_bits_equal(g.numpy(), w.numpy(), f"{row.op} {dtype.name} {shape}, call {call}")


SHUFFLE_SHAPES = [(), (1,), (1, 4), (7,), (10, 3), (0, 2), (1031,)]   # the first three: copied, no samples


@pytest.mark.parametrize("dtype", [tf.float16, tf.int32, tf.int64, tf.bool])
def test_random_shuffle_matches_tf_bits(dtype):
    """Fisher–Yates over TF's Philox samples (lower/shuffle.py); each node's counter skips
    by (rows - 1) samples rounded up to blocks, none for a value it only copies."""
    values = [tf.constant(np.arange(int(np.prod(s))).reshape(s) % 3 == 0 if dtype == tf.bool
                          else np.arange(int(np.prod(s))).reshape(s), dtype) for s in SHUFFLE_SHAPES]

    def fn():
        return [R.RandomShuffle(value=v, seed=4, seed2=k) for k, v in enumerate(values)]
    compiled, reference = tfjit.function(fn, jit_compile=True), tf.function(fn)
    for call in range(CALLS):
        for shape, g, w in zip(SHUFFLE_SHAPES, compiled(), reference()):
            assert_bits_equal(g.numpy(), w.numpy(), f"RandomShuffle {dtype.name} {shape}, call {call}")


def test_stateless_shuffle_with_run_time_key_and_counter():
    def fn(v, key, counter):
        return R.StatelessShuffle(value=v, key=key, counter=counter, alg=3)     # auto-select: Philox
    v = tf.constant(np.arange(40.0, dtype=np.float32).reshape(20, 2))
    compiled, reference = tfjit.function(fn, jit_compile=True), tf.function(fn)
    for key, counter in (([1], [0, 0]), ([2**64 - 1], [2**64 - 3, 7])):
        args = (v, tf.constant(key, tf.uint64), tf.constant(counter, tf.uint64))
        assert_bits_equal(compiled(*args).numpy(), reference(*args).numpy(), f"key {key} counter {counter}")


def test_a_long_shuffle_is_refused_with_a_reason():
    def fn():
        return R.RandomShuffle(value=tf.range(20000), seed=1, seed2=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"StatelessShuffle of 20000 rows.*slower than TF"):
        tfjit.function(fn, jit_compile=True)()


def test_the_random_tensor_fuses_with_its_consumer():
    """The dropout pattern is one kernel, and its mask changes from call to call as TF's."""
    def dropout(x):
        keep = tf.cast(R.RandomUniform(shape=tf.shape(x), dtype=x.dtype, seed=1, seed2=2) >= 0.3, x.dtype)
        return x * keep * (1 / 0.7)
    x = tf.constant(np.random.default_rng(0).standard_normal((8, 129)).astype(np.float32))
    f, ref = tfjit.function(dropout, jit_compile=True), tf.function(dropout)
    got = [f(x).numpy() for _ in range(CALLS)]
    for k, g in enumerate(got):
        assert_bits_equal(g, ref(x).numpy(), f"dropout call {k}")
    assert not np.array_equal(got[0], got[1])
    assert f.compiled(x).num_kernels == 1


def test_gradient_sees_the_forward_mask():
    """The backward recomputes the fill from the launch's key and counter inputs: the
    same mask as its forward, call after call, as TF's gradient reads TF's mask."""
    def loss(x):
        keep = tf.cast(R.RandomUniform(shape=tf.shape(x), dtype=x.dtype, seed=3, seed2=4) >= 0.5, x.dtype)
        return tf.reduce_sum(x * x * keep)
    x = tf.constant(np.linspace(-1, 1, 37, dtype=np.float32))

    def gradients(fn) -> list:
        out = []
        for _ in range(CALLS):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = fn(x)
            out.append(tape.gradient(y, x).numpy())
        return out
    want = gradients(tf.function(loss))
    for k, (g, w) in enumerate(zip(gradients(tfjit.function(loss, jit_compile=True)), want)):
        assert_bits_equal(g, w, f"gradient, call {k}")


def test_each_signature_and_each_function_has_its_own_state():
    """As TF's concrete functions: a new signature (a retrace) starts from its seed again,
    and two functions with the same seeds do not share a counter."""
    def fn(x):
        return x + tf.cast(R.RandomUniform(shape=[5], dtype=tf.float32, seed=7, seed2=8), x.dtype)
    a, b = tfjit.function(fn, jit_compile=True), tfjit.function(fn, jit_compile=True)
    ref = tf.function(fn)
    f32, f64 = tf.zeros([5]), tf.zeros([5], tf.float64)
    assert_bits_equal(a(f32).numpy(), ref(f32).numpy(), "call 1")
    assert_bits_equal(a(f32).numpy(), ref(f32).numpy(), "call 2")
    assert_bits_equal(a(f64).numpy(), ref(f64).numpy(), "float64's call 1")
    assert_bits_equal(a(f32).numpy(), ref(f32).numpy(), "call 3")
    assert_bits_equal(b(f32).numpy(), tf.function(fn)(f32).numpy(), "another function's call 1")


def test_inside_an_outer_function():
    """A tfjit.function called while tf.function traces: its reserve node is a node of the
    outer graph, with that graph's state, as TF's inlined random node would be."""
    def inner(x):
        return x + R.RandomStandardNormal(shape=[4], dtype=tf.float32, seed=2, seed2=3)
    compiled = tfjit.function(inner, jit_compile=True)
    outer, reference = tf.function(lambda x: compiled(x) * 2.0), tf.function(lambda x: inner(x) * 2.0)
    x = tf.zeros([4])
    for k in range(CALLS):
        assert_bits_equal(outer(x).numpy(), reference(x).numpy(), f"call {k}")


def test_a_shape_known_only_at_run_time_is_refused_with_a_reason():
    def fn(n):
        return R.RandomUniform(shape=n, dtype=tf.float32, seed=1, seed2=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"shape is not known when the function is traced"):
        tfjit.function(fn, jit_compile=True)(tf.constant([3]))


def _session_graph():
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [6, 9], name="x")
        u = R.RandomUniform(shape=[6, 9], dtype=tf.float32, seed=5, seed2=6)
        n = R.RandomUniformInt(shape=[13], minval=tf.constant(-3), maxval=tf.constant(40), seed=5, seed2=7)
        y = x * tf.cast(u >= 0.25, tf.float32) * 2.0 + 1.0
        z = tf.reduce_sum(tf.cast(n, tf.float32) * 0.5 + 1.0) * tf.cast(n[:3], tf.float32) - 2.0
    return g, x, y, z


def _session_runs(level, threads: int = 1):
    g, x, y, z = _session_graph()
    cfg = tf.compat.v1.ConfigProto()
    cfg.graph_options.optimizer_options.global_jit_level = level
    data = np.arange(54, dtype=np.float32).reshape(6, 9)
    with tf.compat.v1.Session(graph=g, config=cfg) as sess:
        if threads == 1:
            out = [sess.run([y, z], {x: data}) for _ in range(CALLS)]
            out.append(sess.run([y], {x: data}))       # another fetch set: another executor
            out.append(sess.run([y, z], {x: data}))
            meta = tf.compat.v1.RunMetadata()
            opts = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
            sess.run([y, z], {x: data}, options=opts, run_metadata=meta)
            names = {n.node_name for d in meta.step_stats.dev_stats for n in d.node_stats}
            return out, names
        out, lock = [], threading.Lock()

        def work():
            for _ in range(4):
                r = sess.run([y, z], {x: data})
                with lock:
                    out.append(r)
        pool = [threading.Thread(target=work) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return out, set()


def test_session_runs_match_tf_bits(flags):
    config.set_flags(tfjit_auto_jit=0, tfjit_cpu_global_jit=True)
    autojit.activate()
    want, _ = _session_runs(tf.compat.v1.OptimizerOptions.OFF)
    got, names = _session_runs(tf.compat.v1.OptimizerOptions.ON_1)
    assert any(n.startswith("tfjit/cluster_") for n in names), names
    assert not {"RandomUniform", "RandomUniformInt"} & names
    for k, (g, w) in enumerate(zip(got, want)):
        for j, (a, b) in enumerate(zip(g, w)):
            assert_bits_equal(a, b, f"run {k} output {j}")


def test_concurrent_runs_never_share_a_counter(flags):
    """Two threads running one Session: each random node's reservation is atomic, so
    each fetch's results are exactly those of as many sequential runs, in some order.
    Which run a thread's `y` and its `z` come from is not fixed: the two random nodes
    keep separate counters, so thread A may reserve first at one and second at the
    other.  TF's executor pairs them the same loose way, so each fetch is compared on
    its own (comparing (y, z) pairs made this test fail now and then)."""
    config.set_flags(tfjit_auto_jit=0, tfjit_cpu_global_jit=True)
    autojit.activate()
    got, _ = _session_runs(tf.compat.v1.OptimizerOptions.ON_1, threads=2)
    g, x, y, z = _session_graph()
    data = np.arange(54, dtype=np.float32).reshape(6, 9)
    with tf.compat.v1.Session(graph=g) as sess:          # TF alone (jit level OFF by default)
        want = [sess.run([y, z], {x: data}) for _ in range(8)]

    def key(a):
        return tuple(np.ravel(a).view(np.uint32).tolist())
    assert len(got) == len(want)
    for fetch in range(2):
        assert sorted(key(r[fetch]) for r in got) == sorted(key(r[fetch]) for r in want), f"fetch {fetch}"


def test_a_random_node_in_a_v1_loop_stays_in_its_frame(flags):
    """The split's new nodes join the loop body's frame (TF refuses a graph whose nodes
    mix frames).  One iteration at a time: with parallel iterations, which iteration
    reserves first is a race in TF's executor itself."""
    config.set_flags(tfjit_auto_jit=0, tfjit_cpu_global_jit=True, tfjit_min_cluster_size=1)
    autojit.activate()
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.disable_control_flow_v2()
        try:
            x = tf.compat.v1.placeholder(tf.float32, [4], name="x")
            body = lambda i, v: (i + 1, v * 0.5 + R.RandomUniform(shape=[4], dtype=tf.float32, seed=1, seed2=2))
            _, out = tf.while_loop(lambda i, v: i < 3, body, [tf.constant(0), x * 2.0], parallel_iterations=1)
            result = out * 3.0 - 1.0
        finally:
            tf.compat.v1.enable_control_flow_v2()
    runs = {}
    for level in (tf.compat.v1.OptimizerOptions.OFF, tf.compat.v1.OptimizerOptions.ON_1):
        cfg = tf.compat.v1.ConfigProto()
        cfg.graph_options.optimizer_options.global_jit_level = level
        autojit.recent.clear()
        with tf.compat.v1.Session(graph=g, config=cfg) as sess:
            runs[level] = [sess.run(result, {x: np.ones(4, np.float32)}) for _ in range(CALLS)]
    assert any("while/RandomUniform" in s.nodes for r in autojit.recent for s in r.specs)
    for k, (g_, w) in enumerate(zip(runs[tf.compat.v1.OptimizerOptions.ON_1], runs[tf.compat.v1.OptimizerOptions.OFF])):
        assert_bits_equal(g_, w, f"run {k}")


def test_auto_mode_clusters_the_random_node(flags):
    config.set_flags(tfjit_auto_jit=2, tfjit_cpu_global_jit=True)
    autojit.activate()
    autojit.recent.clear()

    def fn(x):
        noise = tf.random.normal(tf.shape(x), seed=21) * 0.1
        return tf.nn.relu(x * tf.cast(tf.random.uniform(tf.shape(x), seed=22) >= 0.5, x.dtype) + noise) - 1.0
    x = tf.constant(np.random.default_rng(2).standard_normal((5, 17)).astype(np.float32))
    tf.random.set_seed(9)
    auto = tf.function(fn)
    got = [auto(x).numpy() for _ in range(CALLS)]
    clustered = {n for r in autojit.recent for s in r.specs for n in s.nodes}
    assert any("RandomUniform" in n for n in clustered) and any("RandomStandardNormal" in n for n in clustered), \
        clustered
    config.set_flags(tfjit_auto_jit=0)
    tf.random.set_seed(9)
    ref = tf.function(fn)
    for k, g in enumerate(got):
        assert_bits_equal(g, ref(x).numpy(), f"auto-mode call {k}")


def test_auto_clustered_tfjit_function():
    """tfjit.function(jit_compile=None): the rewritten graph runs as one function, whose
    reserve kernels keep their state from call to call."""
    def fn(x):
        u = R.RandomUniform(shape=[3, 11], dtype=tf.float32, seed=13, seed2=14)
        return tf.nn.relu(x * tf.cast(u >= 0.5, tf.float32) * 2.0 - 1.0) + 3.0
    x = tf.constant(np.random.default_rng(5).standard_normal((3, 11)).astype(np.float32))
    f, ref = tfjit.function(fn, jit_compile=None), tf.function(fn)
    got = [f(x).numpy() for _ in range(CALLS)]
    assert any("RandomUniform" in n for _, nodes, _ in f.clusters(x) for n in nodes), f.clusters(x)
    for k, g in enumerate(got):
        assert_bits_equal(g, ref(x).numpy(), f"call {k}")


def test_unseeded_ops_draw_their_own_key():
    """seed = seed2 = 0: TF draws a random key per kernel; only the distribution can be
    compared, and two kernels (two functions) must differ."""
    n = 20000

    def fn():
        return (R.RandomUniform(shape=[n], dtype=tf.float32), R.RandomStandardNormal(shape=[n], dtype=tf.float32),
                R.TruncatedNormal(shape=[n], dtype=tf.float64),
                R.RandomUniformInt(shape=[n], minval=tf.constant(0), maxval=tf.constant(10)))
    f, g = tfjit.function(fn, jit_compile=True), tfjit.function(fn, jit_compile=True)
    u, z, t, i = (a.numpy() for a in f())
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.02 and abs(u.var() - 1 / 12) < 0.01
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05
    assert np.abs(t).max() < 2 and abs(t.mean()) < 0.05 and abs(t.std() - 0.8796) < 0.03
    assert i.min() == 0 and i.max() == 9 and abs(i.mean() - 4.5) < 0.15
    assert not np.array_equal(u, f()[0].numpy()) and not np.array_equal(u, g()[0].numpy())


def test_bad_bounds_are_a_typed_error():
    def fn():
        return R.RandomUniformInt(shape=[4], minval=tf.constant(3), maxval=tf.constant(3), seed=1, seed2=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="minval < maxval"):
        tf.function(fn)()
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"minval < maxval.*RandomUniformInt"):
        tfjit.function(fn, jit_compile=True)()


def test_split_keeps_the_name_and_control_edges_and_leaves_gpu_nodes():
    from tfjit.graph import random_state
    g = tf.Graph()
    with g.as_default():
        c, lo, hi, shape = tf.constant(1.0, name="c"), tf.constant(0), tf.constant(5), tf.constant([3])
        with tf.control_dependencies([c]):
            R.RandomUniformInt(shape=shape, minval=lo, maxval=hi, seed=1, seed2=2, name="cpu")
        with tf.device("/device:GPU:0"):
            R.RandomUniform(shape=[3], dtype=tf.float32, seed=1, seed2=2, name="gpu")
    gd, _, reserves = random_state.split(g.as_graph_def())
    nodes = {nd.name: nd for nd in gd.node}
    assert reserves == {"cpu": "cpu/tfjit_rng_state"} and nodes["gpu"].op == "RandomUniform"
    cpu = nodes["cpu"]
    assert cpu.op == "StatelessRandomUniformIntV2" and cpu.attr["dtype"].type == tf.int32.as_datatype_enum
    assert list(cpu.input)[1:4] == ["cpu/tfjit_rng_state:0", "cpu/tfjit_rng_state:1", "cpu/tfjit_rng_alg"]
    assert "^c" in cpu.input and "^c" in nodes["cpu/tfjit_rng_state"].input
    reserve = nodes["cpu/tfjit_rng_state"]
    assert (reserve.op, reserve.attr["seed"].i, reserve.attr["seed2"].i) == ("TfjitRandomReserve", 1, 2)


def test_shuffle_module_interprets_and_round_trips():
    """The shuffle's while loop is plain IR: the interpreter (what checks other targets)
    gives TF's permutation, and the module's text parses back to itself."""
    from tfjit.ir.interp import evaluate
    from tfjit.ir.text import module_str, parse_module

    def fn(v, key, counter):
        return R.StatelessShuffle(value=v, key=key, counter=counter, alg=1)
    args = (tf.constant(np.arange(26, dtype=np.int32).reshape(13, 2)), tf.constant([9], tf.uint64),
            tf.constant([5, 2**63], tf.uint64))
    compiled = tfjit.function(fn, jit_compile=True).compiled(*args)
    for text in (compiled.module_before, compiled.module_after):
        assert module_str(parse_module(text)) == text
    (got,) = evaluate(parse_module(compiled.module_before), [a.numpy() for a in args])
    assert_bits_equal(got, tf.function(fn)(*args).numpy(), "interpreted shuffle")
