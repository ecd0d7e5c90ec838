"""tfjit-aot on models with matmuls, convolutions, a QR, the dense solvers and the other
decompositions (eig, SVD, LU, least squares): the object calls the AOT runtime
(tfjit_aot_rt_*, aot/runtime.py), written beside it as ``<prefix>_runtime.a``, and a
C++ program built with g++ from the object, that library and -lm gives TF's results.
The seed's MNIST softmax regression (trained a few steps, frozen), a small CNN, a QR and
a chain of solvers, a set of decompositions."""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from oracle import assert_matches
from test_aot import RUNNER, _aot, _results, _run, _save, _session_run, _undefined, pytestmark  # noqa: F401


def _build_with_runtime(tmp_path, prefix, cpp_class) -> str:
    src = tmp_path / "main.cc"
    src.write_text(RUNNER)
    exe = str(tmp_path / "prog")
    cmd = ["g++", "-std=c++17", "-O1", "-Wall", "-Werror", f'-DHEADER="{prefix}.h"',
           f"-DCLASS={cpp_class}", str(src), f"{prefix}.o", f"{prefix}_runtime.a", "-lm", "-o", exe]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return exe


def _freeze(tf, graph, session, outputs):
    gd = tf.compat.v1.graph_util.convert_variables_to_constants(session, graph.as_graph_def(), outputs)
    frozen = tf.Graph()
    with frozen.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    return frozen


def _mnist_softmax(tf, rng):
    """784 -> 10 softmax regression, trained 20 SGD steps on separable random data, frozen."""
    labels = rng.integers(0, 10, 512)
    centers = rng.standard_normal((10, 784)).astype(np.float32)
    images = (centers[labels] + 0.5 * rng.standard_normal((512, 784))).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 784], name="x")
        y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
        w = tf.compat.v1.Variable(tf.zeros([784, 10]), name="w")
        b = tf.compat.v1.Variable(tf.zeros([10]), name="b")
        logits = tf.nn.bias_add(tf.matmul(x, w), b)
        tf.nn.softmax(logits, name="probs")
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        with tf.compat.v1.Session(graph=g) as s:
            s.run(tf.compat.v1.global_variables_initializer())
            for k in range(20):
                s.run(train, {x: images[k * 16:(k + 1) * 16], y: labels[k * 16:(k + 1) * 16]})
            frozen = _freeze(tf, g, s, ["probs"])
    return frozen, images[:16], labels[:16]


def _cnn(tf, rng):
    """Conv2D + bias + ReLU (one fused call) + MaxPool, a strided conv + AvgPool, Dense +
    softmax (random weights)."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 28, 28, 1], name="x")
        w1 = tf.constant(rng.standard_normal((3, 3, 1, 8)).astype(np.float32) * 0.5)
        w2 = tf.constant(rng.standard_normal((3, 3, 8, 16)).astype(np.float32) * 0.2)
        wd = tf.constant(rng.standard_normal((4 * 4 * 16, 10)).astype(np.float32) * 0.1)
        b1 = tf.constant(rng.uniform(-0.2, 0.2, 8).astype(np.float32))
        h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w1, 1, "SAME"), b1))  # fused: conv2d_bias
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")                               # 14x14x8
        h = tf.nn.relu(tf.nn.conv2d(h, w2, 2, "VALID"))                      # 6x6x16
        h = tf.nn.avg_pool2d(h, 3, 1, "VALID")                               # 4x4x16
        logits = tf.matmul(tf.reshape(h, [-1, 4 * 4 * 16]), wd)
        tf.nn.softmax(logits, name="probs")
    return g


def _cnn3d(tf, rng):
    """Conv3D + bias + ReLU (one fused call: conv3d_bias), a MaxPool3D, a strided Conv3D
    (TF's 3-D kernels under the launch op; linalg.cc's depth taps and 2-D convolution in
    the AOT runtime), a global average and a softmax (random weights)."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6, 8, 8, 3], name="x")
        w1 = tf.constant(rng.standard_normal((3, 3, 3, 3, 8)).astype(np.float32) * 0.3)
        w2 = tf.constant(rng.standard_normal((2, 3, 3, 8, 5)).astype(np.float32) * 0.2)
        b1 = tf.constant(rng.uniform(-0.2, 0.2, 8).astype(np.float32))
        h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv3d(x, w1, [1] * 5, "SAME"), b1))
        h = tf.nn.max_pool3d(h, 2, 2, "VALID")                                 # 3x4x4x8
        h = tf.nn.conv3d(h, w2, [1, 2, 1, 1, 1], "SAME")                        # 2x4x4x5
        tf.nn.softmax(tf.reduce_mean(h, [1, 2, 3]), name="probs")
    return g


