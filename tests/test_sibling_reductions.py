"""Sibling column reductions in one kernel (passes/fusion.py ``_merge_siblings``,
codegen/reduction.py ``_column_row``): reductions of one shape that read a common
input, each a column reduction, become one kernel with a root per reduction; and a
loop kernel whose result a column reduction reads at each point once is computed and
written by it (``_merge_producers``).

The policy on IR text (which merge, which stay apart and why); end to end against
TF's executor: mixed kinds (sum with max, NaN included), mixed dtypes (a float and an
int sum, split into chunks: the scratch holds each root's partials), any/all, edge
sizes (one reduced row, a prime number of channels, fewer rows than cores), batch
normalisation's, layer normalisation's and a dense layer's train steps, and the
merged kernels assembled for the GPU.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit.codegen import nvptx
from tfjit.ir.parse import parse_module
from tfjit.passes import fusion
from tfjit.passes.kernels import reductions

needs_ptxas = pytest.mark.skipif(nvptx.ptxas() is None, reason="no ptxas (CUDA toolkit) here")

# sum(x) and sum(x * y) over the rows of [R, C]: two column reductions reading x
SIBLINGS = """module m {{
  %p0 = f32[{r},{c}] parameter(0)
  %p1 = f32[{r},{c}] parameter(1)
  %transpose.0 = f32[{c},{r}] transpose(%p0), perm={{1,0}}
  %reduce.1 = f32[{c}] reduce(%transpose.0), kind=sum, ndims=1
  %multiply.2 = f32[{r},{c}] multiply(%p0, %p1)
  %transpose.3 = f32[{c},{r}] transpose(%multiply.2), perm={{1,0}}
  %reduce.4 = f32[{c}] reduce(%transpose.3), kind=sum, ndims=1
  ROOT (%reduce.1, %reduce.4)
}}
"""


def _reduce_kernels(text: str) -> list:
    return [f for f in fusion.fuse(parse_module(text)) if f.kind == "reduce"]


def test_two_column_sums_of_one_input_are_one_kernel():
    (f,) = _reduce_kernels(SIBLINGS.format(r=512, c=64))
    assert sorted(r.name for r in f.roots) == ["reduce.1", "reduce.4"]
    assert f.column and any("merged" in n for n in f.notes), f.notes


@pytest.mark.parametrize("why,r,c", [
    ("8 outputs side by side: too few to vectorise across (row reductions stay apart)", 512, 8),
])
def test_reductions_that_are_not_column_ones_stay_apart(why, r, c):
    assert len(_reduce_kernels(SIBLINGS.format(r=r, c=c))) == 2, why


def test_a_statistic_and_a_reduction_that_reads_it_stay_apart():
    """The variance over axis 0 reads the mean: one kernel could not compute both."""
    text = """module m {
  %p0 = f32[256,64] parameter(0)
  %transpose.0 = f32[64,256] transpose(%p0), perm={1,0}
  %reduce.1 = f32[64] reduce(%transpose.0), kind=sum, ndims=1
  %broadcast.2 = f32[256,64] broadcast(%reduce.1), dims={1}
  %subtract.3 = f32[256,64] subtract(%p0, %broadcast.2)
  %multiply.4 = f32[256,64] multiply(%subtract.3, %subtract.3)
  %transpose.5 = f32[64,256] transpose(%multiply.4), perm={1,0}
  %reduce.6 = f32[64] reduce(%transpose.5), kind=sum, ndims=1
  ROOT (%reduce.1, %reduce.6)
}
"""
    assert len(_reduce_kernels(text)) == 2


def test_reductions_of_different_shapes_stay_apart():
    """Over axis 0 of x and of x's first half: different iteration spaces."""
    text = """module m {
  %p0 = f32[256,64] parameter(0)
  %transpose.0 = f32[64,256] transpose(%p0), perm={1,0}
  %reduce.1 = f32[64] reduce(%transpose.0), kind=sum, ndims=1
  %slice.2 = f32[128,64] slice(%p0), starts={0,0}, limits={128,64}, strides={1,1}
  %exponential.3 = f32[128,64] exp(%slice.2)
  %transpose.4 = f32[64,128] transpose(%exponential.3), perm={1,0}
  %reduce.5 = f32[64] reduce(%transpose.4), kind=sum, ndims=1
  ROOT (%reduce.1, %reduce.5)
}
"""
    assert len(_reduce_kernels(text)) == 2


# relu's gradient g = dy * (y > 0), written for a product, and summed over the rows
PRODUCER = """module m {{
  %p0 = f32[{r},{c}] parameter(0)
  %p1 = f32[{r},{c}] parameter(1)
  %p2 = f32[{c},{c}] parameter(2)
  %constant.0 = f32[] constant(0.0)
  %broadcast.1 = f32[{r},{c}] broadcast(%constant.0), dims={{}}
  %greater.2 = pred[{r},{c}] compare-gt(%p1, %broadcast.1)
  %select.3 = f32[{r},{c}] select(%greater.2, %p0, %broadcast.1)
  %transpose.4 = f32[{c},{r}] transpose(%select.3), perm={{1,0}}
  %reduce.5 = f32[{c}] reduce(%transpose.4), kind=sum, ndims=1
  %dot.6 = f32[{r},{c}] dot(%select.3, %p2), transpose_lhs=0, transpose_rhs=0
  ROOT (%reduce.5, %dot.6)
}}
"""


