"""Loop kernels with short rows, and kernels written over their input, against TF's
executor.

- Rows of more than ``SHORT_ROW`` elements (or ``ACROSS_ROW_BYTES``) keep LLVM from
  vectorising across rows (codegen/emitter.py ``_long_element_rows``): after it unrolled
  a row of 12 or 16 floats it did so with gathers and scatters, 3-4x slower.
- A loop kernel writes its result over a temp it reads only at the index it writes
  and that nothing reads later (passes/buffers.py ``overwritable``): not over one read
  later or at another index, not over a parameter (a loop body's invariant is the
  caller's temp, read again by the next iteration), not where the result is an output.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit import pipeline
from tfjit.codegen import llvm_cpu
from tfjit.codegen.elemental import MESSAGES


def _compiled(f, *args):
    return tfjit.function(f, jit_compile=True).compiled(*args)


def _check(f, *args):
    got = tfjit.function(f, jit_compile=True)(*args)
    assert_matches(np.asarray(got), np.asarray(tf.function(f)(*args)))


def _special(x: np.ndarray) -> np.ndarray:
    """x with NaN, infinities and signed zeros in its first elements."""
    flat = x.reshape(-1)
    flat[:6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, -1.0]
    return x


# -- rows and the row loop ------------------------------------------------------------

CASES = [(np.float32, w) for w in (1, 3, 8, 12, 16, 17, 24, 64)] + \
        [(np.float64, w) for w in (4, 8, 16)]


@pytest.mark.parametrize("dtype,width", CASES, ids=[f"{np.dtype(d).name}-{w}" for d, w in CASES])
def test_bias_and_relu_on_rows_of_every_width(rng, dtype, width):
    x = tf.constant(_special(rng.standard_normal((67, width)).astype(dtype)))   # 67: prime
    b = tf.constant(rng.standard_normal(width).astype(dtype))
    _check(lambda x, b: tf.nn.relu(x + b) * 2.0, x, b)


def _emitted(f, *args) -> str:
    c = _compiled(f, *args)
    module, _ = llvm_cpu.emit_module("rows", c.fusions, c.plan, list(MESSAGES),
                                     pipeline.jit_target())
    return str(module)


def test_long_rows_are_not_vectorised_across_rows(rng):
    def f(x, b):
        return tf.nn.relu(x + b)
    no_vectorize = re.compile(r'"llvm\.loop\.vectorize\.enable", i1 (0|false)')
    args16 = [tf.constant(rng.standard_normal(s).astype(np.float32)) for s in ((4096, 16), (16,))]
    args8 = [tf.constant(rng.standard_normal(s).astype(np.float32)) for s in ((4096, 8), (8,))]
    assert no_vectorize.search(_emitted(f, *args16))
    assert not no_vectorize.search(_emitted(f, *args8))    # 32 bytes: shuffles, kept
    asm = tfjit.function(f, jit_compile=True).experimental_get_compiler_ir(*args16)(stage="asm")
    assert not re.search(r"\bv(p?gather|p?scatter)", asm)


# -- a kernel written over its input ---------------------------------------------------

def _slots(c, name_of_op: str):
    """The slots of the first kernel root whose instruction is ``name_of_op``, and of the
    values that kernel reads."""
    from tfjit.passes import kernel_order
    for f in c.fusions:
        for r in f.roots:
            if r.op.value == name_of_op or r.name.startswith(name_of_op):
                return c.plan.slots[r], {x.name: c.plan.slots.get(x) for x in kernel_order.reads(f)}, f
    raise AssertionError(f"no kernel root {name_of_op}")


def _args(rng, n=48, k=32, m=16):
    return [tf.constant(rng.standard_normal(s).astype(np.float32))
            for s in ((n, k), (k, m), (m,), (m, 8))]


def test_a_kernel_writes_over_its_dead_input(rng):
    def f(a, w, b, w2):
        return tf.matmul(tf.nn.relu(tf.matmul(a, w) + b), w2)
    args = _args(rng)
    _check(f, *args)
    written, read, kernel = _slots(_compiled(f, *args), "maximum")
    dot = [name for name in read if name.startswith("dot")]
    assert dot and read[dot[0]] == written, (written, read)
    assert any("is written over" in n for n in kernel.notes), kernel.notes


@pytest.mark.parametrize("case", ["read later", "another index", "a parameter", "an output"])
def test_no_kernel_writes_over_a_live_or_foreign_input(rng, case):
    def f(a, w, b, w2):
        h = tf.matmul(a, w)
        if case == "read later":
            return tf.matmul(tf.nn.relu(h + b), w2) + tf.reduce_sum(h)
        if case == "another index":
            return tf.matmul(tf.nn.relu(h + tf.reverse(h, [0]) + b), w2)
        if case == "a parameter":
            return tf.matmul(tf.nn.relu(a * 2.0), w)
        return tf.nn.relu(h + b)
    args = _args(rng)
    _check(f, *args)
    written, read, kernel = _slots(_compiled(f, *args), "maximum")
    assert all(slots != written for slots in read.values() if slots), (written, read)
    assert not any("is written over" in n for n in kernel.notes), kernel.notes


def test_a_loop_body_leaves_its_state_alone(rng):
    # The loop state acc lives in one buffer that the body updates in place (its next
    # value is the product's); the ReLU kernel reads it at the index it writes, as its
    # last reader in the body, but a body's parameter is not written over: the product
    # would then read and write that one buffer (with K = 1024 its kernel reads the
    # input's rows again after writing partial results).
    w3 = tf.constant(rng.standard_normal((1024, 1024)).astype(np.float32) / 32)
    a = tf.constant(rng.standard_normal((64, 1024)).astype(np.float32))
    b = tf.constant(rng.standard_normal(1024).astype(np.float32))

    def f(a, b):
        n = tf.cast(a[0, 0] * 0.0, tf.int32) + 3     # a trip count the compiler cannot see
        _, acc = tf.while_loop(lambda i, acc: i < n, lambda i, acc: (
            i + 1, tf.matmul(tf.nn.relu(acc + b), w3)), (0, a * 2.0))
        return acc * 0.5
    got = tfjit.function(f, jit_compile=True)(a, b)
    assert_matches(np.asarray(got), np.asarray(tf.function(f)(a, b)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(4, 6, 5), (1, 1, 7), (3, 17, 2)])
def test_a_stack_update_reads_a_reshaped_value_in_place(rng, shape):
    """A TensorArray written in a loop (what Keras's recurrent layers save for their
    gradient): the update kernel reads the step's value through the reshape, with no
    copy kernel of its own (passes/fusion.py ``_update_reading_reshape``)."""
    x = tf.constant(rng.standard_normal(shape).astype(np.float32))

    def f(x):
        ta = tf.TensorArray(tf.float32, size=5)
        h = x
        for t in tf.range(5):
            h = tf.tanh(h * 0.9 + tf.cast(t, tf.float32))
            ta = ta.write(t, tf.reshape(h, (-1,)))
        return ta.stack(), h
    def notes(fusions):
        return [n for fu in fusions for n in fu.notes + [m for c in fu.called for m in notes(c)]]
    text = "\n".join(notes(_compiled(f, x).fusions))
    assert "is read in place by" in text, text
    assert "starts a loop kernel: it is an operand of %dynamic" not in text, text
    got, want = tfjit.function(f, jit_compile=True)(x), tf.function(f)(x)
    for g, w in zip(got, want):
        assert_matches(g.numpy(), w.numpy(), rtol=1e-6, atol=1e-6)
