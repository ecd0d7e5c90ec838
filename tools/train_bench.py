"""Training and model benchmarks: tfjit against TF graph mode and TF's XLA.

    python tools/train_bench.py                      # every workload, timings in one process
    python tools/train_bench.py --only mlp --runs 30
    python tools/train_bench.py --memory             # also peak RSS, one process per mode
    python tools/train_bench.py --compile-profile    # where tfjit's first call goes, per phase

Workloads (issue 4's targets):

* ``mlp``       train step of a 784-1024-1024-10 ReLU MLP, batch 512, Adam,
                sparse softmax cross-entropy (forward, tape gradients, update);
* ``softmax``   train step of softmax regression (784 -> 10, batch 100, SGD);
* ``cnn``       train step of a small Keras CNN (Conv2D, BatchNormalization,
                MaxPooling2D, Dropout, GlobalAveragePooling2D, Dense) on
                28x28x1 images, batch 128, Adam;
* ``mobilenet`` MobileNetV2 (weights=None) inference, batch 8 at 224x224;

and issue 14's blocks (batch 8, sequence 128, d_model 256, float32):

* ``attn`` / ``attn_train``     a pre-LN transformer encoder block: layernorm, Q/K/V
                projections, reshape/transpose into 4 heads, batched matmuls with
                a scaled, padding-masked softmax, output projection, residual,
                layernorm, tanh-GELU MLP (d_ff 1024), residual; forward, and a
                train step (mean squared error, tape gradients, SGD on its 16
                variables);
* ``swiglu`` / ``swiglu_train`` an RMSNorm + SwiGLU MLP block (d_ff 1024, residual);
                forward, and the same kind of train step.

Each step runs as ``tf.function`` (TF graph), ``tf.function(jit_compile=True)``
(TF's XLA) and ``tfjit.function(jit_compile=True)``, on its own copy of the
variables, after warm-up; the figure is the median of ``--runs`` steps timed
round-robin (one step of each mode in turn, in an order shuffled every round),
so a noisy neighbour slows every mode alike.  The shuffle: a step that always ran
right after XLA's paid for it (plausibly XLA's threads still spinning): on the loaded
2-core machine identical tfjit steps differed by 25% in p10 depending on whether
they followed XLA's.  ``--memory`` reruns each (workload, mode) in a fresh process and
reports its peak resident set size (VmHWM), and for tfjit also that of its LLVM
compile server (a process of its own; see codegen/jit_server.py).  Nothing is
asserted.

``--compile-profile`` times the first call of each workload, and of a
``train_on_batch`` of each Keras model of tests/test_keras_models.py
(``keras_*``), in fresh processes that are warm (the compile server up, the op
library loaded, one small function compiled by tfjit and one by XLA before) and
without the persistent cache; tfjit's first call is broken down by phase
(``pipeline.profiling``), with XLA's first call beside it.  Medians over
``--processes`` processes per mode.  See tools/compile_profile.py.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tensorflow as tf  # noqa: E402

import tfjit  # noqa: E402
from tools.bench import WARMUP  # noqa: E402

MODES = ("graph", "xla", "tfjit")


def _wrap(fn, mode: str):
    if mode == "graph":
        return tf.function(fn)
    if mode == "xla":
        return tf.function(fn, jit_compile=True)
    return tfjit.function(fn, jit_compile=True)


def _xent(labels, logits):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))


# -- workloads: make(rng) -> (step function, its arguments); a fresh model each call ----

def mlp(rng):
    import keras
    init = keras.initializers.GlorotUniform(seed=1)
    sizes = [784, 1024, 1024, 10]
    ws = []
    for a, b in zip(sizes, sizes[1:]):
        ws += [tf.Variable(init((a, b))), tf.Variable(tf.zeros([b]))]
    opt = keras.optimizers.Adam(1e-3)
    opt.build(ws)

    def step(x, y):
        with tf.GradientTape() as tape:
            h = x
            for k in range(0, len(ws) - 2, 2):
                h = tf.nn.relu(tf.matmul(h, ws[k]) + ws[k + 1])
            loss = _xent(y, tf.matmul(h, ws[-2]) + ws[-1])
        opt.apply_gradients(zip(tape.gradient(loss, ws), ws))
        return loss
    x = tf.constant(rng.standard_normal((512, 784), dtype=np.float32))
    y = tf.constant(rng.integers(0, 10, 512), tf.int32)
    return step, (x, y)


def softmax(rng):
    w = tf.Variable(tf.zeros([784, 10]))
    b = tf.Variable(tf.zeros([10]))

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = _xent(y, tf.matmul(x, w) + b)
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.5 * gw)
        b.assign_sub(0.5 * gb)
        return loss
    x = tf.constant(rng.random((100, 784), dtype=np.float32))
    y = tf.constant(rng.integers(0, 10, 100), tf.int32)
    return step, (x, y)


def cnn(rng):
    import keras
    keras.utils.set_random_seed(1)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        L.Conv2D(32, 3, activation="relu"), L.BatchNormalization(), L.MaxPooling2D(),
        L.Conv2D(64, 3, activation="relu"), L.BatchNormalization(), L.MaxPooling2D(),
        L.Dropout(0.25), L.GlobalAveragePooling2D(), L.Dense(10)])
    opt = keras.optimizers.Adam(1e-3)
    opt.build(model.trainable_variables)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = _xent(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        return loss
    x = tf.constant(rng.random((128, 28, 28, 1), dtype=np.float32))
    y = tf.constant(rng.integers(0, 10, 128), tf.int32)
    return step, (x, y)


def mobilenet(rng):
    import keras
    model = keras.applications.MobileNetV2(weights=None)
    x = tf.constant(rng.random((8, 224, 224, 3), dtype=np.float32))
    return (lambda x: model(x, training=False)), (x,)


_B, _T, _D, _H, _FF = 8, 128, 256, 4, 1024


def _dense_vars(rng, shapes):
    return [tf.Variable((rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
                        if len(s) == 2 else np.zeros(s, np.float32)) for s in shapes]


def _layernorm(x, g, b):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-5) * g + b


def _encoder_vars(rng):
    d, ff = _D, _FF
    vs = _dense_vars(rng, [(d, d), (d,), (d, d), (d,), (d, d), (d,), (d, d), (d,),
                           (d, ff), (ff,), (ff, d), (d,)])
    return vs + [tf.Variable(tf.ones([d])), tf.Variable(tf.zeros([d])),
                 tf.Variable(tf.ones([d])), tf.Variable(tf.zeros([d]))]


def _encoder(vs, x, mask):
    """Pre-LN encoder block; ``mask`` [B, T] is 1 for a token, 0 for padding."""
    wq, bq, wk, bk, wv, bv, wo, bo, w1, b1, w2, b2, g1, c1, g2, c2 = vs
    dh = _D // _H

    def heads(t):                                  # [B, T, D] -> [B, H, T, dh]
        return tf.transpose(tf.reshape(t, [_B, _T, _H, dh]), [0, 2, 1, 3])
    h = _layernorm(x, g1, c1)
    q, k, v = (heads(tf.matmul(h, w) + b) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
    scores = tf.matmul(q, k, transpose_b=True) * (1.0 / np.sqrt(dh))
    scores += (1.0 - mask[:, None, None, :]) * -1e9
    att = tf.matmul(tf.nn.softmax(scores, axis=-1), v)          # [B, H, T, dh]
    att = tf.reshape(tf.transpose(att, [0, 2, 1, 3]), [_B, _T, _D])
    x = x + tf.matmul(att, wo) + bo
    h = _layernorm(x, g2, c2)
    h = tf.nn.gelu(tf.matmul(h, w1) + b1, approximate=True)
    return x + tf.matmul(h, w2) + b2


def _swiglu_vars(rng):
    return _dense_vars(rng, [(_D, _FF), (_D, _FF), (_FF, _D)]) + [tf.Variable(tf.ones([_D]))]


def _swiglu(vs, x):
    wg, wu, wd, g = vs
    h = x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) + 1e-6) * g
    return x + tf.matmul(tf.nn.silu(tf.matmul(h, wg)) * tf.matmul(h, wu), wd)


def _block_inputs(rng):
    x = tf.constant(rng.standard_normal((_B, _T, _D), dtype=np.float32))
    lengths = rng.integers(_T // 2, _T + 1, _B)
    mask = tf.constant((np.arange(_T)[None, :] < lengths[:, None]).astype(np.float32))
    return x, mask


def _sgd_step(vs, loss_of):
    def step(*args):
        with tf.GradientTape() as tape:
            loss = loss_of(*args)
        for v, g in zip(vs, tape.gradient(loss, vs)):
            v.assign_sub(1e-3 * g)
        return loss
    return step


def attn(rng):
    vs = _encoder_vars(rng)
    x, mask = _block_inputs(rng)
    return (lambda x, mask: _encoder(vs, x, mask)), (x, mask)


def attn_train(rng):
    vs = _encoder_vars(rng)
    x, mask = _block_inputs(rng)
    y = tf.constant(rng.standard_normal((_B, _T, _D), dtype=np.float32))
    step = _sgd_step(vs, lambda x, mask, y: tf.reduce_mean(tf.square(_encoder(vs, x, mask) - y)))
    return step, (x, mask, y)


def swiglu(rng):
    vs = _swiglu_vars(rng)
    x, _ = _block_inputs(rng)
    return (lambda x: _swiglu(vs, x)), (x,)


def swiglu_train(rng):
    vs = _swiglu_vars(rng)
    x, _ = _block_inputs(rng)
    y = tf.constant(rng.standard_normal((_B, _T, _D), dtype=np.float32))
    step = _sgd_step(vs, lambda x, y: tf.reduce_mean(tf.square(_swiglu(vs, x) - y)))
    return step, (x, y)


WORKLOADS = {
    "mlp": ("MLP train step (784-1024-1024-10, batch 512, Adam)", mlp),
    "softmax": ("softmax regression train step (784 -> 10, batch 100, SGD)", softmax),
    "cnn": ("Keras CNN train step (28x28x1, batch 128, Adam)", cnn),
    "mobilenet": ("MobileNetV2 inference (batch 8, 224x224)", mobilenet),
    "attn": ("pre-LN encoder block forward (8x128x256, 4 heads)", attn),
    "attn_train": ("pre-LN encoder block train step (8x128x256, 4 heads, SGD)", attn_train),
    "swiglu": ("RMSNorm + SwiGLU MLP forward (8x128x256, d_ff 1024)", swiglu),
    "swiglu_train": ("RMSNorm + SwiGLU MLP train step (8x128x256, SGD)", swiglu_train),
}


def _block(result):
    for t in tf.nest.flatten(result):
        if hasattr(t, "numpy") and t.shape.num_elements() <= 1024:
            t.numpy()


def time_modes(name: str, runs: int, modes=MODES) -> dict:
    """Median ms per mode, timed round-robin after warm-up; a failing mode reports why."""
    rng = np.random.default_rng(0)
    steps, out = {}, {}
    for mode in modes:
        fn, args = WORKLOADS[name][1](rng)
        f = _wrap(fn, mode)
        try:
            t = time.perf_counter()
            _block(f(*args))
            out[mode + " first"] = (time.perf_counter() - t) * 1e3
            for _ in range(WARMUP - 1):
                _block(f(*args))
            steps[mode] = (f, args)
        except Exception as e:          # a benchmark reports, it does not stop
            out[mode] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    times = {mode: [] for mode in steps}
    order, shuffle = list(steps.items()), np.random.default_rng(1)
    for _ in range(runs):
        shuffle.shuffle(order)
        for mode, (f, args) in order:
            t = time.perf_counter()
            _block(f(*args))
            times[mode].append(time.perf_counter() - t)
    for mode, ts in times.items():
        out[mode] = float(np.median(ts) * 1e3)
    return out


def vm_hwm_mb() -> float:
    """This process's peak RSS (VmHWM).  Not ``ru_maxrss``: Linux carries that across
    exec, so a child forked from this (large) benchmark process would report at least
    the parent's size -- every mode then read the same 1472 MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise OSError("no VmHWM in /proc/self/status")


