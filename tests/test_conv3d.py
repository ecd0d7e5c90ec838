"""3-D convolutions and pools (NDHWC) and their gradients, compiled by tfjit against TF's
executor: Conv3D, Conv3DBackpropInputV2/FilterV2 (as tf.nn.conv3d_transpose and the
tape emit them; the V1 ops are gone from GraphDefs since version 10), MaxPool3D, AvgPool3D, MaxPool3DGrad, AvgPool3DGrad.

Geometries: SAME/VALID, strides per dim (depth stride with SAME padding), 1-deep
filters (x read in place), windows as large as the input, size-1 dims, a prime
channel count.  The pools on ordinary values against this process's TF (its reference
kernels); on special values (NaN, ±inf, ±0 ties, -FLT_MAX; tests/pool3d_cases.py)
against TF's default x86 kernels, oneDNN's, run in a child process (lower/pooling.py
says why those are the semantics followed).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import pool3d_cases
import tfjit
from oracle import assert_matches
from test_ops import NP_DTYPES, Case, check, params

R = tf.raw_ops
TOL = {"f32": (1e-4, 1e-4), "f64": (1e-10, 1e-10), "f16": (1e-2, 1e-2), "bf16": (5e-2, 5e-2)}

# name -> (x shape, filter (kd, kh, kw), strides (d, h, w), padding, out channels)
CONV = {
    "3x3x3 SAME": ((2, 5, 6, 7, 3), (3, 3, 3), (1, 1, 1), "SAME", 4),
    "2x3x1 VALID strided": ((2, 7, 8, 9, 3), (2, 3, 1), (2, 1, 3), "VALID", 5),
    "3x2x2 SAME stride 2": ((1, 7, 6, 5, 2), (3, 2, 2), (2, 2, 2), "SAME", 3),
    "1x3x3 in place": ((2, 4, 6, 6, 4), (1, 3, 3), (1, 1, 1), "SAME", 2),
    "1x1x1": ((1, 3, 4, 5, 6), (1, 1, 1), (1, 1, 1), "VALID", 7),
    "window = input": ((1, 3, 4, 2, 2), (3, 4, 2), (1, 1, 1), "VALID", 3),
    "depth 1, prime channels": ((2, 1, 5, 5, 7), (1, 2, 2), (1, 1, 1), "SAME", 3),
    "depth stride 3 SAME": ((1, 8, 3, 3, 2), (2, 1, 1), (3, 1, 1), "SAME", 2),
}


def _floats(d, shape, scale=1.0):
    return lambda rng: (rng.uniform(-1, 1, shape) * scale).astype(NP_DTYPES[d])


def _conv(strides, padding):
    return lambda x, w: R.Conv3D(input=x, filter=w, strides=[1, *strides, 1], padding=padding)


def _conv_grads(strides, padding):
    def fn(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = _conv(strides, padding)(x, w)
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, [x, w])
    return fn


def conv_cases() -> list:
    cases = []
    for name, (shape, k, s, pad, o) in CONV.items():
        w_shape = (*k, shape[-1], o)
        for d in ("f32", "f64", "bf16") if name == "3x3x3 SAME" else ("f32",):
            rtol, atol = TOL[d]
            make = (lambda rng, d=d, shape=shape, w_shape=w_shape:
                    [_floats(d, shape)(rng), _floats(d, w_shape)(rng)])
            cases.append(Case("Conv3D", d, name, _conv(s, pad), make, tol=(rtol, atol)))
            cases.append(Case("Conv3D-grads", d, name, _conv_grads(s, pad), make,
                              tol=(10 * rtol, 10 * atol)))
    return cases


def explicit_op_cases() -> list:
    """The gradient ops as user code writes them: conv3d_transpose (the input gradient)
    and the filter gradient called directly."""
    x_shape, w_shape, g_shape = (2, 5, 6, 4, 3), (3, 2, 2, 3, 4), (2, 3, 3, 2, 4)
    kw = dict(strides=[1, 2, 2, 2, 1], padding="SAME")
    make = lambda rng: [_floats("f32", x_shape)(rng), _floats("f32", w_shape)(rng),  # noqa: E731
                        _floats("f32", g_shape)(rng)]
    return [
        Case("Conv3DBackpropInputV2", "f32", "conv3d_transpose", lambda x, w, g: tf.nn.conv3d_transpose(
            g, w, x_shape, strides=[1, 2, 2, 2, 1], padding="SAME"), make, tol=(1e-4, 1e-4)),
        Case("Conv3DBackpropFilterV2", "f32", "V2", lambda x, w, g: R.Conv3DBackpropFilterV2(
            input=x, filter_sizes=list(w_shape), out_backprop=g, **kw), make, tol=(1e-4, 1e-4)),
    ]


# -- pools ---------------------------------------------------------------------------------

def _distinct(d, shape):
    """Values with no ties (TF's reference MaxPool3DGrad gives every tie the gradient,
    oneDNN's and tfjit's the first): a permutation, scaled into [-1, 1)."""
    return lambda rng: ((rng.permutation(int(np.prod(shape))).reshape(shape) * 2.0
                         / max(np.prod(shape), 1)) - 1).astype(NP_DTYPES[d])


def pool_cases() -> list:
    """Ordinary values, where TF's reference kernels (the in-process oracle) and oneDNN's
    agree: the geometry, the counts and the sums."""
    cases = []
    for name, (spatial, k, s, pad) in pool3d_cases.GEOMETRY.items():
        a = pool3d_cases.attrs(k, s, pad)
        for c in (3, 17):
            shape = (*spatial, c)
            out = tuple(R.MaxPool3D(input=tf.zeros(shape), **a).shape)
            tag = f"{name}-c{c}"
            for d in ("f32", "bf16"):
                x = _distinct(d, shape)
                cases.append(Case("MaxPool3D", d, tag, lambda x, a=a: R.MaxPool3D(input=x, **a),
                                  lambda rng, x=x: [x(rng)]))
                cases.append(Case("AvgPool3D", d, tag, lambda x, a=a: R.AvgPool3D(input=x, **a),
                                  lambda rng, x=x: [x(rng)]))
                # TF adds a position's shares in bfloat16 looping over the outputs' last
                # dim first; tfjit in row-major order: 27 rounded adds apart at 3x3x3
                cases.append(Case("AvgPool3DGrad", d, tag, lambda g, a=a, sh=shape:
                                  R.AvgPool3DGrad(orig_input_shape=list(sh), grad=g, **a),
                                  lambda rng, g=_floats(d, out, 4.0): [g(rng)],
                                  tol=TOL[d] if d == "bf16" else None))
            cases.append(Case("MaxPool3DGrad", "f32", tag, pool3d_cases.max_pool_grad(a),
                              lambda rng, x=_distinct("f32", shape): [x(rng)]))
    return cases


@pytest.mark.parametrize("case", params(conv_cases() + explicit_op_cases() + pool_cases()))
def test_3d_against_tf(case):
    check(case)


def test_pools_on_special_values_match_tf_with_onednn(tmp_path):
    """NaN, ±inf, ±0 ties, windows of -inf, -FLT_MAX: TF's default 3-D pools on x86
    (oneDNN's) computed in a child process with TF_ENABLE_ONEDNN_OPTS=1 (this process
    runs TF's reference kernels, whose special-value handling follows Eigen's
    vectorisation: lower/pooling.py)."""
    out = tmp_path / "onednn.npz"
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1")
    subprocess.run([sys.executable, pool3d_cases.__file__, str(out)], check=True, env=env,
                   cwd=os.path.dirname(pool3d_cases.__file__), capture_output=True)
    want = np.load(out)
    for cid, fn, xs in pool3d_cases.cases():
        got = tfjit.function(fn, jit_compile=True)(*[tf.constant(v) for v in xs]).numpy()
        assert_matches(got, want[cid], what=cid)


def test_dilated_conv3d_against_2d_convolutions_per_depth_tap(rng):
    """TF's CPU Conv3D refuses dilations (Eigen's kernel); the oracle is the same sum
    written as one TF Conv2D per depth tap."""
    x = tf.constant(rng.uniform(-1, 1, (2, 9, 8, 8, 3)).astype(np.float32))
    w = tf.constant(rng.uniform(-1, 1, (2, 3, 2, 3, 4)).astype(np.float32))
    dil = (3, 2, 2)

    def conv(x, w):
        return R.Conv3D(input=x, filter=w, strides=[1] * 5, dilations=[1, *dil, 1], padding="VALID")

    def reference(x, w):
        n, d, h, wd, c = x.shape
        do = d - (w.shape[0] - 1) * dil[0]
        total = 0
        for t in range(w.shape[0]):
            planes = tf.reshape(x[:, t * dil[0]:t * dil[0] + do], (n * do, h, wd, c))
            total += tf.nn.conv2d(planes, w[t], 1, "VALID", dilations=dil[1:])
        return tf.reshape(total, (n, do, *total.shape[1:]))
    assert_matches(tfjit.function(conv, jit_compile=True)(x, w).numpy(),
                   tf.function(reference)(x, w).numpy(), rtol=1e-4, atol=1e-4)


def test_conv3d_is_one_library_call_and_a_1_deep_filter_reads_x_in_place(rng):
    x = tf.constant(rng.uniform(-1, 1, (2, 5, 6, 6, 3)).astype(np.float32))
    for k, in_place in (((3, 3, 3), False), ((1, 3, 3), True)):
        w = tf.constant(rng.uniform(-1, 1, (*k, 3, 4)).astype(np.float32))
        f = tfjit.function(_conv((1, 1, 1), "SAME"), jit_compile=True)
        assert_matches(f(x, w).numpy(), tf.function(_conv((1, 1, 1), "SAME"))(x, w).numpy(),
                       rtol=1e-4, atol=1e-4)
        compiled = f.compiled(x, w)
        got = [fu.kind for fu in compiled.fusions]
        # x and the filter read through reshapes by a 2-D call, or TF's own 3-D kernel
        # (lower/conv3d.py _native; tests/test_conv3d_native.py): no data moves
        assert got == ["library"], got
        assert ("convolution-3d(" in compiled.module_after) != in_place, compiled.module_after


def test_ncdhw_and_dilated_gradients_are_refused_with_the_op_named():
    x, w = tf.zeros((1, 2, 4, 4, 4)), tf.zeros((1, 1, 1, 2, 2))
    ncdhw = tfjit.function(lambda x, w: R.Conv3D(input=x, filter=w, strides=[1] * 5,
                                                 padding="VALID", data_format="NCDHW"),
                           jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Conv3D.*NCDHW"):
        ncdhw(x, w)
    dilated = tfjit.function(lambda x, w, g: R.Conv3DBackpropFilterV2(
        input=x, filter_sizes=[2, 1, 1, 4, 2], out_backprop=g, strides=[1] * 5,
        dilations=[1, 2, 1, 1, 1], padding="VALID"), jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Conv3DBackpropFilterV2.*dilat"):
        dilated(tf.zeros((1, 4, 4, 4, 4)), w, tf.zeros((1, 2, 4, 4, 2)))
