"""Sums over repeats: the gradient of a nearest upsampling (a reshape and a sum over
each block) of a value that is itself a repeat (a non-overlapping average pool's
gradient, whose window phases are concatenated copies of one value).

The passes: concatenated copies become a broadcast (passes/simplify.py
``RepeatsAsBroadcasts``, values compared with the IR interpreter's); the read analysis
follows a reshape that neither only splits nor only merges dims by splitting digits
(passes/iteration.py ``_reshape_index``), so such a sum is a column reduction.  End to
end against TF's executor: AvgPoolGrad then one or two block sums, max over blocks,
edge sizes (one image, one channel, a prime number of channels, a 1-pixel grid), a 3-D
pool's gradient, and a Keras model's train step through UpSampling2D and
AveragePooling2D.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from ir_passes import run_pass, same_values
from oracle import assert_matches
from tfjit.ir.indexing import ZERO
from tfjit.ir.ops import Op
from tfjit.ir.parse import parse_module
from tfjit.ir.text import module_str
from tfjit.passes import fusion
from tfjit.passes.iteration import _reshape_index
from tfjit.passes.simplify import RepeatsAsBroadcasts


def test_concatenated_copies_along_a_unit_dim_are_a_broadcast():
    text = """module m {
  %p0 = f32[2,1,3,1,5] parameter(0)
  %concatenate.1 = f32[2,1,3,4,5] concatenate(%p0, %p0, %p0, %p0), dim=3
  %concatenate.2 = f32[2,2,3,4,5] concatenate(%concatenate.1, %concatenate.1), dim=1
  ROOT (%concatenate.2)
}
"""
    before, after, changed = run_pass(RepeatsAsBroadcasts(), text)
    assert changed and not any(i.op is Op.CONCAT for i in after.instrs)
    assert all(len(i.operands) == 1 for i in after.instrs if i.op is Op.BROADCAST)
    parse_module(module_str(after))             # (the dump's text reads back)
    same_values(before, after, exact=True)


@pytest.mark.parametrize("why,operands,size", [
    ("different values", "%p0, %p1", 1),
    ("copies of a value that has the dim twice: a tile, not a broadcast", "%p0, %p0", 2)])
def test_other_concatenations_stay(why, operands, size):
    text = f"""module m {{
  %p0 = f32[3,{size}] parameter(0)
  %p1 = f32[3,{size}] parameter(1)
  %concatenate.1 = f32[3,{2 * size}] concatenate({operands}), dim=1
  ROOT (%concatenate.1)
}}
"""
    _, after, changed = run_pass(RepeatsAsBroadcasts(), text)
    assert not changed and any(i.op is Op.CONCAT for i in after.instrs), why


@pytest.mark.parametrize("src,dst,idx,sizes,want", [
    # a split: group normalisation's [B, H, W, G, C/G] view reads channel (g, c)
    ((2, 12), (2, 4, 3), ("a", "b", "c"), {"a": 2, "b": 4, "c": 3}, ("a", ("b", "c"))),
    # a merge of a repeat, read split another way: [24, 4] as [48, 2]
    ((24, 4), (48, 2), ("w", "r"), {"w": 48, "r": 2}, ("w>2", ("w%2", "r"))),
    # digits already split by an earlier reshape regroup without a new name
    ((6, 4), (24,), (("a", "b"),), {"a": 6, "b": 4}, ("a", "b")),
    # unit dims index 0, and a name of range 1 is no digit
    ((1, 6, 1), (6, 1), ("a", "u"), {"a": 6, "u": 1}, (None, "a", None)),
    # sizes that do not divide: no digits
    ((2, 3), (3, 2), ("a", "b"), {"a": 3, "b": 2}, "none"),
    # a name without a known range
    ((4, 4), (16,), ("a",), {}, "none")])
def test_a_reshape_maps_named_digits(src, dst, idx, sizes, want):
    got = _reshape_index(SimpleNamespace(shape=src), SimpleNamespace(shape=dst), idx, dict(sizes))
    if want == "none":
        assert got is None
    else:
        assert got == tuple(ZERO if w is None else w for w in want)


# The sum over a 2x2 nearest upsampling's W pairs of a 4x4 average pool's gradient:
# the repeat as lowered and CSE'd (concatenated copies), read through a merge and a split.
UPSAMPLE_OF_POOL = """module m {{
  %p0 = f32[{n},{q},{q},{c}] parameter(0)
  %reshape.1 = f32[{n},1,{q},1,{q},1,{c},1] reshape(%p0)
  %concatenate.2 = f32[{n},1,{q},1,{q},4,{c},1] concatenate(%reshape.1, %reshape.1, %reshape.1, %reshape.1), dim=5
  %concatenate.3 = f32[{n},1,{q},4,{q},4,{c},1] concatenate(%concatenate.2, %concatenate.2, %concatenate.2, %concatenate.2), dim=3
  %reshape.4 = f32[{n},{s},{s},{c}] reshape(%concatenate.3)
  %reshape.5 = f32[{n},{s},{h},2,{c}] reshape(%reshape.4)
  %transpose.6 = f32[{n},{s},{h},{c},2] transpose(%reshape.5), perm={{0,1,2,4,3}}
  %reduce.7 = f32[{n},{s},{h},{c}] reduce(%transpose.6), kind=sum, ndims=1
  ROOT (%reduce.7)
}}
"""


@pytest.mark.parametrize("c,column", [(16, True), (4, False)], ids=["16-channels", "4-channels"])
def test_a_block_sum_of_a_repeat_is_a_column_reduction(c, column):
    """16 channels side by side: vectorised across outputs (before: a row of 2 per
    output, each element picked through two concatenations); 4 are too few."""
    text = UPSAMPLE_OF_POOL.format(n=2, q=3, s=12, h=6, c=c)
    m = parse_module(text)
    assert RepeatsAsBroadcasts().run(m)
    (f,) = [f for f in fusion.fuse(m) if f.kind == "reduce"]
    assert f.column == column, f.notes


def _pool_grad(g, shape, k):
    return tf.raw_ops.AvgPoolGrad(orig_input_shape=shape, grad=g, ksize=[1, k, k, 1],
                                  strides=[1, k, k, 1], padding="VALID")


CASES = [("batch", 4, 6, 16), ("one-image", 1, 6, 16), ("one-channel", 2, 6, 1),
         ("prime-channels", 3, 5, 17), ("one-pixel-grid", 2, 1, 16), ("wide", 2, 4, 48)]


@pytest.mark.parametrize("n,q,c", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
@pytest.mark.parametrize("form", ["w-pairs", "w-then-h", "both-at-once", "max"])
def test_block_sums_of_a_pool_gradient_match_tensorflow(form, n, q, c):
    s = 4 * q
    g = tf.constant(np.random.default_rng(n * 100 + q * 10 + c).standard_normal(
        (n, q, q, c)).astype(np.float32))

    def f(g):
        dx = _pool_grad(g, [n, s, s, c], 4)
        if form == "w-pairs":
            return tf.reduce_sum(tf.reshape(dx, [n, s, s // 2, 2, c]), axis=3)
        if form == "w-then-h":
            a = tf.reduce_sum(tf.reshape(dx, [n, s, s // 2, 2, c]), axis=3)
            return tf.reduce_sum(tf.reshape(a, [n, s // 2, 2, s // 2, c]), axis=2)
        if form == "both-at-once":
            return tf.reduce_sum(tf.reshape(dx, [n, s // 2, 2, s // 2, 2, c]), axis=[2, 4])
        return tf.reduce_max(tf.reshape(dx, [n, s, s // 2, 2, c]), axis=3)
    assert_matches(tfjit.function(f, jit_compile=True)(g).numpy(), f(g).numpy())


def test_a_3d_pool_gradient_summed_over_blocks_matches_tensorflow():
    g = tf.constant(np.random.default_rng(3).standard_normal((2, 3, 3, 3, 8)).astype(np.float32))

    def f(g):
        dx = tf.raw_ops.AvgPool3DGrad(orig_input_shape=[2, 6, 6, 6, 8], grad=g,
                                      ksize=[1, 2, 2, 2, 1], strides=[1, 2, 2, 2, 1],
                                      padding="VALID")
        return tf.reduce_sum(tf.reshape(dx, [2, 3, 2, 6, 3, 2, 8]), axis=[2, 5])
    assert_matches(tfjit.function(f, jit_compile=True)(g).numpy(), f(g).numpy())


def test_an_upsampling_then_pooling_model_trains_as_tensorflow():
    """UpSampling2D's gradient sums AveragePooling2D's over each 2x2 block."""
    import keras
    keras.utils.set_random_seed(7)
    layers = [keras.layers.UpSampling2D(), keras.layers.Conv2D(16, 3, padding="same"),
              keras.layers.UpSampling2D(), keras.layers.AveragePooling2D(4)]
    model = keras.Sequential([keras.Input((6, 6, 16))] + layers)
    x = tf.constant(np.random.default_rng(8).standard_normal((3, 6, 6, 16)).astype(np.float32))

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = model(x)
            loss = tf.reduce_sum(y * tf.cast(tf.range(16), tf.float32))
        return [y, *tape.gradient(loss, [x] + model.trainable_variables)]
    for got, want in zip(tfjit.function(step, jit_compile=True)(x), tf.function(step)(x)):
        scale = max(float(np.max(np.abs(want.numpy()))), 1.0)
        assert_matches(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5 * scale)


# Two sums of a few elements, the second reading each output of the first once: the
# gradient of a 2x2 nearest upsampling as TF's tape makes it (over W pairs, then H).
TWO_SUMS = """module m {{
  %p0 = f32[{n},{s},{s},{c}] parameter(0)
  %reshape.1 = f32[{n},{s},{h},{k},{c}] reshape(%p0)
  %transpose.2 = f32[{n},{s},{h},{c},{k}] transpose(%reshape.1), perm={{0,1,2,4,3}}
  %reduce.3 = f32[{n},{s},{h},{c}] reduce(%transpose.2), kind=sum, ndims=1
  %reshape.4 = f32[{n},{h},{k},{h},{c}] reshape(%reduce.3)
  %transpose.5 = f32[{n},{h},{h},{c},{k}] transpose(%reshape.4), perm={{0,1,3,4,2}}
  %reduce.6 = f32[{n},{h},{h},{c}] reduce(%transpose.5), kind=sum, ndims=1
  ROOT (%reduce.6{extra})
}}
"""


@pytest.mark.parametrize("k,extra,kernels", [
    (2, "", 1),                     # the upsampling's gradient: one kernel
    (8, "", 1),                     # INLINE_REDUCE_MAX elements an output
    (16, "", 2),                    # more: the first sum is written by a kernel of its own
    (2, ", %reduce.3", 2)])         # the first sum is an output too
def test_a_few_elements_summed_where_a_reduction_reads_them(k, extra, kernels):
    text = TWO_SUMS.format(n=2, s=4 * k, h=4, k=k, c=16, extra=extra)
    m = parse_module(text)
    fusions = fusion.fuse(m)
    assert len(fusions) == kernels, [f.notes for f in fusions]
    if kernels == 1:
        (f,) = fusions
        assert any("reduced where" in n for n in f.notes) and f.column, f.notes


UPSAMPLED = [("batch", 4, 7, 16, 2), ("one-image", 1, 5, 16, 2), ("one-channel", 2, 6, 1, 2),
             ("prime-channels", 3, 5, 17, 2), ("one-pixel", 2, 1, 32, 2), ("by-8", 2, 3, 16, 8)]


@pytest.mark.parametrize("n,q,c,r", [u[1:] for u in UPSAMPLED], ids=[u[0] for u in UPSAMPLED])
def test_the_gradient_of_a_nearest_upsampling_matches_tensorflow(n, q, c, r):
    """tf.repeat twice (Keras UpSampling2D's nearest mode): its gradient is two sums of r,
    one kernel where 16 or more channels lie side by side; NaN and infinities pass."""
    rng = np.random.default_rng(n * 100 + q * 10 + c)
    g = rng.standard_normal((n, r * q, r * q, c)).astype(np.float32)
    g.flat[::7] = np.inf
    g.flat[3::11] = np.nan
    g.flat[5::13] = -0.0

    def grad(x, g):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.repeat(tf.repeat(x, r, axis=1), r, axis=2)
        return tape.gradient(y, x, g)
    x, g = tf.zeros((n, q, q, c)), tf.constant(g)
    jit = tfjit.function(grad, jit_compile=True)
    assert_matches(jit(x, g).numpy(), tf.function(grad)(x, g).numpy(), rtol=0, atol=0)
    if c >= 16:
        assert len(jit.compiled(x, g).fusions) == 1, jit.compiled(x, g).module_after