def compile_server_hwm_mb() -> float | None:
    """Peak RSS of tfjit's compile server (codegen/jit_server.py), if one runs."""
    from tfjit import pipeline
    from tfjit.codegen import llvm_cpu
    client = (llvm_cpu.server(pipeline.jit_compiler())
              if "tfjit.codegen.llvm_cpu" in sys.modules else None)
    if client is None or client.pid is None:
        return None
    with open(f"/proc/{client.pid}/status") as f:
        return next(int(ln.split()[1]) / 1024 for ln in f if ln.startswith("VmHWM:"))


def peak_rss_mb(name: str, mode: str, runs: int) -> tuple:
    """(peak RSS of a fresh process that builds the workload and runs it ``runs`` times,
    peak RSS of its compile server or None)."""
    code = (f"import sys; sys.argv=['x']; import tools.train_bench as b; "
            f"r = b.time_modes({name!r}, {runs}, ({mode!r},)); "
            f"import json; print(json.dumps([r.get({mode!r}), b.vm_hwm_mb(), "
            f"b.compile_server_hwm_mb()]))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        return f"failed (exit {proc.returncode})", None
    result, rss, server = json.loads(proc.stdout.strip().splitlines()[-1])
    return (rss if not isinstance(result, str) else result), server


def _fmt(v) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def _ratio(a, b) -> str:
    return f"{a / b:.2f}x" if isinstance(a, float) and isinstance(b, float) else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    from tools.compile_profile import KERAS_MODELS
    ap.add_argument("--only", nargs="*", help="workloads to run",
                    choices=sorted(WORKLOADS) + ["keras_" + m for m in KERAS_MODELS])
    ap.add_argument("--memory", action="store_true", help="also peak RSS per mode (slow)")
    ap.add_argument("--compile-profile", action="store_true",
                    help="where tfjit's first call goes, per phase, beside XLA's first call")
    ap.add_argument("--processes", type=int, default=3,
                    help="--compile-profile: fresh processes per workload and mode")
    args = ap.parse_args(argv)
    if args.compile_profile:
        from tools import compile_profile
        return compile_profile.main(args.only, args.processes)
    print(f"machine: {os.cpu_count()} cores; TF {tf.__version__}; medians of {args.runs} "
          "steps, timed round-robin\n")
    print("| workload | TF graph ms | TF XLA ms | tfjit ms | vs TF graph | vs XLA "
          "| first call ms (graph / XLA / tfjit) |")
    print("|---|---|---|---|---|---|---|")
    names = [n for n in args.only or WORKLOADS if n in WORKLOADS]   # keras_*: profile only
    for name in names:
        r = time_modes(name, args.runs)
        first = " / ".join(f"{r.get(m + ' first', float('nan')):.0f}" for m in MODES)
        print(f"| {WORKLOADS[name][0]} | {_fmt(r['graph'])} | {_fmt(r['xla'])} | "
              f"{_fmt(r['tfjit'])} | {_ratio(r['graph'], r['tfjit'])} | "
              f"{_ratio(r['xla'], r['tfjit'])} | {first} |", flush=True)
    if args.memory:
        print("\n| workload | peak RSS MB: TF graph | TF XLA | tfjit | tfjit's compile server |"
              "\n|---|---|---|---|---|")
        for name in names:
            rss = [peak_rss_mb(name, m, 5) for m in MODES]
            print(f"| {WORKLOADS[name][0]} | " + " | ".join(_fmt(v) for v, _ in rss)
                  + f" | {_fmt(rss[-1][1]) if rss[-1][1] is not None else '-'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
