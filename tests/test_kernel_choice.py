"""Which of TF's kernels a library call runs where TF runs oneDNN (codegen/library.py
``tf_kernel``), and that each choice computes what TF's executor computes.

On CPUs where TF turns oneDNN on by itself, a call with few output positions (small
batch x spatial size: InceptionV3's late 1x1 convolutions at batch 4) is timed over its
first calls instead of taking oneDNN's kernel untimed, because oneDNN's per-call filter
reorder can cost more than the convolution; a call with at least
``ONEDNN_SURE_POSITIONS`` positions keeps oneDNN's.  The tests run with oneDNN off
(conftest.py), so the oneDNN machine is stood in for by ``settings.onednn_enabled``;
the oracle is TF's executor with its default kernels, within f32 tolerance.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit import settings
from tfjit.codegen import library
from tfjit.runtime import launch

SURE = library.ONEDNN_SURE_POSITIONS
# The CPUs this process may run on, which TF sizes its intra-op pool by (parts and
# concurrent groups need two threads).
CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _conv(strides, padding):
    return lambda x, w: tf.nn.conv2d(x, w, strides, padding)


def _conv_grads(strides, padding):
    """The forward convolution and both its gradients (Conv2DBackpropInput/Filter)."""
    def f(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = tf.nn.conv2d(x, w, strides, padding)
            loss = tf.reduce_sum(y * y)
        return (y, *tape.gradient(loss, [x, w]))
    return f


def _depthwise_grads(x, w):
    with tf.GradientTape() as tape:
        tape.watch([x, w])
        loss = tf.reduce_sum(tf.square(tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME")))
    return tape.gradient(loss, [x, w])


# (id, function, operand shapes, {library op spelling: "measured" | "oneDNN"})
CASES = [
    # InceptionV3's last 1x1 convolution at batch 4: 4 positions (oneDNN 8x slower)
    ("1x1-4-positions", _conv(1, "VALID"), ((4, 1, 1, 96), (1, 1, 96, 40)),
     {"convolution": "measured"}),
    ("1-position-prime-channels", _conv(1, "SAME"), ((1, 1, 1, 13), (3, 3, 13, 7)),
     {"convolution": "measured"}),
    ("3x3-stride-2-valid", _conv(2, "VALID"), ((4, 9, 9, 24), (3, 3, 24, 16)),
     {"convolution": "measured"}),
    ("1x7-same", _conv(1, "SAME"), ((4, 4, 4, 16), (1, 7, 16, 12)), {"convolution": "measured"}),
    # one position short of the bound, and the bound itself (2 x 64 x 64 = 8192)
    ("just-under-the-bound", _conv(1, "SAME"), ((1, 91, 90, 3), (3, 3, 3, 5)),
     {"convolution": "measured"}),
    ("at-the-bound", _conv(1, "SAME"), ((2, 64, 64, 3), (3, 3, 3, 5)),
     {"convolution": "oneDNN"}),
    ("stride-2-above-the-bound", _conv(2, "SAME"), ((4, 96, 96, 3), (3, 3, 3, 8)),
     {"convolution": "oneDNN"}),
    # gradients: their positions are the forward output's (the gradient operand's)
    ("grads-few-positions", _conv_grads(1, "SAME"), ((2, 5, 5, 6), (3, 3, 6, 4)),
     {"convolution": "measured", "convolution-backprop-input": "measured",
      "convolution-backprop-filter": "measured"}),
    ("grads-above-the-bound", _conv_grads(1, "SAME"), ((2, 64, 65, 2), (3, 3, 2, 3)),
     {"convolution": "oneDNN", "convolution-backprop-input": "oneDNN",
      "convolution-backprop-filter": "oneDNN"}),
    ("depthwise-grads", _depthwise_grads, ((2, 7, 7, 5), (3, 3, 5, 1)),
     {"depthwise-backprop-input": "measured", "depthwise-backprop-filter": "measured"}),
    # a dot's positions are its output rows
    ("dot-few-rows", tf.matmul, ((3, 70), (70, 5)), {"dot": "measured"}),
    ("dot-many-rows", tf.matmul, ((SURE, 8), (8, 3)), {"dot": "oneDNN"}),
]


@pytest.mark.parametrize("fn,shapes,kernels", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_onednn_cpu_times_small_calls_and_matches_tensorflow(fn, shapes, kernels, monkeypatch):
    monkeypatch.setattr(settings, "onednn_enabled", lambda: True)
    rng = np.random.default_rng(sum(map(sum, shapes)))
    xs = [tf.constant(rng.standard_normal(s, dtype=np.float32)) for s in shapes]
    jit = tfjit.function(fn, jit_compile=True)
    fusions = jit.compiled(*xs).fusions
    notes = {f.roots[0].op.spelling: f.notes[-1] for f in fusions if f.kind == "library"}
    assert set(notes) == set(kernels), notes
    for op, kernel in kernels.items():
        assert notes[op].startswith(f"runs TF's {kernel} "), (op, notes[op])
    want = tf.nest.flatten(tf.function(fn)(*xs))
    for call in range(MEASURING_CALLS):      # the measured calls' kernels change in these
        for k, (g, w) in enumerate(zip(tf.nest.flatten(jit(*xs)), want)):
            scale = max(1.0, float(np.max(np.abs(w.numpy()))))     # sums of many products
            assert_matches(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5 * scale,
                           what=f"call {call}, output {k}")


# Calls until a measured choice is made, at most: an untimed warm-up run of each of
# the three kernels (default, oneDNN, split), then three timed runs of each
# (kernel_choice.cc's kRounds).
MEASURING_CALLS = 12


def _choice(rows: int):
    return [v for k, v in launch.kernel_choices().items() if k.startswith("MatMul/") and f"[{rows},37]" in k]


def test_the_measuring_is_spread_over_the_first_calls(monkeypatch):
    """Each call runs the op once, one kernel a call, so the choice is made only after
    both kernels have run and been timed; every call's result is TF's."""
    monkeypatch.setattr(settings, "onednn_enabled", lambda: True)
    rng = np.random.default_rng(5)
    rows = 23                                   # a shape no other test uses
    x, w = (tf.constant(rng.standard_normal(s, dtype=np.float32)) for s in ((rows, 37), (37, 11)))
    jit = tfjit.function(tf.matmul, jit_compile=True)
    want = tf.matmul(x, w).numpy()
    calls = 0
    for calls in range(1, MEASURING_CALLS + 1):
        assert_matches(jit(x, w).numpy(), want, rtol=1e-5, atol=1e-5, what=f"call {calls}")
        if calls <= 3:      # two untimed warm-ups and one timed run: nothing to compare yet
            assert _choice(rows) == [], (calls, _choice(rows))
        if _choice(rows):
            break
    # 23 rows of 37 floats cannot be cut where both halves start 64-byte aligned, so
    # running in parts is no candidate here
    ((kernel, default_us, onednn_us, split_us),) = _choice(rows)
    assert split_us is None
    assert calls >= 4 and default_us > 0 and onednn_us > 0, (calls, default_us, onednn_us)
    assert kernel == ("oneDNN" if onednn_us < default_us else "default")
    assert_matches(jit(x, w).numpy(), want, rtol=1e-5, atol=1e-5, what="after the choice")


def test_without_onednn_every_f32_call_is_measured_and_the_reason_says_why(monkeypatch):
    # shapes no other test compiles: the process-wide compile cache is keyed by the
    # cluster, not by the oneDNN flag (which is constant in a process but for tests)
    monkeypatch.setattr(settings, "onednn_enabled", lambda: False)
    x = tf.ones([2, 64, 66, 3])
    fusions = tfjit.function(_conv(1, "SAME")).compiled(x, tf.ones([3, 3, 3, 5])).fusions
    (note,) = [f.notes[-1] for f in fusions if f.kind == "library"]
    assert note == ("runs TF's measured Conv2D kernel: the fastest of TF's default and oneDNN "
                    "kernels and the default one run in parts side by side (where the call "
                    "divides), timed over its first calls")
    monkeypatch.setattr(settings, "onednn_enabled", lambda: True)
    fusions = tfjit.function(_conv(1, "SAME")).compiled(x[:1, :4], tf.ones([3, 3, 3, 5])).fusions
    (note,) = [f.notes[-1] for f in fusions if f.kind == "library"]
    assert "filter reorder can cost more than the convolution" in note, note


# Calls that divide into independent rows, and where their parts start (kernel_choice
# runs a measured call's default kernel in parts side by side as a third candidate):
# part boundaries must be 64-byte aligned in the divided operand and the result.
# (id, function, operand shapes, the measured call's key starts with, and contains)
PARTS_CASES = [
    # a 1x1 convolution divides into positions: 105 of 16 floats in, 24 out (rows of 96
    # bytes: parts start at even positions)
    ("1x1-positions", _conv(1, "VALID"), ((3, 5, 7, 16), (1, 1, 16, 24)), "Conv2D/", "[3,5,7,16]"),
    # any other convolution into its images: an odd batch gives unequal parts
    ("3x3-odd-batch", _conv(1, "SAME"), ((3, 6, 6, 8), (3, 3, 8, 8)), "Conv2D/", "[3,6,6,8]"),
    ("3x3-stride-2-valid", _conv(2, "VALID"), ((4, 9, 9, 16), (3, 3, 16, 16)), "Conv2D/",
     "[4,9,9,16]"),
    # a matrix product into its rows: 45 rows, results of 20 floats (parts of 4k rows)
    ("dot-rows", tf.matmul, ((45, 32), (32, 20)), "MatMul/", "[45,32]"),
    # a batched product whose rhs is one matrix (a dense layer on [B, T, K]) into its
    # B * T rows: 15 rows, results of 20 floats (parts of 4k rows)
    ("batched-dot-rows", tf.matmul, ((3, 5, 32), (32, 20)), "BatchMatMulV2/", "[3,5,32] [1,32,20]"),
    # any other batched product into its matrices, each batched operand divided: both
    # batched, lhs transposed, lhs broadcast against a batch of rhs
    ("batched-dot-matrices", tf.matmul, ((4, 6, 16), (4, 16, 8)), "BatchMatMulV2/",
     "[4,6,16] [4,16,8]"),
    ("batched-dot-adjoint-lhs", lambda a, b: tf.matmul(a, b, transpose_a=True),
     ((5, 16, 6), (5, 16, 8)), "BatchMatMulV2/float/10", "[5,16,6] [5,16,8]"),
    ("batched-dot-broadcast-lhs", tf.matmul, ((1, 6, 16), (3, 16, 16)), "BatchMatMulV2/",
     "[1,6,16] [3,16,16]"),
    # the gradient of a convolution's input, through the gradient operand, with the
    # input_sizes operand of each part its own
    ("grad-input-images", _conv_grads(2, "SAME"), ((3, 7, 7, 16), (3, 3, 16, 16)),
     "Conv2DBackpropInput/", "sizes3,7,7,16"),
    ("grad-input-1x1-positions", _conv_grads(1, "VALID"), ((2, 5, 3, 16), (1, 1, 16, 32)),
     "Conv2DBackpropInput/", "sizes2,5,3,16"),
]


@pytest.mark.skipif(CPUS < 2, reason="one thread: no parts")
@pytest.mark.parametrize("fn,shapes,op,fragment", [c[1:] for c in PARTS_CASES],
                         ids=[c[0] for c in PARTS_CASES])
def test_calls_that_divide_are_timed_in_parts_and_match_tensorflow(fn, shapes, op, fragment,
                                                                   monkeypatch):
    monkeypatch.setattr(settings, "onednn_enabled", lambda: True)
    rng = np.random.default_rng(sum(map(sum, shapes)) + 1)
    xs = [tf.constant(rng.standard_normal(s, dtype=np.float32)) for s in shapes]
    jit = tfjit.function(fn, jit_compile=True)
    want = [w.numpy() for w in tf.nest.flatten(tf.function(fn)(*xs))]
    for call in range(MEASURING_CALLS + 1):     # every kernel runs, split from the third
        for k, (g, w) in enumerate(zip(tf.nest.flatten(jit(*xs)), want)):
            scale = max(1.0, float(np.max(np.abs(w))))     # sums of many products
            assert_matches(g.numpy(), w, rtol=1e-4, atol=1e-5 * scale,
                           what=f"call {call}, output {k}")
    (choice,) = [v for k, v in launch.kernel_choices().items()
                 if k.startswith(op) and fragment in k and k.endswith(" in parts")]
    kernel, default_us, onednn_us, split_us = choice
    assert split_us is not None and split_us > 0, choice      # it ran, and was timed
    times = {"default": default_us, "oneDNN": onednn_us, "split": split_us}
    assert kernel == min((t, k) for k, t in times.items() if t > 0)[1], choice


@pytest.mark.skipif(CPUS < 2, reason="one thread: no groups")
def test_calls_in_a_concurrent_group_run_whole_and_are_chosen_apart(rng, monkeypatch):
    """A task of a concurrent group runs on one thread (parallel.cc RunGroup): its calls
    never run in parts, and their choice is kept apart from the same call's outside a
    group (which may run in parts)."""
    from test_concurrent_groups import grouped_steps, inception_block
    monkeypatch.setattr(settings, "onednn_enabled", lambda: True)
    c = 40                                   # channel counts no other test uses
    shapes = [(1, 1, c, 24), (1, 1, c, 40), (3, 3, 40, 56), (1, 1, c, 40), (3, 3, 40, 56),
              (3, 3, 56, 56), (1, 1, c, 24)]
    filters = [tf.constant(rng.standard_normal(s).astype(np.float32) * 0.1) for s in shapes]
    x = tf.constant(rng.standard_normal((4, 11, 11, c)).astype(np.float32))
    f = lambda v: inception_block(v, filters)
    g = tfjit.function(f, jit_compile=True)
    assert grouped_steps(g.compiled(x)), "no concurrent group: the test checks nothing"
    want = tf.function(f)(x)
    for call in range(MEASURING_CALLS + 1):
        assert_matches(g(x), want, rtol=1e-4, atol=1e-5, what=f"call {call}")
    # the branches' 3x3 convolutions run inside the group's tasks (the 1x1 ones that
    # read x may be merged into one convolution ahead of the group)
    grouped = {k: v for k, v in launch.kernel_choices().items()
               if k.startswith("Conv2D/") and ("[3,3,40,56]" in k or "[3,3,56,56]" in k)}
    assert grouped, launch.kernel_choices()
    for key, (kernel, *_, split_us) in grouped.items():
        assert not key.endswith(" in parts") and split_us is None and kernel != "split", key
