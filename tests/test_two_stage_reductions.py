"""Reductions whose reduced dims lie on both sides of the kept ones, in two stages
(passes/reductions.py): group statistics, reduced over H, W and each group's
channels.

The pass: IR text in, the stages' shapes and operands asserted, values compared with
the IR interpreter's before the pass; the cases it leaves alone.  End to end: sums,
products, max, min, any and all over groups against TF's executor (ints and bools
exactly, floats within tolerance), edge sizes (one pixel, groups of one channel,
primes), and group normalisation's forward and train step.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from ir_passes import run_pass, same_values
from oracle import assert_matches
from tfjit.ir import verify
from tfjit.ir.ops import Op
from tfjit.ir.parse import parse_module
from tfjit.passes.reductions import TwoStageReductions

GROUP_SUM = """module m {
  %p0 = f32[2,3,5,12] parameter(0)
  %reshape.0 = f32[2,3,5,4,3] reshape(%p0)
  %transpose.1 = f32[2,4,3,5,3] transpose(%reshape.0), perm={0,3,1,2,4}
  %reduce.2 = f32[2,4] reduce(%transpose.1), kind=KIND, ndims=3
  ROOT (%reduce.2)
}
"""


def _run(text: str):
    before, after, changed = run_pass(TwoStageReductions(), text)
    same_values(before, after)
    return after, changed


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
def test_a_group_sum_reads_the_operand_itself_in_its_first_stage(kind):
    m, changed = _run(GROUP_SUM.replace("KIND", kind))
    assert changed
    stage1, stage2 = [i for i in m.instrs if i.op is Op.REDUCE]
    # over H and W of x itself (a column reduction over [2, 12]), then the group's 3
    assert stage1.operands[0].op is Op.TRANSPOSE and stage1.operands[0].operands[0] is m.params[0]
    assert stage1.shape == (2, 12) and stage1.attrs["ndims"] == 2
    assert stage2.shape == (2, 4) and stage2.attrs["ndims"] == 1 and m.outputs == [stage2]


def test_an_expression_of_the_groups_is_reduced_in_its_own_layout():
    """The operand is an expression of the reshape (x - 1): stage 1 reads it transposed
    with the group's channels kept, and the kept dims' order is restored after."""
    text = GROUP_SUM.replace("KIND", "sum").replace(
        "%transpose.1 = f32[2,4,3,5,3] transpose(%reshape.0)",
        "%constant.5 = f32[] constant(1.0)\n  %broadcast.6 = f32[2,3,5,4,3] broadcast(%constant.5), dims={}\n"
        "  %subtract.7 = f32[2,3,5,4,3] subtract(%reshape.0, %broadcast.6)\n"
        "  %transpose.1 = f32[4,2,3,5,3] transpose(%subtract.7)").replace(
        "perm={0,3,1,2,4}", "perm={3,0,1,2,4}").replace("f32[2,4] reduce", "f32[4,2] reduce")
    m, changed = _run(text)
    assert changed
    assert m.outputs[0].op is Op.TRANSPOSE and m.outputs[0].shape == (4, 2)


@pytest.mark.parametrize("why,perm,ndims,shape", [
    ("reduced dims only before the kept ones (a column reduction)", "{3,4,0,1,2}", 3, "f32[4,3]"),
    ("reduced dims only after the kept ones (a row reduction)", "{0,1,2,3,4}", 2, "f32[2,3,5]"),
])
def test_left_alone(why, perm, ndims, shape):
    text = GROUP_SUM.replace("KIND", "sum").replace("perm={0,3,1,2,4}", f"perm={perm}").replace(
        "ndims=3", f"ndims={ndims}").replace("f32[2,4] reduce", f"{shape} reduce")
    if perm == "{3,4,0,1,2}":
        text = text.replace("f32[2,4,3,5,3] transpose", "f32[4,3,2,3,5] transpose")
    else:
        text = text.replace("f32[2,4,3,5,3] transpose", "f32[2,3,5,4,3] transpose")
    m = parse_module(text)
    verify.module(m, "input")
    assert not TwoStageReductions().run(m), why


# -- end to end, against TF's executor -------------------------------------------------

SHAPES = [("gn", (4, 8, 8, 32), 8), ("one-pixel", (3, 1, 1, 12), 4),
          ("groups-of-one", (2, 5, 5, 6), 6), ("primes", (3, 7, 5, 15), 5)]
OPS = [("sum", tf.reduce_sum, "float32"), ("max", tf.reduce_max, "float32"),
       ("min", tf.reduce_min, "float64"), ("prod", tf.reduce_prod, "float64"),
       ("int-sum", tf.reduce_sum, "int32"), ("any", tf.reduce_any, "bool"),
       ("all", tf.reduce_all, "bool")]


@pytest.mark.parametrize("shape,groups", [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
@pytest.mark.parametrize("reduce,dtype", [o[1:] for o in OPS], ids=[o[0] for o in OPS])
def test_group_reductions_match_tensorflow(shape, groups, reduce, dtype):
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(shape)
    x = tf.constant(a > 0.3 if dtype == "bool" else
                    (a * 10).astype(np.int32) if dtype == "int32" else
                    (1 + a * 0.05).astype(dtype))

    def f(x):
        b, h, w, c = shape
        return reduce(tf.reshape(x, (b, h, w, groups, c // groups)), axis=[1, 2, 4])
    got, want = tfjit.function(f, jit_compile=True)(x).numpy(), f(x).numpy()
    if dtype in ("int32", "bool"):
        np.testing.assert_array_equal(got, want)
    else:
        assert_matches(got, want, rtol=1e-5, atol=1e-6)


def test_group_normalisation_and_its_train_step_match_tensorflow():
    import keras
    shape = (4, 8, 8, 32)
    layer = keras.layers.GroupNormalization(groups=8)
    layer.build(shape)
    x = tf.constant(np.random.default_rng(5).standard_normal(shape).astype(np.float32) * 2 + 1)

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(y * y * tf.range(32, dtype=tf.float32))
        return [y, *tape.gradient(loss, [x] + layer.trainable_variables)]
    for g, w in zip(tfjit.function(step, jit_compile=True)(x), tf.function(step)(x)):
        scale = max(float(np.max(np.abs(w.numpy()))), 1.0)
        assert_matches(g.numpy(), w.numpy(), rtol=1e-4, atol=2e-5 * scale)


# -- column reductions that read through a reshape splitting a dim (passes/fusion.py) --

VARIANCE_STAGE = """module m {
  %p0 = f32[2,6,6,C] parameter(0)
  %p1 = f32[2,G] parameter(1)
  %reshape.0 = f32[2,6,6,G,K] reshape(%p0)
  %broadcast.1 = f32[2,6,6,G,K] broadcast(%p1), dims={0,3}
  %subtract.2 = f32[2,6,6,G,K] subtract(%reshape.0, %broadcast.1)
  %multiply.3 = f32[2,6,6,G,K] multiply(%subtract.2, %subtract.2)
  %transpose.4 = f32[2,G,K,6,6] transpose(%multiply.3), perm={0,3,4,1,2}
  %reduce.5 = f32[2,G,K] reduce(%transpose.4), kind=sum, ndims=2
  ROOT (%reduce.5)
}
"""


@pytest.mark.parametrize("groups,per_group,column", [(8, 8, True), (2, 4, False), (1, 32, True)],
                         ids=["64-channels", "8-channels", "one-group"])
def test_a_reduction_through_a_split_reshape_is_a_column_one_where_its_outputs_are_wide(
        groups, per_group, column):
    """The (group, channel) outputs index the operand's channel dim, split: contiguous
    along the channel (64 side by side: a column reduction); with 8 channels in all,
    too few to vectorise, it stays a reduction per output."""
    from tfjit.passes import fusion
    text = VARIANCE_STAGE.replace("C]", f"{groups * per_group}]").replace("G", str(groups)) \
        .replace("K", str(per_group))
    m = parse_module(text)
    (f,) = [f for f in fusion.fuse(m) if f.kind == "reduce"]
    assert f.column == column, f.notes
