"""tfjit.kernel_profile: per-kernel time from the launch op (api/kernel_profile.py)."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

import tfjit


def _function():
    rng = np.random.default_rng(0)
    a = tf.constant(rng.standard_normal((96, 64)).astype(np.float32))
    w = tf.constant(rng.standard_normal((64, 32)).astype(np.float32))
    f = tfjit.function(lambda a, w: tf.reduce_sum(tf.nn.relu(tf.matmul(a, w) + 1.0), 1),
                       jit_compile=True)
    return f, a, w


def test_profile_counts_each_step_of_each_run():
    f, a, w = _function()
    want = tf.reduce_sum(tf.nn.relu(tf.matmul(a, w) + 1.0), 1)
    f(a, w)                                   # compiled outside the block
    with tfjit.kernel_profile() as profile:
        for _ in range(7):
            np.testing.assert_allclose(f(a, w), want, rtol=1e-5)
    kernels = profile.kernels
    assert [k.runs for k in kernels] == [7] * len(kernels) and len(kernels) >= 2, kernels
    assert all(k.seconds > 0 and k.cluster != "?" for k in kernels), kernels
    whats = [k.what for k in sorted(kernels, key=lambda k: k.step)]
    assert whats[0].startswith("library dot") and "TF's MatMul" in whats[0], whats
    assert any(w.startswith("reduce ") and "f32[96]" in w for w in whats), whats
    table = profile.table().splitlines()
    assert table[0].startswith("| cluster | step | kernel |") and len(table) == 2 + len(kernels)
    assert abs(profile.seconds - sum(k.seconds for k in kernels)) < 1e-12


def test_profile_is_off_outside_the_block():
    f, a, w = _function()
    with tfjit.kernel_profile() as first:
        f(a, w)
    for _ in range(3):
        f(a, w)                               # not timed
    with tfjit.kernel_profile() as empty:
        pass
    assert first.kernels and not empty.kernels
    with tfjit.kernel_profile() as again:     # a new block starts from zero
        f(a, w)
    assert [k.runs for k in again.kernels] == [1] * len(again.kernels)


def test_a_concurrent_group_is_one_row_naming_its_kernels():
    """The op times a concurrent group as its first step: that row names the others."""
    rng = np.random.default_rng(1)
    x = tf.constant(rng.standard_normal((64, 128)).astype(np.float32))
    ws = [tf.constant(rng.standard_normal((128, 128)).astype(np.float32)) for _ in range(3)]
    f = tfjit.function(lambda v: tf.concat([tf.matmul(tf.tanh(v * float(k + 1)), w)
                                            for k, w in enumerate(ws)], 1), jit_compile=True)
    marks = f.compiled(x).executable.marks()
    first = next(s for s, (group, _) in enumerate(marks) if group > 1)
    with tfjit.kernel_profile() as profile:
        f(x)
    (row,) = [k for k in profile.kernels if k.step == first]
    assert "[run at once with: " in row.what and row.what.count("library dot") == 3, row.what
    assert not any(k.step in range(first + 1, first + marks[first][0]) for k in profile.kernels)
