"""The IR's fused multiply-add (``fma``: ``x * y + z`` rounded once, f32) and the
convolution taps that use it (lower/conv.py ``_accumulate``).

The interpreter's FMA against exact rational arithmetic, including the tie that
rounding the f64 sum to f32 gets wrong; the compiled FMA bit for bit against the
interpreter on special values; what the IR refuses; the depthwise convolution's
lowering (FMA in f32 and the halves, multiply and add in f64) against TF's
executor; and the instruction in the CPU assembly and the PTX.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit import dtypes as dt
from tfjit import pipeline
from tfjit.codegen import llvm_target, nvptx
from tfjit.ir import interp
from tfjit.ir.module import IRError, Module
from tfjit.ir.ops import Op
from tfjit.ir.parse import parse_module
from tfjit.ir.text import module_str
from tfjit.runtime import host

# 8(1 + 2^-18) * 8(1 - 2^-18) + (2^30 + 128) = 2^30 + 192 - 2^-30: just under the tie
# between 2^30 + 128 and 2^30 + 256.  Its f64 sum is the tie itself, which rounds to even
# (2^30 + 256); one rounding gives 2^30 + 128.
TIE = (np.float32(8 * (1 + 2**-18)), np.float32(8 * (1 - 2**-18)), np.float32(2**30 + 128))


def _fma_module(shape) -> Module:
    m = Module("fma")
    x, y, z = (m.parameter(dt.F32, shape) for _ in range(3))
    m.outputs = [m.elementwise(Op.FMA, x, y, z)]
    return m


def _exact(x, y, z) -> np.float32:
    """Round-to-nearest-even of the exact x * y + z to f32 (finite, normal operands)."""
    v = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
    lo = np.float32(float(v))            # within one f32 step of v; search the neighbours
    cands = [lo, np.nextafter(lo, np.float32(np.inf)), np.nextafter(lo, np.float32(-np.inf))]
    dist = [abs(Fraction(float(c)) - v) for c in cands]
    best = min(dist)
    ties = [c for c, d in zip(cands, dist) if d == best]
    return min(ties, key=lambda c: int(np.array(c).view(np.uint32)) & 1)


def _special_operands(rng, n=4096):
    # no denormals: host.run_compiled runs without TF's DAZ/FTZ, which the interpreter
    # models (the depthwise test below meets denormals under TF)
    vals = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38,
                     1.17549435e-38, -1.17549435e-38, 2.0**-75], dtype=np.float32)
    ops = []
    for _ in range(3):
        a = (rng.standard_normal(n) * 10.0 ** rng.integers(-20, 20, n)).astype(np.float32)
        pick = rng.random(n) < 0.3
        a[pick] = rng.choice(vals, n)[pick]
        ops.append(a)
    x, y, z = ops
    with np.errstate(all="ignore"):
        z[:512] = -(x[:512] * y[:512])     # cancellations: the product's rounding error is the result
    z[np.abs(z) < np.finfo(np.float32).tiny] = 0.0
    return x, y, z


def test_the_interpreter_rounds_once(rng):
    x, y, z = (rng.standard_normal(600).astype(np.float32) * s for s in (1.0, 3.0, 2.0))
    z[:200] = -(x[:200] * y[:200])
    x[200:300] = TIE[0]
    y[200:300], z[200:300] = TIE[1], TIE[2]
    got = interp._fma(x, y, z)
    want = np.array([_exact(*t) for t in zip(x, y, z)], dtype=np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert got[200] == np.float32(2**30 + 128)
    naive = (x[200].astype(np.float64) * y[200] + np.float64(z[200])).astype(np.float32)
    assert naive == np.float32(2**30 + 256)      # the case the nudge is for
    assert np.count_nonzero(got[:200]) > 0       # a multiply then an add gives zeros there


def test_compiled_fma_is_the_interpreters_bit_for_bit(rng):
    x, y, z = _special_operands(rng)
    x[:4], y[:4], z[:4] = TIE[0], TIE[1], TIE[2]
    m = _fma_module(x.shape)
    want = interp.evaluate(m, [x, y, z])[0]
    compiled = pipeline.compile_module(parse_module(module_str(m)), "fma")
    got = np.asarray(host.run_compiled(compiled, [x, y, z])[0])
    assert got[0] == np.float32(2**30 + 128)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    tiny = np.finfo(np.float32).tiny
    raw = interp._fma(x, y, z)                       # unflushed: where FTZ would act
    real = ~np.isnan(want) & ((np.abs(raw) >= tiny) | (raw == 0))
    assert real.sum() > 3000
    assert np.array_equal(got[real].view(np.uint32), want[real].view(np.uint32))


def test_fma_takes_three_f32_operands_of_one_shape():
    m = Module("bad")
    a, b = m.parameter(dt.F64, (4,)), m.parameter(dt.F64, (4,))
    with pytest.raises(IRError, match="fma needs f32"):
        m.elementwise(Op.FMA, a, b, a)
    h = m.parameter(dt.BF16, (4,))
    with pytest.raises(IRError, match="fma needs f32"):
        m.elementwise(Op.FMA, h, h, h)
    f, g = m.parameter(dt.F32, (4,)), m.parameter(dt.F32, (5,))
    with pytest.raises(IRError, match="shapes differ"):
        m.elementwise(Op.FMA, f, f, g)
    with pytest.raises(IRError, match="arity"):
        m.elementwise(Op.FMA, f, f)


def test_fma_survives_the_text_form():
    text = module_str(_fma_module((3, 5)))
    assert "fma(" in text
    assert module_str(parse_module(text)) == text


def _depthwise(x, w):
    return tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME")


def _ops(module_text: str) -> set:
    return {i.op for i in parse_module(module_text).instrs}


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.float64])
def test_depthwise_taps_accumulate_with_fma_in_f32_only(dtype, rng):
    x = tf.cast(tf.constant(rng.uniform(-1, 1, (2, 7, 12, 9))), dtype)
    w = tf.cast(tf.constant(rng.uniform(-1, 1, (3, 3, 9, 2))), dtype)
    f = tfjit.function(_depthwise, jit_compile=True)
    ops = _ops(f.compiled(x, w).module_before)
    assert (Op.FMA in ops) is (dtype != tf.float64)
    tol = {tf.float32: 1e-5, tf.bfloat16: 2e-2, tf.float64: 1e-12}[dtype]
    got = tf.cast(f(x, w), tf.float64).numpy()
    want = tf.cast(tf.function(_depthwise)(x, w), tf.float64).numpy()
    assert_matches(got, want, rtol=tol, atol=tol)


def test_depthwise_special_values_keep_their_positions(rng):
    x = rng.uniform(-1, 1, (1, 6, 10, 8)).astype(np.float32)
    x[0, 1, 2, :3] = [np.nan, np.inf, -np.inf]
    x[0, 4, 7, :] = 0.0
    x[0, 2, 5, :] = 1e-40            # denormals: DAZ reads them as zeros in TF and in tfjit
    w = rng.uniform(-1, 1, (3, 3, 8, 1)).astype(np.float32)
    w[1, 1, 5, 0] = -0.0
    got = tfjit.function(_depthwise, jit_compile=True)(x, w).numpy()
    assert_matches(got, tf.function(_depthwise)(x, w).numpy(), rtol=1e-5, atol=1e-5)


def test_the_cpu_code_has_fma_instructions(rng):
    x = tf.constant(rng.uniform(-1, 1, (2, 8, 16, 16)).astype(np.float32))
    w = tf.constant(rng.uniform(-1, 1, (5, 5, 16, 1)).astype(np.float32))
    f = tfjit.function(_depthwise, jit_compile=True)
    assert "llvm.fma" in f.experimental_get_compiler_ir(x, w)(stage="llvm")
    if llvm_target.has_feature(llvm_target.features(), "fma"):
        assert "vfmadd" in f.experimental_get_compiler_ir(x, w)(stage="asm")


@pytest.mark.skipif(nvptx.ptxas() is None, reason="no ptxas (CUDA toolkit) here")
def test_the_ptx_has_fma_instructions(rng):
    x = tf.constant(rng.uniform(-1, 1, (2, 8, 16, 16)).astype(np.float32))
    w = tf.constant(rng.uniform(-1, 1, (3, 3, 16, 1)).astype(np.float32))
    ptx = tfjit.function(_depthwise, jit_compile=True).experimental_get_compiler_ir(x, w)(stage="ptx")
    assert "fma.rn.f32" in ptx
    nvptx.assemble(ptx, "sm_90")
