"""Shape/movement lowerings and the reference interpreter, against TF's executor.

Lowering cases: one table row per TF graph; each is traced with tf.function,
lowered node by node (tfjit.lower.shape), run by tfjit.ir.interp and compared
bit-exactly (dtype, shape, bits) with TF running the same concrete function.
Interpreter cases: hand-built IR modules against tf.raw_ops on special values.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import tfjit.lower.shape  # noqa: F401  (registers the rules under test)
from tfjit import dtypes as dt
from tfjit.graph.graphdef import Graph, Node, TFType
from tfjit.ir import interp
from tfjit.ir.module import Module
from tfjit.ir.ops import Op
from tfjit.lower import registry
from tfjit.lower.shape import broadcast_gradient_args, strided_slice_spec

BF16 = ml_dtypes.bfloat16


# -- helpers -------------------------------------------------------------------

def lower(cf) -> Module:
    """A concrete function's graph as one module (parameters in argument order)."""
    m = Module("test")
    values = {}
    for t in cf.inputs:
        values[(t.op.name, 0)] = m.parameter(dt.from_tf_enum(t.dtype.as_datatype_enum), t.shape.as_list())
    for node in Graph(cf.graph.as_graph_def()).topological():
        if node.op in ("Placeholder", "NoOp"):
            continue
        outs = registry.lower_node(m, node, [values[i] for i in node.inputs])
        values.update({(node.name, k): o for k, o in enumerate(outs)})
    m.outputs = [values[(t.op.name, t.value_index)] for t in cf.outputs]
    return m


def assert_same(got: np.ndarray, want: np.ndarray, what=""):
    """Same dtype and shape; equal values with NaN/Inf positions and zero signs identical."""
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}"
    if got.dtype.kind == "f" or got.dtype == BF16:
        g, w = got.astype(np.float64), want.astype(np.float64)
        ok = (g == w) & (np.signbit(g) == np.signbit(w)) | (np.isnan(g) & np.isnan(w))
    else:
        ok = got == want
    assert np.all(ok), f"{what}: mismatch\n got {got!r}\nwant {want!r}"


def assert_close(got: np.ndarray, want: np.ndarray, what=""):
    """Within a few ulp, with NaN/Inf positions identical."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    assert (np.isnan(got) == np.isnan(want)).all() and (np.isinf(got) == np.isinf(want)).all(), what
    finfo = np.finfo(got.dtype)
    np.testing.assert_allclose(got, want, rtol=4 * finfo.eps, atol=4 * finfo.tiny, err_msg=what)


def data(shape, dtype, seed=0):
    """Distinct values of ``dtype`` (floats include -0.0, NaN and inf when big enough)."""
    n = math.prod(shape)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return (np.arange(n) % 3 == 1).reshape(shape)
    x = (np.arange(n) + 3 * seed) % 120 - (0 if dtype.kind == "u" else 40)
    x = x.astype(dtype)
    if dtype.kind == "f" or dtype == BF16:
        x = (x.astype(np.float32) / 4).astype(dtype)
        special = np.array([-0.0, np.nan, np.inf, -np.inf]).astype(dtype)
        x[1:1 + min(4, max(n - 1, 0))] = special[:max(0, min(4, n - 1))]
    return x.reshape(shape)


def check_tf(fn, *args):
    """Lowers ``fn`` traced on ``args``' specs, and compares with TF."""
    specs = [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for a in args]
    cf = tf.function(lambda *xs: fn(*xs)).get_concrete_function(*specs)
    want = [np.asarray(t) for t in tf.nest.flatten(cf(*[tf.constant(a) for a in args]))]
    got = interp.evaluate(lower(cf), list(args))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"output {i}")


# -- lowering cases --------------------------------------------------------------

F, I, B = np.float32, np.int32, np.bool_
x234, x23 = data((2, 3, 4), F), data((2, 3), F)

