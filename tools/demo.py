"""tfjit demo: the seed example and a small multi-op model, end to end.

    python tools/demo.py

Shows what a user wants to see: the clusters tfjit formed, the kernels per
cluster, compile time, results checked against TensorFlow, and speed against
TF graph mode and TF's XLA measured in this process.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

# After site-packages: the installed tfjit comes first (what `pip install .` put there,
# with its prebuilt op library); the checkout serves only where tfjit is not installed,
# and for tools.bench.
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tensorflow as tf  # noqa: E402

import tfjit  # noqa: E402
from tools.bench import median_ms  # noqa: E402


def seed(x, y, z):
    return tf.reduce_sum(x + y * z)


def block(x, gamma, beta):
    """A transformer-style elementwise block: layernorm -> GELU -> softmax."""
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    h = (x - mean) * tf.math.rsqrt(var + 1e-5) * gamma + beta
    h = 0.5 * h * (1.0 + tf.math.erf(h * np.float32(0.7071067811865476)))
    return tf.nn.softmax(h), tf.reduce_max(h, axis=-1)


def uniques(x):
    y = tf.nn.relu(x * 2.0 + 1.0) - tf.abs(x) * 0.5 + tf.square(x)
    values, _ = tf.unique(tf.cast(tf.round(y), tf.int32))   # not compilable: stays with TF
    return values


def show(title, fn, args, runs=20):
    print(f"\n== {title}")
    jit = tfjit.function(fn, jit_compile=True)
    start = time.perf_counter()
    out = jit(*args)
    first = time.perf_counter() - start
    for name, nodes, compiled in jit.clusters(*args):
        ops = sorted({n.split("/")[-1] for n in nodes})
        print(f"cluster {name}: {len(nodes)} nodes -> {compiled.num_kernels} kernel(s), "
              f"compiled in {compiled.seconds * 1e3:.0f} ms (first call {first * 1e3:.0f} ms)")
        for f in compiled.fusions:
            print(f"  kernel {f.name}: {f.kind}, writes {len(f.roots)} value(s), "
                  f"{len(f.instrs)} instructions fused" + (f", {len(f.hoisted)} row reduction(s) hoisted" if f.hoisted else ""))
        print(f"  ops: {', '.join(ops[:12])}{' ...' if len(ops) > 12 else ''}")
    ref = tf.function(fn)(*args)
    worst = max(float(np.max(np.abs(a.numpy() - b.numpy()))) for a, b in
                zip(tf.nest.flatten(out), tf.nest.flatten(ref)))
    print(f"max |tfjit - TF| = {worst:.3g}")
    graph, xla = tf.function(fn), tf.function(fn, jit_compile=True)
    t_graph = median_ms(lambda: graph(*args), runs)
    t_xla = median_ms(lambda: xla(*args), runs)
    t_jit = median_ms(lambda: jit(*args), runs)
    print(f"median ms: TF graph {t_graph:.2f} | TF XLA {t_xla:.2f} | tfjit {t_jit:.2f} "
          f"-> {t_graph / t_jit:.2f}x TF graph, {t_xla / t_jit:.2f}x XLA")


def main():
    rng = np.random.default_rng(0)
    x, y, z = (tf.constant(rng.standard_normal((4096, 4096), dtype=np.float32)) for _ in range(3))
    show("seed: reduce_sum(x + y*z) on 4096x4096", seed, (x, y, z))
    h = tf.constant(rng.standard_normal((4096, 1024), dtype=np.float32))
    gamma = tf.constant(rng.standard_normal((1024,), dtype=np.float32))
    beta = tf.constant(rng.standard_normal((1024,), dtype=np.float32))
    show("block: layernorm -> GELU -> softmax on 4096x1024", block, (h, gamma, beta))

    print("\n== must-compile refuses what it cannot compile")
    try:
        tfjit.function(uniques, jit_compile=True)(tf.constant([1.0, 2.0, 2.0]))
    except tf.errors.InvalidArgumentError as e:
        print(e.message)

    print("\n== jit_compile=None: auto-clustering leaves tf.unique to TensorFlow")
    auto = tfjit.function(uniques, jit_compile=None)
    v = tf.constant(rng.standard_normal((1000,), dtype=np.float32))
    got, want = auto(v).numpy(), tf.function(uniques)(v).numpy()
    for name, nodes, compiled in auto.clusters(v):
        print(f"cluster {name}: {len(nodes)} nodes -> {compiled.num_kernels} kernel(s)")
    print(f"unique values: tfjit {len(got)}, TF {len(want)}, identical: {np.array_equal(got, want)}")


if __name__ == "__main__":
    main()
