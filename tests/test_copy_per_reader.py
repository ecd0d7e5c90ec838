"""Cheap values copied per reader (passes/copies.py), and column reductions that read
a per-row statistic (passes/fusion.py ``_contiguous_along_output``).

The pass: IR text in, the copies counted and the values compared with the IR
interpreter's; fusion after it writes no full-size broadcast and no cheap chain.  End to end, against
TF's executor: batch-norm and layer-norm train steps (where the scale's broadcast
was written out at full size), with edge sizes (one row, one channel, primes).
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
from tfjit.ir.text import module_str
from tfjit.passes import fusion
from tfjit.passes.copies import CopyPerReader

# a [5] scale, computed, broadcast to [4,6,5] and read by a product and by a sum
# over rows: two kernels
SCALE_READ_TWICE = """module m {
  %p0 = f32[4,6,5] parameter(0)
  %p1 = f32[5] parameter(1)
  %exp.0 = f32[5] exp(%p1)
  %broadcast.1 = f32[4,6,5] broadcast(%exp.0), dims={2}
  %multiply.2 = f32[4,6,5] multiply(%p0, %broadcast.1)
  %add.3 = f32[4,6,5] add(%p0, %broadcast.1)
  %transpose.4 = f32[5,4,6] transpose(%add.3), perm={2,0,1}
  %reduce.5 = f32[5] reduce(%transpose.4), kind=sum, ndims=2
  ROOT (%multiply.2, %reduce.5)
}
"""


def _broadcast_roots(fusions) -> list:
    return [r for f in fusions for r in f.roots if r.op is Op.BROADCAST]


def _copied(text: str):
    """(module after CopyPerReader, its kernels): the pass changed something, the
    module and kernels verify, it prints and parses back, and the values are the
    interpreter's before the pass, bit for bit (a copy is the same arithmetic)."""
    before, m, changed = run_pass(CopyPerReader(), text)
    assert changed
    m = parse_module(module_str(m))
    same_values(before, m, exact=True)
    kernels = fusion.fuse(m)
    verify.fusions(m, kernels)
    return m, kernels


def test_each_reader_gets_a_copy_and_no_kernel_writes_the_broadcast():
    assert _broadcast_roots(fusion.fuse(parse_module(SCALE_READ_TWICE)))   # written, before
    m, kernels = _copied(SCALE_READ_TWICE)
    assert sum(i.op is Op.BROADCAST for i in m.instrs) == 2
    assert not _broadcast_roots(kernels)
    assert any(r.op is Op.EXP for f in kernels for r in f.roots)     # the [5] vector instead


@pytest.mark.parametrize("why,text", [
    ("one reader", SCALE_READ_TWICE.replace("%add.3 = f32[4,6,5] add(%p0, %broadcast.1)",
                                            "%add.3 = f32[4,6,5] add(%p0, %multiply.2)")),
    ("a parameter's broadcast is recomputed already",
     SCALE_READ_TWICE.replace("broadcast(%exp.0)", "broadcast(%p1)")),
    ("an output", SCALE_READ_TWICE.replace("ROOT (%multiply.2, %reduce.5)",
                                           "ROOT (%multiply.2, %reduce.5, %broadcast.1)")),
])
def test_left_alone(why, text):
    assert not CopyPerReader().run(parse_module(text)), why


RELU_OF_BIAS_READ_THRICE = """module m {
  %p0 = f32[6,5] parameter(0)
  %p1 = f32[5,5] parameter(1)
  %p2 = f32[5] parameter(2)
  %dot.0 = f32[6,5] dot(%p0, %p1), transpose_lhs=0, transpose_rhs=0
  %exp.1 = f32[5] exp(%p2)
  %broadcast.2 = f32[6,5] broadcast(%exp.1), dims={1}
  %add.3 = f32[6,5] add(%dot.0, %broadcast.2)
  %constant.4 = f32[] constant(0.0)
  %broadcast.5 = f32[6,5] broadcast(%constant.4), dims={}
  %maximum.6 = f32[6,5] maximum(%add.3, %broadcast.5)
  %multiply.7 = f32[6,5] multiply(%maximum.6, %maximum.6)
  %reduce.8 = f32[6] reduce(%maximum.6), kind=sum, ndims=1
  %transpose.9 = f32[5,6] transpose(%maximum.6), perm={1,0}
  %reduce.10 = f32[5] reduce(%transpose.9), kind=sum, ndims=1
  ROOT (%multiply.7, %reduce.8, %reduce.10)
}
"""


