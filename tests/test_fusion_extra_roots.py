"""Values read by two kernels written as extra roots of the first (passes/fusion.py
``extra_root_home``): an elementwise value whose users sit before and after a GEMM
(an activation and its gradient) is written by the kernel that feeds the GEMM instead
of a kernel of its own.  Values and gradients against TF's executor, on SwiGLU's train
step and on seeded random chains around two products (the seed is in the test id)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches


def test_a_swiglu_train_step_matches_tf(rng):
    """silu(x W_g) * (x W_u) W_d with its gradients in one compiled step: the silu chain
    is written by the kernel feeding the down projection and read back by the backward
    (passes/fusion.py extra roots); values and gradients against TF's."""
    x = tf.constant(rng.standard_normal((3, 5, 16)), tf.float32)
    ws = [tf.constant(rng.standard_normal(s) * 0.3, tf.float32) for s in ((16, 24), (16, 24), (24, 16))]

    def step(x, wg, wu, wd):
        with tf.GradientTape() as tape:
            tape.watch([wg, wu, wd])
            h = tf.nn.silu(tf.matmul(x, wg)) * tf.matmul(x, wu)
            loss = tf.reduce_mean(tf.square(x + tf.matmul(h, wd)))
        return [loss, *tape.gradient(loss, [wg, wu, wd])]
    jit = tfjit.function(step, jit_compile=True)
    got, want = jit(x, *ws), tf.function(step)(x, *ws)
    for g, w in zip(got, want):
        assert_matches(g.numpy(), w.numpy(), rtol=2e-5, atol=2e-5)
    assert any("is also a root of" in n for k in jit.compiled(x, *ws).fusions for n in k.notes)


UNARY = [tf.sigmoid, tf.tanh, tf.nn.relu, lambda v: v * 0.5, tf.math.softplus]   # bounded growth
BINARY = [tf.add, tf.multiply, tf.subtract, tf.maximum]


@pytest.mark.parametrize("seed", range(12))
def test_random_chains_read_across_products_match_tf(seed):
    """A chain of elementwise values on x @ w1; random ones feed y @ w2 and random ones
    are read again after it (and by the gradient)."""
    rng = np.random.default_rng(seed)
    rows, width = int(rng.integers(1, 9)), int(rng.integers(1, 20))
    x = tf.constant(rng.standard_normal((rows, 7)), tf.float32)
    w1 = tf.constant(rng.standard_normal((7, width)) * 0.5, tf.float32)
    w2 = tf.constant(rng.standard_normal((width, width)) * 0.5, tf.float32)
    plan = [(int(rng.integers(2)), int(rng.integers(len(UNARY))), int(rng.integers(len(BINARY))),
             int(rng.integers(1 << 20))) for _ in range(int(rng.integers(3, 8)))]
    late = [int(k) for k in rng.integers(0, len(plan) + 1, 3)]

    def fn(x, w1, w2):
        with tf.GradientTape() as tape:
            tape.watch(w1)
            values = [tf.matmul(x, w1)]
            for binary, u, b, pick in plan:
                v = values[-1]
                values.append(BINARY[b](v, values[pick % len(values)]) if binary else UNARY[u](v))
            y = tf.matmul(values[-1], w2)
            out = y
            for k in late:
                out = out * values[k]
            loss = tf.reduce_sum(out)
        return out, tape.gradient(loss, w1)
    got, want = tfjit.function(fn, jit_compile=True)(x, w1, w2), tf.function(fn)(x, w1, w2)
    for g, w in zip(got, want):
        assert_matches(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-4)