def test_a_loop_kernel_a_column_sum_reads_is_computed_by_it():
    kernels = fusion.fuse(parse_module(PRODUCER.format(r=512, c=64)))
    assert [f.kind for f in kernels].count("loop") == 0, [f.notes for f in kernels]
    (f,) = [f for f in kernels if f.kind == "reduce"]
    assert [r.name for r in f.roots] == ["reduce.5", "select.3"] and f.elementwise_at == ("r0", "d0")


def test_a_small_producer_stays_apart():
    """512 x 32 values: read back, they cost less than making the product wait for the
    whole reduction."""
    kernels = fusion.fuse(parse_module(PRODUCER.format(r=512, c=32)))
    assert any(f.kind == "loop" for f in kernels) and not any(f.elementwise_at for f in kernels)


def test_a_producer_another_input_of_the_reduction_needs_stays_apart():
    """The sum also reads exp(g) @ w, which needs g written first: one kernel could not
    both write g and read what is computed from it."""
    text = PRODUCER.format(r=512, c=64).replace(
        "  %reduce.5 = f32[64] reduce(%transpose.4), kind=sum, ndims=1\n",
        "  %dot.7 = f32[512,64] dot(%select.3, %p2), transpose_lhs=0, transpose_rhs=0\n"
        "  %multiply.8 = f32[512,64] multiply(%select.3, %dot.7)\n"
        "  %transpose.9 = f32[64,512] transpose(%multiply.8), perm={1,0}\n"
        "  %reduce.5 = f32[64] reduce(%transpose.9), kind=sum, ndims=1\n")
    kernels = fusion.fuse(parse_module(text))
    assert any(f.kind == "loop" and [r.name for r in f.roots] == ["select.3"] for f in kernels)


# -- end to end, against TF's executor -------------------------------------------------

SHAPES = [("wide", (300, 64)), ("one-row", (1, 48)), ("prime-columns", (37, 131)),
          ("few-rows", (3, 1024)), ("split", (4096, 32)), ("3d-middle", (6, 50, 40))]


def _input(shape, seed, dtype="float32", nan=False):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    if nan:
        a.flat[::97] = np.nan
        a.flat[5::89] = -0.0
    return tf.constant(a)


