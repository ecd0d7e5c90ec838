"""Concurrent groups (passes/concurrency.py) under the launch op, against TF's executor:
independent branches of convolutions and matmuls run as one group of tasks, give TF's
results, and a task that fails reports its error as a lone kernel does."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches


def grouped_steps(compiled) -> list:
    """(group size, [task sizes]) of each concurrent group of the executable."""
    marks = compiled.executable.marks()
    out, s = [], 0
    while s < len(marks):
        group = marks[s][0]
        if group > 1:
            out.append((group, [t for _, t in marks[s:s + group] if t]))
            s += group
        else:
            s += 1
    return out


def inception_block(x, filters):
    """Four branches as an Inception module's: 1x1; 1x1 -> 3x3; 1x1 -> 3x3 -> 3x3; pool -> 1x1."""
    f1, f2a, f2b, f3a, f3b, f3c, f4 = filters
    conv = lambda v, w: tf.nn.relu(tf.nn.conv2d(v, w, 1, "SAME") + 0.1)
    b1 = conv(x, f1)
    b2 = conv(conv(x, f2a), f2b)
    b3 = conv(conv(conv(x, f3a), f3b), f3c)
    b4 = conv(tf.nn.avg_pool2d(x, 3, 1, "SAME"), f4)
    return tf.concat([b1, b2, b3, b4], axis=-1)


@pytest.mark.parametrize("batch, size", [(4, 17), (1, 9)])
def test_inception_block_runs_its_branches_as_one_group(rng, batch, size):
    c = 64
    shapes = [(1, 1, c, 32), (1, 1, c, 48), (3, 3, 48, 64), (1, 1, c, 48), (3, 3, 48, 64),
              (3, 3, 64, 64), (1, 1, c, 32)]
    filters = [tf.constant(rng.standard_normal(s).astype(np.float32) * 0.1) for s in shapes]
    x = tf.constant(rng.standard_normal((batch, size, size, c)).astype(np.float32))
    f = lambda v: inception_block(v, filters)
    g = tfjit.function(f, jit_compile=True)
    groups = grouped_steps(g.compiled(x))
    assert groups and max(len(tasks) for _, tasks in groups) >= 3, groups
    assert any(n > 1 for _, tasks in groups for n in tasks), groups   # a branch as one task
    expected = tf.function(f)(x)
    for _ in range(3):           # tasks claimed by whichever thread comes first: every order
        assert_matches(g(x), expected, rtol=1e-4, atol=1e-5)


def test_matmul_branches_with_a_shared_input_and_variables(rng):
    x = tf.constant(rng.standard_normal((64, 256)).astype(np.float32))
    ws = [tf.Variable(rng.standard_normal((256, 256)).astype(np.float32) * 0.05) for _ in range(4)]

    def f(v):
        outs = [tf.nn.relu(tf.matmul(tf.tanh(v * float(k + 1)), w)) for k, w in enumerate(ws)]
        return tf.concat(outs, 1) * 2.0, tf.reduce_sum(outs[0], 0)

    g = tfjit.function(f, jit_compile=True)
    groups = grouped_steps(g.compiled(x))
    assert any(len(tasks) == 4 for _, tasks in groups), groups
    for got, want in zip(g(x), tf.function(f)(x)):
        assert_matches(got, want, rtol=1e-4, atol=1e-5)


