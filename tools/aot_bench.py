"""tfjit-aot against TensorFlow: time per call of a compiled C++ program and of TF.

    python tools/aot_bench.py [--runs 200]

Builds two frozen graphs, a 784->10 softmax regression (batch 16; the seed's MNIST
model) and a small CNN (Conv2D+ReLU+MaxPool, a strided Conv2D, AvgPool, Dense,
softmax; batch 8 of 28x28x1), compiles each with tfjit-aot, links the object and
its runtime library into a C++ program that times ``Run()`` (median of --runs
calls after warm-up), and times TF's Session.run of the same graph on the same
inputs the same way.  The C++ program runs single-threaded (the AOT contract);
TF uses its thread pools.  Nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tensorflow as tf  # noqa: E402

from tfjit.aot.cli import main as aot_main  # noqa: E402

TIMER = r"""
#include HEADER
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
int main(int argc, char** argv) {
  CLASS m;
  float* x = static_cast<float*>(m.arg_data(0));
  for (size_t i = 0; i < CLASS::arg_size(0) / sizeof(float); ++i) x[i] = (i % 17) * 0.1f - 0.8f;
  const int runs = std::atoi(argv[1]);
  for (int i = 0; i < 10; ++i) m.Run();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    auto a = std::chrono::steady_clock::now();
    if (!m.Run()) return 1;
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  std::printf("%f\n", t[t.size() / 2]);
  return 0;
}
"""


def models(rng):
    g1 = tf.Graph()
    with g1.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [16, 784], name="x")
        w = tf.constant(rng.standard_normal((784, 10)).astype(np.float32) * 0.05)
        tf.nn.softmax(tf.nn.bias_add(tf.matmul(x, w), tf.zeros([10])), name="probs")
    g2 = tf.Graph()
    with g2.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [8, 28, 28, 1], name="x")
        w1 = tf.constant(rng.standard_normal((3, 3, 1, 8)).astype(np.float32) * 0.5)
        w2 = tf.constant(rng.standard_normal((3, 3, 8, 16)).astype(np.float32) * 0.2)
        wd = tf.constant(rng.standard_normal((256, 10)).astype(np.float32) * 0.1)
        h = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME") + 0.1), 2, 2, "VALID")
        h = tf.nn.avg_pool2d(tf.nn.relu(tf.nn.conv2d(h, w2, 2, "VALID")), 3, 1, "VALID")
        tf.nn.softmax(tf.matmul(tf.reshape(h, [-1, 256]), wd), name="probs")
    return {"mnist softmax (16x784)": (g1, (16, 784)), "small CNN (8x28x28x1)": (g2, (8, 28, 28, 1))}


def time_aot(graph, shape, workdir, runs: int) -> float:
    dims = " ".join(f"dim {{ size: {s} }}" for s in shape)
    with open(os.path.join(workdir, "g.pb"), "wb") as f:
        f.write(graph.as_graph_def().SerializeToString())
    with open(os.path.join(workdir, "g.pbtxt"), "w") as f:
        f.write(f'feed {{ id {{ node_name: "x" }} shape {{ {dims} }} name: "x" }}\n'
                'fetch { id { node_name: "probs" } name: "probs" }\n')
    prefix = os.path.join(workdir, "net")
    if aot_main(["--graph", f"{workdir}/g.pb", "--config", f"{workdir}/g.pbtxt",
                 "--cpp_class", "Net", "--out_prefix", prefix]) != 0:
        raise SystemExit("tfjit-aot failed")
    with open(os.path.join(workdir, "timer.cc"), "w") as f:
        f.write(TIMER)
    exe = os.path.join(workdir, "timer")
    runtime = [f"{prefix}_runtime.a"] if os.path.exists(f"{prefix}_runtime.a") else []
    subprocess.run(["g++", "-std=c++17", "-O2", f'-DHEADER="{prefix}.h"', "-DCLASS=Net",
                    f"{workdir}/timer.cc", f"{prefix}.o", *runtime, "-lm", "-o", exe], check=True)
    return float(subprocess.run([exe, str(runs)], check=True, capture_output=True,
                                text=True).stdout)


def time_tf(graph, shape, runs: int) -> float:
    x = (np.arange(np.prod(shape)) % 17 * 0.1 - 0.8).astype(np.float32).reshape(shape)
    with tf.compat.v1.Session(graph=graph) as s:
        out = graph.get_tensor_by_name("probs:0")
        for _ in range(10):
            s.run(out, {"x:0": x})
        t = []
        for _ in range(runs):
            a = time.perf_counter()
            s.run(out, {"x:0": x})
            t.append((time.perf_counter() - a) * 1e6)
    return float(np.median(t))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args(argv)
    print(f"{'model':<24} {'tfjit-aot C++ (us)':>19} {'TF Session.run (us)':>20}  speed-up")
    for name, (graph, shape) in models(np.random.default_rng(0)).items():
        with tempfile.TemporaryDirectory() as d:
            aot = time_aot(graph, shape, d, args.runs)
        ref = time_tf(graph, shape, args.runs)
        print(f"{name:<24} {aot:>19.1f} {ref:>20.1f}  {ref / aot:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