LOWER_CASES = [
    # identities and constants
    ("identity", tf.identity, [x23]),
    ("identity_n", lambda x, y: tf.identity_n([x, y]), [x23, data((4,), B)]),
    ("stop_gradient", tf.stop_gradient, [data((3,), I)]),
    ("snapshot", lambda x: tf.raw_ops.Snapshot(input=x), [x23]),
    ("prevent_gradient", lambda x: tf.raw_ops.PreventGradient(input=x), [x23]),
    ("const_f32", lambda: tf.constant([[1.5, -0.0], [np.nan, np.inf]]), []),
    ("const_mixed", lambda: (tf.constant([True, False]), tf.constant(2**64 - 1, tf.uint64),
                             tf.constant([1.1, 2.2], tf.bfloat16), tf.constant([0.1], tf.float16),
                             tf.constant(np.zeros((0, 3), np.int8))), []),
    # reshapes
    ("reshape_infer", lambda x: tf.reshape(x, [4, -1]), [x234]),
    ("reshape_flat", lambda x: tf.reshape(x, [-1]), [x234]),
    ("reshape_scalar", lambda x: tf.reshape(x, []), [data((1, 1), I)]),
    ("reshape_to_11", lambda x: tf.reshape(x, [1, 1]), [data((), B)]),
    ("reshape_empty_infer", lambda x: tf.reshape(x, [3, -1]), [data((0, 3), F)]),
    ("reshape_empty_zero_dim", lambda x: tf.reshape(x, [-1, 0]), [data((2, 0, 3), F)]),
    ("reshape_int64_shape", lambda x: tf.reshape(x, tf.constant([3, 2], tf.int64)), [x23]),
    ("expand_dims_0", lambda x: tf.expand_dims(x, 0), [x23]),
    ("expand_dims_neg", lambda x: tf.expand_dims(x, -1), [x23]),
    ("expand_dims_mid", lambda x: tf.expand_dims(x, 1), [data((0, 2), I)]),
    ("expand_dims_scalar", lambda x: tf.expand_dims(x, -1), [data((), B)]),
    ("squeeze_all", tf.squeeze, [data((1, 3, 1), F)]),
    ("squeeze_axis", lambda x: tf.squeeze(x, [0]), [data((1, 3, 1), F)]),
    ("squeeze_neg", lambda x: tf.squeeze(x, [-1]), [data((1, 3, 1), I)]),
    ("squeeze_empty", tf.squeeze, [data((1, 0, 1), F)]),
    ("squeeze_to_scalar", tf.squeeze, [data((1, 1), B)]),
    ("transpose", lambda x: tf.transpose(x, [2, 0, 1]), [x234]),
    ("transpose_bool", lambda x: tf.transpose(x, [1, 0, 2]), [data((2, 3, 4), B)]),
    ("transpose_empty", lambda x: tf.transpose(x), [data((0, 3), F)]),
    ("transpose_scalar", lambda x: tf.transpose(x, []), [data((), F)]),
    ("transpose_bf16", tf.transpose, [data((2, 3), BF16)]),
    ("transpose_u64", lambda x: tf.transpose(x, [1, 2, 0]), [data((2, 3, 2), np.uint64)]),
    # broadcasts
    ("broadcast_to", lambda x: tf.broadcast_to(x, [2, 3]), [data((3,), F)]),
    ("broadcast_to_inner", lambda x: tf.broadcast_to(x, [2, 4]), [data((2, 1), I)]),
    ("broadcast_to_zero", lambda x: tf.broadcast_to(x, [2, 0]), [data((2, 1), F)]),
    ("broadcast_to_scalar", lambda x: tf.broadcast_to(x, [2, 2]), [data((), B)]),
    ("broadcast_to_same", lambda x: tf.broadcast_to(x, [2, 3]), [x23]),
    ("fill", lambda v: tf.fill([2, 3], v), [data((), F)]),
    ("fill_empty", lambda v: tf.fill([0, 3], v), [data((), I)]),
    ("fill_bool_scalar", lambda v: tf.fill([], v), [np.array(True)]),
    ("zeros_like", tf.zeros_like, [x23]),
    ("zeros_like_bool", tf.zeros_like, [data((2,), B)]),
    ("ones_like", tf.ones_like, [data((2, 0), I)]),
    ("ones_like_bool", tf.ones_like, [data((3,), B)]),
    ("tile", lambda x: tf.tile(x, [2, 1]), [x23]),
    ("tile_zero", lambda x: tf.tile(x, [0, 2]), [x23]),
    ("tile_3d", lambda x: tf.tile(x, [2, 2, 3]), [data((1, 2, 1), B)]),
    ("tile_empty", lambda x: tf.tile(x, [3, 1]), [data((0, 2), I)]),
    ("tile_scalar", lambda x: tf.tile(x, tf.zeros([0], tf.int32)), [data((), F)]),
    # padding and slicing
    ("pad", lambda x: tf.pad(x, [[1, 0], [2, 1]]), [x23]),
    ("pad_v2", lambda x: tf.pad(x, [[0, 2], [1, 1]], constant_values=7), [data((2, 3), np.int8)]),
    ("pad_bool", lambda x: tf.pad(x, [[1, 1]], constant_values=True), [data((3,), B)]),
    ("pad_empty", lambda x: tf.pad(x, [[1, 1], [0, 0]]), [data((0, 2), F)]),
    ("pad_none", lambda x: tf.pad(x, [[0, 0], [0, 0]]), [x23]),
    ("pad_bf16", lambda x: tf.pad(x, [[1, 2]], constant_values=2.5), [data((3,), BF16)]),
    ("pad_f16", lambda x: tf.pad(x, [[0, 1], [2, 0]]), [data((2, 2), np.float16)]),
    ("pad_value_input", lambda x, v: tf.raw_ops.PadV2(input=x, paddings=[[1, 2]], constant_values=v),
     [data((2,), F), np.float32(-3.5)]),
    ("slice", lambda x: tf.slice(x, [1, 2], [2, -1]), [data((4, 5), F)]),
    ("slice_zero", lambda x: tf.slice(x, [1, 5], [2, 0]), [data((4, 5), I)]),
    ("slice_3d", lambda x: tf.slice(x, [0, 1, 1], [-1, 2, 3]), [x234]),
    ("slice_int64", lambda x: tf.slice(x, tf.constant([1], tf.int64), tf.constant([1], tf.int64)),
     [data((3,), B)]),
    # joining and splitting
    ("concat0", lambda x, y: tf.concat([x, y], 0), [x23, data((2, 3), F, 1)]),
    ("concat_neg", lambda x, y: tf.concat([x, y], -1), [x23, data((2, 1), F, 1)]),
    ("concat_empty_part", lambda x, y: tf.concat([x, y], 1), [data((2, 0), I), data((2, 3), I)]),
    ("concat_all_empty", lambda x, y: tf.concat([x, y], 0), [data((0, 2), F), data((0, 2), F)]),
    ("concat_f16", lambda x, y: tf.concat([x, y], 0), [data((2,), np.float16), data((3,), np.float16)]),
    ("concat_bool3", lambda x, y, z: tf.concat([x, y, z], 0), [data((1,), B), data((2,), B), data((3,), B)]),
    ("concat_empty_other_dim", lambda x, y: tf.concat([x, y], 1), [data((0, 2), F), data((0, 3), F)]),
    ("pack", lambda x, y: tf.stack([x, y]), [x23, data((2, 3), F, 1)]),
    ("pack_neg", lambda x, y, z: tf.stack([x, y, z], axis=-1), [x23, x23, x23]),
    ("pack_mid", lambda x, y: tf.stack([x, y], axis=1), [data((2, 0), I), data((2, 0), I)]),
    ("pack_scalars", lambda x, y: tf.stack([x, y]), [data((), B), np.array(True)]),
    ("unpack", lambda x: tf.unstack(x), [data((3, 2), F)]),
    ("unpack_neg", lambda x: tf.unstack(x, axis=-1), [data((2, 3), I)]),
    ("unpack_empty", lambda x: tf.unstack(x), [data((2, 0), F)]),
    ("unpack_1d", lambda x: tf.unstack(x), [data((2,), B)]),
    # values from shapes
    ("range_i32", lambda: tf.range(2, 10, 3), []),
    ("range_neg", lambda: tf.range(10, 2, -3), []),
    ("range_empty", lambda: tf.range(5, 5), []),
    ("range_f32", lambda: tf.range(0.1, 10.3, 0.1), []),
    ("range_f64", lambda: tf.range(*[tf.constant(v, tf.float64) for v in (1.0, -3.0, -0.3)]), []),
    ("range_i64", lambda: tf.range(*[tf.constant(v, tf.int64) for v in (-7, 20, 4)]), []),
    ("range_bf16", lambda: tf.range(*[tf.constant(v, tf.bfloat16) for v in (1.0, 9.0, 0.3)]), []),
    ("shape", tf.shape, [x234]),
    ("shape_i64_empty", lambda x: tf.shape(x, out_type=tf.int64), [data((0, 3), B)]),
    ("shape_scalar", tf.shape, [data((), F)]),
    ("size", tf.size, [x234]),
    ("size_i64", lambda x: tf.size(x, out_type=tf.int64), [data((2, 0), F)]),
    ("rank", tf.rank, [x234]),
    ("rank_scalar", tf.rank, [data((), I)]),
]


