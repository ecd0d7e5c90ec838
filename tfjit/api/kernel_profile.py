"""Per-kernel time from the launch op: where a compiled cluster's time goes.

    with tfjit.kernel_profile() as profile:
        for _ in range(100):
            model.predict_on_batch(x)
    print(profile)            # the kernels, slowest first

While the block runs, the launch op (runtime/launch_op.cc) times each step of every
executable it runs, on the wall clock, and adds it up per step; a concurrent group
(passes/concurrency.py) counts as its first step, whose row lists the group's other
kernels.  Each row names the cluster, the
step's kernel symbol and what the kernel computes (pipeline.describe_kernel: its
kind, first root, shape, and TF's kernel for a library call), with its runs, total
and mean time.  What it costs: two clock reads and a locked add per step, nothing
with the profile off.  The JIT's CPU launches only: the host runner, tfjit-aot's
code and the GPU kernel are not timed.  XLA's counterpart is ``--xla_hlo_profile``.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses

from tfjit.runtime import launch


@dataclasses.dataclass
class KernelTime:
    cluster: str        # the compiled cluster (its executable's name); "?" once freed
    step: int           # position in the executable's run order
    symbol: str         # the kernel's function
    what: str           # what it computes
    runs: int
    seconds: float      # total wall time

    @property
    def mean_us(self) -> float:
        return self.seconds / self.runs * 1e6


class KernelProfile:
    """The steps timed inside one ``kernel_profile()`` block (filled when it ends)."""

    def __init__(self):
        self.kernels: list = []

    @property
    def seconds(self) -> float:
        return sum(k.seconds for k in self.kernels)

    def table(self, top: int | None = None) -> str:
        """A markdown table of the kernels, slowest in total first (``top`` rows)."""
        rows = sorted(self.kernels, key=lambda k: -k.seconds)[:top]
        total = self.seconds or 1.0
        lines = ["| cluster | step | kernel | runs | total ms | mean us | share |",
                 "|---|---|---|---|---|---|---|"]
        lines += [f"| {k.cluster} | {k.step} | {k.what} | {k.runs} | {k.seconds * 1e3:.3f} | "
                  f"{k.mean_us:.1f} | {k.seconds / total:.1%} |" for k in rows]
        return "\n".join(lines)

    __str__ = table


def _rows() -> list:
    """[(executable or None, step, seconds, runs)] for every step run while the kernel
    profile was on (None: an executable gone since, or one without step names)."""
    if launch._library is None:
        return []
    c = launch._library.c
    n = c.TfjitKernelProfile(None, 0)
    table = (ctypes.c_int64 * max(4 * n, 1))()
    n = min(n, c.TfjitKernelProfile(table, n))
    return [(launch._named.get(table[4 * k]), table[4 * k + 1], table[4 * k + 2] * 1e-9,
             table[4 * k + 3]) for k in range(n)]


@contextlib.contextmanager
def kernel_profile():
    """Times every step the launch op runs inside the block; yields a ``KernelProfile``,
    filled when the block ends.  Profiles do not nest (the op has one table)."""
    profile = KernelProfile()
    c = launch._lib().c
    c.TfjitSetKernelProfile(1)       # (clears the op's table)
    try:
        yield profile
    finally:
        rows = _rows()
        c.TfjitSetKernelProfile(0)
        for executable, step, seconds, runs in rows:
            steps = executable.steps if executable is not None else []
            symbol, what = steps[step] if step < len(steps) else ("?", "?")
            cluster = executable.cluster if executable is not None else "?"
            if executable is not None:
                what = _with_group(executable, step, what)
            profile.kernels.append(KernelTime(cluster, step, symbol, what, runs, seconds))


def _with_group(executable, step: int, what: str) -> str:
    """``what`` of a step that starts a concurrent group names the group's other
    kernels: the op times the group as one step, so its time is theirs too (a transposed
    convolution's gradient once read as 2.5 ms where its own call takes 0.7)."""
    marks = executable.marks()
    group = marks[step][0] if step < len(marks) else 0
    if group < 2:
        return what
    others = [w for _, w in executable.steps[step + 1:step + group]]
    return f"{what} [run at once with: {'; '.join(others)}]"
