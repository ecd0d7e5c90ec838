"""Dims collapsed where every instruction carries them together (passes/collapse.py),
and outputs written through a reshape by the kernel that computes them
(passes/fusion.py ``output_views``).

The pass on IR text: what collapses and what must not (a slice's or an iota's dims, a
value read twice in two orders, a while's operand, a reduced dim next to a kept one),
the values compared with the IR interpreter's.  End to end against TF's executor:
softmax over the channels of NCHW tensors of edge sizes, broadcasts of size-1 dims, a
dot reading a collapsed value, outputs that are reshapes.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from ir_passes import run_pass, same_values
from oracle import assert_matches
from tfjit.codegen import nvptx
from tfjit.ir import verify
from tfjit.ir.ops import Op
from tfjit.ir.parse import parse_module
from tfjit.ir.text import module_str
from tfjit.passes import buffers, fusion
from tfjit.passes.collapse import CollapseDims

# softmax over axis 1 of [2, 3, 4, 5] as lowering writes it (max and sum over C, H and W
# carried along)
SOFTMAX_NCHW = """module m {
  %p0 = f32[2,3,4,5] parameter(0)
  %transpose.0 = f32[2,4,5,3] transpose(%p0), perm={0,2,3,1}
  %reduce.1 = f32[2,4,5] reduce(%transpose.0), kind=maxnum, ndims=1
  %broadcast.2 = f32[2,3,4,5] broadcast(%reduce.1), dims={0,2,3}
  %subtract.3 = f32[2,3,4,5] subtract(%p0, %broadcast.2)
  %exp.4 = f32[2,3,4,5] exp(%subtract.3)
  %transpose.5 = f32[2,4,5,3] transpose(%exp.4), perm={0,2,3,1}
  %reduce.6 = f32[2,4,5] reduce(%transpose.5), kind=sum, ndims=1
  %broadcast.7 = f32[2,3,4,5] broadcast(%reduce.6), dims={0,2,3}
  %divide.8 = f32[2,3,4,5] divide(%exp.4, %broadcast.7)
  ROOT (%divide.8)
}
"""


def _collapsed(text: str):
    before, m, changed = run_pass(CollapseDims(), text)
    assert changed
    m = parse_module(module_str(m))         # prints and parses back
    same_values(before, m, exact=True)      # the same arithmetic in the same order
    return m


def _shapes(m) -> set:
    return {i.shape for i in m.instrs}


def test_nchw_softmax_collapses_h_and_w_and_its_output_is_written_in_place():
    m = _collapsed(SOFTMAX_NCHW)
    assert (2, 3, 20) in _shapes(m) and (2, 20) in _shapes(m) and (2, 4, 5, 3) not in _shapes(m)
    (out,) = m.outputs
    assert out.op is Op.RESHAPE and out.shape == (2, 3, 4, 5)
    kernels = fusion.fuse(m)
    verify.fusions(m, kernels)
    assert not any(out in f.roots for f in kernels)          # no kernel copies it out
    plan = buffers.assign(m, kernels)
    verify.buffer_plan(m, kernels, plan, buffers.ALIGN)
    assert plan.slots[out.operands[0]] == [plan.num_inputs]  # the divide writes the output


def test_reduced_dims_collapse_and_a_kept_dim_next_to_them_does_not():
    m = _collapsed("""module m {
  %p0 = f32[6,4,5,7] parameter(0)
  %exp.0 = f32[6,4,5,7] exp(%p0)
  %transpose.1 = f32[6,7,4,5] transpose(%exp.0), perm={0,3,1,2}
  %reduce.2 = f32[6,7] reduce(%transpose.1), kind=sum, ndims=2
  ROOT (%reduce.2)
}
""")
    (r,) = [i for i in m.instrs if i.op is Op.REDUCE]
    assert r.operands[0].shape == (6, 7, 20) and r.attrs["ndims"] == 1


def test_a_size_one_dim_broadcast_keeps_its_place():
    m = _collapsed("""module m {
  %p0 = f32[2,1,4,5] parameter(0)
  %p1 = f32[2,3,4,5] parameter(1)
  %broadcast.0 = f32[2,3,4,5] broadcast(%p0), dims={0,1,2,3}
  %multiply.1 = f32[2,3,4,5] multiply(%broadcast.0, %p1)
  ROOT (%multiply.1)
}
""")
    (b,) = [i for i in m.instrs if i.op is Op.BROADCAST]
    assert b.operands[0].shape == (2, 1, 20) and b.shape == (2, 3, 20) and b.attrs["dims"] == (0, 1, 2)


@pytest.mark.parametrize("why,text", [
    ("a slice's dims would need a division to read", """module m {
  %p0 = f32[2,3,4,6] parameter(0)
  %slice.0 = f32[2,3,4,5] slice(%p0), starts={0,0,0,0}, strides={1,1,1,1}
  %exp.1 = f32[2,3,4,5] exp(%slice.0)
  ROOT (%exp.1)
}
"""),
    ("an iota indexes one dim", """module m {
  %iota.0 = f32[3,4] iota(), dim=1
  %exp.1 = f32[3,4] exp(%iota.0)
  ROOT (%exp.1)
}
"""),
    ("the two dims are read in both orders", """module m {
  %p0 = f32[4,4] parameter(0)
  %transpose.0 = f32[4,4] transpose(%p0), perm={1,0}
  %add.1 = f32[4,4] add(%p0, %transpose.0)
  ROOT (%add.1)
}
"""),
    ("one kept dim and one reduced", """module m {
  %p0 = f32[3,4] parameter(0)
  %reduce.0 = f32[3] reduce(%p0), kind=sum, ndims=1
  ROOT (%reduce.0)
}
"""),
    ("unit dims gain nothing", """module m {
  %p0 = f32[1,1,5] parameter(0)
  %exp.0 = f32[1,1,5] exp(%p0)
  ROOT (%exp.0)
}
"""),
    ("a broadcast maps one of the two", """module m {
  %p0 = f32[3,4] parameter(0)
  %p1 = f32[4] parameter(1)
  %broadcast.0 = f32[3,4] broadcast(%p1), dims={1}
  %add.1 = f32[3,4] add(%p0, %broadcast.0)
  ROOT (%add.1)
}
"""),
])
def test_left_alone(why, text):
    assert not CollapseDims().run(parse_module(text)), why


@pytest.mark.parametrize("value,output,view", [
    ("4,6,20", "4,6,4,5", True),        # written where the collapsed value is
    ("4,120", "4,6,4,5", True),
    ("8,4,8,8", "8,4,64", False),       # its rows would be 8 long where the output's are 64
    ("4,6,4,5", "4,120", False),
    ("8,2,128", "8,256", True),         # rows of 128 are long enough (tf.tile's layout)
])
def test_an_output_reshape_is_written_by_its_value_s_kernel_unless_its_rows_are_shorter(
        value, output, view):
    m = parse_module(f"""module m {{
  %p0 = f32[{value}] parameter(0)
  %exp.0 = f32[{value}] exp(%p0)
  %reshape.1 = f32[{output}] reshape(%exp.0)
  ROOT (%reshape.1)
}}
""")
    assert bool(fusion.output_views(m)) == view
    kernels = fusion.fuse(m)
    verify.fusions(m, kernels)
    (k,) = kernels
    assert k.roots[0].op is (Op.EXP if view else Op.RESHAPE)


def test_tile_is_written_by_its_broadcast_kernel():
    x = tf.constant(np.random.default_rng(6).standard_normal((100, 257)).astype(np.float32))
    f = tfjit.function(lambda x: tf.tile(x, [3, 2]), jit_compile=True)
    assert_matches(f(x), tf.tile(x, [3, 2]), rtol=0, atol=0)
    (k,) = f.compiled(x).fusions
    assert k.roots[0].op is Op.BROADCAST and k.shape == (3, 100, 2, 257)


def test_a_dot_reads_its_own_reshape_back_in_place():
    m = _collapsed("""module m {
  %p0 = f32[2,3,4] parameter(0)
  %p1 = f32[2,4,5] parameter(1)
  %exp.0 = f32[2,3,4] exp(%p0)
  %dot.1 = f32[2,3,5] dot(%exp.0, %p1), transpose_lhs=0, transpose_rhs=0
  %dot.2 = f32[2,3,5] dot(%exp.0, %p1), transpose_lhs=0, transpose_rhs=0
  ROOT (%dot.1, %dot.2, %exp.0)
}
""")
    (e,) = [i for i in m.instrs if i.op is Op.EXP]
    assert e.shape == (2, 12)       # (one dim would be one row: the first stays apart)
    kernels = fusion.fuse(m)
    verify.fusions(m, kernels)
    assert len(kernels) == 3        # the exp, two dots: no copy for a dot's operand


def test_other_readers_of_a_collapsed_parameter_read_it_as_it_is():
    m = _collapsed("""module m {
  %p0 = f32[2,3,4,5] parameter(0)
  %reshape.0 = f32[6,4,5] reshape(%p0)
  %exp.1 = f32[6,4,5] exp(%reshape.0)
  %argreduce.2 = i64[2,3,4] argreduce(%p0), kind=max
  ROOT (%exp.1, %argreduce.2)
}
""")
    (arg,) = [i for i in m.instrs if i.op is Op.ARGREDUCE]
    (e,) = [i for i in m.instrs if i.op is Op.EXP]
    assert arg.operands[0].op is Op.PARAMETER              # not through two reshapes
    assert e.shape == (6, 20) and e.operands[0].operands[0].op is Op.PARAMETER   # one reshape


def test_a_transpose_of_a_collapsed_parameter_is_staged_in_tiles():
    x = tf.constant(np.random.default_rng(5).standard_normal((4, 32, 7, 9)).astype(np.float32))
    f = tfjit.function(lambda x: tf.transpose(x, [0, 2, 3, 1]) * 2, jit_compile=True)
    assert_matches(f(x), tf.transpose(x, [0, 2, 3, 1]) * 2)
    (k,) = f.compiled(x).fusions
    assert k.shape == (4, 63, 32) and any("transposed in registers" in n for n in k.notes)


@pytest.mark.parametrize("shape", [(32, 64, 28, 28), (2, 3, 4, 5), (1, 7, 1, 13), (3, 1, 5, 1),
                                   (4, 17, 2, 3, 5)])
def test_softmax_over_nchw_channels_matches_tf(shape):
    x = tf.constant(np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 4)
    f = tfjit.function(lambda x: tf.nn.softmax(x, axis=1), jit_compile=True)
    assert_matches(f(x), tf.nn.softmax(x, axis=1))


def test_nchw_softmax_runs_three_kernels_over_collapsed_dims():
    x = tf.constant(np.ones((16, 16, 12, 12), np.float32))   # >= 32k: exp merged
    f = tfjit.function(lambda x: tf.nn.softmax(x, axis=1), jit_compile=True)
    kernels = f.compiled(x).fusions
    assert len(kernels) == 3 and all(144 in k.shape for k in kernels)


def test_nchw_batch_norm_statistics_and_gradient_match_tf():
    rng = np.random.default_rng(2)
    x = tf.constant(rng.standard_normal((4, 6, 5, 7)).astype(np.float32))
    g = tf.constant(rng.standard_normal((6,)).astype(np.float32))

    def step(x, g):
        with tf.GradientTape() as tape:
            tape.watch([x, g])
            mean, var = tf.nn.moments(x, axes=[0, 2, 3], keepdims=True)
            y = (x - mean) * tf.math.rsqrt(var + 1e-3) * tf.reshape(g, [1, 6, 1, 1])
            loss = tf.reduce_sum(tf.nn.relu(y) * x)
        return [y] + tape.gradient(loss, [x, g])
    got = tfjit.function(step, jit_compile=True)(x, g)
    for a, e in zip(got, tf.function(step)(x, g)):
        assert_matches(a, e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fn", [
    lambda x: tf.reshape(tf.exp(x), [-1]),
    lambda x: (tf.reshape(tf.exp(x) * 2, [6, -1]), tf.exp(x) * 2),
    lambda x: tf.reshape(tf.nn.softmax(x, axis=1), [x.shape[0], -1]) + 1,
])
def test_outputs_that_are_reshapes_match_tf(fn):
    x = tf.constant(np.random.default_rng(3).standard_normal((6, 5, 4, 3)).astype(np.float32))
    got = tfjit.function(fn, jit_compile=True)(x)
    want = fn(x)
    for a, e in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
        assert a.shape == e.shape
        assert_matches(a, e)


def test_a_dot_of_a_collapsed_softmax_matches_tf():
    rng = np.random.default_rng(4)
    x = tf.constant(rng.standard_normal((4, 8, 3, 5)).astype(np.float32))
    w = tf.constant(rng.standard_normal((15, 6)).astype(np.float32))

    def fn(x, w):
        s = tf.nn.softmax(x, axis=1)
        return tf.einsum("bchw,hwk->bck", s, tf.reshape(w, [3, 5, 6])), s
    got = tfjit.function(fn, jit_compile=True)(x, w)
    for a, e in zip(got, fn(x, w)):
        assert_matches(a, e, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(nvptx.ptxas() is None, reason="no ptxas (CUDA toolkit) here")
def test_the_collapsed_softmax_and_transpose_assemble_for_the_gpu():
    """The GPU's tile rows and transposed reads over collapsed dims (no device here: the
    PTX is assembled for sm_90 by ptxas)."""
    x = tf.constant(np.ones((16, 16, 12, 12), np.float32))

    def f(x):
        return tf.nn.softmax(x, axis=1), tf.transpose(x, [0, 2, 3, 1]) * 2
    fn = tfjit.function(f, jit_compile=True)
    assert any(144 in k.shape for k in fn.compiled(x).fusions)
    ptx = fn.experimental_get_compiler_ir(x)(stage="ptx", arch="sm_90")
    assert nvptx.assemble(ptx, "sm_90")[:4] == b"\x7fELF"