@pytest.mark.parametrize("fn,args", [pytest.param(f, a, id=n) for n, f, a in LOWER_CASES])
def test_lowering_matches_tf(fn, args):
    check_tf(fn, *args)


x5, x45, x346 = data((5,), F), data((4, 5), I), data((3, 4, 6), F)
SS = tf.strided_slice
STRIDED_CASES = [
    ("range", lambda x: x[1:3], x5),
    ("reverse", lambda x: x[::-1], x5),
    ("neg_range", lambda x: x[-3:-1], x5),
    ("backwards_empty", lambda x: x[4:1], x5),
    ("past_end", lambda x: x[7:], x5),
    ("before_start", lambda x: x[-10:2], x5),
    ("neg_stride_clamp", lambda x: x[10:-10:-2], x5),
    ("neg_stride_range", lambda x: x[3:0:-1], x5),
    ("big_stride", lambda x: x[::7], x5),
    ("index", lambda x: x[-1], x5),
    ("index_2d", lambda x: x[2, -2], x45),
    ("stride_and_index", lambda x: x[::2, 1], x45),
    ("ellipsis_index", lambda x: x[..., 0], x346),
    ("ellipsis_mid", lambda x: x[1, ..., ::-2], x346),
    ("newaxis_front", lambda x: x[tf.newaxis, ...], x45),
    ("newaxis_mid", lambda x: x[:, tf.newaxis, 1::2], x45),
    ("newaxis_after_ellipsis", lambda x: x[..., tf.newaxis, tf.newaxis, 2], x346),
    ("newaxis_both_sides", lambda x: x[tf.newaxis, 1, ..., tf.newaxis, ::-1], x346),
    ("all_masks_empty_result", lambda x: x[2:2, ..., tf.newaxis], x346),
    ("on_empty", lambda x: x[1:, ::-1], data((0, 3), F)),
    ("on_empty_newaxis", lambda x: x[tf.newaxis], data((0,), I)),
    ("size_one", lambda x: x[0, :, -1:], data((1, 1, 2), B)),
    ("full", lambda x: x[:, :], x45),
    ("scalar_newaxis", lambda x: x[tf.newaxis], data((), F)),
    ("shrink_with_begin_mask", lambda x: SS(x, [2], [0], [1], begin_mask=1, shrink_axis_mask=1), x5),
    ("shrink_and_newaxis_same_bit",
     lambda x: SS(x, [1, 0], [2, 0], [1, 1], new_axis_mask=1, shrink_axis_mask=1), x45),
    ("end_mask_neg_stride", lambda x: SS(x, [3, 1], [0, 0], [-1, 2], end_mask=3), x45),
    ("begin_mask_neg_stride", lambda x: SS(x, [0, -2], [1, 5], [-2, -1], begin_mask=1), x45),
    ("masks_beyond_length", lambda x: SS(x, [1], [3], [1], begin_mask=6, end_mask=4, shrink_axis_mask=2), x346),
    ("ellipsis_with_masked_rest",
     lambda x: SS(x, [0, 1, 0], [0, 3, 0], [1, 1, -1], ellipsis_mask=1, end_mask=4), x346),
    ("ellipsis_empty_expansion", lambda x: SS(x, [0, 1, 0, 2], [0, 2, 4, 5], [1, 1, 1, 1], ellipsis_mask=1), x346),
    ("int64_indices", lambda x: SS(x, tf.constant([-4], tf.int64), tf.constant([-1], tf.int64),
                                   tf.constant([2], tf.int64)), x5),
    ("bool", lambda x: x[::-1, 1:], data((3, 3), B)),
    ("u8", lambda x: x[1::2], data((6,), np.uint8)),
    ("f16", lambda x: x[::-1, 1], data((3, 3), np.float16)),
    ("bf16", lambda x: x[..., ::-2], data((2, 5), BF16)),
]


