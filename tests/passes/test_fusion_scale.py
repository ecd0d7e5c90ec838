"""Fusion's cost and kernel size on a graph of NASNetMobile's shape class (issue 16).

NASNetMobile's train step lowers to 77k instructions and 7541 kernels before
sibling merging; the former merge rescanned every pair of kernels after every
merge, computing each kernel's reads afresh, and ran for more than 30 minutes.
Its Adam updates (952 kernels of one shape, all reading the learning rate) would
then have become one kernel.  These tests build the same shape class small --
cells whose branches read the cell's input (siblings) and feed library calls,
their results concatenated, and many same-shaped optimizer updates sharing a
scalar -- and count work (``fusion.reads`` walks, which every merge decision made)
instead of timing it.  No TensorFlow.
"""
from __future__ import annotations

import pytest

from tfjit import pipeline
from tfjit.ir.parse import parse_module
from tfjit.passes import fusion

ROWS, WIDTH, BRANCHES = 16, 8, 5


def nasnet_like(cells: int, updates: int) -> str:
    """Cells of BRANCHES branches (an elementwise op of the cell's input, a dot, a
    scale) concatenated and projected by a dot; then ``updates`` Adam-like updates
    of [WIDTH] variables that all read one learning rate and one decay."""
    lines, n = [], [0]

    def new(text: str) -> str:
        n[0] += 1
        name = f"%v.{n[0]}"
        lines.append(f"  {name} = {text}")
        return name

    params = []

    def param(shape: str) -> str:
        name = f"%p{len(params)}"
        params.append(f"  {name} = f32[{shape}] parameter({len(params)})")
        return name

    x = param(f"{ROWS},{WIDTH}")
    lr, beta = param(""), param("")
    outputs = []
    for _ in range(cells):
        branches = []
        for k in range(BRANCHES):
            scale = new(f"f32[{ROWS},{WIDTH}] broadcast({param(f'{WIDTH}')}), dims={{1}}")
            act = new(f"f32[{ROWS},{WIDTH}] {('maximum', 'multiply', 'add', 'minimum', 'subtract')[k]}({x}, {scale})")
            d = new(f"f32[{ROWS},{WIDTH}] dot({act}, {param(f'{WIDTH},{WIDTH}')}), transpose_lhs=0, transpose_rhs=0")
            branches.append(new(f"f32[{ROWS},{WIDTH}] multiply({d}, {scale})"))
        cat = new(f"f32[{ROWS},{BRANCHES * WIDTH}] concatenate({', '.join(branches)}), dim=1")
        x = new(f"f32[{ROWS},{WIDTH}] dot({cat}, {param(f'{BRANCHES * WIDTH},{WIDTH}')}), "
                "transpose_lhs=0, transpose_rhs=0")
    outputs.append(x)
    lr_b = new(f"f32[{WIDTH}] broadcast({lr}), dims={{}}")
    beta_b = new(f"f32[{WIDTH}] broadcast({beta}), dims={{}}")
    for _ in range(updates):
        g, m, v, w = (param(f"{WIDTH}") for _ in range(4))
        m2 = new(f"f32[{WIDTH}] add({new(f'f32[{WIDTH}] multiply({m}, {beta_b})')}, {g})")
        v2 = new(f"f32[{WIDTH}] add({v}, {new(f'f32[{WIDTH}] multiply({g}, {g})')})")
        step = new(f"f32[{WIDTH}] divide({m2}, {new(f'f32[{WIDTH}] sqrt({v2})')})")
        w2 = new(f"f32[{WIDTH}] subtract({w}, {new(f'f32[{WIDTH}] multiply({lr_b}, {step})')})")
        outputs += [m2, v2, w2]
    return ("module nasnet_like {\n" + "\n".join(params + lines)
            + f"\n  ROOT ({', '.join(outputs)})\n}}\n")


@pytest.fixture(scope="module")
def optimized():
    """(module before fusion's kernels were made, Optimized, fusion.reads walks)."""
    m = parse_module(nasnet_like(cells=24, updates=300))
    instrs = len(m.instrs)
    calls = [0]
    reads = fusion.reads
    bound = 20 * instrs     # the former merge walked ~10^7 times on this graph

    def counted(f):
        calls[0] += 1
        if calls[0] > bound:
            raise AssertionError(f"fusion walked kernels' reads more than {bound} times "
                                 f"for {instrs} instructions")
        return reads(f)
    fusion.reads = counted
    try:
        o = pipeline.optimize(m, pipeline.Options(verify=True))
    finally:
        fusion.reads = reads
    return instrs, o, calls[0]


def test_fusion_work_grows_with_the_graph_not_with_pairs_of_kernels(optimized):
    instrs, o, calls = optimized
    assert calls <= 20 * instrs, calls


def test_siblings_still_merge_reading_their_input_once(optimized):
    _, o, _ = optimized
    # every cell's branches read its input: one multi-output kernel per cell computes
    # the operands of its BRANCHES dots
    multi = [f for f in o.fusions if f.kind == "loop" and len(f.roots) == BRANCHES
             and f.shape == (ROWS, WIDTH)]
    assert len(multi) == 24, [(f.name, len(f.roots)) for f in o.fusions if f.kind == "loop"][:10]


def test_a_merged_kernel_reads_and_writes_at_most_the_bound(optimized):
    _, o, _ = optimized
    updates = [f for f in o.fusions if f.kind == "loop" and f.shape == (WIDTH,)]
    sizes = [len(fusion.reads(f)) + len(f.roots) for f in updates]
    assert max(sizes) <= fusion.MAX_OPERANDS_AND_OUTPUTS, sizes
    # the 300 updates (900 outputs) still merge into a few kernels, not 300 nor one
    assert 900 // fusion.MAX_OPERANDS_AND_OUTPUTS <= len(updates) <= 300 // 4, len(updates)
    assert any(f"(at most {fusion.MAX_OPERANDS_AND_OUTPUTS})" in note
               for f in updates for note in f.notes)
