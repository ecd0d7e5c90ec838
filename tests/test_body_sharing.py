"""Kernels of repeated blocks share one body, found by key before emitting
(codegen/body_sharing.py): right results against TF, fewer bodies, and no sharing
where the code differs (constants, shapes, a constant table, an error's node).

The rest of the suite runs with --tfjit_verify_ir, which emits every body anyway and
fails a compile whose key matched different code; these tests turn it off, so the
wrapper-only path is what runs here."""
import re

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from tfjit import pipeline
from tfjit.codegen import body_sharing, llvm_cpu
from tfjit.codegen.elemental import MESSAGES

from oracle import assert_matches


@pytest.fixture(params=[False, True], ids=["by-key", "verified"])
def verify(request, flags):
    flags.tfjit_verify_ir = request.param
    return request.param


def _blocks(scales, shift_tables=None, width=96):
    """A chain of dense, layer-norm and GELU blocks over [rows, width], one weight each
    (the products are library calls, so each block is kernels of its own)."""
    def f(x, *ws):
        for k, w in enumerate(ws):
            h = tf.matmul(x, w) + scales[k]
            if shift_tables is not None:
                h = h + tf.constant(shift_tables[k])
            mean = tf.reduce_mean(h, -1, keepdims=True)
            var = tf.reduce_mean(tf.square(h - mean), -1, keepdims=True)
            x = x + tf.nn.gelu((h - mean) * tf.math.rsqrt(var + 1e-5))
        return x
    return f


def _compiled(f, *args):
    return tfjit.function(f, jit_compile=True).compiled(*args)


def _bodies(f, *args) -> tuple:
    """(kernels, body functions) of ``f``'s module as emitted for this CPU."""
    c = _compiled(f, *args)
    module, _ = llvm_cpu.emit_module("sharing", c.fusions, c.plan, list(MESSAGES),
                                     pipeline.jit_target())
    bodies = [g for g in module.globals.values()
              if re.search(r"\.body$", getattr(g, "name", "")) and g.blocks]
    return len(c.fusions), len(bodies)


def _args(rng, n, rows=64, width=96):
    x = tf.constant(rng.standard_normal((rows, width), dtype=np.float32))
    return [x] + [tf.constant(rng.standard_normal((width, width), dtype=np.float32) / 10)
                  for _ in range(n)]


def test_repeated_blocks_share_bodies(rng, verify):
    f = _blocks([0.5] * 6)
    args = _args(rng, 6)
    assert_matches(tfjit.function(f, jit_compile=True)(*args), tf.function(f)(*args))
    kernels, bodies = _bodies(f, *args)
    # the first block reads the input, the later ones write over the previous block's
    # result (passes/buffers.py overwritable), the last writes the output (another slot
    # order each): three bodies for six blocks
    assert (kernels, bodies) == (12, 3)
    assert _bodies(_blocks([0.5] * 3), *args[:4]) == (6, 3)


def test_scalar_constants_keep_their_own_bodies(rng, verify):
    f, same = _blocks([0.5, 1.5, -2.0, 3.25]), _blocks([0.5] * 4)
    args = _args(rng, 4)
    assert_matches(tfjit.function(f, jit_compile=True)(*args), tf.function(f)(*args))
    assert _bodies(f, *args)[1] > _bodies(same, *args)[1]


def test_constant_tables_differ_per_block(rng, verify):
    tables = [rng.standard_normal(96).astype(np.float32) for _ in range(3)]
    f = _blocks([0.5] * 3, tables)
    args = _args(rng, 3)
    assert_matches(tfjit.function(f, jit_compile=True)(*args), tf.function(f)(*args))


def test_shapes_differ(rng, verify):
    def f(a, b, wa, wb):
        return _blocks([0.5])(a, wa), _blocks([0.5])(b, wb)
    a, wa = _args(rng, 1, rows=64)
    b, wb = _args(rng, 1, rows=65)
    for got, want in zip(tfjit.function(f, jit_compile=True)(a, b, wa, wb),
                         tf.function(f)(a, b, wa, wb)):
        assert_matches(got, want)


def test_kernels_that_report_errors(verify):
    """Integer division reports division by zero from whichever block divides by it
    (a body that can report an error is never registered under its key)."""
    def f(x, w, d1, d2):
        a = tf.math.floordiv(tf.cast(tf.matmul(x, w), tf.int32), d1)
        b = tf.math.floordiv(tf.cast(tf.matmul(tf.cast(a, tf.float32), w), tf.int32), d2)
        return b
    x = tf.constant(np.arange(64, dtype=np.float32).reshape(8, 8))
    w = tf.constant(np.eye(8, dtype=np.float32) * 3)
    d = tf.constant(np.arange(64, dtype=np.int32).reshape(8, 8) % 7 + 1)
    g = tfjit.function(f, jit_compile=True)
    assert_matches(g(x, w, d, d), tf.function(f)(x, w, d, d))
    with pytest.raises(Exception, match="division by zero"):
        g(x, w, d, tf.zeros([8, 8], tf.int32))


def test_key_describes_code_not_buffers(rng):
    """Blocks that differ in their buffers only get one key (the first, which reads the
    input, and the last, which writes the result, others: the middle ones write over
    their input); a changed scalar constant gives another key."""
    def keys(f, args):
        c = _compiled(f, *args)
        return [body_sharing.body_key(k, c.plan) for k in c.fusions
                if k.kind in body_sharing.KEYED]
    args = _args(rng, 4)
    same = keys(_blocks([0.5] * 4), args)
    assert len(same) == 4 and len(set(same)) == 3 and same[1] == same[2]
    other = keys(_blocks([0.5, 0.5, 0.75, 0.5]), args)
    assert len(set(other)) == 4
