"""The classic TF1 softmax-regression example, unmodified: it imports nothing from tfjit.

Run it plain, or clustered by tfjit through the import hook::

    python tools/softmax_regression.py
    TFJIT_FLAGS=--tfjit_cpu_global_jit python tools/softmax_regression.py --trace /tmp/t.json

The Session asks for XLA-style auto-clustering (``global_jit_level = ON_1``);
with TFJIT_FLAGS set, tfjit does the clustering.  The data is a synthetic,
MNIST-shaped problem (784 features, 10 classes) drawn from a fixed seed, so
the script needs no download and runs the same everywhere.  It prints the
test accuracy and the final loss, and with ``--trace`` writes the last step's
chrome trace (RunMetadata FULL_TRACE -> timeline), where tfjit's launch ops
appear under their cluster names.
"""
import argparse
import time

import numpy as np
import tensorflow as tf
from tensorflow.python.client import timeline


def synthetic_mnist(n, seed):
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(1234).standard_normal((10, 784)).astype(np.float32)
    labels = rng.integers(0, 10, n)
    images = centres[labels] + 5.0 * rng.standard_normal((n, 784)).astype(np.float32)
    images = 1.0 / (1.0 + np.exp(-images))              # pixel-like values in (0, 1)
    return images.astype(np.float32), np.eye(10, dtype=np.float32)[labels]


OPTIMIZERS = {
    "sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(0.5),
    "adam": lambda: tf.compat.v1.train.AdamOptimizer(0.01),
    "adagrad": lambda: tf.compat.v1.train.AdagradOptimizer(0.5),
    "momentum": lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
    "rmsprop": lambda: tf.compat.v1.train.RMSPropOptimizer(0.01),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--trace", default="", help="write the last step's chrome trace here")
    parser.add_argument("--optimizer", default="sgd", choices=sorted(OPTIMIZERS),
                        help="TF1 optimizer (the others create slot variables)")
    parser.add_argument("--computed_init", action="store_true",
                        help="initialise W from a computed expression, not tf.zeros")
    args = parser.parse_args()
    train_x, train_y = synthetic_mnist(6000, seed=1)
    test_x, test_y = synthetic_mnist(2000, seed=2)

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(0)
        x = tf.compat.v1.placeholder(tf.float32, [None, 784])
        y_ = tf.compat.v1.placeholder(tf.float32, [None, 10])
        if args.computed_init:   # an initializer that auto mode clusters
            W = tf.compat.v1.Variable(0.01 * tf.exp(tf.sin(tf.cos(tf.tanh(tf.ones([784, 10])) * 2.) + 1.)))
        else:
            W = tf.compat.v1.Variable(tf.zeros([784, 10]))
        b = tf.compat.v1.Variable(tf.zeros([10]))
        y = tf.matmul(x, W) + b
        cross_entropy = tf.reduce_mean(
            tf.nn.softmax_cross_entropy_with_logits(labels=y_, logits=y))
        train_step = OPTIMIZERS[args.optimizer]().minimize(cross_entropy)
        correct = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
        accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
        init = tf.compat.v1.global_variables_initializer()

    config = tf.compat.v1.ConfigProto()
    config.graph_options.optimizer_options.global_jit_level = tf.compat.v1.OptimizerOptions.ON_1
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        times = []
        for step in range(args.steps):
            start = time.perf_counter()
            lo = (step * 100) % len(train_x)
            feed = {x: train_x[lo:lo + 100], y_: train_y[lo:lo + 100]}
            if args.trace and step == args.steps - 1:
                options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
                metadata = tf.compat.v1.RunMetadata()
                _, loss = sess.run([train_step, cross_entropy], feed, options=options,
                                   run_metadata=metadata)
                with open(args.trace, "w") as f:
                    f.write(timeline.Timeline(metadata.step_stats).generate_chrome_trace_format())
            else:
                _, loss = sess.run([train_step, cross_entropy], feed)
            times.append(time.perf_counter() - start)
        acc = sess.run(accuracy, {x: test_x, y_: test_y})
    print(f"accuracy {acc:.4f} loss {loss:.6f} ({args.steps} steps, median "
          f"{1e3 * np.median(times):.3f} ms/step, first {1e3 * times[0]:.0f} ms)")


if __name__ == "__main__":
    main()
