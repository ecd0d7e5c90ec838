"""Data movement of every common layout: tfjit against TF graph mode and TF's XLA.

    python tools/layout_sweep.py                     # every row, 20 timed rounds each
    python tools/layout_sweep.py --only transpose concat --runs 30

Rows are memory-bound ops a model runs between its products and convolutions:
* transpose: a matrix (power-of-two and odd sizes), NHWC <-> NCHW, attention's head
  split and merge, the last two dims of a batch swapped, a full reverse of dims;
* concat: along the last dim (two, three and four operands, Inception's and
  DenseNet's channel concatenations), along the first, along a middle dim;
* pad, strided slice, reverse, tile, gather of rows, broadcast arithmetic;
* each with a multiply by 2 after it where noted (a fused consumer), else bare.

Each row prints the medians (variants timed round-robin, as tools/bench.py does),
the ratios to the peers, and tfjit's share of the measured read bandwidth, counting
the bytes the op must move (its inputs read once, its result written once).  The
machine may be shared and noisy: medians, nothing asserted.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tensorflow as tf  # noqa: E402

from tools.bench import peer_medians, print_slowest, read_bandwidth_gbs  # noqa: E402


def _transpose(perm):
    return lambda x: tf.transpose(x, perm)


def _concat(axis):
    return lambda *xs: tf.concat(xs, axis) * 2.0


# (class, description, function, operand shapes; "idx" is 32768 row indices)
ROWS = [
    ("transpose", "[4096,4096] -> [1,0]", _transpose([1, 0]), [(4096, 4096)]),
    ("transpose", "[4097,1023] -> [1,0]", _transpose([1, 0]), [(4097, 1023)]),
    ("transpose", "[1024,64] -> [1,0]", _transpose([1, 0]), [(1024, 64)]),
    ("transpose", "NHWC->NCHW [16,56,56,64]", _transpose([0, 3, 1, 2]), [(16, 56, 56, 64)]),
    ("transpose", "NCHW->NHWC [16,64,56,56]", _transpose([0, 2, 3, 1]), [(16, 64, 56, 56)]),
    ("transpose", "NCHW->NHWC [32,3,224,224]", _transpose([0, 2, 3, 1]), [(32, 3, 224, 224)]),
    ("transpose", "heads [8,512,16,64] -> [0,2,1,3]", _transpose([0, 2, 1, 3]), [(8, 512, 16, 64)]),
    ("transpose", "[64,512,256] -> [0,2,1]", _transpose([0, 2, 1]), [(64, 512, 256)]),
    ("transpose", "[8,64,128,128] -> [0,1,3,2]", _transpose([0, 1, 3, 2]), [(8, 64, 128, 128)]),
    ("transpose", "[256,128,64] -> [2,1,0]", _transpose([2, 1, 0]), [(256, 128, 64)]),
    ("concat", "last dim, 2 x [1024,1024]", _concat(1), [(1024, 1024)] * 2),
    ("concat", "last dim, 3 x [1024,1024]", _concat(1), [(1024, 1024)] * 3),
    ("concat", "channels 96+32 [16,28,28,*]", _concat(3), [(16, 28, 28, 96), (16, 28, 28, 32)]),
    ("concat", "channels 4 x 192 [8,17,17,*]", _concat(3), [(8, 17, 17, 192)] * 4),
    ("concat", "channels 256+32 [8,14,14,*]", _concat(3), [(8, 14, 14, 256), (8, 14, 14, 32)]),
    ("concat", "first dim, 3 x [1024,1024]", _concat(0), [(1024, 1024)] * 3),
    ("concat", "middle dim, 2 x [64,128,256]", _concat(1), [(64, 128, 256)] * 2),
    ("concat", "last dim 3+5 [4096,8,*]", _concat(2), [(4096, 8, 3), (4096, 8, 5)]),
    ("pad", "spatial 1 [16,56,56,64]", lambda x: tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]]),
     [(16, 56, 56, 64)]),
    ("slice", "every second column [4096,4096]", lambda x: x[:, ::2], [(4096, 4096)]),
    ("reverse", "last dim [4096,4096]", lambda x: tf.reverse(x, [1]), [(4096, 4096)]),
    ("tile", "[1024,1024] x (2,2)", lambda x: tf.tile(x, [2, 2]), [(1024, 1024)]),
    ("gather", "32768 of [65536,256] rows", lambda x, i: tf.gather(x, i), [(65536, 256), "idx"]),
    ("broadcast", "bias + relu [4096,4096]", lambda x, b: tf.nn.relu(x + b), [(4096, 4096), (4096,)]),
    ("broadcast", "column scale [4096,4096]", lambda x, b: x * b, [(4096, 4096), (4096, 1)]),
]


def _bytes_moved(fn, xs) -> int:
    """Inputs read once (a gather: the rows it takes) and the result written once."""
    specs = [tf.TensorSpec(x.shape, x.dtype) for x in xs]
    out = tf.function(fn).get_concrete_function(*specs).outputs[0]
    read = sum(x.shape.num_elements() * x.dtype.size for x in xs)
    if len(xs) == 2 and xs[1].dtype == tf.int32 and xs[1].shape.rank == 1:   # gather
        read = out.shape.num_elements() * 4 + xs[1].shape.num_elements() * 4
    return read + out.shape.num_elements() * out.dtype.size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--only", nargs="*", help="classes: transpose, concat, pad, slice, reverse, "
                                              "tile, gather, broadcast")
    args = ap.parse_args(argv)
    bw = read_bandwidth_gbs()
    print(f"machine: {os.cpu_count()} cores, measured read bandwidth {bw:.1f} GB/s; "
          f"TF {tf.__version__}; medians of {args.runs} rounds")
    print("| class | op | TF graph ms | TF XLA ms | tfjit ms | vs graph | vs XLA | tfjit GB/s "
          "| % of bandwidth |")
    print("|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    worst = []
    for cls, what, fn, shapes in ROWS:
        if args.only and cls not in args.only:
            continue
        xs = [tf.constant(rng.integers(0, 65536, 32768).astype(np.int32)) if s == "idx"
              else tf.constant(rng.standard_normal(s).astype(np.float32)) for s in shapes]
        med = peer_medians(fn, xs, args.runs)
        gbs = _bytes_moved(fn, xs) / (med["tfjit"] / 1e3) / 1e9
        worst.append((min(med["graph"], med["xla"]) / med["tfjit"], cls, what))
        print(f"| {cls} | {what} | {med['graph']:.3f} | {med['xla']:.3f} | {med['tfjit']:.3f} | "
              f"{med['graph'] / med['tfjit']:.2f}x | {med['xla'] / med['tfjit']:.2f}x | "
              f"{gbs:.1f} | {100 * gbs / bw:.0f}% |", flush=True)
    print_slowest(worst, "the faster peer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
