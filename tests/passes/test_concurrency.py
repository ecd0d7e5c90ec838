"""The concurrency pass (passes/concurrency.py) on IR text: which kernels it groups,
that no two tasks of a group touch the same memory (arena bytes included), and the
step marks the launch op reads.  No TensorFlow; tests/test_concurrent_groups.py runs
grouped clusters against TF's executor."""
from __future__ import annotations

import pytest

from tfjit import pipeline
from tfjit.ir.parse import parse_module
from tfjit.passes import buffers, concurrency
from tfjit.runtime import launch


def branches(n: int, rows: int = 64, width: int = 256) -> str:
    """n branches of dot -> tanh -> dot from one input, summed at the end."""
    lines = [f"module branches {{", f"  %p0 = f32[{rows},{width}] parameter(0)"]
    for k in range(n):
        lines.append(f"  %w{k} = f32[{width},{width}] parameter({k + 1})")
    total = None
    for k in range(n):
        lines += [f"  %a{k} = f32[{rows},{width}] dot(%p0, %w{k}), transpose_lhs=0, transpose_rhs=0",
                  f"  %t{k} = f32[{rows},{width}] tanh(%a{k})",
                  f"  %b{k} = f32[{rows},{width}] dot(%t{k}, %w{k}), transpose_lhs=0, transpose_rhs=0"]
        if total is None:
            total = f"%b{k}"
        else:
            lines.append(f"  %s{k} = f32[{rows},{width}] add({total}, %b{k})")
            total = f"%s{k}"
    lines += [f"  ROOT ({total})", "}"]
    return "\n".join(lines) + "\n"


CHAIN = """module chain {
  %p0 = f32[64,256] parameter(0)
  %p1 = f32[256,256] parameter(1)
  %a = f32[64,256] dot(%p0, %p1), transpose_lhs=0, transpose_rhs=0
  %t = f32[64,256] tanh(%a)
  %b = f32[64,256] dot(%t, %p1), transpose_lhs=0, transpose_rhs=0
  %u = f32[64,256] exp(%b)
  %c = f32[64,256] dot(%u, %p1), transpose_lhs=0, transpose_rhs=0
  ROOT (%c)
}
"""


def optimized(text: str):
    return pipeline.optimize(parse_module(text), pipeline.Options(verify=True))


def test_four_branches_become_one_group_of_four_chains():
    o = optimized(branches(4))
    concurrent = [tasks for tasks in o.groups if len(tasks) > 1]
    assert len(concurrent) == 1 and len(concurrent[0]) == 4, o.groups
    assert all(n == 3 for n in concurrent[0]), o.groups     # dot, tanh, dot per branch
    assert sum(map(sum, o.groups)) == len(o.fusions)
    assert concurrency.group_conflicts(o.module, o.fusions, o.groups, o.plan) == []


def test_tasks_of_a_group_never_share_arena_bytes():
    """Sequentially the branches' temps would share bytes (each is dead after its next
    kernel); in one group they are live together."""
    o = optimized(branches(3))
    (tasks,) = [t for t in concurrency.Schedule(o.fusions, o.groups, {}).concurrent()]
    spans = []
    for k, task in enumerate(tasks):
        for f in task:
            for r in f.roots:
                for slot in o.plan.slots[r]:
                    t = slot - o.plan.num_inputs - o.plan.num_outputs
                    if t >= 0:
                        spans.append((k, o.plan.temp_offsets[t], o.plan.temp_offsets[t] + o.plan.temp_bytes[t]))
    for k, a, b in spans:
        for k2, a2, b2 in spans:
            if k != k2:
                assert b <= a2 or b2 <= a, (spans, o.groups)


def test_a_chain_and_small_branches_stay_one_kernel_at_a_time():
    assert all(tasks == [1] for tasks in optimized(CHAIN).groups)
    small = optimized(branches(4, rows=4, width=8))      # far below MIN_GROUP_NS of work
    assert all(tasks == [1] for tasks in small.groups)


def test_conflicts_are_found_when_temps_share_bytes():
    """The verifier's check: the branches' kernels with the sequential placement (temps
    reused across branches) would clash in one group."""
    o = optimized(branches(4))
    buffers.place_temps(o.plan, o.fusions)         # placement by position, groups ignored
    assert concurrency.group_conflicts(o.module, o.fusions, o.groups, o.plan)


@pytest.mark.parametrize("times, expect", [
    ([100_000, 100_000], True),
    ([100_000, 10_000], False),          # the other task is under a quarter of the largest
    ([20_000, 20_000], False),           # too little work to wake a thread for
    ([100_000], False),
])
def test_concurrent_decision(times, expect):
    assert concurrency.concurrent(times) is expect