def _qr(tf, rng):
    """Batched reduced QR; both factors fetched as one vector (Eigen's HouseholderQR in the
    AOT runtime, TF's kernel in Session.run)."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 7, 4], name="x")
        q, r = tf.linalg.qr(x * 2.0)
        tf.concat([tf.reshape(q, [-1]), tf.reshape(tf.abs(r), [-1])], 0, name="probs")
    return g


def _solvers(tf, rng):
    """Cholesky of x x^T + 4 I, triangular solves with its factor (both sides), the inverse,
    a solve, the determinants (linalg.cc's Eigen solvers in the AOT runtime, TF's kernels in
    Session.run), fetched as one vector."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4, 4], name="x")
        spd = tf.matmul(x, x, transpose_b=True) + 4.0 * tf.eye(4)
        chol = tf.linalg.cholesky(spd)
        y = tf.linalg.triangular_solve(chol, x)
        z = tf.linalg.triangular_solve(chol, y, adjoint=True)
        inv = tf.linalg.inv(spd)
        solved = tf.linalg.solve(spd, x)
        sign, logdet = tf.linalg.slogdet(spd)
        parts = [chol, z, inv, solved, tf.linalg.det(spd) / 100.0, sign, logdet]
        tf.concat([tf.reshape(p, [-1]) for p in parts], 0, name="probs")
    return g


def _decompositions(tf, rng):
    """The eigendecomposition of x + x^T, the SVD of x, the LU of x x^T + 4 I, a
    regularised least-squares solve (linalg.cc's Eigen code in the AOT runtime, TF's
    kernels in Session.run); vectors by magnitude (their signs are not unique), fetched
    as one vector."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4, 4], name="x")
        e, v = tf.linalg.eigh(x + tf.linalg.matrix_transpose(x))
        s, u, w = tf.linalg.svd(x)
        lu, perm = tf.linalg.lu(tf.matmul(x, x, transpose_b=True) + 4.0 * tf.eye(4))
        ls = tf.raw_ops.MatrixSolveLs(matrix=x, rhs=x[..., :2], l2_regularizer=tf.constant(0.1, tf.float64))
        parts = [e, tf.abs(v), s, tf.abs(u), tf.abs(w), lu, tf.cast(perm, tf.float32), ls]
        tf.concat([tf.reshape(p, [-1]) for p in parts], 0, name="probs")
    return g


CONFIG = ('feed {{ id {{ node_name: "x" }} shape {{ {dims} }} name: "x" }}\n'
          'fetch {{ id {{ node_name: "probs" }} name: "probs" }}\n')


def _dims(*sizes) -> str:
    return " ".join(f"dim {{ size: {s} }}" for s in sizes)


@pytest.mark.parametrize("model", ["mnist_softmax", "cnn", "cnn3d", "qr", "solvers", "decompositions"])
def test_models_with_matmul_and_convolution_match_tf(tf, tmp_path, rng, model):
    labels = None
    if model == "mnist_softmax":
        g, images, labels = _mnist_softmax(tf, rng)
        config, inputs = CONFIG.format(dims=_dims(16, 784)), [images]
    elif model == "qr":
        g = _qr(tf, rng)
        config = CONFIG.format(dims=_dims(3, 7, 4))
        inputs = [rng.standard_normal((3, 7, 4)).astype(np.float32)]
    elif model in ("solvers", "decompositions"):
        g = (_solvers if model == "solvers" else _decompositions)(tf, rng)
        config = CONFIG.format(dims=_dims(3, 4, 4))
        inputs = [rng.standard_normal((3, 4, 4)).astype(np.float32)]
    elif model == "cnn3d":
        g = _cnn3d(tf, rng)
        config = CONFIG.format(dims=_dims(2, 6, 8, 8, 3))
        inputs = [rng.standard_normal((2, 6, 8, 8, 3)).astype(np.float32)]
    else:
        g = _cnn(tf, rng)
        config = CONFIG.format(dims=_dims(8, 28, 28, 1))
        inputs = [rng.standard_normal((8, 28, 28, 1)).astype(np.float32)]
    pb, cfg = _save(tmp_path, g, config)
    prefix = tmp_path / "out" / model
    assert _aot(["--graph", pb, "--config", cfg, "--cpp_class", "models::Net",
                 "--out_prefix", prefix]) == 0
    needs = [s for s in _undefined(f"{prefix}.o") if s.startswith("tfjit_")]
    assert needs and all(s.startswith("tfjit_aot_rt_") for s in needs), needs
    if model == "cnn":
        assert "tfjit_aot_rt_conv2d_bias_f32" in needs, needs
    if model == "cnn3d":
        assert {"tfjit_aot_rt_conv3d_bias_f32", "tfjit_aot_rt_conv3d_f32"} <= set(needs), needs
    assert os.path.exists(f"{prefix}_runtime.a")
    assert f"{model}_runtime.a" in (tmp_path / "out" / f"{model}.h").read_text()
    exe = _build_with_runtime(tmp_path, prefix, "models::Net")
    libs = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    assert "tensorflow" not in libs and "python" not in libs, libs
    want = _session_run(tf, g, ["probs:0"], {"x:0": inputs[0]})
    proc = _run(exe, tmp_path, inputs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (got,) = _results(tmp_path, want)
    assert_matches(got, want[0], rtol=1e-4, atol=1e-6)
    if labels is not None:                  # trained: it classifies its training images
        assert (got.argmax(1) == labels).mean() > 0.8