@pytest.mark.parametrize("fn,x", [pytest.param(f, x, id=n) for n, f, x in STRIDED_CASES])
def test_strided_slice_matches_tf(fn, x):
    check_tf(fn, x)


def test_strided_slice_random_specs_match_tf():
    """Random specs through strided_slice_spec + one slice/reshape, against the raw op."""
    rng = np.random.RandomState(1)
    checked = 0
    for _ in range(400):
        shape = tuple(int(s) for s in rng.choice([0, 1, 2, 3, 5], size=rng.randint(0, 4)))
        n = rng.randint(0, 5)
        spec = [rng.randint(-7, 8, size=n).tolist(), rng.randint(-7, 8, size=n).tolist(),
                [int(s) for s in rng.choice([-3, -2, -1, 1, 2, 3], size=n)]]
        masks = [int(rng.randint(0, 1 << max(n, 1))) if rng.rand() < 0.5 else 0 for _ in range(5)]
        if masks[2] & (masks[2] - 1):
            masks[2] &= -masks[2]        # one ellipsis at most
        x = data(shape, F)
        try:
            begin, end, strides = (np.array(v, np.int32).reshape(n) for v in spec)
            want = tf.raw_ops.StridedSlice(input=x, begin=begin, end=end, strides=strides, begin_mask=masks[0],
                                           end_mask=masks[1], ellipsis_mask=masks[2], new_axis_mask=masks[3],
                                           shrink_axis_mask=masks[4]).numpy()
        except (tf.errors.InvalidArgumentError, ValueError):
            with pytest.raises(registry.Unsupported):
                strided_slice_spec(shape, *spec, *masks)
            continue
        starts, sizes, steps, final_shape = strided_slice_spec(shape, *spec, *masks)
        m = Module("ss")
        p = m.parameter(dt.F32, shape)
        m.outputs = [m.reshape(m.slice(p, starts, sizes, steps), final_shape)]
        assert_same(interp.evaluate(m, [x])[0], want, f"shape {shape} spec {spec} masks {masks}")
        checked += 1
    assert checked > 200


@pytest.mark.parametrize("s0,s1", [([2, 3], [3]), ([1, 3], [3, 1]), ([1], [1]), ([3], [1, 3]),
                                   ([2, 1, 4], [1, 1]), ([1, 1], [1]), ([], [2, 1]), ([5, 0], [1]),
                                   ([0], [1]), ([1, 0], [2, 1]), ([], []), ([4, 5], [4, 5])])
def test_broadcast_gradient_args(s0, s1):
    fn = lambda: tf.raw_ops.BroadcastGradientArgs(s0=tf.constant(s0, tf.int32), s1=tf.constant(s1, tf.int32))
    check_tf(fn)
    r = tf.raw_ops.BroadcastGradientArgs(s0=tf.constant(s0, tf.int64), s1=tf.constant(s1, tf.int64))
    assert broadcast_gradient_args(s0, s1) == (r[0].numpy().tolist(), r[1].numpy().tolist())


def _node(op: str, **attrs) -> Node:
    return Node(op.lower(), op, [], [], {k: (TFType(v.tf_enum, v.name) if isinstance(v, dt.DType) else v)
                                         for k, v in attrs.items()})


