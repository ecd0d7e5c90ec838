"""Randomized differential test: random TF graphs compiled by tfjit vs TF's executor.

Each run generates ``TFJIT_TEST_GRAPHS`` (default 320) random programs
(tests/random_graph_generator.py: DAGs of 3-15 ops over 1-3 inputs: elementwise
math, broadcasting, reductions, softmax, reshapes, transposes, slicing, concat,
pad, tile, casts; 1-3 outputs; fan-out), compiles each with
``tfjit.function(jit_compile=True)``, checks that its IR text (as lowered and as
optimised) round-trips through the parser, and compares every output with
``tf.function`` run by TF's executor (tests/oracle.py; floats get an extra
per-element atol derived from the inputs, see random_graphs.py).  All
mismatches are collected and reported together at the end.

Replaying: the seed is printed and is part of every failure message.  Graph
``i`` of seed ``S`` depends only on (S, i):

    TFJIT_TEST_SEED=S TFJIT_TEST_ONLY=i pytest tests/test_random_graphs.py -s

and ``python tests/test_random_graphs.py S i`` shrinks that graph to a small
program that still fails (random_graphs.minimize).  If the process dies
(segfault), the graph being run is in the file named by ``CURRENT`` (printed
at the start of the run).  Known tfjit bugs are kept out of the generated
programs (random_graph_generator.KNOWN_BUGS; none at present);
``TFJIT_TEST_INCLUDE_KNOWN_BUGS=1`` generates them again, to check a fix.
The bugs found so far are pinned, minimised, in ``REGRESSIONS``.
"""
from __future__ import annotations

import collections
import contextlib
import os
import sys
import tempfile
import time
import traceback

import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, os.path.dirname(__file__))
import random_graph_generator as gen  # noqa: E402
import random_graphs as rg  # noqa: E402
from oracle import TOLERANCE, assert_matches  # noqa: E402

import tfjit  # noqa: E402
from tfjit.ir.text import module_str, parse_module  # noqa: E402

DEFAULT_SEED = 20240611
SEED = int(os.environ.get("TFJIT_TEST_SEED", DEFAULT_SEED))
COUNT = int(os.environ.get("TFJIT_TEST_GRAPHS", 320))
ONLY = os.environ.get("TFJIT_TEST_ONLY")
EXCLUDE = set() if os.environ.get("TFJIT_TEST_INCLUDE_KNOWN_BUGS") else gen.EXCLUDE
CURRENT = os.path.join(tempfile.gettempdir(), "tfjit_random_graph_current.txt")


def generate(seed: int, index: int):
    """Graph ``index`` of ``seed``: (Program, input arrays)."""
    rng = np.random.default_rng([seed, index])
    program = gen.Generator(rng, EXCLUDE).generate()
    return program, gen.make_inputs(rng, program)


@contextlib.contextmanager
def grappler_without_arithmetic_optimizer():
    """The oracle runs without grappler's arithmetic optimizer, which in TF 2.21
    computes ``tf.maximum(x + x, x)`` as the minimum under tf.function (eager TF
    and tfjit agree with each other)."""
    saved = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options(
            {"arithmetic_optimization": saved.get("arithmetic_optimization", True)})


def compare(program, arrays, stats=None) -> list:
    """tfjit vs TF on one program: a list of problems (empty when they match)."""
    inputs = [tf.constant(a) for a in arrays]
    fn = rg.build(program)
    try:
        with grappler_without_arithmetic_optimizer():
            expected = tf.function(fn, autograph=False)(*inputs)
    except Exception as e:      # a generator bug, not a tfjit one: report it all the same
        return [f"TF itself rejected the program: {type(e).__name__}: {e}"]
    try:
        jitted = tfjit.function(fn, jit_compile=True, autograph=False)
        actual = jitted(*inputs)
        compiled = jitted.compiled(*inputs)
        if stats is not None:
            _count_kernels(compiled, stats)
    except Exception:
        return ["tfjit raised:\n" + traceback.format_exc(limit=-8)]
    problems = _round_trip_problems(compiled)
    bounds = rg.error_bounds(program, inputs)
    values = {v.id: v for v in program.values}
    for k, (a, e, bound) in enumerate(zip(actual, expected, bounds)):
        e = e.numpy()
        kw = {"check_zero_sign": values[program.outputs[k]].zero_sign}
        if e.dtype.kind == "f":
            default_atol = TOLERANCE[e.dtype.name][1]
            kw["atol"] = np.maximum(default_atol, rg.SAFETY * bound) if bound.any() else default_atol
        try:
            assert_matches(np.asarray(a), e, what=f"output {k} (v{program.outputs[k]})", **kw)
        except AssertionError as err:
            problems.append(f"  {err}")
    return problems


def _round_trip_problems(compiled) -> list:
    """The IR text of the module as lowered and as optimised must survive print ->
    parse -> print unchanged (tfjit-run-module re-runs dumps through the parser)."""
    problems = []
    for stage, text in (("lowered", compiled.module_before), ("optimised", compiled.module_after)):
        try:
            again = module_str(parse_module(text))
        except Exception as e:
            problems.append(f"  the {stage} IR does not parse: {type(e).__name__}: {e}")
            continue
        if again != text:
            first = next(k for k, (a, b) in enumerate(zip(again.splitlines() + [""],
                                                          text.splitlines() + [""])) if a != b)
            problems.append(f"  the {stage} IR changes in print -> parse -> print at line "
                            f"{first + 1}: {text.splitlines()[first:first + 1]} -> "
                            f"{again.splitlines()[first:first + 1]}")
    return problems