def test_a_failing_task_reports_its_error(rng):
    """Integer division by zero in one branch of a group: the launch reports it as it
    does from a lone kernel, whichever thread ran the branch; the other branches' results
    are not handed out."""
    xs = [tf.constant(rng.standard_normal((64, 256)).astype(np.float32)) for _ in range(3)]
    w = tf.constant(rng.standard_normal((256, 256)).astype(np.float32) * 0.05)

    def f(x1, x2, x3, d):       # three branches from three inputs: nothing to merge
        a = tf.matmul(tf.tanh(x1), w)
        b = tf.matmul(tf.sigmoid(x2), w)
        q = tf.math.floordiv(tf.cast(tf.matmul(x3, w) * 100.0, tf.int32), d)
        return a + b, q

    g = tfjit.function(f, jit_compile=True)
    d = tf.constant(np.arange(64 * 256, dtype=np.int32).reshape(64, 256) % 5 + 1)
    groups = grouped_steps(g.compiled(*xs, d))
    assert any(len(tasks) == 3 for _, tasks in groups), groups
    for got, want in zip(g(*xs, d), tf.function(f)(*xs, d)):
        assert_matches(got, want, rtol=1e-4, atol=1e-5)
    zeros = tf.tensor_scatter_nd_update(d, [[5, 7]], [0])
    for _ in range(3):
        with pytest.raises(tf.errors.InvalidArgumentError, match="Integer division by zero"):
            g(*xs, zeros)


GROUP_PROGRAM = r"""
import sys
import numpy as np, tensorflow as tf
threads = int(sys.argv[1])
if threads:
    tf.config.threading.set_intra_op_parallelism_threads(threads)
import tfjit
from tfjit.runtime import launch
rng = np.random.default_rng(3)
xs = [tf.constant(rng.standard_normal((64, 256)).astype(np.float32)) for _ in range(3)]
w = tf.constant(rng.standard_normal((256, 256)).astype(np.float32) * 0.05)
f = lambda a, b, c: tf.matmul(tf.tanh(a), w) + tf.matmul(tf.sigmoid(b), w) + tf.matmul(tf.exp(c * 0.1), w)
g = tfjit.function(f, jit_compile=True)
g(*xs)
before = launch.stats()
got = g(*xs)
after = launch.stats()
np.testing.assert_allclose(got.numpy(), tf.function(f)(*xs).numpy(), rtol=1e-4, atol=1e-4)
print(after["groups_concurrent"] - before["groups_concurrent"],
      after["groups_one_at_a_time"] - before["groups_one_at_a_time"])
# a task that fails: the launch reports it as a lone kernel does
h = tfjit.function(lambda a, b, d: (tf.matmul(tf.tanh(a), w) + tf.matmul(tf.sigmoid(b), w),
                                    tf.math.floordiv(tf.cast(tf.matmul(xs[2], w) * 100.0, tf.int32), d)),
                   jit_compile=True)
d = np.arange(64 * 256, dtype=np.int32).reshape(64, 256) % 5 + 1
h(xs[0], xs[1], tf.constant(d))
d[5, 7] = 0
try:
    h(xs[0], xs[1], tf.constant(d))
    print("no error")
except tf.errors.InvalidArgumentError as e:
    print("error:", "Integer division by zero" in str(e))
"""


@pytest.mark.parametrize("threads, expect", [
    (2, "1 0"),      # a 3-task group: every one of 2 threads gets a task
    (8, "0 1"),      # 8 threads, 3 tasks: each step split over the 8 instead
])
def test_the_launch_decides_by_its_threads(tmp_path, threads, expect):
    """Whether a group runs concurrently depends on the intra-op pool the launch gets,
    decided at run time: both sides, whatever this machine's core count."""
    import os
    import subprocess
    import sys
    script = tmp_path / "group.py"
    script.write_text(GROUP_PROGRAM)
    out = subprocess.run([sys.executable, str(script), str(threads)], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-2:] == [expect, "error: True"], out.stdout


# -- a loop body's groups (concurrency.schedule_loops, run through run_group) ---------------

def _recurrent_convolutions(x, ws, steps=4):
    """A convolutional recurrence as ConvLSTM2D's: four convolutions of the state a step,
    each of its own filters, then gates."""
    def body(i, h, c):
        z = [tf.nn.conv2d(h, w, 1, "SAME") for w in ws]
        c = tf.sigmoid(z[0]) * c + tf.sigmoid(z[1]) * tf.tanh(z[2] + x[i])
        return i + 1, tf.sigmoid(z[3]) * tf.tanh(c), c
    _, h, c = tf.while_loop(lambda i, h, c: i < steps, body, (0, x[0] * 0.5, x[0] * 0.1),
                            maximum_iterations=steps)
    return h, c


