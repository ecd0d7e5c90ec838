"""bfloat16 matrix products as bf16 library calls (passes/dots.py Bf16Products,
runtime/tf_bf16.cc), against TF's executor.

This process runs TF without oneDNN (conftest), where the call widens its operands,
runs the f32 product and rounds once: bit for bit what the converts around an f32 dot
computed before the rewrite (checked against that computation itself), and within
bf16 rounding of TF's own Eigen bf16 kernel.  Where TF runs oneDNN (a child process
with TF_ENABLE_ONEDNN_OPTS=1) the call is TF's oneDNN bf16 kernel, checked against
that TF's graph mode.  Also: what is not rewritten (an f32 result read as f32, f16,
vector products), Keras's mixed_bfloat16 layers and their gradients, the host runner
against the interpreter, and the pass on IR text.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit import dtypes as dt
from tfjit.ir import interp
from tfjit.ir.module import IRError, Module
from tfjit.ir.parse import parse_module
from tfjit.ir.text import module_str
from tfjit.passes.dots import Bf16Products
from tfjit.runtime import host

BF16_TOL = 2e-2     # TF's Eigen bf16 kernel sums in another order: 1 bf16 ulp apart


def _bf16(rng, shape):
    return tf.cast(tf.constant(rng.standard_normal(shape).astype(np.float32)), tf.bfloat16)


def _optimized(f, *args) -> str:
    return f.experimental_get_compiler_ir(*args)(stage="optimized_ir")


def _f32_rounded(fn, *args):
    """``fn`` on the operands widened to f32, rounded to bf16 once: the rewrite's arithmetic."""
    return tf.cast(fn(*[tf.cast(a, tf.float32) for a in args]), tf.bfloat16).numpy()


# (a shape, b shape, transpose_a, transpose_b): edge sizes (a prime contraction, 2 rows,
# one batch side broadcast)
PRODUCTS = [
    ((64, 96), (96, 48), False, False),
    ((97, 2), (5, 97), True, True),
    ((3, 17, 31), (3, 31, 5), False, False),
    ((3, 17, 31), (1, 5, 31), False, True),
    ((1, 40, 8), (6, 8, 40), True, True),
]


@pytest.mark.parametrize("case", range(len(PRODUCTS)))
def test_products_are_bf16_calls_bit_exact_to_the_f32_sum(case, rng):
    sa, sb, ta, tb = PRODUCTS[case]
    a, b = _bf16(rng, sa), _bf16(rng, sb)

    def fn(a, b):
        return tf.matmul(a, b, transpose_a=ta, transpose_b=tb)
    f = tfjit.function(fn, jit_compile=True)
    assert "bf16[" in _optimized(f, a, b).split(" dot(")[0].splitlines()[-1]
    exact = _f32_rounded(fn, a, b)
    for _ in range(3):          # the f32 call is measured over its first calls
        got = f(a, b).numpy()
        assert np.array_equal(got.view(np.uint16), exact.view(np.uint16))
    assert_matches(got.astype(np.float32), tf.function(fn)(a, b).numpy().astype(np.float32),
                   rtol=BF16_TOL, atol=BF16_TOL)


def test_what_is_not_rewritten(rng):
    a, b = _bf16(rng, (16, 24)), _bf16(rng, (24, 8))
    cases = {
        # the f32 product read as f32 (no rounding to bf16 after it)
        "f32 result": lambda a, b: tf.matmul(tf.cast(a, tf.float32), tf.cast(b, tf.float32)),
        # one side f32
        "mixed operands": lambda a, b: tf.cast(tf.matmul(tf.cast(a, tf.float32), tf.ones((24, 8))),
                                               tf.bfloat16),
        # f16 stays an f32 call between converts
        "f16": lambda a, b: tf.matmul(tf.cast(a, tf.float16), tf.cast(b, tf.float16)),
        # a vector product is a reduction (DotsAsReductions), in f32
        "vector": lambda a, b: tf.matmul(a, b[:, :1]),
    }
    for what, fn in cases.items():
        f = tfjit.function(fn, jit_compile=True)
        text = _optimized(f, a, b)
        assert not any("bf16[" in line and " dot(" in line for line in text.splitlines()), (what, text)
        got, want = f(a, b).numpy(), tf.function(fn)(a, b).numpy()
        assert_matches(got.astype(np.float32), want.astype(np.float32), rtol=BF16_TOL,
                       atol=BF16_TOL, what=what)


