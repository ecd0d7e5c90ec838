"""Transformer blocks and the rewrites made for them (issue 14), against TF's executor.

- Pow with a constant exponent of 1, 2, 3, 4 (products) or -1 (a division), as
  tanh-GELU's ``pow(x, 3)``: special values, signed zeros, f16/f32/f64, one element
  and a prime count; other exponents keep the general power.
- ``x @ w`` for x [B, T, K] and a matrix w (kept batched: lower/linalg.py says why).
- ``reduce_sum(x^T @ g, axis=0)`` over a batch (the weight gradient of that product):
  one dot whose contraction runs over the batch (passes/dots.py), and the cases it must
  leave alone (a broadcast operand, other transposes, a dot read elsewhere).
- A pre-LN encoder block and an RMSNorm + SwiGLU block (tools/train_bench.py's, at
  small sizes): forward and gradients of every variable.

Sizes cover 1 row, 1 column and primes.  Nothing here measures time.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

SPECIAL = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, -2.5, 3e12, -7e12, 1e-15, 2.2e-13,
           1e-30, 65504.0, 40.0, -40.0]


def _values(n: int, dtype, rng) -> tf.Tensor:
    x = np.concatenate([np.array(SPECIAL), rng.standard_normal(n) * 3])
    return tf.constant(x.astype(dtype))


def _ops(compiled) -> list:
    return [line.split("=")[1].split("(")[0].split()[-1] for line in compiled.module_after.splitlines()
            if " = " in line]


# -- pow with a constant exponent ------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("exponent, rewritten", [(1.0, True), (2.0, True), (3.0, True), (4.0, True),
                                                 (-1.0, True), (2.5, False), (-2.0, False),
                                                 (0.5, False), (0.0, False)])
@pytest.mark.parametrize("n", [1, 13])
def test_pow_by_a_constant_is_tfs(dtype, exponent, rewritten, n):
    rng = np.random.default_rng(n)
    x = _values(n, dtype, rng)

    def f(x):
        return tf.pow(x, tf.constant(exponent, x.dtype)) * 2.0
    got = tfjit.function(f, jit_compile=True)
    assert_matches(got(x).numpy(), f(x).numpy(), what=f"pow(x, {exponent})")
    if dtype is not np.float16:          # f16 computes in f32: converts around either form
        assert ("power" in _ops(got.compiled(x))) is not rewritten


def test_pow_by_a_constant_tensor_of_one_value_and_of_several():
    rng = np.random.default_rng(3)
    x = tf.constant(rng.standard_normal((7, 5)).astype(np.float32))
    same = np.full((7, 5), 3.0, np.float32)
    mixed = np.tile(np.float32([1, 2, 3, 4, 2.5]), (7, 1))
    for y, rewritten in ((same, True), (mixed, False)):
        def f(x, values=y.tolist()):      # a Const node in the graph, not a captured input
            return tf.pow(x, tf.constant(values, tf.float32))
        got = tfjit.function(f, jit_compile=True)
        assert_matches(got(x).numpy(), f(x).numpy())
        assert ("power" in _ops(got.compiled(x))) is not rewritten


def test_pow_of_a_variable_exponent_and_of_integers_keep_tfs_meaning():
    x = tf.constant(np.float32([-2, 0, 1.5, np.inf]))
    y = tf.constant(np.float32([3, 3, 3, 3]))
    f = tfjit.function(lambda x, y: tf.pow(x, y), jit_compile=True)
    assert_matches(f(x, y).numpy(), tf.pow(x, y).numpy())
    i = tf.constant(np.int32([-3, 0, 2, 7]))
    g = tfjit.function(lambda i: tf.pow(i, 3), jit_compile=True)
    assert_matches(g(i).numpy(), tf.pow(i, 3).numpy())


def test_gelu_gradient_through_the_cube():
    x = _values(29, np.float32, np.random.default_rng(5))

    def f(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.nn.gelu(x, approximate=True)
        return y, tape.gradient(y, x)
    for got, want in zip(tfjit.function(f, jit_compile=True)(x), tf.function(f)(x)):
        assert_matches(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


# -- a dense layer on [B, T, K] --------------------------------------

DENSE = [(1, 1, 1, 1), (1, 5, 3, 7), (3, 1, 4, 2), (2, 7, 1, 5), (4, 3, 13, 1), (2, 17, 11, 19)]


@pytest.mark.parametrize("b, t, k, n", DENSE)
@pytest.mark.parametrize("transpose_b", [False, True])
def test_batch_times_one_matrix_is_tfs(b, t, k, n, transpose_b):
    rng = np.random.default_rng(b * 1000 + t * 100 + k * 10 + n)
    x = tf.constant(rng.standard_normal((b, t, k)).astype(np.float32))
    w = tf.constant(rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32))

    def f(x, w):
        return tf.tanh(tf.matmul(x, w, transpose_b=transpose_b))
    got = tfjit.function(f, jit_compile=True)
    assert_matches(got(x, w).numpy(), f(x, w).numpy(), rtol=1e-5, atol=1e-6)


def test_a_transposed_batch_and_a_batched_rhs_stay_batched():
    rng = np.random.default_rng(9)
    x = tf.constant(rng.standard_normal((3, 4, 5)).astype(np.float32))
    w = tf.constant(rng.standard_normal((4, 2)).astype(np.float32))
    v = tf.constant(rng.standard_normal((3, 5, 2)).astype(np.float32))
    for f, args in ((lambda x, w: tf.matmul(x, w, transpose_a=True), (x, w)),
                    (lambda x, v: tf.matmul(x, v), (x, v))):
        got = tfjit.function(f, jit_compile=True)
        assert_matches(got(*args).numpy(), f(*args).numpy(), rtol=1e-5, atol=1e-6)
        dots = [ln for ln in got.compiled(*args).module_after.splitlines() if " dot(" in ln]
        assert dots and "f32[3," in dots[0], dots


# -- the weight gradient: a batch folded into the contraction ------------------------------

@pytest.mark.parametrize("b, t, k, n", DENSE)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_weight_gradient_is_one_dot_over_the_batch(b, t, k, n, dtype):
    rng = np.random.default_rng(b + 7 * t + 31 * k + 101 * n)
    x = tf.constant(rng.standard_normal((b, t, k)).astype(dtype))
    w = tf.constant(rng.standard_normal((k, n)).astype(dtype))

    def f(x, w):
        with tf.GradientTape() as tape:
            tape.watch(w)
            y = tf.matmul(x, w)
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, w)
    got = tfjit.function(f, jit_compile=True)
    tol = {np.float16: 2e-2}.get(dtype, 1e-5)
    assert_matches(got(x, w).numpy(), tf.function(f)(x, w).numpy(), rtol=tol, atol=tol * t * b)
    after = got.compiled(x, w).module_after
    if dtype is np.float16 or 1 in (t, k, n):     # the product runs in f32 between converts:
        return      # not folded; or a product has a vector side, a reduction (test_vector_dots.py)
    assert " reduce(" not in after, after
    if b > 1:          # (TF's own gradient has no sum over a batch of 1)
        name = "f32" if dtype is np.float32 else "f64"
        assert f"{name}[{k},{n}] dot(" in after and "transpose_lhs=1" in after, after


def test_a_sum_over_a_batch_of_products_with_special_values():
    x = np.random.default_rng(2).standard_normal((3, 5, 4)).astype(np.float32)
    g = np.random.default_rng(4).standard_normal((3, 5, 2)).astype(np.float32)
    x[1, 2, 3], x[2, 0, 0], g[0, 4, 1] = np.nan, np.inf, -np.inf
    x, g = tf.constant(x), tf.constant(g)

    def f(x, g):
        return tf.reduce_sum(tf.matmul(x, g, transpose_a=True), axis=0)
    got = tfjit.function(f, jit_compile=True)
    assert_matches(got(x, g).numpy(), f(x, g).numpy(), rtol=1e-5, atol=1e-5)
    assert " reduce(" not in got.compiled(x, g).module_after


@pytest.mark.parametrize("case", ["broadcast lhs", "lhs not transposed", "rhs transposed",
                                  "dot read twice", "max, not sum", "sum over rows"])
def test_sums_of_products_that_are_not_folded(case):
    rng = np.random.default_rng(len(case))
    x = tf.constant(rng.standard_normal((3, 5, 4)).astype(np.float32))
    g = tf.constant(rng.standard_normal((3, 5, 2)).astype(np.float32))
    one = tf.constant(rng.standard_normal((1, 5, 4)).astype(np.float32))
    sq = tf.constant(rng.standard_normal((3, 4, 5)).astype(np.float32))
    f, args = {
        "broadcast lhs": (lambda a, g: tf.reduce_sum(tf.matmul(a, g, transpose_a=True), 0), (one, g)),
        "lhs not transposed": (lambda a, g: tf.reduce_sum(tf.matmul(a, g), 0), (sq, g)),
        "rhs transposed": (lambda a, g: tf.reduce_sum(tf.matmul(a, g, transpose_a=True, transpose_b=True), 0),
                           (x, tf.transpose(g, [0, 2, 1]))),
        "dot read twice": (lambda a, g: (tf.reduce_sum(tf.matmul(a, g, transpose_a=True), 0),
                                         tf.matmul(a, g, transpose_a=True)), (x, g)),
        "max, not sum": (lambda a, g: tf.reduce_max(tf.matmul(a, g, transpose_a=True), 0), (x, g)),
        "sum over rows": (lambda a, g: tf.reduce_sum(tf.matmul(a, g, transpose_a=True), 1), (x, g)),
    }[case]
    got = tfjit.function(f, jit_compile=True)
    for a, e in zip(tf.nest.flatten(got(*args)), tf.nest.flatten(f(*args))):
        assert_matches(a.numpy(), e.numpy(), rtol=1e-5, atol=1e-5)
    assert " reduce(" in got.compiled(*args).module_after


# -- the blocks ------------------------------------------------------------------------

def _layernorm(x, g, b):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-5) * g + b


def _encoder(vs, x, mask, heads):
    wq, wk, wv, wo, w1, b1, w2, g1, g2 = vs
    bsz, t, d = x.shape
    dh = d // heads

    def split(y):
        return tf.transpose(tf.reshape(y, [bsz, t, heads, dh]), [0, 2, 1, 3])
    h = _layernorm(x, g1, 0.0)
    q, k, v = (split(tf.matmul(h, w)) for w in (wq, wk, wv))
    s = tf.matmul(q, k, transpose_b=True) * (1.0 / np.sqrt(dh)) + (1.0 - mask[:, None, None, :]) * -1e9
    a = tf.reshape(tf.transpose(tf.matmul(tf.nn.softmax(s, axis=-1), v), [0, 2, 1, 3]), [bsz, t, d])
    x = x + tf.matmul(a, wo)
    h = tf.nn.gelu(tf.matmul(_layernorm(x, g2, 0.0), w1) + b1, approximate=True)
    return x + tf.matmul(h, w2)


def _swiglu(vs, x):
    wg, wu, wd, g = vs
    h = x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) + 1e-6) * g
    return x + tf.matmul(tf.nn.silu(tf.matmul(h, wg)) * tf.matmul(h, wu), wd)


def _block_case(kind, bsz, t, d, heads, ff, seed):
    rng = np.random.default_rng(seed)

    def m(*s):
        return tf.constant((rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32))
    x = tf.constant(rng.standard_normal((bsz, t, d)).astype(np.float32))
    mask = tf.constant((np.arange(t)[None] < rng.integers(1, t + 1, bsz)[:, None]).astype(np.float32))
    if kind == "encoder":
        vs = [m(d, d), m(d, d), m(d, d), m(d, d), m(d, ff), m(ff), m(ff, d),
              tf.constant(rng.uniform(0.5, 1.5, d).astype(np.float32)),
              tf.constant(rng.uniform(0.5, 1.5, d).astype(np.float32))]
        return (lambda vs, x, mask: _encoder(vs, x, mask, heads)), vs, (x, mask)
    vs = [m(d, ff), m(d, ff), m(ff, d), tf.constant(rng.uniform(0.5, 1.5, d).astype(np.float32))]
    return (lambda vs, x, mask: _swiglu(vs, x)), vs, (x, mask)


BLOCKS = [("encoder", 2, 5, 8, 2, 16), ("encoder", 1, 1, 4, 1, 4), ("encoder", 3, 7, 12, 3, 13),
          ("swiglu", 2, 5, 8, 0, 16), ("swiglu", 1, 1, 1, 0, 1), ("swiglu", 3, 7, 11, 0, 13)]


@pytest.mark.parametrize("kind, bsz, t, d, heads, ff", BLOCKS)
def test_block_forward_and_gradients_are_tfs(kind, bsz, t, d, heads, ff):
    block, vs, (x, mask) = _block_case(kind, bsz, t, d, heads, ff, seed=bsz * 100 + t * 10 + d)

    def step(x, mask, *vs):
        with tf.GradientTape() as tape:
            tape.watch(vs)
            y = block(list(vs), x, mask)
            loss = tf.reduce_mean(tf.square(y - 0.5))
        return [y, loss] + tape.gradient(loss, list(vs))
    got = tfjit.function(step, jit_compile=True)(x, mask, *vs)
    want = tf.function(step)(x, mask, *vs)
    # A gradient that cancels exactly (one key: softmax's gradient is 0) is a sum of
    # signed zeros, whose sign depends on the GEMM's blocking: TF's default and oneDNN
    # kernels, both TF's and chosen by timing at the first run, differ there.
    for k, (a, e) in enumerate(zip(got, want)):
        assert_matches(a.numpy(), e.numpy(), rtol=1e-4, atol=1e-5, what=f"{kind} output {k}",
                       check_zero_sign=False)
