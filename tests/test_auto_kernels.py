"""Auto mode runs what must-compile runs (issue 3's speed target, behaviour only).

An unmodified tf.function under auto mode must end up as the same compiled
kernels as ``tfjit.function(jit_compile=True)``: one launch node between the
function's arguments and results, the same fusion and buffer plan, and the
compiled code (not the fallback) on every later call.  A function whose whole
graph is one op that TensorFlow runs as several memory passes (Softmax) is
clustered too; eager ops never are.  Results are compared with the same
function run by TensorFlow alone.  No timings are asserted (tools/bench.py
measures them).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from oracle import assert_matches
from tfjit import config, settings
from tfjit.api import autojit
from tfjit.api.function import function as tfjit_function
from tfjit.api.service import SERVICE
from tfjit.api.tracing import tensor_info
from tfjit.graph import auto
from tfjit.lower.registry import multi_pass_ops
from tfjit.runtime import launch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tf_alone(fn, *args):
    """``fn`` as a fresh tf.function run by TensorFlow alone (auto mode off)."""
    saved = config.flags().tfjit_auto_jit
    config.set_flags(tfjit_auto_jit=-1)
    try:
        return tf.function(fn)(*args)
    finally:
        config.set_flags(tfjit_auto_jit=saved)


def launches() -> int:
    s = launch.stats()
    return s["hits"] + s["misses"]


def seed(x, y):
    return tf.reduce_sum(x + y * x)


def chain10(x, y):
    a = x * y + 1.0
    b = tf.maximum(a, 0.5) - x
    c = b * b + y
    d = tf.abs(c) * 0.25 - a
    return tf.minimum(d, 3.0) + b


def gelu(x, y):
    return 0.5 * x * (1.0 + tf.math.erf(x * np.float32(1 / np.sqrt(2.0)))) + y


def layernorm(x, y):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-5) + y


@pytest.mark.parametrize("fn", [seed, chain10, gelu, layernorm], ids=lambda f: f.__name__)
def test_auto_mode_runs_the_kernels_must_compile_runs(auto_mode, fn):
    rng = np.random.default_rng(7)
    x, y = (tf.constant(rng.standard_normal((64, 96), dtype=np.float32)) for _ in range(2))
    must = tfjit_function(fn, jit_compile=True)
    want = tf_alone(fn, x, y)
    assert_matches(must(x, y).numpy(), want.numpy(), rtol=1e-5)

    f = tf.function(fn)
    assert_matches(f(x, y).numpy(), want.numpy(), rtol=1e-5)
    (result,) = autojit.recent
    assert {nd.op for nd in result.graph_def.node} == {"_Arg", "TfjitLaunch", "_Retval"}
    (spec,) = result.specs
    got, expected = SERVICE.latest[spec.key], must.compiled(x, y)
    assert [len(k.roots) for k in got.fusions] == [len(k.roots) for k in expected.fusions]
    assert got.num_kernels == expected.num_kernels
    assert got.plan.temp_bytes == expected.plan.temp_bytes          # the same scratch buffers
    assert got.plan.output_source == expected.plan.output_source

    before, fallbacks = launches(), SERVICE.fallbacks[spec.key]
    for _ in range(3):
        assert_matches(f(x, y).numpy(), want.numpy(), rtol=1e-5)
    assert launches() == before + 3                    # every call runs the launch node ...
    assert SERVICE.fallbacks[spec.key] == fallbacks    # ... and its compiled kernels


# -- an op that TF runs as several passes is worth a cluster of its own -------------------

def analyse(fn, *args, **options):
    cf = tf.function(fn).get_concrete_function(*args)
    return auto.cluster_graph(cf.graph.as_graph_def(), tensor_info(cf.graph),
                              auto.Options(**options),
                              outputs=[(t.op.name, t.value_index) for t in cf.outputs])


def test_a_lone_multi_pass_op_is_a_cluster_and_a_lone_one_pass_op_is_not():
    x = tf.ones([8, 16])
    weights = multi_pass_ops()
    assert weights["Softmax"] == weights["LogSoftmax"] == 4
    for op in (tf.nn.softmax, tf.nn.log_softmax):
        def fn(a, op=op):       # the string op keeps the graph from being one whole cluster
            return op(a), tf.strings.as_string(a)
        result = analyse(fn, x, min_size=4, weights=weights)
        assert len(result.specs) == 1
        assert auto.effective_ops(result.graph, result.specs[0].nodes, weights) == 4
        assert not analyse(fn, x, min_size=5, weights=weights).specs
        assert not analyse(fn, x, min_size=4, weights={}).specs
        assert len(analyse(lambda a, op=op: op(a), x, min_size=5, weights=weights).specs) == 1
    for op in (tf.nn.relu, tf.exp):                # one pass in TF: a cluster gains nothing
        assert not analyse(lambda a, op=op: op(a), x, min_size=2, weights=weights).specs


def test_softmax_counts_as_one_op_when_tensorflow_runs_onednn(monkeypatch):
    # With oneDNN on, TF swaps Softmax for _MklSoftmax (one fused pass) after tfjit's pass.
    monkeypatch.setattr(settings, "onednn_enabled", lambda: True)
    assert "Softmax" not in auto.op_weights() and auto.op_weights()["LogSoftmax"] == 4
    assert "Softmax" not in auto.Options().weights
    monkeypatch.setattr(settings, "onednn_enabled", lambda: False)
    assert auto.Options().weights["Softmax"] == 4


def test_a_function_of_one_softmax_is_one_launch_but_eager_ops_never_are(auto_mode, monkeypatch):
    monkeypatch.setattr(settings, "onednn_enabled", lambda: False)
    seen = []        # (function name, graph bytes) of every graph the pass was offered

    def spy(data, is_function, jit_level, function_name):
        seen.append((function_name, data))
        return autojit.on_graph(data, is_function, jit_level, function_name)
    launch.set_pass_callback(spy)
    try:
        x = tf.constant(np.random.default_rng(8).standard_normal((32, 40), dtype=np.float32))
        rows = tf.constant([[np.inf, 1.0, -np.inf], [np.nan, 0.0, 1.0], [-0.0, 0.0, 1e30]],
                           tf.float32)
        for fn, arg in ((tf.nn.softmax, x), (tf.nn.log_softmax, x), (tf.nn.softmax, rows)):
            before = launches()
            got = tf.function(lambda a, fn=fn: fn(a))(arg)
            assert launches() == before + 1
            assert [len(s.nodes) for s in autojit.recent[-1].specs] == [1]
            assert_matches(got.numpy(), tf_alone(lambda a, fn=fn: fn(a), arg).numpy(), rtol=1e-5)
        name, data = next((n, d) for n, d in seen if n.startswith("__inference_"))

        clustered, before, offered = autojit.stats["graphs_clustered"], launches(), len(seen)
        got = tf.nn.softmax(tf.cast(x, tf.float64))      # eager ops: TF's one-op functions
        assert all(autojit.is_eager_op(n) for n, _ in seen[offered:])
        assert autojit.stats["graphs_clustered"] == clustered and launches() == before
        assert_matches(got.numpy(), tf_alone(tf.nn.softmax, tf.cast(x, tf.float64)).numpy(),
                       rtol=1e-12)
    finally:
        launch.set_pass_callback(autojit.on_graph)
    # the same one-op graph is clustered as a tf.function body, never as an eager op
    assert autojit.on_graph(data, True, 2, name) is not None
    eager = "__wrapped__Softmax_device_/job:localhost/replica:0/task:0/device:CPU:0"
    assert autojit.is_eager_op(eager) and autojit.on_graph(data, True, 2, eager) is None


def test_bench_times_the_clustered_function_on_every_call(auto_mode, monkeypatch):
    # TF instantiates a function again when the session config it is called with changes
    # (tf.config.optimizer.set_jit does): tools/bench.py keeps each auto mode on around
    # its own calls, so its auto columns time the clustered graph, not TF graph mode.
    monkeypatch.setenv("TF_XLA_FLAGS", os.environ.get("TF_XLA_FLAGS", ""))
    monkeypatch.syspath_prepend(os.path.join(ROOT, "tools"))
    import bench
    bench._mode_off()
    x = tf.constant(np.random.default_rng(9).standard_normal((16, 24), dtype=np.float32))
    variant = bench.auto_clustered(chain10, [x, x], "tfjit")
    assert config.flags().tfjit_auto_jit == 0           # off outside the function's calls
    plain = tf.function(chain10)
    before = launches()
    times = bench.time_ms({"auto": variant, "plain": bench.Variant(lambda: plain(x, x))},
                          runs=3, warmup=1)
    assert launches() == before + 4 and len(times["auto"]) == 3