def _loop_groups(compiled) -> list:
    from tfjit.passes import kernel_order
    return [compiled.plan.control[f].groups for f in kernel_order.walk(compiled.fusions)
            if f.kind == "while" and compiled.plan.control[f].groups]


@pytest.mark.parametrize("batch, size, channels, grouped", [
    (8, 12, 32, True),
    (1, 5, 3, False),       # too little work to wake a thread for (concurrency.concurrent)
])
def test_a_loop_body_runs_its_convolutions_as_groups(rng, batch, size, channels, grouped):
    from tfjit.runtime import launch
    x = tf.constant(rng.standard_normal((4, batch, size, size, channels)).astype(np.float32))
    ws = [tf.constant(rng.standard_normal((3, 3, channels, channels)).astype(np.float32) * 0.1)
          for _ in range(4)]
    f = lambda v: _recurrent_convolutions(v, ws)
    g = tfjit.function(f, jit_compile=True)
    compiled = g.compiled(x)
    groups = _loop_groups(compiled)
    assert bool(groups) == grouped, groups
    assert ("tfjit_rt_run_group" in compiled.code.llvm_ir) == grouped
    expected = tf.function(f)(x)
    before = launch.stats()
    for _ in range(3):           # tasks claimed by whichever thread comes first: every order
        for got, want in zip(g(x), expected):
            assert_matches(got, want, rtol=1e-4, atol=1e-5)
    after = launch.stats()
    ran = sum(after[k] - before[k] for k in ("groups_concurrent", "groups_one_at_a_time"))
    assert ran >= (3 * 4 if grouped else 0), (before, after)   # a group each step of each call


def test_a_loop_gradient_runs_its_convolution_gradients_as_groups(rng):
    x = tf.constant(rng.standard_normal((4, 8, 12, 12, 32)).astype(np.float32))
    ws = [tf.Variable(rng.standard_normal((3, 3, 32, 32)).astype(np.float32) * 0.1) for _ in range(4)]

    def f(v):
        with tf.GradientTape() as tape:
            h, c = _recurrent_convolutions(v, ws)
            loss = tf.reduce_sum(h * h) + tf.reduce_sum(c)
        return tape.gradient(loss, ws)
    g = tfjit.function(f, jit_compile=True)
    assert len(_loop_groups(g.compiled(x))) >= 2       # the forward loop and the gradient's
    for got, want in zip(g(x), tf.function(f)(x)):
        assert_matches(got, want, rtol=1e-3, atol=1e-4)


def test_a_failing_task_in_a_loop_body_reports_its_error(rng):
    x = tf.constant(rng.standard_normal((3, 64, 256)).astype(np.float32))
    w = tf.constant(rng.standard_normal((256, 256)).astype(np.float32) * 0.05)

    def f(v, d):
        def body(i, a, q):
            a2 = tf.matmul(tf.tanh(a), w) + tf.matmul(tf.sigmoid(v[i]), w)
            q = q + tf.math.floordiv(tf.cast(tf.matmul(v[i] * 3.0, w) * 100.0, tf.int32), d)
            return i + 1, a2, q
        return tf.while_loop(lambda i, a, q: i < 3, body, (0, v[0], tf.zeros_like(d)))[1:]
    g = tfjit.function(f, jit_compile=True)
    d = tf.constant(np.arange(64 * 256, dtype=np.int32).reshape(64, 256) % 5 + 1)
    assert _loop_groups(g.compiled(x, d))
    for got, want in zip(g(x, d), tf.function(f)(x, d)):
        assert_matches(got, want, rtol=1e-4, atol=1e-4)
    zeros = tf.tensor_scatter_nd_update(d, [[5, 7]], [0])
    for _ in range(3):
        with pytest.raises(tf.errors.InvalidArgumentError, match="Integer division by zero"):
            g(x, zeros)
