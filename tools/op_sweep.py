"""Assorted single ops and small patterns no benchmark names: tfjit against TF graph
mode and TF's XLA, in one process.

    python tools/op_sweep.py                      # every row, 15 timed rounds each
    python tools/op_sweep.py --only statistic scan --runs 30

The other sweeps (reduce_sweep, matmul_sweep, layout_sweep) cover a class each; this
one is for what falls between them, the way users meet a compiler: broadcasts along
middle and outer dims, statistics of a whole tensor feeding every element (a clip by
global norm, a normalisation), softmax over a non-last axis, scans, one_hot, top_k,
pooling, resizing, depthwise convolution, the gradients of ops that move data
(upsampling, tiling, space-to-depth, pooling, strided slices), segment sums and
scatters.  A row that is far
behind a peer here is a missing kernel shape or a fusion decision to revisit
(docs/performance.md lists what each found).  Medians, nothing asserted.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tensorflow as tf  # noqa: E402

from tools.bench import peer_medians, print_slowest  # noqa: E402

_RNG = np.random.default_rng(0)


def _f32(*shape):
    return lambda: _RNG.standard_normal(shape).astype(np.float32)


def _softmax_grad(x, g, axis):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.nn.softmax(x, axis=axis)
    return tape.gradient(y, x, output_gradients=g)


def _grad(forward):
    """The gradient of ``forward`` at x, for the output gradient g: what a train step
    runs for a layer that moves data (upsampling, tiling, space-to-depth, pooling)."""
    def f(x, g):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = forward(x)
        return tape.gradient(y, x, output_gradients=g)
    return f


def _ints(high, shape):
    return lambda: _RNG.integers(0, high, shape).astype(np.int32)


_GATHER_ROWS = tf.constant(_RNG.integers(0, 8192, 4096).astype(np.int32))

# (class, description, function, operand makers)
ROWS = [
    ("broadcast", "[64,512,256] * [64,1,256]", lambda x, s: x * s, [_f32(64, 512, 256), _f32(64, 1, 256)]),
    ("broadcast", "outer sum [4096,1] + [1,4096]", lambda a, b: a + b, [_f32(4096, 1), _f32(1, 4096)]),
    ("broadcast", "NCHW bias + relu [16,64,56,56]", lambda x, b: tf.nn.relu(x + b),
     [_f32(16, 64, 56, 56), _f32(1, 64, 1, 1)]),
    ("broadcast", "int32 -> f32 * 0.5 [4096,4096]", lambda i: tf.cast(i, tf.float32) * 0.5,
     [_ints(100, (4096, 4096))]),
    ("statistic", "x * min(1, 5 / norm(x)) [4096,4096]",
     lambda x: x * tf.minimum(1.0, 5.0 / tf.norm(x)), [_f32(4096, 4096)]),
    ("statistic", "clip_by_global_norm [2048,2048] + [2048]",
     lambda x, y: tf.clip_by_global_norm([x, y], 3.0)[0], [_f32(2048, 2048), _f32(2048)]),
    ("statistic", "l2_normalize rows [8192,512]", lambda x: tf.math.l2_normalize(x, axis=1),
     [_f32(8192, 512)]),
    ("statistic", "softmax over axis 1 [32,64,28,28]", lambda x: tf.nn.softmax(x, axis=1),
     [_f32(32, 64, 28, 28)]),
    ("statistic", "softmax over axis 1 [64,512,64]", lambda x: tf.nn.softmax(x, axis=1),
     [_f32(64, 512, 64)]),
    ("statistic", "softmax over axis 0 [4096,1024]", lambda x: tf.nn.softmax(x, axis=0),
     [_f32(4096, 1024)]),
    ("statistic", "gradient of softmax over axis 1 [64,512,64]", lambda x, g: _softmax_grad(x, g, 1),
     [_f32(64, 512, 64), _f32(64, 512, 64)]),
    ("statistic", "mean over axes 0, 2 [64,256,256]", lambda x: tf.reduce_mean(x, [0, 2]),
     [_f32(64, 256, 256)]),
    ("statistic", "moments NHWC [32,56,56,64]", lambda x: tf.nn.moments(x, [0, 1, 2]),
     [_f32(32, 56, 56, 64)]),
    ("statistic", "sigmoid cross-entropy [4096,1024]",
     lambda x, y: tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=x),
     [_f32(4096, 1024), _f32(4096, 1024)]),
    ("scan", "cumsum over axis 1 [1024,4096]", lambda x: tf.cumsum(x, axis=1), [_f32(1024, 4096)]),
    ("scan", "cumsum over axis 0 [4096,1024]", lambda x: tf.cumsum(x, axis=0), [_f32(4096, 1024)]),
    ("select", "one_hot 65536 x 1000", lambda i: tf.one_hot(i, 1000), [_ints(1000, (65536,))]),
    ("select", "top_k 8 of [4096,1024]", lambda x: tf.math.top_k(x, 8).values, [_f32(4096, 1024)]),
    ("window", "max_pool 3x3 stride 2 [16,56,56,64]", lambda x: tf.nn.max_pool2d(x, 3, 2, "SAME"),
     [_f32(16, 56, 56, 64)]),
    ("window", "avg_pool 2x2 [16,56,56,64]", lambda x: tf.nn.avg_pool2d(x, 2, 2, "VALID"),
     [_f32(16, 56, 56, 64)]),
    ("window", "resize bilinear x2 [8,64,64,32]", lambda x: tf.image.resize(x, [128, 128]),
     [_f32(8, 64, 64, 32)]),
    ("window", "depthwise 3x3 [8,56,56,128]",
     lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME"),
     [_f32(8, 56, 56, 128), _f32(3, 3, 128, 1)]),
    ("gradient", "of nearest upsampling x2 [16,56,56,64]",
     _grad(lambda x: tf.repeat(tf.repeat(x, 2, axis=1), 2, axis=2)),
     [_f32(16, 56, 56, 64), _f32(16, 112, 112, 64)]),
    ("gradient", "of nearest upsampling x2, then avg_pool 4x4 [16,56,56,64]",
     _grad(lambda x: tf.nn.avg_pool2d(tf.repeat(tf.repeat(x, 2, axis=1), 2, axis=2), 4, 4, "VALID")),
     [_f32(16, 56, 56, 64), _f32(16, 28, 28, 64)]),
    ("gradient", "of resize nearest x2 [16,56,56,64]",
     _grad(lambda x: tf.image.resize(x, [112, 112], method="nearest")),
     [_f32(16, 56, 56, 64), _f32(16, 112, 112, 64)]),
    ("gradient", "of resize bilinear x2 [8,64,64,32]", _grad(lambda x: tf.image.resize(x, [128, 128])),
     [_f32(8, 64, 64, 32), _f32(8, 128, 128, 32)]),
    ("gradient", "of tile [1,4,1] of [64,256,128]", _grad(lambda x: tf.tile(x, [1, 4, 1])),
     [_f32(64, 256, 128), _f32(64, 1024, 128)]),
    ("gradient", "of broadcast_to [64,16,1024] of [64,1,1024]",
     _grad(lambda x: tf.broadcast_to(x, [64, 16, 1024])), [_f32(64, 1, 1024), _f32(64, 16, 1024)]),
    ("gradient", "of depth_to_space 2 [16,56,56,256]", _grad(lambda x: tf.nn.depth_to_space(x, 2)),
     [_f32(16, 56, 56, 256), _f32(16, 112, 112, 64)]),
    ("gradient", "of space_to_depth 2 [16,112,112,64]", _grad(lambda x: tf.nn.space_to_depth(x, 2)),
     [_f32(16, 112, 112, 64), _f32(16, 56, 56, 256)]),
    ("gradient", "of avg_pool 2x2 [16,56,56,64]", _grad(lambda x: tf.nn.avg_pool2d(x, 2, 2, "VALID")),
     [_f32(16, 56, 56, 64), _f32(16, 28, 28, 64)]),
    ("gradient", "of max_pool 3x3 stride 2 [16,56,56,64]",
     _grad(lambda x: tf.nn.max_pool2d(x, 3, 2, "SAME")), [_f32(16, 56, 56, 64), _f32(16, 28, 28, 64)]),
    ("gradient", "of x[:, ::2, ::2] [16,112,112,64]", _grad(lambda x: x[:, ::2, ::2]),
     [_f32(16, 112, 112, 64), _f32(16, 56, 56, 64)]),
    ("gradient", "of pad 3 [16,56,56,64]", _grad(lambda x: tf.pad(x, [[0, 0], [3, 3], [3, 3], [0, 0]])),
     [_f32(16, 56, 56, 64), _f32(16, 62, 62, 64)]),
    ("gradient", "of gather 4096 rows of [8192,256]", _grad(lambda x: tf.gather(x, _GATHER_ROWS)),
     [_f32(8192, 256), _f32(4096, 256)]),
    ("gradient", "of max_pool 2x2 [16,56,56,64]", _grad(lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID")),
     [_f32(16, 56, 56, 64), _f32(16, 28, 28, 64)]),
    ("gradient", "of avg_pool 3x3 stride 2 SAME [16,56,56,64]",
     _grad(lambda x: tf.nn.avg_pool2d(x, 3, 2, "SAME")), [_f32(16, 56, 56, 64), _f32(16, 28, 28, 64)]),
    ("gradient", "of resize bilinear /2 [8,128,128,32]", _grad(lambda x: tf.image.resize(x, [64, 64])),
     [_f32(8, 128, 128, 32), _f32(8, 64, 64, 32)]),
    ("gradient", "of extract_patches 3x3 [16,32,32,16]",
     _grad(lambda x: tf.image.extract_patches(x, [1, 3, 3, 1], [1, 1, 1, 1], [1, 1, 1, 1], "SAME")),
     [_f32(16, 32, 32, 16), _f32(16, 32, 32, 144)]),
    ("gradient", "of roll 5 along axis 1 [64,1024,128]", _grad(lambda x: tf.roll(x, 5, axis=1)),
     [_f32(64, 1024, 128), _f32(64, 1024, 128)]),
    ("gradient", "of gather along axis 1 [64,1024,128]",
     _grad(lambda x: tf.gather(x, _GATHER_ROWS[:512] % 1024, axis=1)),
     [_f32(64, 1024, 128), _f32(64, 512, 128)]),
    ("gradient", "of top_k 8 values of [4096,1024]", _grad(lambda x: tf.math.top_k(x, 8).values),
     [_f32(4096, 1024), _f32(4096, 8)]),
    ("gradient", "of cumsum over axis 1 [1024,4096]", _grad(lambda x: tf.cumsum(x, axis=1)),
     [_f32(1024, 4096), _f32(1024, 4096)]),
    ("scatter", "unsorted_segment_sum 65536 x 64 -> 1024",
     lambda x, i: tf.math.unsorted_segment_sum(x, i, 1024), [_f32(65536, 64), _ints(1024, (65536,))]),
    ("scatter", "scatter_nd 16384 rows of 256 -> 4096", lambda i, u: tf.scatter_nd(i, u, [4096, 256]),
     [_ints(4096, (16384, 1)), _f32(16384, 256)]),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--only", nargs="*", help="classes: broadcast, statistic, scan, select, "
                                              "window, gradient, scatter")
    args = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} cores; TF {tf.__version__}; medians of {args.runs} rounds")
    print("| class | op | TF graph ms | TF XLA ms | tfjit ms | vs graph | vs XLA |")
    print("|---|---|---|---|---|---|---|")
    worst = []
    for cls, what, fn, makers in ROWS:
        if args.only and cls not in args.only:
            continue
        xs = [tf.constant(make()) for make in makers]
        med = peer_medians(fn, xs, args.runs)
        worst.append((np.nanmin([med["graph"], med["xla"]]) / med["tfjit"], cls, what))
        print(f"| {cls} | {what} | {med['graph']:.3f} | {med['xla']:.3f} | {med['tfjit']:.3f} | "
              f"{med['graph'] / med['tfjit']:.2f}x | {med['xla'] / med['tfjit']:.2f}x |", flush=True)
    print_slowest(worst, "the faster peer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