@pytest.mark.parametrize("op,shape,const,attrs,reason", [
    ("Reshape", (2, 3), [4], dict(Tshape=dt.I32), "cannot reshape"),
    ("Reshape", (2, 3), [-1, -1], dict(Tshape=dt.I32), "invalid target"),
    ("Squeeze", (2, 1), None, dict(squeeze_dims=(0,)), "cannot squeeze"),
    ("Transpose", (2, 3), [0, 0], dict(Tperm=dt.I32), "not a permutation"),
    ("BroadcastTo", (3,), [2, 2], dict(Tidx=dt.I32), "cannot broadcast"),
    ("ExpandDims", (2,), [3], dict(Tdim=dt.I32), "out of range"),
    ("Tile", (2,), [1, 1], dict(Tmultiples=dt.I32), "multiples"),
])
def test_unsupported_instances_carry_reasons(op, shape, const, attrs, reason):
    m = Module("bad")
    inputs = [m.parameter(dt.F32, shape)] + ([m.constant(const, dt.I32)] if const is not None else [])
    with pytest.raises(registry.Unsupported, match=reason):
        registry.lower_node(m, _node(op, T=dt.F32, **attrs), inputs)


def test_non_constant_shape_operand_is_unsupported():
    m = Module("bad")
    x, shape = m.parameter(dt.F32, (2, 3)), m.parameter(dt.I32, (1,))
    with pytest.raises(registry.Unsupported, match="compile-time constant"):
        registry.lower_node(m, _node("Reshape", T=dt.F32, Tshape=dt.I32), [x, shape])


def test_range_delta_zero_and_int32_overflow_are_unsupported():
    m = Module("bad")
    consts = [m.scalar(v, dt.I32) for v in (0, 5, 0)]
    with pytest.raises(registry.Unsupported, match="delta"):
        registry.lower_node(m, _node("Range", Tidx=dt.I32), consts)
    big = m.parameter(dt.F32, (2**31, 0))
    with pytest.raises(registry.Unsupported, match="int32"):
        registry.lower_node(m, _node("Shape", T=dt.F32, out_type=dt.I32), [big])
    (shape,) = registry.lower_node(m, _node("Shape", T=dt.F32, out_type=dt.I64), [big])
    assert shape.value.tolist() == [2**31, 0]


# -- interpreter semantics against tf.raw_ops -----------------------------------

def run_ir(build, *arrays):
    """Evaluates ``build(m, *params)`` on ``arrays``."""
    m = Module("t")
    params = [m.parameter(dt.from_tf_enum(tf.as_dtype(a.dtype).as_datatype_enum), a.shape) for a in arrays]
    m.outputs = [build(m, *params)]
    return interp.evaluate(m, list(arrays))[0]


def elementwise(op, *arrays, dtype=None):
    return run_ir(lambda m, *ps: m.elementwise(op, *ps, dtype=dtype), *arrays)


INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def int_operands(t):
    info = np.iinfo(t)
    a = [info.min, info.min + 1, info.max, info.max - 1, 0, 1, 7, 100, info.max // 3]
    if info.min < 0:
        a += [-1, -7, -100, info.min // 3]
    a = np.array(a, dtype=t)
    divisors = (1, 2, 3, 7, -1, -2, -7, info.max, info.min, 100)
    b = np.array([v for v in divisors if v and info.min <= v <= info.max], t)
    return np.repeat(a, len(b)), np.tile(b, len(a))


@pytest.mark.parametrize("t", INT_TYPES)
def test_integer_arithmetic_wraps_and_truncates_like_tf(t):
    a, b = int_operands(t)
    raw = tf.raw_ops
    assert_same(elementwise(Op.ADD, a, b), raw.AddV2(x=a, y=b).numpy(), "add")
    assert_same(elementwise(Op.SUB, a, b), raw.Sub(x=a, y=b).numpy(), "sub")
    assert_same(elementwise(Op.MUL, a, b), raw.Mul(x=a, y=b).numpy(), "mul")
    assert_same(elementwise(Op.DIV, a, b), raw.TruncateDiv(x=a, y=b).numpy(), "div")
    quotient = raw.TruncateDiv(x=a, y=b)       # TF's TruncateMod exists for i32/i64 only
    assert_same(elementwise(Op.REM, a, b), raw.Sub(x=a, y=raw.Mul(x=quotient, y=b)).numpy(), "rem")
    if t in (np.int32, np.int64):
        assert_same(elementwise(Op.REM, a, b), raw.TruncateMod(x=a, y=b).numpy(), "rem")
    assert_same(elementwise(Op.MAX, a, b), raw.Maximum(x=a, y=b).numpy(), "max")
    assert_same(elementwise(Op.MIN, a, b), raw.Minimum(x=a, y=b).numpy(), "min")
    assert_same(elementwise(Op.AND, a, b), tf.bitwise.bitwise_and(a, b).numpy(), "and")
    assert_same(elementwise(Op.OR, a, b), tf.bitwise.bitwise_or(a, b).numpy(), "or")
    assert_same(elementwise(Op.NOT, a), tf.bitwise.invert(a).numpy(), "not")
    for op, tf_op in ((Op.EQ, raw.Equal), (Op.LT, raw.Less), (Op.GE, raw.GreaterEqual)):
        assert_same(elementwise(op, a, b), tf_op(x=a, y=b).numpy(), op.spelling)
    if np.iinfo(t).min < 0:
        assert_same(elementwise(Op.NEG, a), raw.Neg(x=a).numpy(), "neg")
        assert_same(elementwise(Op.ABS, a), raw.Abs(x=a).numpy(), "abs")
        assert_same(elementwise(Op.SIGN, a), raw.Sign(x=a).numpy(), "sign")


@pytest.mark.parametrize("t", [np.int8, np.int16, np.int32, np.int64])
def test_integer_power_wraps_and_refuses_negative_exponents(t):
    a = np.repeat(np.array([0, 1, -1, 2, -3, 7, np.iinfo(t).max, np.iinfo(t).min], t), 6)
    b = np.tile(np.array([0, 1, 2, 7, 31, 40], t), 8)
    assert_same(elementwise(Op.POW, a, b), tf.raw_ops.Pow(x=a, y=b).numpy())
    neg = np.array([1, -1], t)
    with pytest.raises(tf.errors.InvalidArgumentError, match="negative integer powers"):
        tf.raw_ops.Pow(x=np.array([2, 2], t), y=neg)
    with pytest.raises(interp.NegativeIntegerPower, match="Integers to negative integer powers are not allowed"):
        elementwise(Op.POW, np.array([2, 2], t), neg)


@pytest.mark.parametrize("op", [Op.DIV, Op.REM])
def test_integer_division_by_zero_raises(op):
    a, b = np.array([1, 2], np.int32), np.array([1, 0], np.int32)
    tf_op = tf.raw_ops.Div if op is Op.DIV else tf.raw_ops.FloorMod
    with pytest.raises(tf.errors.InvalidArgumentError, match="Integer division by zero"):
        tf_op(x=a, y=b)
    with pytest.raises(interp.IntegerDivisionByZero, match="Integer division by zero"):
        elementwise(op, a, b)
    assert issubclass(interp.IntegerDivisionByZero, ValueError)


SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-3, 88.0, -88.0, 1e30, -1e30, np.inf, -np.inf, np.nan,
           1e-40, -1e-40, 2.5, 3.5, -0.5]


@pytest.mark.parametrize("t", [np.float32, np.float64])
def test_float_binary_ops_match_tf_on_special_values(t):
    s = np.array(SPECIAL, t)
    a, b = np.repeat(s, len(s)), np.tile(s, len(s))
    raw = tf.raw_ops
    for op, tf_op in ((Op.ADD, raw.AddV2), (Op.SUB, raw.Sub), (Op.MUL, raw.Mul), (Op.DIV, raw.RealDiv),
                      (Op.REM, raw.TruncateMod), (Op.EQ, raw.Equal), (Op.NE, raw.NotEqual),
                      (Op.LT, raw.Less), (Op.LE, raw.LessEqual), (Op.GT, raw.Greater)):
        assert_same(elementwise(op, a, b), tf_op(x=a, y=b).numpy(), op.spelling)
    # Eigen's pow and atan2 are its own, within an ulp or two of libm's; its atan2
    # also answers +-pi/4 for denormal/zero pairs it finds equal in magnitude.
    normal = (np.abs(a) != np.float32(1e-40)) & (np.abs(b) != np.float32(1e-40))
    assert_close(elementwise(Op.POW, a, b), raw.Pow(x=a, y=b).numpy(), "pow")
    assert_close(elementwise(Op.ATAN2, a[normal], b[normal]), raw.Atan2(y=a[normal], x=b[normal]).numpy(), "atan2")


@pytest.mark.parametrize("t", [np.float32, np.float64])
def test_max_min_propagate_nan_and_keep_lhs_on_ties(t):
    """Element by element: TF's vector path keeps the rhs on +0/-0 ties, its scalar path the lhs."""
    pairs = [(0.0, -0.0), (-0.0, 0.0), (np.nan, 1.0), (1.0, np.nan), (np.nan, np.nan), (2.0, -3.0),
             (-np.inf, np.inf), (1e-40, 0.0), (-1e-40, 0.0), (0.0, -1e-40)]
    for x, y in pairs:
        a, b = np.array([x], t), np.array([y], t)
        assert_same(elementwise(Op.MAX, a, b), tf.raw_ops.Maximum(x=a, y=b).numpy(), f"max({x}, {y})")
        assert_same(elementwise(Op.MIN, a, b), tf.raw_ops.Minimum(x=a, y=b).numpy(), f"min({x}, {y})")


@pytest.mark.parametrize("t", [np.float32, np.float64])
def test_float_unary_ops_match_tf(t):
    s = np.concatenate([np.array(SPECIAL, t), np.linspace(-12, 12, 97).astype(t),
                        np.array([-15.0, -13.94, 13.94, 15.0, -37.0, 37.0, -40.0, 40.0, 1e-8], t)])
    raw = tf.raw_ops
    exact = ((Op.NEG, raw.Neg), (Op.ABS, raw.Abs), (Op.SIGN, raw.Sign), (Op.FLOOR, raw.Floor), (Op.CEIL, raw.Ceil),
             (Op.ROUND_EVEN, raw.Rint), (Op.SQRT, raw.Sqrt), (Op.IS_NAN, raw.IsNan), (Op.IS_INF, raw.IsInf),
             (Op.IS_FINITE, raw.IsFinite))
    for op, tf_op in exact:
        # TF's sign of an f32 denormal is its absolute value (an Eigen quirk); tfjit's is 0.
        x = s[np.abs(s) != np.float32(1e-40)] if op is Op.SIGN else s
        assert_same(elementwise(op, x), tf_op(x=x).numpy(), op.spelling)
    close = ((Op.EXP, raw.Exp), (Op.EXPM1, raw.Expm1), (Op.LOG, raw.Log), (Op.LOG1P, raw.Log1p),
             (Op.SIN, raw.Sin), (Op.COS, raw.Cos), (Op.TANH, raw.Tanh), (Op.LOGISTIC, raw.Sigmoid),
             (Op.RSQRT, raw.Rsqrt), (Op.ERF, raw.Erf), (Op.SOFTPLUS, raw.Softplus))
    for op, tf_op in close:
        x = s[np.abs(s) < 1e4] if op in (Op.SIN, Op.COS) else s
        assert_close(elementwise(op, x), (tf_op(features=x) if op is Op.SOFTPLUS else tf_op(x=x)).numpy(),
                     op.spelling)


def test_denormals_are_flushed_like_tf():
    """TF's CPU threads run with DAZ+FTZ; neg/abs/select and bf16 conversion are bit operations."""
    d = np.array([1e-40, -1e-40, 0.0, 1.0], np.float32)
    z = np.zeros(4, np.float32)
    assert_same(elementwise(Op.ADD, d, z), tf.raw_ops.AddV2(x=d, y=z).numpy(), "add")
    assert_same(elementwise(Op.EQ, d, z), tf.raw_ops.Equal(x=d, y=z).numpy(), "eq")
    assert_same(elementwise(Op.NEG, d), tf.raw_ops.Neg(x=d).numpy(), "neg")
    assert_same(elementwise(Op.ABS, d), tf.raw_ops.Abs(x=d).numpy(), "abs")
    for target in (tf.float64, tf.bool, tf.bfloat16, tf.float16):
        got = elementwise(Op.CONVERT, d, dtype=dt.from_tf_enum(target.as_datatype_enum))
        assert_same(got, tf.cast(d, target).numpy(), f"convert to {target.name}")
    w = np.array([1e-40, 1e-310, 1.1754942e-38], np.float64)
    assert_same(elementwise(Op.CONVERT, w, dtype=dt.F32), tf.cast(w, tf.float32).numpy(), "f64->f32")
    e = np.array([-100.0, -88.0], np.float32)
    assert_same(elementwise(Op.EXP, e), tf.exp(e).numpy(), "exp into the denormal range")


CAST_VALUES = [np.nan, np.inf, -np.inf, 1.5, -1.5, -2.7, 0.0, -0.0, 300.7, -129.5, 65543.5, 3e9, -3e9, 2.0**31,
               -2.0**31, 5e19, 1e19, -1.0, 2.0**63, -2.0**63, 1.7e19, 2.0**64, 1e-40]
TF_FLOATS = [tf.float64, tf.float32, tf.float16, tf.bfloat16]
TF_INTS = [tf.int8, tf.int16, tf.int32, tf.int64, tf.uint8, tf.uint16, tf.uint32, tf.uint64]


def ir_dtype(t: tf.DType) -> dt.DType:
    return dt.from_tf_enum(t.as_datatype_enum)


def _packet_aligned(vals: np.ndarray) -> np.ndarray:
    # TF's Cast gives its vector path's results (which the interpreter follows) only
    # on whole packets; 256 elements on one thread puts every element on that path
    return np.resize(vals, -(-vals.size // 256) * 256)


@pytest.mark.parametrize("source", TF_FLOATS, ids=lambda t: t.name)
def test_float_to_int_convert_matches_tf_cast(source):
    x = tf.cast(tf.constant(_packet_aligned(np.array(CAST_VALUES, np.float64))), source)
    for target in TF_INTS + [tf.bool]:
        got = elementwise(Op.CONVERT, x.numpy(), dtype=ir_dtype(target))
        assert_same(got, tf.cast(x, target).numpy(), f"{source.name} -> {target.name}")


ALL_TF = TF_FLOATS + TF_INTS + [tf.bool]


def test_convert_matrix_matches_tf():
    """Every type pair on values every type holds, as whole (vectorised) arrays."""
    base = np.array([0, 1, 2, 3, 5, 7, 100, 127, 0, 1, 42, 64, 9, 11, 13, 120] * 3, np.float64)
    signed = base * np.tile([1.0, -1.0], len(base) // 2)
    for source in ALL_TF:
        vals = signed if (source.is_floating or (source.is_integer and not source.is_unsigned)) else base
        x = tf.cast(tf.constant(_packet_aligned(vals)), source)
        if source.is_floating:
            x = x + tf.cast(tf.constant(np.resize([0.0, 0.25, 0.75, -0.5], x.shape)), source) * \
                tf.cast(tf.abs(tf.sign(x)), source)
        for target in ALL_TF:
            got = elementwise(Op.CONVERT, x.numpy(), dtype=ir_dtype(target))
            assert_same(got, tf.cast(x, target).numpy(), f"{source.name} -> {target.name}")


def test_convert_rounding_corner_cases_match_tf():
    cases = [(np.array([1 + 2**-11 + 2**-40, 1e300, -1e300, 65520.0, 1e-8], np.float64), tf.float16),
             (np.array([1 + 2**-8 + 2**-40, 1e300, 3.3e38], np.float64), tf.bfloat16),
             (np.array([2**30 + 2**22 + 1, -(2**62 + 2**38 + 1), 2**63 - 1], np.int64), tf.bfloat16),
             (np.array([2**62 + 2**38 + 1, 2**63 - 1, -2**63], np.int64), tf.float32),
             (np.array([2**64 - 1, 2**63 + 2**39 + 1, 2**53 + 1], np.uint64), tf.float32),
             (np.array([2**64 - 1, 2**53 + 1], np.uint64), tf.float64),
             (np.array([1e300, -1e300, 3.4028235e38, 3.4028236e38], np.float64), tf.float32),
             (np.array([-1, 255, 256, -129], np.int32), tf.uint8),
             (np.array([-1, 2**40 + 5], np.int64), tf.int32),
             (np.array([True, False]), tf.float32),
             (np.array([True, False]), tf.bfloat16)]
    for x, target in cases:
        got = elementwise(Op.CONVERT, x, dtype=ir_dtype(target))
        assert_same(got, tf.cast(x, target).numpy(), f"{x.dtype} -> {target.name}")


def test_argreduce_skips_nan_and_keeps_first_tie():
    x = np.array([[np.nan, 1, 3], [3, 1, 3], [np.nan] * 3, [-np.inf, np.nan, -np.inf], [1, np.nan, 5],
                  [np.inf, np.nan, np.inf], [-0.0, 0.0, -0.0],
                  [np.nan, -3.4028235e38, -3.4028235e38], [np.nan, 3.4028235e38, 2]], np.float32)
    for kind, tf_op in (("max", tf.math.argmax), ("min", tf.math.argmin)):
        for out in (dt.I32, dt.I64):
            got = run_ir(lambda m, p: m.argreduce(p, kind, out), x)
            assert_same(got, tf_op(x, axis=1, output_type=tf.int64 if out is dt.I64 else tf.int32).numpy(), kind)
    i = np.array([[5, -3, 5], [-128, -128, 0], [7, 7, 7]], np.int8)
    for kind, tf_op in (("max", tf.math.argmax), ("min", tf.math.argmin)):
        assert_same(run_ir(lambda m, p: m.argreduce(p, kind, dt.I64), i), tf_op(i, axis=1).numpy(), kind)


REDUCTIONS = {"sum": tf.reduce_sum, "prod": tf.reduce_prod, "max": tf.reduce_max, "min": tf.reduce_min}


@pytest.mark.parametrize("t", [np.float32, np.float64, np.int32, np.uint8, np.int64])
def test_reductions_match_tf_including_empty(t):
    for shape in [(3, 0), (0, 4), (2, 3, 4), (5,)]:
        x = data(shape, t)
        for kind, tf_op in REDUCTIONS.items():
            for ndims in range(1, len(shape) + 1):
                axes = list(range(len(shape) - ndims, len(shape)))
                got = run_ir(lambda m, p: m.reduce(p, kind, ndims), x)
                want = tf_op(x, axis=axes).numpy()
                if np.dtype(t).kind == "f" and kind in ("sum", "prod"):
                    np.testing.assert_allclose(got, want, rtol=1e-6)   # summation order differs
                    assert got.dtype == want.dtype and got.shape == want.shape
                else:
                    assert_same(got, want, f"{kind} over {axes} of {shape}")
    big = np.full(4, np.iinfo(t).max if np.dtype(t).kind in "iu" else 1e30, t)
    assert_same(run_ir(lambda m, p: m.reduce(p, "sum", 1), big), tf.reduce_sum(big).numpy(), "wrapping sum")


def test_bool_reductions_and_logic_match_tf():
    for shape in [(3, 0), (2, 3)]:
        x = data(shape, np.bool_)
        for kind, tf_op in (("and", tf.reduce_all), ("or", tf.reduce_any)):
            assert_same(run_ir(lambda m, p: m.reduce(p, kind, 1), x), tf_op(x, axis=1).numpy(), kind)
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    assert_same(elementwise(Op.AND, a, b), np.logical_and(a, b))
    assert_same(elementwise(Op.OR, a, b), np.logical_or(a, b))
    assert_same(elementwise(Op.NOT, a), np.logical_not(a))
    f = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    assert_same(elementwise(Op.SELECT, a, f, -f), tf.where(a, f, -f).numpy())


def test_movement_leaves_and_constant_folding_entry():
    m = Module("t")
    io = m.iota(dt.I32, (2, 3), 1)
    b = m.broadcast(m.constant([1.5, 2.5], dt.F32), (2, 4), (0,))
    assert_same(interp.evaluate_instr(io, []), np.array([[0, 1, 2], [0, 1, 2]], np.int32))
    assert_same(interp.evaluate_instr(b, [np.array([1.5, 2.5], np.float32)]),
                np.array([[1.5] * 4, [2.5] * 4], np.float32))
    with pytest.raises(ValueError, match="argument 0"):
        p = m.parameter(dt.F32, (2,))
        m.outputs = [p]
        interp.evaluate(m, [np.zeros(2, np.float64)])
