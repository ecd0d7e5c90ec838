"""Stencil loop kernels computing neighbouring outputs together (codegen/stencil.py):
depthwise convolutions and pools whose window taps are slices of one input along W.

Which kernels are blocked and by how much (the width's largest divisor of 4, 3, 2;
none for a prime width or a 2-tap window), the results against TF's executor at
widths that each block size divides, strides 1 and 2, SAME and VALID, channel counts
that are not a vector's multiple, and the blocked code against the same module
compiled row by row, bit for bit on special values (NaN payloads aside).
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit import pipeline
from tfjit.codegen import stencil
from tfjit.ir.parse import parse_module
from tfjit.runtime import host


def _depthwise(k, s, padding):
    return lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, s, s, 1], padding)


def _blocks(fn, *args) -> list:
    """The block each kernel got, from its notes (1: row by row)."""
    out = []
    for f in tfjit.function(fn, jit_compile=True).compiled(*args).fusions:
        notes = [n for n in f.notes if "neighbouring outputs" in n]
        out.append(int(notes[0].split(": ")[1].split()[0]) if notes else 1)
    return out


@pytest.mark.parametrize("width,block", [(48, 4), (45, 3), (46, 2), (47, 1), (4, 2)])
def test_the_block_is_the_widths_largest_divisor_of_4_3_2(width, block, rng):
    x = tf.constant(rng.standard_normal((2, 6, width, 16), dtype=np.float32))
    w = tf.constant(rng.standard_normal((3, 3, 16, 1), dtype=np.float32))
    assert _blocks(_depthwise(3, 1, "SAME"), x, w) == [block]


def test_windows_of_two_taps_and_plain_elementwise_kernels_run_row_by_row(rng):
    x = tf.constant(rng.standard_normal((2, 8, 16, 16), dtype=np.float32))
    assert _blocks(lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"), x) == [1]
    assert _blocks(lambda x: tf.nn.max_pool2d(x, 3, 2, "SAME"), x) == [4]
    assert _blocks(lambda x: tf.nn.relu(x) * 2.0, x) == [1]


CASES = [  # (x shape, k, stride, padding, multiplier)
    ((2, 9, 48, 32), 5, 1, "SAME", 1),
    ((2, 9, 48, 32), 5, 2, "SAME", 1),
    ((1, 8, 45, 35), 3, 1, "SAME", 1),     # width 45: blocks of 3; 35 channels: a vector tail
    ((1, 7, 26, 3), 3, 2, "VALID", 1),     # 12 outputs wide, 3 channels (no vector)
    ((2, 6, 18, 8), 5, 1, "VALID", 2),     # channel multiplier 2
    ((1, 5, 7, 16), 3, 1, "SAME", 1),      # a prime width: row by row
]


@pytest.mark.parametrize("shape,k,s,padding,mult", CASES)
def test_blocked_depthwise_convolutions_match_tf(shape, k, s, padding, mult, rng):
    x = tf.constant(rng.uniform(-1, 1, shape).astype(np.float32))
    w = tf.constant(rng.uniform(-1, 1, (k, k, shape[-1], mult)).astype(np.float32))
    b = tf.constant(rng.uniform(-1, 1, (shape[-1],)).astype(np.float32))

    def fn(x, w, b):          # a producer recomputed at every tap, as Keras's bias + ReLU
        return tf.nn.depthwise_conv2d(tf.nn.relu(x + b), w, [1, s, s, 1], padding)
    got = tfjit.function(fn, jit_compile=True)(x, w, b).numpy()
    assert_matches(got, tf.function(fn)(x, w, b).numpy(), rtol=1e-5, atol=1e-5)


def test_blocked_pools_match_tf(rng):
    x = tf.constant(rng.standard_normal((2, 9, 24, 19), dtype=np.float32))
    for fn in (lambda x: tf.nn.max_pool2d(x, 3, 1, "SAME"),
               lambda x: tf.nn.avg_pool2d(x, 3, 2, "SAME")):
        assert_matches(tfjit.function(fn, jit_compile=True)(x).numpy(), tf.function(fn)(x).numpy())


def test_blocked_code_computes_the_bits_of_the_row_by_row_code(rng, monkeypatch):
    x = rng.standard_normal((2, 6, 24, 20)).astype(np.float32)
    x.reshape(-1)[::13] = np.nan
    x.reshape(-1)[5::17] = np.inf
    x.reshape(-1)[7::19] = -0.0
    w = rng.standard_normal((5, 5, 20, 1)).astype(np.float32)
    text = tfjit.function(_depthwise(5, 1, "SAME"), jit_compile=True).compiled(
        tf.constant(x), tf.constant(w)).module_before
    blocked = pipeline.compile_module(parse_module(text), "blocked")
    assert any("4 neighbouring outputs" in n for f in blocked.fusions for n in f.notes)
    monkeypatch.setattr(stencil, "block_of", lambda f: 1)
    rows = pipeline.compile_module(parse_module(text), "rows")
    got = np.asarray(host.run_compiled(blocked, [x, w])[0])
    want = np.asarray(host.run_compiled(rows, [x, w])[0])
    # NaN's sign and payload aside (LLVM may commute an add of two NaNs), bit for bit
    assert np.array_equal(np.isnan(got), np.isnan(want))
    real = ~np.isnan(want)
    assert np.array_equal(got[real].view(np.uint32), want[real].view(np.uint32))