def _count_kernels(compiled, stats) -> None:
    """What fusion made of a graph, so a run shows which code paths it exercised."""
    for f in compiled.fusions:
        stats[f"{f.kind} kernels"] += 1
        stats["multi-output kernels"] += len(f.roots) > 1
        stats["kernels with hoisted reductions"] += bool(f.hoisted)
        stats["flat kernels"] += bool(f.flat)
        stats["split reductions"] += f.split > 1
        stats["column reductions"] += bool(getattr(f, "column", False))
        stats["kernels started for users in several kernels"] += any("users are in" in n for n in f.notes)


def check_graph(seed: int, index: int, stats=None) -> str | None:
    """Runs graph ``index``; returns a failure report, or None when tfjit matches TF."""
    program, arrays = generate(seed, index)
    header = f"graph {index} (TFJIT_TEST_SEED={seed} TFJIT_TEST_ONLY={index}):\n{program.describe()}\n"
    with open(CURRENT, "w") as f:
        f.write(header)
    problems = compare(program, arrays, stats)
    return header + "\n".join(problems) if problems else None


def test_random_graphs():
    indices = [int(ONLY)] if ONLY is not None else range(COUNT)
    print(f"\nrandom graphs: TFJIT_TEST_SEED={SEED}, {len(indices)} graphs; "
          f"a crashed run leaves its graph in {CURRENT}")
    start = time.perf_counter()
    failures, stats = [], collections.Counter()
    for i in indices:
        report = check_graph(SEED, i, stats)
        if report:
            failures.append(report)
            if ONLY is not None:
                print(report)
    print(f"random graphs: {len(indices)} graphs in {time.perf_counter() - start:.1f}s, "
          f"{len(failures)} mismatches (seed {SEED})")
    print("random graphs: " + ", ".join(f"{n} {k}" for k, n in sorted(stats.items())))
    if failures:
        pytest.fail(f"{len(failures)} of {len(indices)} random graphs differ from TF "
                    f"(TFJIT_TEST_SEED={SEED}):\n\n" + "\n\n".join(failures), pytrace=False)


# -- the bugs this test found, minimised -------------------------------------------------

def _transposed(x):
    t = tf.transpose(x)
    return tf.reduce_sum(t), t


def _transposed_and_sliced(x):
    t = tf.transpose(x)
    return t[:1] * 2.0, t


_X23 = np.arange(6, dtype=np.float32).reshape(2, 3)
REGRESSIONS = {
    # passes/fusion.py _propagate read the "opaque" marker string as an index tuple
    # (IndexError once a broadcast has rank >= 7: tf.tile of a computed rank-4 value).
    "tile_of_computed_rank4": (lambda x: tf.tile(x * x, [1, 1, 1, 2]),
                               [np.linspace(-1, 1, 6, dtype=np.float32).reshape(1, 2, 1, 3)]),
    # A cheap output (movement of inputs) read by another kernel: codegen/emitter.py
    # loaded it from an output buffer that kernel was never given (KeyError: 2).
    "cheap_output_read_by_a_reduction": (_transposed, [_X23]),
    # A cheap output read by a cheap value: fusion.fuse looked up kernels of its
    # users before checking that it is an output (KeyError: %slice.1).
    "cheap_output_with_cheap_user": (_transposed_and_sliced, [_X23]),
    # Float sums added with 'nsz': LLVM dropped the +0.0 start, so a sum of -0.0s was -0.0.
    "sum_of_negative_zeros": (tf.reduce_sum, [-np.zeros(3, np.float32)]),
    # TF's grappler (arithmetic optimizer) computes this as the minimum; the oracle runs
    # without it (see grappler_without_arithmetic_optimizer).
    "maximum_of_doubled": (lambda x: tf.maximum(x + x, x), [np.array([0.5, -0.5], np.float32)]),
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regression(name):
    fn, arrays = REGRESSIONS[name]
    inputs = [tf.constant(a) for a in arrays]
    with grappler_without_arithmetic_optimizer():
        expected = tf.function(fn, autograph=False)(*inputs)
    actual = tfjit.function(fn, jit_compile=True, autograph=False)(*inputs)
    for k, (a, e) in enumerate(zip(tf.nest.flatten(actual), tf.nest.flatten(expected))):
        assert_matches(a.numpy(), e.numpy(), what=f"{name}: output {k}")


if __name__ == "__main__":      # python tests/test_random_graphs.py SEED INDEX: minimise a failure
    program, arrays = generate(int(sys.argv[1]), int(sys.argv[2]))
    problems = compare(program, arrays)
    print(program.describe() + "\n" + "\n".join(problems))
    if not problems:
        sys.exit("this graph matches TF: nothing to minimise")
    small, small_arrays = rg.minimize(program, arrays, lambda p, a: bool(compare(p, a)))
    print("\nminimised:\n" + small.describe() + "\n" + "\n".join(compare(small, small_arrays)))
    for v, a in zip(small.inputs, small_arrays):
        print(f"v{v.id} = np.array({a.tolist()!r}, np.{a.dtype})")