def test_keras_mixed_bfloat16_layers_and_gradients(rng, monkeypatch):
    import keras
    from tfjit import pipeline
    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        keras.utils.set_random_seed(2)
        inputs = keras.Input((12, 32))
        h = keras.layers.MultiHeadAttention(2, 16)(inputs, inputs)
        h = keras.layers.Dense(64, activation="relu")(h)
        model = keras.Model(inputs, keras.layers.Dense(4, dtype="float32")(h))
    finally:
        keras.mixed_precision.set_global_policy(policy)
    x = tf.constant(rng.uniform(-1, 1, (3, 12, 32)).astype(np.float32))

    def step(scope):
        def fn(x):
            with tf.name_scope(scope), tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x, training=True) ** 2)
            return [loss] + tape.gradient(loss, model.trainable_variables)
        return fn
    f = tfjit.function(step("rewritten"), jit_compile=True)
    text = _optimized(f, x)
    bf16_dots = [line for line in text.splitlines() if " dot(" in line and "= bf16[" in line]
    f32_dots = [line for line in text.splitlines() if " dot(" in line and "= f32[" in line]
    # every product of the bf16 layers and their gradients; the float32 Dense's stay f32
    assert len(bf16_dots) == 18 and len(f32_dots) == 3, text
    got = f(x)
    # without oneDNN the rewrite is the same arithmetic as the converts around an f32
    # dot: bit for bit the step compiled without the pass
    monkeypatch.setattr(pipeline, "PIPELINE", [p for p in pipeline.PIPELINE
                                               if getattr(p, "name", "") != Bf16Products.name])
    before = tfjit.function(step("converts"), jit_compile=True)
    assert " dot(" in _optimized(before, x) and "= bf16[" not in "".join(
        line for line in _optimized(before, x).splitlines() if " dot(" in line)
    for g, b in zip(got, before(x)):
        assert np.array_equal(g.numpy(), b.numpy())
    # and the loss is TF's within bf16 rounding (the gradients' small entries are sums
    # of cancelling bf16 terms: TF's Eigen kernels round them elsewhere)
    assert_matches(got[0].numpy(), step("tf")(x)[0].numpy(), rtol=2e-2, atol=0)


def test_the_host_runner_against_the_interpreter(rng):
    a, b = _bf16(rng, (2, 9, 13), ), _bf16(rng, (2, 13, 7))
    fn = lambda a, b: tf.nn.relu(tf.matmul(a, b))  # noqa: E731
    compiled = tfjit.function(fn, jit_compile=True).compiled(a, b)
    values = [a.numpy(), b.numpy()]
    (got,) = host.run_compiled(compiled, values)
    (want,) = interp.evaluate(parse_module(compiled.module_after), values)
    assert np.array_equal(np.asarray(got).view(np.uint16), np.asarray(want).view(np.uint16))
    assert np.array_equal(np.asarray(got).view(np.uint16), _f32_rounded(fn, a, b).view(np.uint16))


def test_the_pass_on_ir_text_and_the_builder():
    text = textwrap.dedent("""\
        module m {
          %p0 = bf16[4,6] parameter(0)
          %p1 = bf16[6,3] parameter(1)
          %c0 = f32[4,6] convert(%p0)
          %c1 = f32[6,3] convert(%p1)
          %d = f32[4,3] dot(%c0, %c1), transpose_lhs=0, transpose_rhs=0
          %r = bf16[4,3] convert(%d)
          ROOT (%r)
        }
        """)
    m = parse_module(text)
    rng = np.random.default_rng(0)
    import ml_dtypes
    values = [rng.standard_normal(s).astype(ml_dtypes.bfloat16) for s in ((4, 6), (6, 3))]
    (before,) = interp.evaluate(m, values)
    assert Bf16Products().run(m)
    out = module_str(m)
    assert "bf16[4,3] dot(%p0, %p1)" in out, out
    (after,) = interp.evaluate(parse_module(out), values)
    assert np.array_equal(np.asarray(before).view(np.uint16), np.asarray(after).view(np.uint16))
    # the dot read by something else besides the convert: left alone
    m2 = parse_module(text.replace("ROOT (%r)", "ROOT (%r, %d)"))
    assert not Bf16Products().run(m2)
    b = Module("b")
    with pytest.raises(IRError, match="f32/f64/bf16"):
        b.dot(b.parameter(dt.F16, (2, 2)), b.parameter(dt.F16, (2, 2)))


ONEDNN_CHILD = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    import tfjit
    rng = np.random.default_rng(4)
    a = tf.cast(tf.constant(rng.standard_normal((3, 40, 64)).astype(np.float32)), tf.bfloat16)
    b = tf.cast(tf.constant(rng.standard_normal((3, 64, 24)).astype(np.float32)), tf.bfloat16)
    fn = lambda a, b: tf.matmul(a, b) * tf.cast(2.0, tf.bfloat16)
    f = tfjit.function(fn, jit_compile=True)
    want = tf.function(fn)(a, b).numpy().astype(np.float32)
    for _ in range(3):
        got = f(a, b).numpy().astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
    print([n for fu in f.compiled(a, b).fusions for n in fu.notes if "runs TF's" in n])
""")


def test_with_onednn_the_call_is_onednns_bf16_kernel(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(ONEDNN_CHILD)
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "runs TF's oneDNN BatchMatMulV2 kernel" in proc.stdout, proc.stdout
