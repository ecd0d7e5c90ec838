"""Matrix products of every common shape class: tfjit against TF graph mode and TF's XLA.

    python tools/matmul_sweep.py                  # every row, 10 timed rounds each
    python tools/matmul_sweep.py --runs 20 --only dense dx
    python tools/matmul_sweep.py --max-gflop 1    # skip the largest rows
    python tools/matmul_sweep.py --products "[1024,256]x[256,1024]"

Rows are the products a model's layers run, forward and backward:
* dense: a layer's forward, x [m, k] @ w [k, n], from a few rows (serving) to many;
* dx / dw: its gradients, g @ w^T ([m, n] x [k, n]^T) and x^T @ g ([m, k]^T x [m, n]);
* dense3d: a dense layer on a sequence, x [b, t, k] @ w [k, n] (a BatchMatMulV2 whose
  rhs is broadcast);
* scores / context: attention's products per head, q @ k^T ([bh, t, d] x [bh, t, d]^T)
  and p @ v ([bh, t, t] x [bh, t, d]).

Each row prints the medians (variants timed round-robin, as tools/bench.py does),
the ratios to the peers, tfjit's GFLOP/s, and how near tfjit is to the row's limit:
the roofline time (the larger of its flops at the machine's measured GEMM peak, TF's
MatMul of 2048^3 floats on every core, and its operands and result moved once at the
measured read bandwidth) over tfjit's time.  A product of a few rows is bound by
reading its weights, a large one by the peak.  tfjit runs TF's own kernels for
these (measured per shape: runtime/kernel_choice.cc), so this sweep shows which
kernel choices cost or gain against the peers.  The machine may be shared and noisy:
medians, nothing asserted.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tensorflow as tf  # noqa: E402

from tools.bench import median_ms, peer_medians, print_slowest, read_bandwidth_gbs  # noqa: E402

_LAYERS = ((256, 256), (1024, 256), (256, 1024), (1024, 1024), (4096, 1024))
_ROWS = (1, 16, 256, 1024, 4096)


def _matmul(ta=False, tb=False):
    return lambda a, b: tf.matmul(a, b, transpose_a=ta, transpose_b=tb)


def rows():
    """(class, description, function, operand shapes, flops)."""
    for k, n in _LAYERS:
        for m in _ROWS:
            yield "dense", f"[{m},{k}]x[{k},{n}]", _matmul(), ((m, k), (k, n)), 2 * m * k * n
    for k, n in _LAYERS:
        for m in (256, 1024, 4096):
            yield "dx", f"[{m},{n}]x[{k},{n}]^T", _matmul(tb=True), ((m, n), (k, n)), 2 * m * k * n
            yield "dw", f"[{m},{k}]^Tx[{m},{n}]", _matmul(ta=True), ((m, k), (m, n)), 2 * m * k * n
    for b, t in ((8, 128), (3, 100), (32, 512)):
        for k, n in ((256, 256), (256, 1024), (1024, 256)):
            yield ("dense3d", f"[{b},{t},{k}]x[{k},{n}]", _matmul(), ((b, t, k), (k, n)),
                   2 * b * t * k * n)
    for bh, t, d in ((32, 128, 64), (32, 512, 64), (12, 197, 64), (8, 1024, 128)):
        yield ("scores", f"[{bh},{t},{d}]x[{bh},{t},{d}]^T", _matmul(tb=True),
               ((bh, t, d), (bh, t, d)), 2 * bh * t * t * d)
        yield ("context", f"[{bh},{t},{t}]x[{bh},{t},{d}]", _matmul(), ((bh, t, t), (bh, t, d)),
               2 * bh * t * t * d)


def out_shape(fn, xs) -> list:
    """The product's result shape (traced, not run)."""
    specs = [tf.TensorSpec(x.shape, x.dtype) for x in xs]
    return tf.function(fn).get_concrete_function(*specs).outputs[0].shape.as_list()


def gemm_peak_gflops(runs: int = 10) -> float:
    """GFLOP/s of TF's MatMul on 2048x2048 by 2048x2048 floats, every core: the
    machine's practical f32 GEMM rate, the ceiling the rows are read against."""
    a = tf.constant(np.ones((2048, 2048), np.float32))
    mm = tf.function(lambda a: tf.matmul(a, a))
    return 2 * 2048 ** 3 / (median_ms(lambda: mm(a), runs, warmup=3) / 1e3) / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--only", nargs="*", help="classes: dense, dx, dw, dense3d, scores, context")
    ap.add_argument("--products", nargs="*", help="products as the table prints them")
    ap.add_argument("--max-gflop", type=float, default=float("inf"),
                    help="skip rows of more GFLOP than this")
    args = ap.parse_args(argv)
    peak, bw = gemm_peak_gflops(), read_bandwidth_gbs()
    print(f"machine: {os.cpu_count()} cores, measured GEMM peak {peak:.0f} GFLOP/s (TF MatMul "
          f"2048^3), read bandwidth {bw:.1f} GB/s; TF {tf.__version__}; medians of "
          f"{args.runs} rounds")
    print("| class | product | TF graph ms | TF XLA ms | tfjit ms | vs graph | vs XLA "
          "| tfjit GFLOP/s | bound by | % of roofline |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    worst = []
    for cls, what, fn, shapes, flops in rows():
        if ((args.only and cls not in args.only) or (args.products and what not in args.products)
                or flops / 1e9 > args.max_gflop):
            continue
        xs = [tf.constant(rng.standard_normal(s).astype(np.float32)) for s in shapes]
        med = peer_medians(fn, xs, args.runs)
        gflops = flops / (med["tfjit"] / 1e3) / 1e9
        moved = 4 * (sum(x.shape.num_elements() for x in xs) + int(np.prod(out_shape(fn, xs))))
        compute_ms, memory_ms = flops / peak / 1e6, moved / bw / 1e6
        bound = "compute" if compute_ms >= memory_ms else "memory"
        worst.append((min(med["graph"], med["xla"]) / med["tfjit"], cls, what))
        print(f"| {cls} | {what} | {med['graph']:.3f} | {med['xla']:.3f} | {med['tfjit']:.3f} | "
              f"{med['graph'] / med['tfjit']:.2f}x | {med['xla'] / med['tfjit']:.2f}x | "
              f"{gflops:.0f} | {bound} | {100 * max(compute_ms, memory_ms) / med['tfjit']:.0f}% |",
              flush=True)
    print_slowest(worst, "the faster peer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