@pytest.mark.parametrize("shape", [s[1] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_sum_and_weighted_sum_match_tensorflow(shape):
    x, y = _input(shape, 1), _input(shape, 2)

    def f(x, y):
        return tf.reduce_sum(x, axis=-2), tf.reduce_sum(x * y, axis=-2)
    fn = tfjit.function(f, jit_compile=True)
    for got, want in zip(fn(x, y), f(x, y)):       # (float32 sums of up to 4096 terms)
        assert_matches(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6 * shape[-2])
    merged = [k for k in fn.compiled(x, y).fusions if k.kind == "reduce" and len(k.roots) == 2]
    assert merged or shape[-2] == 1, [k.notes for k in fn.compiled(x, y).fusions]


@pytest.mark.parametrize("shape", [(500, 64), (4096, 48)], ids=["rows", "split"])
def test_sum_max_and_min_of_values_with_nans_and_signed_zeros(shape):
    x = _input(shape, 3, nan=True)

    def f(x):
        e = x * 2.0
        return tf.reduce_sum(e, axis=0), tf.reduce_max(e, axis=0), tf.reduce_min(e, axis=0)
    fn = tfjit.function(f, jit_compile=True)
    for got, want in zip(fn(x), f(x)):
        assert_matches(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6 * shape[0])
    assert any(len(k.roots) == 3 for k in fn.compiled(x).fusions)


def test_a_float_and_an_int_sum_split_into_chunks_keep_their_own_partials():
    """Different dtypes in one split kernel: each root's partials have their own part
    of the scratch, at the widest element size."""
    shape = (8192, 32)
    a = np.random.default_rng(4).standard_normal(shape)
    x, n = tf.constant(a.astype(np.float64)), tf.constant((a * 100).astype(np.int32))

    def f(x, n):
        return tf.reduce_sum(x * 3.0, axis=0), tf.reduce_sum(n + tf.cast(x > 0, tf.int32), axis=0)
    fn = tfjit.function(f, jit_compile=True)
    got, want = fn(x, n), f(x, n)
    assert_matches(got[0].numpy(), want[0].numpy(), rtol=1e-12, atol=1e-10)
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    (k,) = [k for k in fn.compiled(x, n).fusions if k.kind == "reduce"]
    assert len(k.roots) == 2 and k.split > 1, k.notes


def test_any_and_all_of_one_column_input_match_exactly():
    x = _input((200, 40), 6)

    def f(x):
        return tf.reduce_any(x > 1.5, axis=0), tf.reduce_all(x > -2.5, axis=0), tf.reduce_sum(x, axis=0)
    fn = tfjit.function(f, jit_compile=True)
    got, want = fn(x), f(x)
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    assert_matches(got[2].numpy(), want[2].numpy(), rtol=1e-5, atol=1e-5)


def _normalisation_train_step(layer, shape, seed):
    """A Keras normalisation layer's train step (relu, squared loss) compiled and compared
    with TF's executor; the compiled function and its input."""
    layer.build(shape)
    x = _input(shape, seed)

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.nn.relu(layer(x, training=True)) ** 2)
        return tape.gradient(loss, [x] + layer.trainable_variables)
    fn = tfjit.function(step, jit_compile=True)
    for got, want in zip(fn(x), tf.function(step)(x)):
        scale = max(float(np.max(np.abs(want.numpy()))), 1.0)
        assert_matches(got.numpy(), want.numpy(), rtol=1e-4, atol=2e-5 * scale)
    return fn, x


@pytest.mark.parametrize("shape", [(16, 13, 13, 32), (3, 5, 7, 17), (2, 3, 3, 130), (1, 1, 1, 64)],
                         ids=["bn", "prime-channels", "wide", "one-pixel"])
def test_batch_normalisation_train_step_matches_tensorflow(shape):
    import keras
    fn, x = _normalisation_train_step(keras.layers.BatchNormalization(), shape, 7)
    if shape[-1] >= 16 and np.prod(shape[:-1]) > 1:      # dy and dy * xhat summed in one pass,
        # dy written by the same kernel where it is large
        big = np.prod(shape) >= fusion.PRODUCER_MIN_ELEMENTS
        assert any(len(reductions(k)) == 2 and bool(k.elementwise_at) == big
                   for k in fn.compiled(x).fusions if k.kind == "reduce")


@pytest.mark.parametrize("shape", [(8, 128, 256), (1, 1, 64), (3, 7, 131)],
                         ids=["encoder", "one-row", "prime-features"])
def test_layer_normalisation_train_step_matches_tensorflow(shape):
    import keras
    fn, x = _normalisation_train_step(keras.layers.LayerNormalization(), shape, 10)
    if shape == (8, 128, 256):       # the scale's and offset's gradients, and what they sum
        assert any(len(reductions(k)) == 2 and k.elementwise_at for k in fn.compiled(x).fusions)


@pytest.mark.parametrize("batch,units", [(512, 64), (1, 32), (37, 131)], ids=["mlp", "one-row", "primes"])
def test_dense_relu_train_step_matches_tensorflow(batch, units):
    """relu's gradient is written for the weights' product and summed for the bias."""
    rng = np.random.default_rng(11)
    w1 = tf.Variable(rng.standard_normal((48, units)).astype(np.float32) * 0.2)
    b1 = tf.Variable(rng.standard_normal(units).astype(np.float32) * 0.1)
    w2 = tf.Variable(rng.standard_normal((units, 10)).astype(np.float32) * 0.2)
    x = _input((batch, 48), 12)

    def step(x):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(x @ w1 + b1)
            loss = tf.reduce_sum((h @ w2) ** 2)
        return tape.gradient(loss, [w1, b1, w2])
    fn = tfjit.function(step, jit_compile=True)
    for got, want in zip(fn(x), tf.function(step)(x)):
        scale = max(float(np.max(np.abs(want.numpy()))), 1.0)
        assert_matches(got.numpy(), want.numpy(), rtol=1e-4, atol=2e-5 * scale)
    if batch * units >= fusion.PRODUCER_MIN_ELEMENTS:
        assert any(k.elementwise_at for k in fn.compiled(x).fusions), \
            [k.notes for k in fn.compiled(x).fusions]


@needs_ptxas
def test_a_reduction_that_writes_its_producer_assembles_for_the_gpu():
    x, y = _input((600, 64), 13), _input((600, 64), 14)

    def f(x, y):
        g = tf.where(y > 0, x, 0.0)
        return tf.reduce_sum(g, axis=0), tf.exp(g) * 3.0
    fn = tfjit.function(f, jit_compile=True)
    for got, want in zip(fn(x, y), f(x, y)):
        assert_matches(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-4)
    assert any(k.elementwise_at for k in fn.compiled(x, y).fusions)
    nvptx.assemble(fn.experimental_get_compiler_ir(x, y)(stage="ptx", arch="sm_90"), "sm_90")


@needs_ptxas
@pytest.mark.parametrize("shape", [(300, 64), (4096, 32)], ids=["rows", "split"])
def test_the_merged_kernel_assembles_for_the_gpu(shape):
    x, y = _input(shape, 8), _input(shape, 9)

    def f(x, y):
        return tf.reduce_sum(x, axis=0), tf.reduce_max(x * y, axis=0)
    fn = tfjit.function(f, jit_compile=True)
    assert any(len(k.roots) == 2 for k in fn.compiled(x, y).fusions)
    ptx = fn.experimental_get_compiler_ir(x, y)(stage="ptx")
    assert nvptx.assemble(ptx, "sm_90")[:4] == b"\x7fELF"
