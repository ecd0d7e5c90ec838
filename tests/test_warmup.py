"""runtime/warmup.py: oneDNN's GEMM code generated beside LLVM for modules whose TF
kernels reach it, and nowhere else; results unchanged."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

import tfjit
from tfjit import pipeline
from tfjit.codegen import library
from tfjit.ir import text
from tfjit.passes import kernel_order
from tfjit.runtime import warmup


def _library_roots(src: str) -> list:
    o = pipeline.optimize(text.parse_module(src))
    return [f.roots[0] for f in kernel_order.walk(o.fusions) if f.kind == "library"]


DOT = ("module m {{\n  %p0 = {t}[8,16] parameter(0)\n  %p1 = {t}[16,4] parameter(1)\n"
       "  %d = {t}[8,4] dot(%p0, %p1), transpose_lhs=0, transpose_rhs=0\n  ROOT (%d)\n}}\n")
CONV = ("module m {\n  %p0 = f32[1,6,6,2] parameter(0)\n  %p1 = f32[3,3,2,4] parameter(1)\n"
        "  %c = f32[1,4,4,4] convolution(%p0, %p1), strides={1,1}, dilations={1,1}, padding={0,0,0,0}\n  ROOT (%c)\n}\n")
ELEMENTWISE = "module m {\n  %p0 = f32[8,16] parameter(0)\n  %e = f32[8,16] exp(%p0)\n  ROOT (%e)\n}\n"


def test_wanted_for_f32_dots_and_convolutions_only():
    assert library.runs_onednn_gemm(_library_roots(DOT.format(t="f32")))
    assert library.runs_onednn_gemm(_library_roots(CONV))
    assert not library.runs_onednn_gemm(_library_roots(DOT.format(t="f64")))   # not measured: left alone
    assert not library.runs_onednn_gemm(_library_roots(ELEMENTWISE))


def test_a_dot_starts_the_thread_once_and_results_match_tf():
    rng = np.random.default_rng(3)
    x, w = (tf.constant(rng.standard_normal(s).astype(np.float32)) for s in ((65, 33), (33, 17)))
    fn = lambda a, b: tf.nn.relu(tf.matmul(a, b)) * 2.0           # noqa: E731
    got = tfjit.function(fn, jit_compile=True)(x, w)
    np.testing.assert_allclose(got.numpy(), tf.function(fn)(x, w).numpy(), rtol=1e-5, atol=1e-5)
    thread = warmup._thread
    assert thread is not None and thread.name == "tfjit-gemm-warmup"
    thread.join(120)
    assert not thread.is_alive()
    assert warmup.start() is thread        # once per process
