"""Modules whose rows are long enough for GPU threads to share them (codegen/lanes.py),
for tools/gpu_check.py to carry beside the op table's: the op-table and random-graph
tests use small shapes, so few of their kernels share rows.

    python tools/gpu_row_modules.py gpu_modules     # x_*.txt beside the collected m*.txt

Reductions of every kind (sum, prod, max, min, mean, any, all, argmax) over last,
middle, column and all axes, rows of 7 to 8193 elements (held by 8 lanes to a block of
512, or shared by a warp), f16/bf16/f32/f64 and integers; softmax, log-softmax,
layernorm, broadcasts, transposes, two-pass statistics and split sums.  On an H200
on 2026-12-04 the 725 of them (743 then) that run on a GPU matched the interpreter;
18 need float64 exp or log and were refused.
"""
from __future__ import annotations

import itertools
import os
import sys


def _name(*parts) -> str:
    return "_".join("x".join(map(str, p)) if isinstance(p, (list, tuple)) else str(p)
                    for p in parts)


def cases() -> list:
    """(name, function, specs) of every module."""
    import tensorflow as tf
    spec = tf.TensorSpec
    red = {"sum": tf.reduce_sum, "prod": tf.reduce_prod, "max": tf.reduce_max,
           "min": tf.reduce_min, "mean": tf.reduce_mean}
    shapes = [([7, 33], [-1]), ([5, 100], [-1]), ([3, 1000], [-1]), ([2, 4097], [-1]),
              ([4, 6, 64], [-1]), ([4, 6, 64], [1, 2]), ([3, 40, 50], [0, 2]), ([70000], None),
              ([300, 400], None), ([64, 96], [0]), ([1, 257], [-1]), ([33, 2048], [-1])]
    dtypes = [tf.float32, tf.float64, tf.int32, tf.int64, tf.bfloat16, tf.float16, tf.int8]
    out = []

    def reduce(fn, axes, square=True):
        return lambda x: fn(x * x if square and x.dtype.is_floating else x, axis=axes)

    for (kind, fn), (shape, axes), dtype in itertools.product(red.items(), shapes, dtypes):
        if (kind == "prod" and dtype in (tf.float16, tf.bfloat16)) or (kind == "mean" and dtype == tf.int8):
            continue
        out.append((_name(kind, shape, axes, dtype.name), reduce(fn, axes), [spec(shape, dtype)]))
    for shape, axes in shapes:
        out.append((_name("any", shape, axes), lambda x, a=axes: tf.reduce_any(x > 0.5, axis=a), [spec(shape)]))
        out.append((_name("all", shape, axes), lambda x, a=axes: tf.reduce_all(x > -1.5, axis=a), [spec(shape)]))
        out.append((_name("argmax", shape),
                    lambda x: tf.argmax(tf.reshape(x, [-1, x.shape[-1]]), axis=-1), [spec(shape)]))

    def layernorm(x):
        m, v = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - m) * tf.math.rsqrt(v + 1e-3)

    for n, dtype in itertools.product([32, 33, 100, 1000, 3000, 8192],
                                      [tf.float32, tf.float16, tf.bfloat16, tf.float64]):
        d = dtype.name
        out += [(_name("softmax", n, d), tf.nn.softmax, [spec([6, n], dtype)]),
                (_name("logsoftmax", n, d), tf.nn.log_softmax, [spec([5, n], dtype)]),
                (_name("layernorm", n, d), layernorm, [spec([4, n], dtype)]),
                (_name("bcast", n, d), lambda x, y: x * y + tf.reduce_sum(x, axis=1, keepdims=True),
                 [spec([3, n], dtype), spec([n], dtype)]),
                (_name("transpose", n, d), lambda x: tf.transpose(x) * 2, [spec([5, n], dtype)]),
                (_name("twostat", n, d),
                 lambda x: tf.reduce_mean(tf.square(x - tf.reduce_mean(x, 0, keepdims=True)), 0),
                 [spec([n, 40], dtype)]),
                (_name("rowmax_nan", n, d), lambda x: tf.reduce_max(tf.math.log(x), axis=-1),
                 [spec([3, n], dtype)])]
    out += [("split_sum_1M", tf.reduce_sum, [spec([1 << 20])]),
            ("split_sum_2d", lambda x: tf.reduce_sum(x * 2.0), [spec([1000, 3000])]),
            ("split_max_2d", tf.reduce_max, [spec([1000, 3000])]),
            ("split_i64", tf.reduce_sum, [spec([1 << 20], tf.int64)]),
            ("split_f64", tf.reduce_sum, [spec([1 << 20], tf.float64)]),
            ("split_2out", lambda x: tf.reduce_sum(x, axis=[1, 2]), [spec([2, 700, 300])]),
            ("seedsmall", lambda x, y, z: tf.reduce_sum(x + y * z), [spec([1024, 1024])] * 3)]
    columns = [([8, 14, 14, 96], [0, 1, 2]), ([1000, 33], [0]), ([4, 500, 70], [0, 1]),
               ([2000, 7], [0]), ([300, 2, 40], [0])]
    for shape, axes in columns:
        for kind, dtype in itertools.product(("sum", "max", "min", "prod"),
                                             (tf.float32, tf.int32, tf.float16, tf.float64)):
            if kind != "prod" or dtype != tf.float16:
                out.append((_name("col", kind, shape, dtype.name), reduce(red[kind], axes, False),
                            [spec(shape, dtype)]))
        out.append((_name("col_any", shape), lambda x, a=axes: tf.reduce_any(x > 1.0, axis=a),
                    [spec(shape)]))
        out.append((_name("col_mean_bn", shape), lambda x, a=axes: tf.nn.moments(x * 2.0, axes=a)[1],
                    [spec(shape)]))
    for n in (8, 9, 17, 20, 31, 64, 65, 129):
        for dtype in (tf.float32, tf.bfloat16, tf.int64):
            out.append((_name("short_sum", n, dtype.name), lambda x: tf.reduce_sum(x, axis=-1),
                        [spec([301, n], dtype)]))
            out.append((_name("short_max", n, dtype.name), lambda x: tf.reduce_max(x, axis=-1),
                        [spec([301, n], dtype)]))
        out.append((_name("short_softmax", n), tf.nn.softmax, [spec([77, n])]))
        out.append((_name("short_all", n), lambda x: tf.reduce_all(x > -1.0, axis=-1), [spec([77, n])]))
    return out


def main(argv=None) -> int:
    import tfjit
    out = (argv or sys.argv[1:])[0]
    os.makedirs(out, exist_ok=True)
    written = 0
    for name, fn, specs in cases():
        text = tfjit.function(fn, jit_compile=True).experimental_get_compiler_ir(*specs)()
        with open(os.path.join(out, f"x_{name}.txt"), "w") as f:
            f.write(text)
        written += 1
    print(f"{written} modules in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