@pytest.mark.parametrize("times, loops, expect", [
    ([100_000, 100_000], [20_000, 20_000], True),       # small loops beside the calls
    # a task holding a long loop: split over two threads it takes half as long alone
    ([60_000, 60_000], [0, 1_000_000], False),
    ([300_000, 300_000], [0, 500_000], True),           # ... unless the calls outweigh it
])
def test_loops_held_to_one_thread_count_against_a_group(times, loops, expect):
    assert concurrency.concurrent(times, loops) is expect


def test_attention_beside_additive_attention_runs_one_kernel_at_a_time():
    """Keras's Attention and AdditiveAttention of one query: two branches, the second a
    1M-tanh reduction that, grouped, would run on one thread (0.74 ms a call against
    0.57 one kernel at a time)."""
    import numpy as np
    import tensorflow as tf
    import tfjit
    from tests.oracle import assert_matches
    rng = np.random.default_rng(5)
    q = tf.constant(rng.standard_normal((32, 32, 32)).astype(np.float32))

    def f(q):
        dot = tf.nn.softmax(tf.matmul(q, q, transpose_b=True) * 0.2) @ q
        additive = tf.reduce_sum(tf.tanh(q[:, :, None, :] + q[:, None, :, :]), -1)
        return dot, tf.nn.softmax(additive) @ q

    fn = tfjit.function(f, jit_compile=True)
    for got, want in zip(fn(q), tf.function(f)(q)):
        assert_matches(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
    executable = fn.compiled(q).executable
    marks, whats = executable.marks(), [what for _, what in executable.steps]
    grouped, s = [], 0
    while s < len(marks):
        group = max(marks[s][0], 1)
        if group > 1:
            grouped += whats[s:s + group]
        s += group
    tanh_grouped = any(w.startswith("reduce") and "[32, 32, 32]" in w for w in grouped)
    assert not tanh_grouped, marks


def test_step_marks():
    # kernels: 1 alone, then a group of tasks of 2 kernels (1 + 2 steps) and 1 kernel (1 step)
    marks = concurrency.step_marks([[1], [2, 1], [1]], [1, 1, 2, 1, 1])
    assert marks == [(0, 0), (4, 3), (0, 0), (0, 0), (0, 1), (0, 0)]
    launch.check_marks(marks)
    # a group whose other task has no steps is no group
    assert concurrency.step_marks([[1, 1]], [1, 0]) == [(0, 0)]


@pytest.mark.parametrize("marks", [
    [(3, 1), (0, 1)],                 # the group runs past the steps
    [(2, 1), (0, 0)],                 # the second step starts no task
    [(2, 2), (0, 1)],                 # a task inside another
    [(1, 1)],                         # a group of one step
    [(3, 1), (2, 1), (0, 1)],         # a group start inside a group
])
def test_check_marks_refuses_what_the_launch_op_would_misread(marks):
    with pytest.raises(ValueError):
        launch.check_marks(marks)


def test_a_placement_that_does_not_fit_the_order_is_caught():
    """The verifier's check that temps fit the run order: with every temp at offset 0,
    the branches' results (live together until the sum) overwrite each other."""
    o = optimized(branches(4, rows=4, width=8))          # no groups: one kernel at a time
    assert concurrency.clobbered(o.module, o.fusions, o.plan) == []
    o.plan.temp_offsets = [0] * len(o.plan.temp_offsets)
    assert concurrency.clobbered(o.module, o.fusions, o.plan)


def test_the_flag_keeps_fusions_order(flags):
    flags.tfjit_concurrent_groups = False
    o = optimized(branches(4))
    assert all(tasks == [1] for tasks in o.groups)


def test_branches_of_loops_and_reductions_are_not_grouped():
    """tfjit's own kernels split over the threads well on their own: four independent
    branches of big elementwise work and a reduction, no library call, stay one kernel
    at a time (counted as work of their own, they would make a group)."""
    lines = ["module loops {", "  %p0 = f32[512,1024] parameter(0)"]
    for k, op in enumerate(["exp", "tanh", "logistic", "cos"]):
        lines += [f"  %e{k} = f32[512,1024] {op}(%p0)",
                  f"  %r{k} = f32[512] reduce(%e{k}), kind=sum, ndims=1",
                  f"  %b{k} = f32[512,1024] broadcast(%r{k}), dims={{0}}",
                  f"  %d{k} = f32[512,1024] divide(%e{k}, %b{k})"]
    lines += ["  ROOT (%d0, %d1, %d2, %d3)", "}"]
    o = optimized("\n".join(lines) + "\n")
    assert all(tasks == [1] for tasks in o.groups)
    read = {f: buffers.read_values(f, o.plan.slots) for f in o.fusions}
    assert concurrency.concurrent([concurrency.estimate_ns(f, read[f]) for f in o.fusions])
