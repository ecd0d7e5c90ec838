"""tfjit.function inside tf.distribute strategies (api/replica.py): MirroredStrategy
over 2 and 4 logical CPUs, each run in a fresh process (tests/distributed_program.py,
since logical devices are fixed when TensorFlow starts), against the same program
without jit."""
import json
import os
import re
import subprocess
import sys

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
    assert len(r["clusters"]) == 2 * devices
    assert r["launch"]["misses"] == 2 * devices and r["launch"]["hits"] == 0


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


def test_must_compile_errors_in_a_replica():
    r = run("errors", 2)
    refused, eager = r["errors"]["refused"], r["errors"]["eager"]
    assert refused and "Unique" in refused and "{{node Unique}}" in refused
    assert "distributed_program.py" in refused                  # the user's line
    assert eager and "strategy.run inside a tf.function" in eager