def test_relu_of_a_biased_product_is_recomputed_by_each_of_its_three_readers():
    m, kernels = _copied(RELU_OF_BIAS_READ_THRICE)
    assert sum(i.op is Op.MAX for i in m.instrs) == 3 and sum(i.op is Op.ADD for i in m.instrs) == 3
    assert not [r for f in kernels for r in f.roots if r.op in (Op.MAX, Op.ADD, Op.BROADCAST)]


@pytest.mark.parametrize("why,old,new", [
    ("two full-size values read", "%add.3 = f32[6,5] add(%dot.0, %broadcast.2)",
     "%add.3 = f32[6,5] add(%dot.0, %p0)"),
    ("not cheap: an exp", "%maximum.6 = f32[6,5] maximum(%add.3, %broadcast.5)",
     "%maximum.6 = f32[6,5] exp(%add.3)"),
    ("a product reads it in place through a reshape",
     "%multiply.7 = f32[6,5] multiply(%maximum.6, %maximum.6)",
     "%reshape.11 = f32[5,6] reshape(%maximum.6)\n  %multiply.7 = f32[6,6] dot(%p0, %reshape.11), "
     "transpose_lhs=0, transpose_rhs=0"),
    ("an inner value a product reads", "ROOT (%multiply.7, %reduce.8, %reduce.10)",
     "%dot.11 = f32[6,5] dot(%add.3, %p1), transpose_lhs=0, transpose_rhs=0\n"
     "  ROOT (%multiply.7, %reduce.8, %reduce.10, %dot.11)"),
])
def test_a_chain_is_left_alone(why, old, new):
    assert not CopyPerReader().run(parse_module(RELU_OF_BIAS_READ_THRICE.replace(old, new))), why


TRANSPOSED_READ_THRICE = """module m {
  %p0 = f32[256,64] parameter(0)
  %constant.0 = f32[] constant(2.0)
  %broadcast.1 = f32[256,64] broadcast(%constant.0), dims={}
  %multiply.2 = f32[256,64] multiply(%p0, %broadcast.1)
  %transpose.3 = f32[64,256] transpose(%multiply.2), perm={1,0}
  %reduce.4 = f32[64] reduce(%transpose.3), kind=sum, ndims=1
  %reduce.5 = f32[64] reduce(%transpose.3), kind=max, ndims=1
  %reduce.6 = f32[64] reduce(%transpose.3), kind=min, ndims=1
  ROOT (%reduce.4, %reduce.5, %reduce.6)
}
"""


def test_a_transposed_chain_is_recomputed_by_each_reduction_over_its_columns():
    """sum, max and min over axis 0 of x * 2 read one transpose of it: copied, no kernel
    writes it, and the three reductions read x along its columns in one kernel."""
    written = [r for f in fusion.fuse(parse_module(TRANSPOSED_READ_THRICE)) for r in f.roots]
    assert any(r.op is Op.TRANSPOSE for r in written)                  # before
    m, kernels = _copied(TRANSPOSED_READ_THRICE)
    assert sum(i.op is Op.TRANSPOSE for i in m.instrs) == 3
    (f,) = kernels
    assert f.column and len(f.roots) == 3, f.notes


def test_a_column_reduction_may_read_a_per_row_statistic():
    """sum over rows of g * x * broadcast(r) with r one value per row: still a column
    reduction (the statistic does not move along the outputs), split over the rows."""
    text = """module m {
  %p0 = f32[512,64] parameter(0)
  %p1 = f32[512,64] parameter(1)
  %p2 = f32[512,1] parameter(2)
  %exp.0 = f32[512,1] exp(%p2)
  %broadcast.1 = f32[512,64] broadcast(%exp.0), dims={0,1}
  %multiply.2 = f32[512,64] multiply(%p0, %p1)
  %multiply.3 = f32[512,64] multiply(%multiply.2, %broadcast.1)
  %transpose.4 = f32[64,512] transpose(%multiply.3), perm={1,0}
  %reduce.5 = f32[64] reduce(%transpose.4), kind=sum, ndims=1
  ROOT (%reduce.5)
}
"""
    m = parse_module(text)
    (f,) = [f for f in fusion.fuse(m) if f.kind == "reduce"]
    assert f.column, f.notes


