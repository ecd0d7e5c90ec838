"""``data_format="NCHW"`` convolutions and pools (tfjit/lower/layout.py), which TF's CPU
kernels refuse: compared with TF running the same computation in NHWC on transposed
tensors, forward and gradients (a GradientTape gives Conv2DBackprop{Input,Filter},
MaxPoolGrad, AvgPoolGrad and the depthwise gradients in NCHW)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

T_NHWC, T_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def _nhwc(v):
    return [v[0], v[2], v[3], v[1]]


def conv(fmt, strides=(1, 1, 1, 1), dilations=(1, 1, 1, 1), padding="SAME"):
    def layer(x, w):
        s, d = (list(strides), list(dilations)) if fmt == "NCHW" else (_nhwc(strides), _nhwc(dilations))
        pad = padding
        if isinstance(padding, list) and fmt == "NHWC":
            pad = _nhwc(padding)
        return tf.nn.conv2d(x, w, strides=s, dilations=d, padding=pad, data_format=fmt)
    return layer


def depthwise(fmt, strides=(1, 1, 1, 1), padding="SAME"):
    def layer(x, w):
        s = list(strides) if fmt == "NCHW" else _nhwc(strides)
        return tf.nn.depthwise_conv2d(x, w, strides=s, padding=padding, data_format=fmt)
    return layer


def pool(kind, fmt, ksize=(1, 1, 2, 2), strides=(1, 1, 2, 2), padding="VALID"):
    def layer(x, w):
        k, s = (list(ksize), list(strides)) if fmt == "NCHW" else (_nhwc(ksize), _nhwc(strides))
        fn = tf.nn.max_pool2d if kind == "max" else tf.nn.avg_pool2d
        return fn(x, k, s, padding, data_format=fmt) * tf.reduce_sum(w)
    return layer


def max_pool_v2(fmt):
    def layer(x, w):
        k, s = ([1, 1, 3, 2], [1, 1, 2, 1]) if fmt == "NCHW" else ([1, 3, 2, 1], [1, 2, 1, 1])
        return tf.raw_ops.MaxPoolV2(input=x, ksize=k, strides=s, padding="SAME",
                                    data_format=fmt) * tf.reduce_sum(w)
    return layer


CASES = [
    ("conv-same", conv, {}, (3, 3, 3, 5)),
    ("conv-strided-valid", conv, dict(strides=(1, 1, 2, 3), padding="VALID"), (3, 2, 3, 4)),
    ("conv-dilated", conv, dict(dilations=(1, 1, 2, 2)), (3, 3, 3, 2)),
    ("conv-explicit", conv, dict(padding=[[0, 0], [0, 0], [1, 2], [0, 1]]), (2, 3, 3, 4)),
    ("conv-1x1", conv, {}, (1, 1, 3, 6)),
    ("depthwise", depthwise, {}, (3, 3, 3, 2)),
    ("depthwise-strided", depthwise, dict(strides=(1, 1, 2, 2)), (3, 3, 3, 1)),
    ("max-pool", lambda fmt: pool("max", fmt), None, (1, 1, 3, 1)),
    ("max-pool-same", lambda fmt: pool("max", fmt, (1, 1, 3, 3), (1, 1, 2, 1), "SAME"), None, (1, 1, 3, 1)),
    ("avg-pool", lambda fmt: pool("avg", fmt), None, (1, 1, 3, 1)),
    ("avg-pool-same", lambda fmt: pool("avg", fmt, (1, 1, 3, 2), (1, 1, 1, 2), "SAME"), None, (1, 1, 3, 1)),
    ("max-pool-v2", max_pool_v2, None, (1, 1, 3, 1)),
]


def _step(layer):
    def step(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = layer(x, w)
            loss = tf.reduce_sum(y * y)
        return (y,) + tuple(tape.gradient(loss, [x, w]))
    return step


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_nchw_matches_nhwc_in_tf(case, dtype, rng):
    name, make, kwargs, wshape = case
    build = (lambda fmt: make(fmt, **kwargs)) if kwargs is not None else make
    x = tf.constant(rng.standard_normal((2, 3, 11, 8)), dtype)
    w = tf.constant(rng.standard_normal(wshape) * 0.5, dtype)
    jit = tfjit.function(_step(build("NCHW")))
    y, dx, dw = jit(x, w)
    ops = {n.op for n in tf.function(_step(build("NCHW"))).get_concrete_function(x, w).graph.as_graph_def().node
           if n.attr["data_format"].s == b"NCHW"}
    assert ops, "no NCHW node in the graph"
    tol = dict(rtol=2e-5, atol=2e-4) if dtype == tf.float32 else dict(rtol=2e-2, atol=5e-2)
    if "dilated" in name:     # TF's CPU gradient kernels refuse dilations: the forward only
        ry = tf.function(build("NHWC"))(tf.transpose(x, T_NHWC), w)
        assert_matches(y.numpy(), tf.transpose(ry, T_NCHW).numpy(), what=f"{name} y", **tol)
        return
    ry, rdx, rdw = tf.function(_step(build("NHWC")))(tf.transpose(x, T_NHWC), w)
    assert_matches(y.numpy(), tf.transpose(ry, T_NCHW).numpy(), what=f"{name} y", **tol)
    assert_matches(dx.numpy(), tf.transpose(rdx, T_NCHW).numpy(), what=f"{name} dx", **tol)
    scale = max(1.0, float(np.abs(rdw.numpy().astype(np.float64)).max()))
    assert_matches(dw.numpy(), rdw.numpy(), what=f"{name} dw", rtol=tol["rtol"],
                   atol=tol["atol"] * scale)


def test_tensorflow_itself_refuses_nchw_on_cpu():
    x, w = tf.ones([1, 2, 5, 5]), tf.ones([3, 3, 2, 2])
    f = conv("NCHW")
    with pytest.raises((tf.errors.InvalidArgumentError, tf.errors.UnimplementedError)):
        tf.function(f)(x, w)
    assert tfjit.function(f)(x, w).shape == (1, 2, 5, 5)


@pytest.mark.parametrize("op", ["depth_to_space", "space_to_depth"])
@pytest.mark.parametrize("block, shape", [(2, (2, 4, 6, 8)), (3, (1, 6, 3, 18)), (2, (3, 2, 2, 4))])
@pytest.mark.parametrize("dtype", [tf.float32, tf.int32, tf.float16, tf.bool])
def test_depth_and_space_moves_in_both_layouts(op, block, shape, dtype):
    """NHWC against TF's own kernel; NCHW (TF's CPU refuses it) against NHWC on the
    transposed tensor; inside a fused kernel with neighbours in both."""
    fn = getattr(tf.nn, op)
    x = np.random.default_rng(block).integers(0, 9, shape)
    x = tf.constant(x > 4 if dtype == tf.bool else x, dtype)

    def around(y):                 # neighbours for fusion to fold the moves into
        return tf.logical_not(y) if dtype == tf.bool else y * 2 + 1

    def nhwc(x):
        return around(fn(around(x), block))

    def nchw(x):
        return around(fn(around(x), block, data_format="NCHW"))
    want = nhwc(x).numpy()
    assert_matches(tfjit.function(nhwc, jit_compile=True)(x).numpy(), want)
    got = tfjit.function(nchw, jit_compile=True)(tf.transpose(x, T_NCHW))
    assert_matches(tf.transpose(got, T_NHWC).numpy(), want)


def test_depth_and_space_moves_that_do_not_divide_are_refused_as_tf_refuses_them():
    x = tf.ones([1, 3, 4, 4])      # TF's shape inference refuses these while tracing
    for fn in (lambda x: tf.nn.space_to_depth(x, 2), lambda x: tf.nn.depth_to_space(x, 3)):
        for wrap in (tf.function, lambda f: tfjit.function(f, jit_compile=True)):
            with pytest.raises(ValueError, match="divisible by"):
                wrap(fn)(x)


@pytest.mark.parametrize("padding", ["SAME", "VALID", "EXPLICIT"])
@pytest.mark.parametrize("strides, dilations", [((1, 1), (1, 1)), ((2, 1), (1, 1)), ((1, 1), (2, 2))])
def test_the_generic_conv_op_is_conv2d_in_both_layouts(padding, strides, dilations):
    """tf.raw_ops.Conv (batch_dims=1, groups=1): CHANNELS_LAST against TF's kernel,
    CHANNELS_FIRST against it on transposed tensors."""
    rng = np.random.default_rng(3)
    x = tf.constant(rng.standard_normal((2, 9, 8, 3)), tf.float32)
    w = tf.constant(rng.standard_normal((3, 2, 3, 4)), tf.float32)
    pads = [0, 0, 1, 2, 0, 1, 0, 0] if padding == "EXPLICIT" else []

    def last(x, w):
        return tf.raw_ops.Conv(input=x, filter=w, strides=[1, *strides, 1], padding=padding,
                               explicit_paddings=pads, data_format="CHANNELS_LAST",
                               dilations=[1, *dilations, 1])

    def first(x, w):
        nchw_pads = pads[:2] + pads[6:8] + pads[2:6] if pads else []
        return tf.raw_ops.Conv(input=x, filter=w, strides=[1, 1, *strides], padding=padding,
                               explicit_paddings=nchw_pads, data_format="CHANNELS_FIRST",
                               dilations=[1, 1, *dilations])
    want = last(x, w).numpy()
    assert_matches(tfjit.function(last, jit_compile=True)(x, w).numpy(), want, rtol=1e-5, atol=1e-5)
    got = tfjit.function(first, jit_compile=True)(tf.transpose(x, T_NCHW), w)
    assert_matches(tf.transpose(got, T_NHWC).numpy(), want, rtol=1e-5, atol=1e-5)
