"""What a TfjitLaunch node costs in a graph, against the TF ops it replaces and XLA's cluster.

    python tools/launch_overhead.py                  # sizes 16 and 256, chains of 2-8 ops
    python tools/launch_overhead.py --runs 500 --sizes 16 --ops 1 4

Issue 14 part 4 asks whether auto mode's launch node adds anything over TF's own
per-op cost.  Each workload is a TF1 ``Session`` graph: a chain of ``--ops``
elementwise ops on an [n, n] float32 feed (mul-add and tanh in turn) whose result
feeds a ``tf.unique`` (which no compiler takes, so the cluster is a node among TF's
own).  It runs under three modes, one Session each, in the same process:

- ``graph``: TF's executor runs every op;
- ``xla``: TF's auto-clustering (``global_jit_level`` ON_1, ``--tf_xla_cpu_global_jit``);
- ``tfjit``: tfjit's (``--tfjit_auto_jit=2 --tfjit_cpu_global_jit``, which clusters
  whatever the Session's jit level; the level stays OFF, so XLA takes nothing).

Two figures per mode, medians over ``--runs`` rounds, the modes interleaved:

- ``run us``: the wall time of ``Session.run`` (untraced), which is what a user pays;
- ``ops us``: from a FULL_TRACE's step stats, the summed time of the nodes that the
  compilers replace (graph: the chain's ops, reshape and constants; XLA: its
  ``_XlaCompile`` and ``_XlaRun`` nodes; tfjit: its ``TfjitLaunch`` node).  TF
  records node times in whole microseconds, so small figures are coarse.

Nothing is asserted: the machine is shared, read the ratios.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")       # the trace warns once per node
os.environ.setdefault("TF_XLA_FLAGS", "--tf_xla_cpu_global_jit")
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tensorflow as tf  # noqa: E402

import tfjit  # noqa: E402
from tfjit import config  # noqa: E402
from tfjit.api import autojit  # noqa: E402

tf1 = tf.compat.v1
MODES = ("graph", "xla", "tfjit")
KEPT = ("Unique", "_Arg", "_Retval", "NoOp", "_Recv", "_Send")    # never replaced


def build(n: int, ops: int):
    """(graph, feed placeholder, fetch) of the workload."""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [n, n], name="x")
        y = tf.constant(np.random.default_rng(0).random((n, n), np.float32))
        z = x
        for i in range(ops):
            z = z * y + 1.0 if i % 2 == 0 else tf.tanh(z)
        u, _ = tf.unique(tf.reshape(z, [-1]))
    return g, x, u


def session(mode: str, n: int, ops: int):
    """A Session running the workload under ``mode``, warmed up (compiled)."""
    config.set_flags(tfjit_auto_jit=2 if mode == "tfjit" else 0,
                     tfjit_cpu_global_jit=mode == "tfjit")
    if mode == "tfjit":
        autojit.activate()     # the graph pass on (TFJIT_FLAGS would do it at import)
    g, x, u = build(n, ops)
    cfg = tf1.ConfigProto()
    cfg.graph_options.optimizer_options.global_jit_level = (
        tf1.OptimizerOptions.ON_1 if mode == "xla" else tf1.OptimizerOptions.OFF)
    s = tf1.Session(graph=g, config=cfg)
    feed = {x: np.random.default_rng(1).random((n, n), np.float32)}
    for _ in range(20):
        s.run(u, feed)
    config.set_flags(tfjit_auto_jit=0, tfjit_cpu_global_jit=False)
    return s, u, feed


def replaced_us(s, u, feed) -> tuple:
    """(summed µs of the nodes a compiler replaces, their op types) in one traced run."""
    md = tf1.RunMetadata()
    s.run(u, feed, options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE),
          run_metadata=md)
    total, kinds = 0, set()
    for dev in md.step_stats.dev_stats:
        for ns in dev.node_stats:
            op = ns.timeline_label.split("=")[-1].split("(")[0].strip()
            if ns.node_name.startswith("_SOURCE") or op in KEPT or not op:
                continue
            total += ns.op_end_rel_micros - ns.op_start_rel_micros
            kinds.add(op)
    return total, kinds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=300, help="rounds (each mode once per round)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 256])
    ap.add_argument("--ops", type=int, nargs="+", default=[2, 4, 8])
    args = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} cores; TF {tf.__version__}; medians of {args.runs} "
          "rounds, modes interleaved; load", " ".join(f"{v:.1f}" for v in os.getloadavg()))
    print("\n| n x n | ops | run us graph / XLA / tfjit | tfjit run vs graph | vs XLA "
          "| ops us graph / XLA / tfjit | replaced by |")
    print("|---|---|---|---|---|---|---|")
    for n in args.sizes:
        for ops in args.ops:
            sessions = {m: session(m, n, ops) for m in MODES}
            run = {m: [] for m in MODES}
            node = {m: [] for m in MODES}
            kinds = {m: set() for m in MODES}
            for _ in range(args.runs):
                for m, (s, u, feed) in sessions.items():
                    t = time.perf_counter()
                    s.run(u, feed)
                    run[m].append((time.perf_counter() - t) * 1e6)
                    us, k = replaced_us(s, u, feed)
                    node[m].append(us)
                    kinds[m] |= k
            for s, _, _ in sessions.values():
                s.close()
            r = {m: float(np.median(v)) for m, v in run.items()}
            o = {m: float(np.median(v)) for m, v in node.items()}
            print(f"| {n} | {ops} | {r['graph']:.0f} / {r['xla']:.0f} / {r['tfjit']:.0f} | "
                  f"{r['graph'] / r['tfjit']:.2f}x | {r['xla'] / r['tfjit']:.2f}x | "
                  f"{o['graph']:.0f} / {o['xla']:.0f} / {o['tfjit']:.0f} | "
                  f"XLA: {', '.join(sorted(kinds['xla']))}; tfjit: "
                  f"{', '.join(sorted(kinds['tfjit']))} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