# -- end to end, against TF's executor -------------------------------------------------

def _grads(layer, x, shape):
    weights = tf.range(shape[-1], dtype=tf.float32) - shape[-1] / 2

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.nn.relu(layer(x, training=True)) ** 2 * weights)
        return tape.gradient(y, [x] + layer.trainable_variables)
    return step


@pytest.mark.parametrize("shape", [(16, 7, 7, 32), (1, 1, 1, 5), (3, 5, 11, 13), (64, 1, 1, 1)],
                         ids=["nhwc", "one-pixel", "primes", "one-channel"])
@pytest.mark.parametrize("kind", ["batch_norm", "layer_norm"])
def test_norm_train_steps_match_tensorflow(shape, kind):
    import keras
    layer = keras.layers.BatchNormalization() if kind == "batch_norm" else \
        keras.layers.LayerNormalization()
    layer.build(shape)
    rng = np.random.default_rng(sum(shape))
    x = tf.constant(rng.standard_normal(shape).astype(np.float32) * 3 + 1)
    step = _grads(layer, x, shape)
    got, want = tfjit.function(step, jit_compile=True)(x), tf.function(step)(x)
    for g, w in zip(got, want):
        scale = max(float(np.max(np.abs(w.numpy()))), 1.0)
        assert_matches(g.numpy(), w.numpy(), rtol=1e-4, atol=2e-5 * scale)


def test_copies_of_copies_have_names_of_their_own():
    """a = p0 + broadcast(exp(p1)) is read by b and c, and b = max(a, 0) by d and e: a
    is copied for c, then b's chain (a, now read by b alone) for e.  The module prints
    and parses back (each copy a name of its own) and computes the same values."""
    text = """module m {
  %p0 = f32[4,3] parameter(0)
  %p1 = f32[3] parameter(1)
  %exp.0 = f32[3] exp(%p1)
  %broadcast.1 = f32[4,3] broadcast(%exp.0), dims={1}
  %add.2 = f32[4,3] add(%p0, %broadcast.1)
  %constant.3 = f32[] constant(0.0)
  %broadcast.4 = f32[4,3] broadcast(%constant.3), dims={}
  %maximum.5 = f32[4,3] maximum(%add.2, %broadcast.4)
  %reduce.6 = f32[4] reduce(%add.2), kind=sum, ndims=1
  %reduce.7 = f32[4] reduce(%maximum.5), kind=maxnum, ndims=1
  %multiply.8 = f32[4,3] multiply(%maximum.5, %maximum.5)
  ROOT (%reduce.6, %reduce.7, %multiply.8)
}
"""
    m, _ = _copied(text)
    names = [i.name for i in m.instrs]
    assert len(names) == len(set(names))


def test_a_long_chain_is_left_alone_without_walking_all_of_it():
    """add_n of thousands of terms is a chain of adds over one parameter: longer than
    MAX_CHAIN, so not copied, and the walk stops there (no recursion 3000 deep)."""
    lines = ["module m {", "  %p0 = f32[4,3] parameter(0)", "  %add.0 = f32[4,3] add(%p0, %p0)"]
    lines += [f"  %add.{k} = f32[4,3] add(%add.{k - 1}, %p0)" for k in range(1, 3000)]
    lines += ["  %reduce.a = f32[4] reduce(%add.2999), kind=sum, ndims=1",
              "  %reduce.b = f32[4] reduce(%add.2999), kind=maxnum, ndims=1",
              "  ROOT (%reduce.a, %reduce.b)", "}", ""]
    assert not CopyPerReader().run(parse_module("\n".join(lines)))
