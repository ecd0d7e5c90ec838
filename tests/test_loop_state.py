"""A loop body's state without copies, against TF's executor.

What a recurrent layer's train step does in its loops, each a copy tfjit used to make
(a ConvLSTM2D(64) step: 2 MB a gate a step):

- the gradient loop reads each step's saved activations at the counter minus one, a
  dynamic slice whose start is scalar index arithmetic: recomputed by every kernel
  that reads it (passes/kernels.py ``INDEX_ARITHMETIC``), the window is read in place
  by them all instead of copied once they were two;
- the forward loop saves the current state in a stack and computes the next one: the
  saving kernels run before the one that writes the next state (passes/kernel_order.py
  ``schedule``), so the state is updated in place, not double-buffered;
- a kernel of several roots that writes a carried value's next value where it reads
  the current one updates it in place (passes/buffers.py ``_carried_in_place``);
- stacks started by one (CSE'd) zeros get a broadcast each (passes/copies.py
  ``_own_loop_inits``), written straight into their state, not copied at the loop's
  entry;
- an update in place splits its window into rows (codegen/update.py);
- a convolution or product reads its step's window of a stack in place, at a start it
  computes (passes/library_operands.py ``library_window``), where the window's rows are
  64-byte aligned;
- an update computes a cheap value (zeros) itself rather than reading it from a kernel
  of its own (passes/fusion.py's dense rule).
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit.passes import kernel_order


def _compiled(f, *args):
    return tfjit.function(f, jit_compile=True).compiled(*args)


def _check(f, *args, tol=1e-5):
    got = tf.nest.flatten(tfjit.function(f, jit_compile=True)(*args))
    want = tf.nest.flatten(tf.function(f)(*args))
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_matches(np.asarray(g), np.asarray(w), rtol=tol, atol=tol, what=f"output {k}")


def _loops(compiled) -> list:
    return [f for f in kernel_order.walk(compiled.fusions) if f.kind == "while"]


def _modes(compiled) -> list:
    return [compiled.plan.control[f].modes for f in _loops(compiled)]


@pytest.mark.parametrize("shape", [(6, 4, 8), (3, 1, 1), (5, 7, 3)])
def test_a_slice_at_the_counter_minus_one_is_read_in_place(rng, shape):
    x = tf.constant(rng.standard_normal(shape).astype(np.float32))

    def f(x):
        n = x.shape[0]

        def body(i, a, s):
            step = x[n - 1 - i]                       # a slice at an index computed each step
            return i + 1, a + tf.tanh(step) * 2.0, s + tf.reduce_sum(step * step, 0)
        _, a, s = tf.while_loop(lambda i, a, s: i < n, body,
                                (0, tf.zeros(shape[1:]), tf.zeros(shape[2:])))
        return a, s
    _check(f, x)
    (loop,) = _loops(_compiled(f, x))
    body = loop.called[1]
    roots = [r for g in body for r in g.roots]
    copies = [r for r in roots if r.op.name in ("DYNAMIC_SLICE", "RESHAPE")]   # the window, copied
    assert not copies, [g.notes for g in body]


@pytest.mark.parametrize("units", [1, 5, 16])
def test_the_state_saved_before_its_next_value_is_in_place(rng, units):
    x = tf.constant(rng.standard_normal((4, 3, units)).astype(np.float32))

    def f(x):
        def body(i, h, c, hs, cs):
            hs, cs = hs.write(i, h), cs.write(i, c)        # the current state, saved
            c = tf.sigmoid(x[i]) * c + tf.tanh(x[i] + h)
            return i + 1, tf.tanh(c) * 0.5, c, hs, cs
        z = tf.zeros(x.shape[1:])
        _, h, c, hs, cs = tf.while_loop(lambda i, *_: i < 4, body, (
            0, z + 0.1, z - 0.2, tf.TensorArray(tf.float32, size=4), tf.TensorArray(tf.float32, size=4)))
        return h, c, hs.stack(), cs.stack()
    _check(f, x)
    (modes,) = _modes(_compiled(f, x))
    assert "double-buffered" not in modes, modes


def test_a_kernel_of_several_roots_updates_its_state_in_place(rng):
    x = tf.constant(rng.standard_normal((5, 64)).astype(np.float32))

    def f(x):
        def body(i, a, b):
            t = a * 0.5 + x[i]                  # one kernel: both next values at one index
            return i + 1, t * t, t - b
        _, a, b = tf.while_loop(lambda i, a, b: i < 5, body, (0, x[0] * 0.1, x[1] * 0.2))
        return a, b
    _check(f, x)
    compiled = _compiled(f, x)
    (loop,) = _loops(compiled)
    assert any(len(g.roots) >= 2 for g in loop.called[1]), [g.roots for g in loop.called[1]]
    (modes,) = _modes(compiled)
    assert "double-buffered" not in modes, modes


@pytest.mark.parametrize("size", [1, 6])
def test_stacks_started_by_one_zeros_are_not_copied_in(rng, size):
    x = tf.constant(rng.standard_normal((size, 256)).astype(np.float32))

    def f(x):
        def body(i, h, a, b, c):
            h = tf.tanh(h + x[i])
            return i + 1, h, a.write(i, h), b.write(i, h * 2.0), c.write(i, -h)
        tas = [tf.TensorArray(tf.float32, size=size) for _ in range(3)]
        _, h, a, b, c = tf.while_loop(lambda i, *_: i < size, body, (0, tf.zeros([256]), *tas))
        return h, a.stack(), b.stack(), c.stack()
    _check(f, x)
    compiled = _compiled(f, x)
    (loop,) = _loops(compiled)
    copied = [n for _, _, n in compiled.plan.control[loop].init]
    assert max(copied, default=0) < 256 * 4, copied     # only scalars (the counters) copied


@pytest.mark.parametrize("shape", [(64, 256), (1, 48), (3, 1, 5)])
def test_a_window_updated_in_place_is_split_into_rows(rng, shape):
    """A stack updated in place has nothing to copy first: its window's first dim of more
    than one element is the update kernel's rows (codegen/update.py), which the loop's
    driver shares among threads like any kernel's."""
    x = tf.constant(rng.standard_normal((5, *shape)).astype(np.float32))

    def f(x):
        def body(i, h, ta):
            h = tf.tanh(h * 0.9 + x[i])
            return i + 1, h, ta.write(i, h)
        _, h, ta = tf.while_loop(lambda i, h, ta: i < 5, body,
                                 (0, x[0], tf.TensorArray(tf.float32, size=5)))
        return ta.stack(), h
    _check(f, x)
    compiled = _compiled(f, x)
    (loop,) = _loops(compiled)
    assert loop.called[1] and "double-buffered" not in _modes(compiled)[0]
    (k,) = [n for n, g in enumerate(loop.called[1]) if g.kind == "update"]
    rows = next(n for n in shape if n > 1)
    call = re.search(rf'body\.k{k}"(\(ptr [^,]*, i64 0, i64 (\d+)\)|, ptr [^,]*, i64 (\d+), i64)',
                     compiled.code.llvm_ir)
    assert call is not None and rows in (int(call.group(2) or 0), int(call.group(3) or 0)), call


