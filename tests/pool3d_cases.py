"""The 3-D pool cases on special values (tests/test_conv3d.py), shared with the child
process that computes them with TF's oneDNN kernels on: ``python pool3d_cases.py OUT``
writes every case's result to OUT (.npz)."""
from __future__ import annotations

import sys
import zlib

import numpy as np
import tensorflow as tf

from test_ops import sample

R = tf.raw_ops
# name -> (x shape without channels, ksize (d, h, w), strides, padding)
GEOMETRY = {
    "2x2x2/2 VALID": ((2, 4, 5, 6), (2, 2, 2), (2, 2, 2), "VALID"),
    "3x3x3/1 SAME": ((1, 4, 5, 5), (3, 3, 3), (1, 1, 1), "SAME"),
    "3x2x1/2x1x1 SAME": ((2, 5, 4, 3), (3, 2, 1), (2, 1, 1), "SAME"),
    "global": ((1, 2, 3, 4), (2, 3, 4), (1, 1, 1), "VALID"),
    "window > input SAME": ((1, 2, 2, 3), (3, 4, 2), (1, 1, 2), "SAME"),
}
FLT_MAX = float(np.finfo(np.float32).max)


def attrs(k, s, padding) -> dict:
    return dict(ksize=[1, *k, 1], strides=[1, *s, 1], padding=padding)


def values(kind: str, shape, rng) -> np.ndarray:
    """float32: "specials" (NaN, ±inf, ±0, extremes, ordinary), "ties" (-1, ±0, 1),
    "edges" (windows of -inf, -FLT_MAX and NaN among small integers)."""
    if kind == "specials":
        return sample("f32", shape, rng)
    if kind == "ties":
        signs = np.array([1.0, -0.0, 0.0])[rng.integers(0, 3, shape)]
        return (rng.integers(-1, 2, shape) * signs).astype(np.float32)
    x = rng.integers(-3, 4, shape).astype(np.float32)
    x[:, :1, :2, :2] = -np.inf
    x.reshape(-1)[::5] = -FLT_MAX
    x.reshape(-1)[::11] = np.nan
    return x


def max_pool_grad(a):
    """The gradient of MaxPool3D as the tape builds it (TF with oneDNN on pairs the two
    ops through its workspace, so the forward op must be in the same graph)."""
    def fn(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = R.MaxPool3D(input=x, **a)
            weights = tf.cast(tf.reshape(tf.range(tf.size(y)) % 7, y.shape), y.dtype)
            loss = tf.reduce_sum(y * weights)
        return tape.gradient(loss, x)
    return fn


def cases():
    """(id, fn, [x]): MaxPool3D and AvgPool3D on every kind, MaxPool3DGrad on ties."""
    for name, (spatial, k, s, pad) in GEOMETRY.items():
        a = attrs(k, s, pad)
        for c in (3, 8, 17):
            for kind in ("specials", "ties", "edges"):
                cid = f"{name}-c{c}-{kind}"
                x = values(kind, (*spatial, c), np.random.default_rng(zlib.crc32(cid.encode())))
                yield "MaxPool3D " + cid, (lambda x, a=a: R.MaxPool3D(input=x, **a)), [x]
                yield "AvgPool3D " + cid, (lambda x, a=a: R.AvgPool3D(input=x, **a)), [x]
                if kind == "ties":
                    yield "MaxPool3DGrad " + cid, max_pool_grad(a), [x]


if __name__ == "__main__":
    np.savez(sys.argv[1], **{cid: tf.function(fn)(*[tf.constant(v) for v in xs]).numpy()
                             for cid, fn, xs in cases()})
