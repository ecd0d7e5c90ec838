"""Training under tf.distribute: tfjit against TF graph mode and TF's XLA.

    python tools/dist_bench.py                 # MirroredStrategy over 2 logical CPUs
    python tools/dist_bench.py --devices 4 --runs 40

The workload is tools/train_bench.py's MLP train step (784-1024-1024-10 ReLU,
Adam, sparse softmax cross-entropy), global batch 512 split over the replicas,
variables mirrored (created under ``strategy.scope()``).  Each mode runs
``strategy.run(step)`` inside a tf.function, the replica step being

* ``graph``: the Python function (TF graph mode),
* ``xla``:   ``tf.function(step, jit_compile=True)`` (MirroredStrategy then
  compiles all replicas as one XLA computation; on CPU TF fails it, reported),
* ``tfjit``: ``tfjit.function(step)`` (each replica compiled, collectives left
  to TF: tfjit/api/replica.py).

Steps are timed round-robin after warm-up (one step of each mode in turn, so a
noisy neighbour slows every mode alike); the figure is the median of ``--runs``.
Logical devices share the machine's cores, so this measures the cost of the
strategy's machinery and of the compiled replicas, not a speed-up from more
devices.  Nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


def _setup(devices: int):
    import tensorflow as tf
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * devices)
    return tf


def _mlp(strategy, rng):
    """train_bench's MLP step, its variables and optimizer made under the strategy
    (mirrored)."""
    import train_bench
    with strategy.scope():
        step, _ = train_bench.mlp(rng)
    return step


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args(argv)
    tf = _setup(args.devices)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.dirname(here), here]      # tfjit, and train_bench beside this file
    import tfjit
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(args.devices)])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 784), dtype=np.float32)
    y = rng.integers(0, 10, 512).astype(np.int32)
    per = 512 // args.devices

    def shard(a):
        return strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(a[ctx.replica_id_in_sync_group * per:
                                      (ctx.replica_id_in_sync_group + 1) * per]))
    data = (shard(x), shard(y))
    wraps = {"graph": lambda f: f, "xla": lambda f: tf.function(f, jit_compile=True),
             "tfjit": lambda f: tfjit.function(f, jit_compile=True)}
    steps, out = {}, {}
    for mode, wrap in wraps.items():
        replica_step = wrap(_mlp(strategy, rng))
        f = tf.function(lambda a, b, s=replica_step: strategy.reduce(
            "SUM", strategy.run(s, args=(a, b)), axis=None))
        try:
            t = time.perf_counter()
            f(*data).numpy()
            out[mode + " first"] = (time.perf_counter() - t) * 1e3
            for _ in range(3):
                f(*data).numpy()
            steps[mode] = f
        except Exception as e:          # a benchmark reports, it does not stop
            out[mode] = f"failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:160]}"
    times = {mode: [] for mode in steps}
    for _ in range(args.runs):
        for mode, f in steps.items():
            t = time.perf_counter()
            f(*data).numpy()
            times[mode].append(time.perf_counter() - t)
    for mode, ts in times.items():
        out[mode] = float(np.median(ts) * 1e3)
    print(f"MLP train step under MirroredStrategy, {args.devices} logical CPUs, global batch 512, "
          f"median of {args.runs} ({os.cpu_count()} cores)")
    print(f"{'mode':<8} {'ms/step':>9} {'steps/s':>9} {'first (ms)':>11}  vs graph")
    base = out.get("graph")
    for mode in wraps:
        v = out.get(mode)
        if isinstance(v, float):
            ratio = f"{base / v:.2f}x" if isinstance(base, float) else "-"
            print(f"{mode:<8} {v:>9.2f} {1e3 / v:>9.1f} {out[mode + ' first']:>11.0f}  {ratio}")
        else:
            print(f"{mode:<8} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