def _notes(fusions) -> str:
    return "\n".join(n for f in kernel_order.walk(fusions) for n in f.notes)


@pytest.mark.parametrize("shape, in_place", [
    ((5, 4, 6, 6, 16), True),       # [4, 6, 6, 16] windows: rows of 2304 bytes
    ((3, 1, 4, 4, 8), True),
    ((4, 2, 3, 5, 1), False),       # windows of 120 bytes: not 64-byte aligned, copied
])
def test_library_calls_read_windows_of_a_stack_in_place(rng, shape, in_place):
    """A convolution and a product read this step's slice of a stacked input and of
    stacked weights, at the counter and at t - 1 minus it (passes/library_operands.py
    ``library_window``; the call computes the start, codegen/library.py)."""
    t, c = shape[0], shape[-1]
    xs = tf.constant(rng.standard_normal(shape).astype(np.float32))
    ws = tf.constant(rng.standard_normal((t, 3, 3, c, 16)).astype(np.float32) * 0.2)
    ms = tf.constant(rng.standard_normal((t, 16, 16)).astype(np.float32) * 0.2)

    def f(xs, ws, ms):
        def body(i, acc):
            y = tf.nn.conv2d(xs[i], ws[t - 1 - i], 1, "SAME")
            z = tf.reshape(tf.matmul(tf.reshape(y, (-1, 16)), ms[i]), y.shape)
            return i + 1, acc + tf.reduce_sum(z, 0)
        return tf.while_loop(lambda i, acc: i < t, body, (0, tf.zeros(shape[2:4] + (16,))))[1]
    _check(f, xs, ws, ms, tol=1e-4)
    notes = _notes(_compiled(f, xs, ws, ms).fusions)
    windows = notes.count("a window of whole rows of a buffer")
    assert windows == (3 if in_place else 2), notes          # the input's window, or not


@pytest.mark.parametrize("shape", [(64, 32), (1, 7)])
def test_an_update_computes_a_cheap_value_itself(rng, shape):
    """Zeros written into a stack each step (a gradient loop's output sequence) are
    computed by the update kernel, not written by a kernel of their own first."""
    x = tf.constant(rng.standard_normal((4, *shape)).astype(np.float32))

    def f(x):
        def body(i, h, ta, zs):
            h = tf.tanh(h + x[i])
            return i + 1, h, ta.write(i, h), zs.write(i, tf.zeros(shape) + 0.5)
        _, h, ta, zs = tf.while_loop(lambda i, *_: i < 4, body, (
            0, x[0], tf.TensorArray(tf.float32, size=4), tf.TensorArray(tf.float32, size=4)))
        return h, ta.stack(), zs.stack()
    _check(f, x)
    (loop,) = _loops(_compiled(f, x))
    roots = [r for g in loop.called[1] for r in g.roots]
    assert not [r for r in roots if r.op.name in ("BROADCAST", "CONSTANT")], roots
