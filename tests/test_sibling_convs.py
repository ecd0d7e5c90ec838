"""Sibling convolutions as one library call (passes/sibling_convs.py): convolutions of
one input, filter gradients of one input, and input gradients one sum adds.

The pass on IR text: what merges, what stays, values compared with the IR
interpreter's before the pass.  End to end against TF's executor: ConvLSTM2D's
predictions and train-step gradients (its split kernel), branches of different widths
reading one input with filters of their own (an Inception block's 1x1 heads) with
strides, dilations and valid padding, and their gradients.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from ir_passes import run_pass, same_values
from oracle import assert_matches
from tfjit.ir.ops import Op
from tfjit.passes.sibling_convs import MergeSiblingConvolutions

# Keras's split kernel: four convolutions of x with quarters of W along its outputs
SPLIT = """module m {
  %p0 = f32[2,6,6,3] parameter(0)
  %p1 = f32[3,3,3,8] parameter(1)
  %slice.0 = f32[3,3,3,2] slice(%p1), starts={0,0,0,0}, strides={1,1,1,1}
  %convolution.1 = f32[2,6,6,2] convolution(%p0, %slice.0), strides={1,1}, dilations={1,1}, padding={1,1,1,1}
  %slice.2 = f32[3,3,3,2] slice(%p1), starts={0,0,0,2}, strides={1,1,1,1}
  %convolution.3 = f32[2,6,6,2] convolution(%p0, %slice.2), strides={1,1}, dilations={1,1}, padding={1,1,1,1}
  %slice.4 = f32[3,3,3,4] slice(%p1), starts={0,0,0,4}, strides={1,1,1,1}
  %convolution.5 = f32[2,6,6,4] convolution(%p0, %slice.4), strides={1,1}, dilations={1,1}, padding={1,1,1,1}
  %tanh.6 = f32[2,6,6,2] tanh(%convolution.3)
  ROOT (%convolution.1, %tanh.6, %convolution.5)
}
"""


def _ops(m, op) -> list:
    return [i for i in m.instrs if i.op is op]


def test_convolutions_with_the_quarters_of_one_filter_are_one():
    before, after, changed = run_pass(MergeSiblingConvolutions(), SPLIT)
    assert changed
    (conv,) = _ops(after, Op.CONV)
    assert conv.operands[1] is after.params[1] and conv.shape == (2, 6, 6, 8)   # W itself
    assert not _ops(after, Op.CONCAT)
    same_values(before, after)


def test_different_geometries_stay_apart():
    text = SPLIT.replace("%convolution.5 = f32[2,6,6,4] convolution(%p0, %slice.4), strides={1,1}, "
                         "dilations={1,1}, padding={1,1,1,1}",
                         "%convolution.5 = f32[2,3,3,4] convolution(%p0, %slice.4), strides={2,2}, "
                         "dilations={1,1}, padding={1,1,1,1}")
    before, after, changed = run_pass(MergeSiblingConvolutions(), text)
    assert changed
    assert sorted(c.shape for c in _ops(after, Op.CONV)) == [(2, 3, 3, 4), (2, 6, 6, 4)]
    (concat,) = _ops(after, Op.CONCAT)      # two of the quarters: not W whole
    assert concat.shape == (3, 3, 3, 4)
    same_values(before, after)


def test_siblings_of_many_filters_stay_apart():
    """Past MAX_OUTPUTS filters each, a call is not mostly its fixed cost (Inception's
    heads ran slower merged)."""
    wide = SPLIT.replace("f32[3,3,3,8] parameter(1)", "f32[3,3,3,80] parameter(1)") \
        .replace("f32[3,3,3,4] slice(%p1), starts={0,0,0,4}", "f32[3,3,3,76] slice(%p1), starts={0,0,0,4}") \
        .replace("f32[2,6,6,4] convolution(%p0, %slice.4)", "f32[2,6,6,76] convolution(%p0, %slice.4)")
    _, after, _ = run_pass(MergeSiblingConvolutions(), wide)
    assert sorted(c.shape[3] for c in _ops(after, Op.CONV)) == [4, 76]    # the two narrow ones merged


# The split kernel's gradient: filter gradients concatenated, input gradients summed
GRADIENTS = """module m {
  %p0 = f32[2,6,6,3] parameter(0)
  %p1 = f32[2,6,6,4] parameter(1)
  %p2 = f32[2,6,6,4] parameter(2)
  %p3 = f32[3,3,3,4] parameter(3)
  %p4 = f32[3,3,3,4] parameter(4)
  %p5 = f32[2,6,6,3] parameter(5)
  %convolution.0 = f32[3,3,3,4] convolution-backprop-filter(%p0, %p1), padding={1,1,1,1}, strides={1,1}
  %convolution.1 = f32[3,3,3,4] convolution-backprop-filter(%p0, %p2), padding={1,1,1,1}, strides={1,1}
  %concatenate.2 = f32[3,3,3,8] concatenate(%convolution.0, %convolution.1), dim=3
  %convolution.3 = f32[2,6,6,3] convolution-backprop-input(%p3, %p1), padding={1,1,1,1}, strides={1,1}
  %convolution.4 = f32[2,6,6,3] convolution-backprop-input(%p4, %p2), padding={1,1,1,1}, strides={1,1}
  %add.5 = f32[2,6,6,3] add(%convolution.3, %p5)
  %add.6 = f32[2,6,6,3] add(%add.5, %convolution.4)
  ROOT (%concatenate.2, %add.6)
}
"""


def test_gradients_of_siblings_are_one_call_each_sharing_the_output_gradients():
    before, after, changed = run_pass(MergeSiblingConvolutions(), GRADIENTS)
    assert changed
    (dw,) = _ops(after, Op.CONV_BACKPROP_FILTER)
    (dx,) = _ops(after, Op.CONV_BACKPROP_INPUT)
    assert after.outputs[0] is dw and dw.shape == (3, 3, 3, 8)     # the concatenation folded
    assert dw.operands[1] is dx.operands[1]                       # one side-by-side gradient
    (total,) = [i for i in _ops(after, Op.ADD) if i is after.outputs[1]]
    assert set(total.operands) == {dx, after.params[5]}           # the sum's other term after
    same_values(before, after)


@pytest.mark.parametrize("why,edit,kind", [
    ("input gradients not summed together",
     ("%add.6 = f32[2,6,6,3] add(%add.5, %convolution.4)\n  ROOT (%concatenate.2, %add.6)",
      "ROOT (%concatenate.2, %add.5, %convolution.4)"), Op.CONV_BACKPROP_INPUT),
    ("filter gradients of different inputs",
     ("convolution-backprop-filter(%p0, %p2)", "convolution-backprop-filter(%p5, %p2)"),
     Op.CONV_BACKPROP_FILTER)])
def test_gradients_left_apart(why, edit, kind):
    before, after, _ = run_pass(MergeSiblingConvolutions(), GRADIENTS.replace(*edit))
    assert len(_ops(after, kind)) == 2, why
    same_values(before, after)


def test_conv_lstm_predicts_and_trains_as_tensorflow(rng):
    import keras
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4, 9, 7, 3)), keras.layers.ConvLSTM2D(5, 3, padding="same"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4)])
    x = tf.constant(rng.standard_normal((3, 4, 9, 7, 3)).astype(np.float32))

    def step(x):
        with tf.GradientTape() as tape:
            y = model(x, training=True)
            loss = tf.reduce_sum(y * tf.range(4, dtype=tf.float32))
        return [y, *tape.gradient(loss, model.trainable_variables)]
    f = tfjit.function(step, jit_compile=True)
    for got, want in zip(f(x), tf.function(step)(x)):
        scale = max(float(np.max(np.abs(want.numpy()))), 1.0)
        assert_matches(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5 * scale)
    text = f.compiled(x).module_after
    assert text.count("convolution-backprop-input(") == 1, "one input gradient per step"
    assert text.count("convolution-backprop-filter(") == 2, "one filter gradient per kernel"


def _heads(rng):
    """Three heads of different widths (8, 5, 3 filters) read x, each its own filter."""
    x = tf.constant(rng.standard_normal((2, 11, 9, 6)).astype(np.float32))
    return x, [tf.constant(rng.standard_normal((3, 3, 6, n)).astype(np.float32)) for n in (8, 5, 3)]


@pytest.mark.parametrize("strides,padding", [(1, "SAME"), (2, "VALID")])
def test_branches_of_one_input_and_their_gradients_match_tensorflow(strides, padding, rng):
    x, ws = _heads(rng)

    def step(x, *ws):
        with tf.GradientTape() as tape:
            tape.watch([x, *ws])
            heads = [tf.nn.conv2d(x, w, strides, padding) for w in ws]
            loss = sum(tf.reduce_sum(tf.tanh(h) * (k + 1)) for k, h in enumerate(heads))
        return [*heads, *tape.gradient(loss, [x, *ws])]
    f = tfjit.function(step, jit_compile=True)
    for got, want in zip(f(x, *ws), tf.function(step)(x, *ws)):
        assert_matches(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
    text = f.compiled(x, *ws).module_after
    assert text.count(" convolution(") == 1 and text.count("convolution-backprop-input(") == 1
    assert text.count("convolution-backprop-filter(") == 1


def test_dilated_branches_match_tensorflow(rng):
    """(TF's CPU kernels have no dilated convolution gradients: forward only.)"""
    x, ws = _heads(rng)

    def heads(x, *ws):
        return [tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME", dilations=2)) for w in ws]
    f = tfjit.function(heads, jit_compile=True)
    for got, want in zip(f(x, *ws), tf.function(heads)(x, *ws)):
        assert_matches(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    assert f.compiled(x, *ws).module_after.count(" convolution(") == 1
