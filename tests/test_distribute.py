"""tfjit.function inside tf.distribute strategies (api/replica.py): MirroredStrategy
over 2 and 4 logical CPUs, each run in a fresh process (tests/distributed_program.py,
since logical devices are fixed when TensorFlow starts), against the same program
without jit."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(case: str, devices: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    env.pop("TFJIT_FLAGS", None)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "distributed_program.py"), case,
                           str(devices)], capture_output=True, text=True, env=env, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def _devices(nodes) -> set:
    """The replicas whose nodes these are (MirroredStrategy names replica k's ops
    ``replica_k/...``, replica 0's without a prefix)."""
    found = (re.search(r"(?:^|/)(replica_\d+)/", n) for n in nodes)
    return {m.group(1) if m else "replica_0" for m in found}


@pytest.mark.parametrize("devices", [2, 4])
def test_the_seed_example_and_code_around_a_collective(devices):
    r = run("seed", devices)
    for name, (got, want) in r["results"].items():
        assert len(got) == devices
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)
    # the code before and after the all_reduce compiles, one cluster per replica and side
    # (the seed's own step is all constants: grappler folds it before the graph pass)
    replicas = [_devices(nodes) for _, nodes in r["clusters"]]
    assert all(len(d) == 1 for d in replicas), r["clusters"]       # never across replicas
    assert {d for s in replicas for d in s} == {f"replica_{i}" for i in range(devices)}
    # per replica, shifted: before and after the collective; auto: before and after
    # tf.unique (TF's), and after the collective
    assert len(r["clusters"]) == 5 * devices
    assert not any(n.endswith("Unique") for _, nodes in r["clusters"] for n in nodes)
    assert r["launch"]["misses"] == 5 * devices and r["launch"]["hits"] == 0
    # tfjit.explain shows the same clusters and the collectives as boundaries
    explained = r["explain"]
    assert len(explained["clusters"]) == 2 * devices
    assert [op for _, op in explained["boundaries"]].count("CollectiveReduceV2") == devices
    assert "collectives: CollectiveReduceV2" in explained["text"]


def test_a_training_loop_under_mirrored_strategy():
    r = run("train", 2)
    assert r["steps"] == 50
    np.testing.assert_allclose(r["losses"], r["ref_losses"], rtol=1e-5)
    for w, ref in zip(r["weights"], r["ref_weights"]):
        np.testing.assert_allclose(w, ref, rtol=1e-5, atol=1e-6)
    # forward and backward of each replica is one cluster (grappler's _FusedMatMul included)
    big = [nodes for _, nodes in r["clusters"] if any("BiasAddGrad" in n for n in nodes)]
    assert len(big) == 2 and all(len(_devices(n)) == 1 for n in big)
    assert all(any(n.endswith("dense_2_1/Relu") for n in nodes) for nodes in big)
    # every step launched compiled kernels on both replicas; compiled once per cluster
    launches = r["launch"]["hits"] + r["launch"]["misses"] - sum(r["before"].values())
    assert r["launch"]["misses"] - r["before"]["misses"] == len(r["clusters"])
    assert launches >= 50 * 2 * 2
    assert r["trace_launches"] > 0          # TfjitLaunch events in a profiler trace of 3 steps


def test_must_compile_errors_in_a_replica():
    r = run("errors", 2)
    refused, eager = r["errors"]["refused"], r["errors"]["eager"]
    assert refused and "Unique" in refused and "{{node Unique}}" in refused
    assert "distributed_program.py" in refused                  # the user's line
    assert eager and "strategy.run inside a tf.function" in eager
    in_cond = r["errors"]["in_cond"]
    assert in_cond and "cond_fn" in in_cond and "inside control flow" in in_cond


def test_keras_fit_under_mirrored_strategy_compiles_each_replicas_step():
    r = run("fit", 2)["fit"]
    ref = r["False"]
    assert ref["tfjit_steps"] == []
    for jit in ("True", "auto"):
        assert r[jit]["tfjit_steps"] == ["train"], jit          # through tfjit, not TF's XLA
        np.testing.assert_allclose(r[jit]["losses"], ref["losses"], rtol=1e-5, err_msg=jit)
        for w, want in zip(r[jit]["weights"], ref["weights"]):
            np.testing.assert_allclose(w, want, rtol=1e-5, atol=1e-6, err_msg=jit)


# -- MultiWorkerMirroredStrategy: two worker processes on loopback -----------------------

def _free_ports(n: int) -> list:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _start_workers(case: str, logs=None) -> list:
    """Two worker processes; their output goes to the files ``logs`` or, without
    them, to pipes (read line by line while they run)."""
    ports = _free_ports(2)
    procs = []
    for index in range(2):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
                   TF_CONFIG=json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                         "task": {"type": "worker", "index": index}}))
        env.pop("TFJIT_FLAGS", None)
        env["PYTHONFAULTHANDLER"] = "1"     # a crash (abort, segfault) shows the Python stack
        out = open(logs[index], "w") if logs else subprocess.PIPE
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "distributed_program.py"),
                                       case, "0"], env=env, stdout=out,
                                      stderr=subprocess.STDOUT, text=True))
        if logs:
            out.close()                     # the worker has its own copy
    return procs


def _stop(procs) -> None:
    """Ends every worker this test started, by pid."""
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)


def test_multi_worker_mirrored_strategy_on_loopback(tmp_path):
    # each worker writes to its own file: with pipes, one worker blocked on a full pipe
    # while the test read the other's would stall both in their collectives
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    procs = _start_workers("worker", logs)
    deadline = time.monotonic() + 300
    try:
        for p in procs:
            p.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        _stop(procs)
    outputs = [log.read_text() for log in logs]
    report = "\n".join(f"--- worker {i} (exit {p.returncode}) ---\n{out[-3000:]}"
                       for i, (p, out) in enumerate(zip(procs, outputs)))
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, report
        seed, train = [json.loads(ln[len("RESULT "):]) for ln in out.splitlines()
                       if ln.startswith("RESULT ")]
        for name, (got, want) in seed["results"].items():
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)
        assert len(seed["clusters"]) == 5           # one replica per worker (as above)
        assert train["steps"] == 50
        np.testing.assert_allclose(train["losses"], train["ref_losses"], rtol=1e-5)
        for w, ref in zip(train["weights"], train["ref_weights"]):
            np.testing.assert_allclose(w, ref, rtol=1e-5, atol=1e-6)
        launched = sum(train["launch"][k] - train["before"][k] for k in ("hits", "misses"))
        assert launched >= 50 * 2                   # two clusters per step, every step
        assert train["trace_launches"] == 0         # not profiled (distributed_program.worker)


def test_a_killed_worker_fails_its_peer_within_a_bounded_time():
    procs = _start_workers("long")
    try:
        deadline = time.monotonic() + 240
        for line in procs[1].stdout:          # both workers are training
            if line.startswith("STEP 10") or time.monotonic() > deadline:
                break
        assert procs[1].poll() is None, "worker 1 stopped before it was killed"
        os.kill(procs[1].pid, signal.SIGKILL)
        killed = time.monotonic()
        out = procs[0].communicate(timeout=60)[0]        # never hangs: 60 s at most
        assert time.monotonic() - killed < 60
        assert procs[0].returncode not in (0, None)
        assert "UnavailableError" in out or "aborted" in out, out[-3000:]
    finally:
        _stop(procs)
