"""Collects the optimised modules that the op-table and random-graph tests compile, so
tests/test_nvptx.py can emit every one of their kernels for the GPU and assemble it
with ptxas, in the same session (nothing compiled twice for the CPU).

With ``TFJIT_COLLECT_MODULES=DIR`` each module is also written there as IR text,
as lowered: what tools/gpu_check.py carries to a machine with a GPU."""
from __future__ import annotations

import os

SOURCES = ("tests/test_ops.py", "tests/test_ops_math.py", "tests/test_diag_ops.py",
           "tests/test_random_graphs.py")
SEEN: list = []          # (test file, pipeline.Optimized)


def install() -> None:
    from tfjit import pipeline
    if getattr(pipeline.optimize, "collects", False):
        return
    original = pipeline.optimize

    def optimize(m, options=None, after_pass=None):
        o = original(m, options, after_pass)
        current = os.environ.get("PYTEST_CURRENT_TEST", "")
        if current.startswith(SOURCES):
            SEEN.append((current.split("::")[0], o))
            where = os.environ.get("TFJIT_COLLECT_MODULES")
            if where:
                os.makedirs(where, exist_ok=True)
                with open(os.path.join(where, f"m{len(SEEN):05d}.txt"), "w") as f:
                    f.write(o.before)
        return o
    optimize.collects = True
    pipeline.optimize = optimize
