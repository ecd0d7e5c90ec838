"""Dot and convolution ops (runtime-library calls), compiled by tfjit and run by TF.

One table row per op x dtype x shape/attrs, each compiled with
``tfjit.function(jit_compile=True)`` and compared with ``tf.function`` through
``oracle.assert_matches``.  Sums are formed in a different order than TF's
kernels (or, for depthwise convolution, by tfjit's own loops), so float
tolerances scale with the contraction length.  Gradients go through
``tf.GradientTape`` on both sides, so TF's own gradient graphs are compiled.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import tfjit
from tfjit.codegen import library
from oracle import assert_matches

R = tf.raw_ops
DTYPES = {"f32": tf.float32, "f64": tf.float64, "f16": tf.float16, "bf16": tf.bfloat16}
TOL = {"f32": (1e-4, 1e-4), "f64": (1e-10, 1e-10), "f16": (1e-2, 1e-2), "bf16": (5e-2, 5e-2)}


def _array(rng, shape, dtype: str, special: bool = False) -> tf.Tensor:
    x = rng.uniform(-1, 1, shape)
    if special and x.size >= 3:
        flat = x.reshape(-1)
        flat[0], flat[1], flat[-1] = np.nan, np.inf, -np.inf
    np_dtype = ml_dtypes.bfloat16 if dtype == "bf16" else DTYPES[dtype].as_numpy_dtype
    return tf.constant(x.astype(np_dtype))


@dataclasses.dataclass
class Case:
    id: str
    fn: Callable
    shapes: tuple
    dtypes: tuple = ("f32", "f64")
    reference: Callable | None = None     # TF's function when it differs from fn (see below)
    special: bool = False
    scale: float = 1.0                    # tolerance multiplier (long contractions)


def _grads(f, n_inputs=2):
    """The gradients of sum(f(*xs)**2) with respect to every input."""
    def g(*xs):
        with tf.GradientTape() as tape:
            tape.watch(xs[:n_inputs])
            y = f(*xs)
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, list(xs[:n_inputs]))
    return g


def _conv(stride, padding, dilation=1):
    return lambda x, w: tf.nn.conv2d(x, w, stride, padding, dilations=dilation)


def _explicit(x, w):
    return R.Conv2D(input=x, filter=w, strides=[1, 2, 1, 1], padding="EXPLICIT",
                    explicit_paddings=[0, 0, 1, 2, 0, 3, 0, 0])


def _depthwise(stride, padding, dilation=1):
    return lambda x, w: R.DepthwiseConv2dNative(input=x, filter=w, strides=[1, stride, stride, 1],
                                                padding=padding, dilations=[1, dilation, dilation, 1])


def _tf_depthwise(stride, padding, dilation):
    # TF's own kernel has no dilation: tf.nn computes it with space-to-batch around it.
    return lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, stride, stride, 1], padding,
                                               dilations=[dilation, dilation])


CASES = [
    Case("MatMul", tf.matmul, ((7, 5), (5, 3)), ("f32", "f64", "f16", "bf16")),
    Case("MatMul-specials", tf.matmul, ((6, 4), (4, 5)), special=True),
    Case("MatMul-transpose_a", lambda a, b: tf.matmul(a, b, transpose_a=True), ((5, 7), (5, 3))),
    Case("MatMul-transpose_b", lambda a, b: tf.matmul(a, b, transpose_b=True), ((7, 5), (3, 5))),
    Case("MatMul-both", lambda a, b: tf.matmul(a, b, transpose_a=True, transpose_b=True),
         ((5, 7), (3, 5))),
    Case("MatMul-large", tf.matmul, ((130, 257), (257, 70)), scale=10),
    Case("MatMul-k0", tf.matmul, ((4, 0), (0, 3))),
    Case("MatMul-m0", tf.matmul, ((0, 4), (4, 3))),
    Case("MatMul-vector", tf.matmul, ((1, 9), (9, 1))),
    Case("MatMul-bias-relu", lambda a, b: tf.nn.relu(tf.matmul(a, b) + 0.25), ((33, 17), (17, 9))),
    Case("MatMul-grads", _grads(tf.matmul), ((6, 5), (5, 4))),
    # SparseMatMul: MatMul into f32 (bfloat16 operands widened); the hints pick TF's algorithm
    Case("SparseMatMul", lambda a, b: R.SparseMatMul(a=a, b=b), ((7, 5), (5, 3)), ("f32", "bf16")),
    Case("SparseMatMul-hints", lambda a, b: R.SparseMatMul(
        a=a, b=b, transpose_a=True, a_is_sparse=True, b_is_sparse=True), ((5, 7), (5, 3)),
         ("f32", "bf16"), special=True),
    Case("SparseMatMul-transpose_b", lambda a, b: R.SparseMatMul(
        a=a, b=b, transpose_b=True, b_is_sparse=True), ((6, 4), (3, 4)), ("f32",)),
    Case("BatchMatMul", tf.matmul, ((3, 4, 5), (3, 5, 2)), ("f32", "f64", "bf16")),
    Case("BatchMatMul-broadcast", tf.matmul, ((2, 3, 4, 5), (5, 6))),
    Case("BatchMatMul-broadcast-batch", tf.matmul, ((2, 1, 4, 5), (1, 3, 5, 6))),
    Case("BatchMatMul-adjoint", lambda a, b: tf.matmul(a, b, adjoint_a=True, adjoint_b=True),
         ((2, 5, 4), (2, 6, 5))),
    Case("BatchMatMul-grads", _grads(tf.matmul), ((2, 3, 4), (2, 4, 5))),
    Case("Einsum-attention-scores", lambda q, k: tf.einsum("aecd,abcd->acbe", q, k),
         ((2, 5, 3, 4), (2, 6, 3, 4))),
    Case("Einsum-attention-values", lambda p, v: tf.einsum("acbe,aecd->abcd", p, v),
         ((2, 3, 6, 5), (2, 5, 3, 4))),
    Case("Einsum-dense", lambda x, w: tf.einsum("abc,cde->abde", x, w), ((2, 3, 4), (4, 5, 6))),
    Case("Einsum-ellipsis", lambda x, w: tf.einsum("...ij,jk->...ik", x, w), ((2, 3, 4, 5), (5, 2))),
    Case("Einsum-sum-unused", lambda x, w: tf.einsum("ijz,jk->ik", x, w), ((3, 4, 2), (4, 5))),
    Case("Einsum-one-operand", lambda x: tf.einsum("ijk->kj", x), ((3, 4, 5),)),
    Case("Einsum-dot", lambda x, y: tf.einsum("i,i->", x, y), ((7,), (7,))),
    Case("Einsum-outer", lambda x, y: tf.einsum("i,j->ij", x, y), ((3,), (4,))),
    Case("Einsum-grads", _grads(lambda x, w: tf.einsum("abc,cd->abd", x, w)), ((2, 3, 4), (4, 5))),
]
for _pad in ("SAME", "VALID"):
    for _s, _d in ((1, 1), (2, 1), (1, 2), (3, 1)):
        _k = f"{_pad}-s{_s}-d{_d}"
        CASES.append(Case(f"Conv2D-{_k}", _conv(_s, _pad, _d), ((2, 9, 11, 3), (3, 3, 3, 5)),
                          ("f32", "f64", "f16") if _s == _d == 1 else ("f32", "f64")))
        CASES.append(Case(f"Depthwise-{_k}", _depthwise(_s, _pad, _d), ((2, 9, 11, 3), (3, 3, 3, 2)),
                          reference=None if _d == 1 else _tf_depthwise(_s, _pad, _d)))
        if _d == 1:    # TF's CPU kernels have no gradient for dilated convolutions
            CASES.append(Case(f"Conv2D-grads-{_k}", _grads(_conv(_s, _pad)),
                              ((2, 9, 11, 3), (3, 3, 3, 4)), scale=10))
            CASES.append(Case(f"Depthwise-grads-{_k}", _grads(_depthwise(_s, _pad)),
                              ((2, 9, 11, 3), (3, 3, 3, 2)), scale=10))
CASES += [
    Case("Conv2D-1x1", _conv(1, "VALID"), ((2, 5, 5, 8), (1, 1, 8, 4))),
    Case("Conv2D-specials", _conv(1, "SAME"), ((1, 6, 6, 2), (3, 3, 2, 3)), special=True),
    Case("Conv2D-explicit", _explicit, ((1, 7, 6, 2), (3, 2, 2, 3))),
    Case("Conv2D-5x5-stride2", _conv(2, "SAME"), ((2, 12, 12, 4), (5, 5, 4, 6)), scale=5),
    Case("Conv2D-grads-5x5-stride2", _grads(_conv(2, "SAME")), ((2, 12, 12, 3), (5, 5, 3, 4)),
         scale=20),
    Case("Conv2D-grads-explicit", _grads(_explicit), ((1, 7, 6, 2), (3, 2, 2, 3)), scale=10),
    Case("Depthwise-multiplier", _depthwise(1, "SAME"), ((1, 6, 7, 4), (3, 3, 4, 3)),
         ("f32", "f64", "f16", "bf16")),
    Case("Depthwise-grads-multiplier", _grads(_depthwise(2, "SAME")), ((1, 7, 7, 3), (3, 3, 3, 2)),
         scale=10),
    Case("Depthwise-5x5", _depthwise(1, "SAME"), ((1, 8, 8, 4), (5, 5, 4, 1))),
    # multiplier 1 (every Keras application's): a [n, ho, wo, c] kernel along channels
    Case("Depthwise-m1-stride2-prime-channels", _depthwise(2, "SAME"), ((2, 9, 8, 13), (3, 3, 13, 1)),
         ("f32", "f64", "f16", "bf16")),
    Case("Depthwise-m1-valid-wide", _depthwise(1, "VALID"), ((1, 6, 6, 728), (3, 3, 728, 1)), scale=2),
    Case("Depthwise-m1-one-channel-dilated", _depthwise(1, "SAME", 2), ((2, 7, 9, 1), (3, 3, 1, 1)),
         reference=_tf_depthwise(1, "SAME", 2)),
    Case("Depthwise-m1-1x1-input", _depthwise(1, "SAME"), ((3, 1, 1, 17), (3, 3, 17, 1))),
    # the gradients' library calls: 1x1 filters, deep and shallow inputs (TF's default and
    # oneDNN kernels), odd sizes under stride 2, padding wider than the window
    Case("Conv2D-grads-1x1", _grads(_conv(1, "VALID")), ((2, 5, 6, 8), (1, 1, 8, 3)), scale=10),
    Case("Conv2D-grads-deep", _grads(_conv(1, "SAME")), ((2, 6, 5, 9), (3, 3, 9, 6)), scale=20),
    Case("Conv2D-grads-odd-stride2", _grads(_conv(2, "SAME")), ((1, 10, 7, 2), (3, 3, 2, 3)),
         ("f32", "f64", "f16"), scale=10),
    Case("Conv2D-grads-wide-padding", _grads(lambda x, w: R.Conv2D(
        input=x, filter=w, strides=[1, 1, 2, 1], padding="EXPLICIT",
        explicit_paddings=[0, 0, 3, 0, 1, 4, 0, 0])), ((1, 5, 6, 2), (2, 2, 2, 3)), scale=10),
    Case("Depthwise-grads-explicit", _grads(lambda x, w: R.DepthwiseConv2dNative(
        input=x, filter=w, strides=[1, 2, 2, 1], padding="EXPLICIT",
        explicit_paddings=[0, 0, 1, 2, 0, 3, 0, 0])), ((2, 7, 6, 3), (3, 2, 3, 2)), scale=10),
    Case("Depthwise-grads-odd-stride2", _grads(_depthwise(2, "VALID")), ((2, 9, 8, 5), (3, 3, 5, 1)),
         ("f32", "f64", "f16"), scale=10),
    Case("MatMul-grads-transposed", _grads(lambda a, b: tf.matmul(a, b, transpose_a=True,
                                                                     transpose_b=True)),
         ((6, 5), (4, 6)), scale=10),
    Case("BatchMatMul-grads-broadcast", _grads(tf.matmul), ((3, 4, 5), (5, 2)), scale=10),
]


def _params():
    for c in CASES:
        for d in c.dtypes:
            yield pytest.param(c, d, id=f"{c.id}-{d}")


@pytest.mark.parametrize("case,dtype", list(_params()))
def test_against_tf(case: Case, dtype: str, monkeypatch):
    rng = np.random.default_rng(abs(hash(case.id)) % 2**32)
    xs = [_array(rng, s, dtype, case.special) for s in case.shapes]
    if case.special:
        # Which outputs a NaN or Inf reaches is the kernel's own business: oneDNN skips
        # the taps that fall on padding, TF's default kernel multiplies them (0 * NaN),
        # and TF itself switches between the two by CPU.  The oracle runs the default
        # kernels (conftest.py), so the compiled call does too.
        monkeypatch.setattr(library, "tf_kernel", lambda i, onednn, native_bf16=False: (library.DEFAULT, "test"))
    got = tfjit.function(case.fn)(*xs)
    want = tf.function(case.reference or case.fn)(*xs)
    rtol, atol = TOL[dtype]
    for k, (g, w) in enumerate(zip(tf.nest.flatten(got), tf.nest.flatten(want))):
        assert_matches(g.numpy(), w.numpy(), rtol=rtol * case.scale, atol=atol * case.scale,
                       what=f"{case.id} output {k}")


def test_matmul_epilogue_fuses_into_one_loop_kernel(rng):
    a = tf.constant(rng.standard_normal((64, 32), dtype=np.float32))
    b = tf.constant(rng.standard_normal((32, 48), dtype=np.float32))
    bias = tf.constant(rng.standard_normal((48,), dtype=np.float32))
    f = tfjit.function(lambda a, b, bias: tf.nn.gelu(tf.nn.bias_add(tf.matmul(a, b), bias), approximate=True))
    assert_matches(f(a, b, bias).numpy(),
                   tf.function(lambda a, b, bias: tf.nn.gelu(tf.nn.bias_add(tf.matmul(a, b), bias), approximate=True))(
                       a, b, bias).numpy(), rtol=1e-4, atol=1e-5)
    kinds = [fu.kind for fu in f.compiled(a, b, bias).fusions]
    assert kinds == ["library", "loop"], kinds


def test_library_operands_are_materialised_once_and_reshapes_read_in_place(rng):
    x = tf.constant(rng.standard_normal((2, 3, 4, 8), dtype=np.float32))
    w = tf.constant(rng.standard_normal((8, 5), dtype=np.float32))

    def f(x, w):      # tanh is computed into a buffer; the reshape to [24, 8] moves nothing
        return tf.matmul(tf.reshape(tf.tanh(x), [24, 8]), w)
    jf = tfjit.function(f)
    assert_matches(jf(x, w).numpy(), tf.function(f)(x, w).numpy(), rtol=1e-5, atol=1e-6)
    fusions = jf.compiled(x, w).fusions
    assert [fu.kind for fu in fusions] == ["loop", "library"]
    assert any("read in place" in note for note in fusions[1].notes)


def test_transposed_operand_of_a_parameter_is_materialised(rng):
    # The dot reads memory: a transpose of a parameter (normally recomputed wherever it is
    # used) becomes a kernel of its own.
    x = tf.constant(rng.standard_normal((6, 4, 5), dtype=np.float32))
    w = tf.constant(rng.standard_normal((6, 3), dtype=np.float32))
    f = lambda x, w: tf.matmul(tf.reshape(tf.transpose(x, [1, 2, 0]), [20, 6]), w)   # noqa: E731
    jf = tfjit.function(f)
    assert_matches(jf(x, w).numpy(), tf.function(f)(x, w).numpy(), rtol=1e-5, atol=1e-6)
    assert [fu.kind for fu in jf.compiled(x, w).fusions] == ["loop", "library"]


def test_an_output_that_is_also_returned_twice(rng):
    a = tf.constant(rng.standard_normal((4, 4), dtype=np.float32))
    f = tfjit.function(lambda a: (tf.matmul(a, a), tf.identity(tf.matmul(a, a))))
    x, y = f(a)
    want = tf.matmul(a, a).numpy()
    assert_matches(x.numpy(), want, rtol=1e-5, atol=1e-6)
    assert_matches(y.numpy(), want, rtol=1e-5, atol=1e-6)


def test_cost_analysis_counts_two_flops_per_multiply_add(rng):
    f = tfjit.function(lambda a, b: tf.matmul(a, b))
    cost = f.lower(tf.TensorSpec([8, 16], tf.float32), tf.TensorSpec([16, 4], tf.float32)) \
        .compile().cost_analysis()
    assert cost["flops"] == 2 * 8 * 16 * 4
    assert cost["kernels"][0]["kind"] == "library"


def test_interpreter_and_text_format_agree_with_compiled_code(rng):
    from tfjit.ir import interp, text
    from tfjit.runtime import host
    x = tf.constant(rng.standard_normal((2, 6, 6, 3), dtype=np.float32))
    w = tf.constant(rng.standard_normal((3, 3, 3, 4), dtype=np.float32))
    f = tfjit.function(lambda x, w: tf.matmul(tf.reshape(_conv(2, "SAME")(x, w), [18, 4]),
                                              tf.ones([4, 2])))
    compiled = f.compiled(x, w)
    module = text.parse_module(compiled.module_after)
    assert text.module_str(module) == compiled.module_after
    want = interp.evaluate(module, [x.numpy(), w.numpy()])[0]
    got = host.run_compiled(compiled, [x.numpy(), w.numpy()])[0]
    assert_matches(got, want, rtol=1e-5, atol=1e-5)
    assert_matches(f(x, w).numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["Conv2D-grads-SAME-s2-d1", "Conv2D-grads-explicit",
                                  "Conv2D-grads-wide-padding", "Depthwise-grads-multiplier",
                                  "Depthwise-grads-explicit", "BatchMatMul-grads-broadcast"])
def test_host_runner_runs_the_eigen_code(case):
    # Without a launch op (the host runner, AOT objects) the runtime library has no
    # OpKernelContext and runs its own Eigen code: the same results as TF's kernels.
    from tfjit.ir import interp, text
    from tfjit.runtime import host
    (c,) = [c for c in CASES if c.id == case]
    rng = np.random.default_rng(7)
    xs = [_array(rng, shape, "f32") for shape in c.shapes]
    compiled = tfjit.function(c.fn).compiled(*xs)
    assert any(f.kind == "library" for f in compiled.fusions)
    inputs = [x.numpy() for x in xs]
    got = host.run_compiled(compiled, inputs)
    want = [w.numpy() for w in tf.nest.flatten(tf.function(c.fn)(*xs))]
    reference = interp.evaluate(text.parse_module(compiled.module_after), inputs)
    for k, (g, w, r) in enumerate(zip(got, want, reference)):
        assert_matches(g, w, rtol=1e-4 * c.scale, atol=1e-4 * c.scale, what=f"{case} output {k}")
        assert_matches(r, w, rtol=1e-4 * c.scale, atol=1e-4 * c.scale, what=f"{case} interp {k}")


@pytest.mark.parametrize("mult", [1, 3])
def test_separable_convolutions_depthwise_kernel_runs_along_channels(rng, mult):
    # Keras's SeparableConv2D: the depthwise sum feeds a 1x1 convolution (a library call,
    # which reads it from memory).  The loop kernel's rows end in the output channels
    # (vectorised along them): with multiplier 1 the taps' sum is [n, ho, wo, c] itself
    # (as [n, ho, wo, c, 1], read in place through the reshape, each row was one scalar
    # element: Xception ran at 0.56x TF graph); with more it is [n, ho, wo, c, mult].
    x = tf.constant(rng.standard_normal((2, 6, 6, 40), dtype=np.float32))
    w = tf.constant(rng.standard_normal((3, 3, 40, mult), dtype=np.float32))
    p = tf.constant(rng.standard_normal((1, 1, 40 * mult, 8), dtype=np.float32))

    def separable(x, w, p):
        return tf.nn.conv2d(_depthwise(1, "SAME")(x, w), p, 1, "VALID")
    f = tfjit.function(separable)
    assert_matches(f(x, w, p).numpy(), tf.function(separable)(x, w, p).numpy(),
                   rtol=1e-4, atol=1e-4)
    (loop,) = [fu for fu in f.compiled(x, w, p).fusions if fu.kind == "loop"]
    assert tuple(loop.shape) == ((2, 6, 6, 40) if mult == 1 else (2, 6, 6, 40, mult)), loop.shape


def test_gradients_are_library_calls_that_name_their_kernel(rng):
    x = tf.constant(rng.standard_normal((2, 8, 8, 3), dtype=np.float32))
    w = tf.constant(rng.standard_normal((3, 3, 3, 4), dtype=np.float32))
    d = tf.constant(rng.standard_normal((3, 3, 3, 1), dtype=np.float32))
    f = _grads(lambda x, w, d: _depthwise(1, "SAME")(_conv(2, "SAME")(x, w)[..., :3], d), 3)
    fusions = tfjit.function(f).compiled(x, w, d).fusions
    calls = {fu.roots[0].op.spelling: fu.notes[-1] for fu in fusions if fu.kind == "library"}
    assert set(calls) == {"convolution", "convolution-backprop-input", "convolution-backprop-filter",
                          "depthwise-backprop-input", "depthwise-backprop-filter"}, calls
    assert calls["convolution"].startswith("runs TF's measured Conv2D kernel: the fastest of")
    assert calls["depthwise-backprop-filter"].startswith(
        "runs TF's measured DepthwiseConv2dNativeBackpropFilter kernel")


def test_tf_kernel_errors_surface_naming_the_node(rng):
    # A depthwise gradient with unequal strides passes the IR builder (the Eigen code
    # computes it) but TF's CPU kernel refuses it, so the lowering never emits one; run
    # directly, the kernel's status becomes the launch's error, with node and cluster.
    from tfjit import pipeline
    from tfjit.api.service import SERVICE
    from tfjit.ir import interp, text
    from tfjit.runtime import host, launch
    m = text.parse_module(
        "module bad {\n  %p0 = f64[3,3,2,1] parameter(0)\n  %p1 = f64[1,3,4,2] parameter(1)\n"
        "  %d = f64[1,7,6,2] depthwise-backprop-input(%p0, %p1), padding={0,0,0,0}, strides={2,1}\n"
        "  ROOT (%d)\n}\n")
    m.outputs[0].source = "model/depthwise/grad"
    compiled = pipeline.compile_module(m, "bad")
    w, g = rng.standard_normal((3, 3, 2, 1)), rng.standard_normal((1, 3, 4, 2))
    launch.set_compile_callback(lambda *args, **kwargs: compiled.executable)
    try:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"TensorFlow's DepthwiseConv2dNativeBackpropInput kernel failed "
                                 r"\{\{node model/depthwise/grad\}\}: .*strides.* \(in tfjit cluster "
                                 r"tfjit_test_bad_kernel\)"):
            launch.launch([w, g], cluster="tfjit_test_bad_kernel", Tout=[tf.float64],
                          output_shapes=[[1, 7, 6, 2]])
    finally:
        launch.set_compile_callback(SERVICE.on_miss if SERVICE.installed else None)
    want = interp.evaluate(m, [w, g])[0]            # the Eigen code has no such limit
    assert_matches(host.run_compiled(compiled, [w, g])[0], want, rtol=1e-10, atol=1e-10)


def test_threads_run_one_compiled_function_together(rng):
    # TF's kernels are shared by every launch (one per op and attributes); Compute runs
    # concurrently, as in TF's own executor.
    import threading
    x = tf.constant(rng.standard_normal((4, 12, 12, 3), dtype=np.float32))
    w = tf.constant(rng.standard_normal((3, 3, 3, 8), dtype=np.float32))
    m = tf.constant(rng.standard_normal((8, 16), dtype=np.float32))

    def model(x, w, m):
        return tf.matmul(tf.reduce_mean(tf.nn.relu(_conv(1, "SAME")(x, w)), [1, 2]), m)
    step = _grads(model, 3)
    f = tfjit.function(step)
    want = [t.numpy() for t in tf.function(step)(x, w, m)]
    f(x, w, m)
    errors, results = [], []

    def worker():
        try:
            for _ in range(5):
                results.append([t.numpy() for t in f(x, w, m)])
        except Exception as e:    # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 20
    for got in results:
        for k, (g, e) in enumerate(zip(got, want)):
            assert_matches(g, e, rtol=1e-3, atol=1e-3, what=f"thread output {k}")


def test_onednn_mode_of_tensorflow(tmp_path):
    # With TF_ENABLE_ONEDNN_OPTS=1 TF's graph rewrites MatMul/Conv2D to its oneDNN ops;
    # the kernels tfjit creates by op name must be unaffected.
    import os
    import subprocess
    import sys
    script = tmp_path / "onednn.py"
    script.write_text(
        "import numpy as np, tensorflow as tf, tfjit\n"
        "from tensorflow.python.util import _pywrap_util_port\n"
        "assert _pywrap_util_port.IsMklEnabled()\n"
        "rng = np.random.default_rng(0)\n"
        "x = tf.constant(rng.standard_normal((2, 9, 9, 3), dtype=np.float32))\n"
        "w = tf.constant(rng.standard_normal((3, 3, 3, 4), dtype=np.float32))\n"
        "m = tf.constant(rng.standard_normal((4, 5), dtype=np.float64))\n"
        "def f(x, w, m):\n"
        "    with tf.GradientTape() as tape:\n"
        "        tape.watch([x, w])\n"
        "        y = tf.nn.conv2d(x, w, 2, 'SAME')\n"
        "        loss = tf.reduce_sum(tf.matmul(tf.reshape(tf.cast(y, tf.float64), [-1, 4]), m))\n"
        "    return tape.gradient(loss, [x, w])\n"
        "for g, e in zip(tfjit.function(f)(x, w, m), tf.function(f)(x, w, m)):\n"
        "    np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-4)\n"
        "print('ok')\n")
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="2")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


@pytest.mark.parametrize("line,message", [
    ("%d = f32[3,5] dot(%p0, %p0), transpose_lhs=0, transpose_rhs=0", "contracting sizes"),
    ("%d = f32[1,1,1,1] convolution(%p0, %p0), strides={1,1}, dilations={1,1}, padding={0,0,0,0}",
     "convolution of"),
])
def test_malformed_library_instructions_are_parse_errors(line, message):
    from tfjit.ir import module as ir_module
    from tfjit.ir import text
    src = f"module m {{\n  %p0 = f32[3,4] parameter(0)\n  {line}\n  ROOT (%d)\n}}\n"
    with pytest.raises(ir_module.IRError, match=message):
        text.parse_module(src)


def test_unsupported_forms_name_the_op():
    w = tf.zeros([2, 2, 2, 4])            # a grouped convolution's dilated input gradient
    g = tf.zeros([1, 4, 4, 4])            # (grouped ones compile: test_grouped_conv.py)
    f = tfjit.function(lambda w, g: tf.raw_ops.Conv2DBackpropInput(
        input_sizes=[1, 4, 4, 4], filter=w, out_backprop=g, strides=[1, 1, 1, 1], padding="SAME",
        dilations=[1, 2, 2, 1]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Conv2DBackpropInput.*grouped"):
        f(w, g)
    g = tfjit.function(lambda a: tf.matmul(a, a))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"MatMul has no tfjit lowering for dtype int32"):
        g(tf.ones([2, 2], tf.int32))


def test_a_target_without_a_runtime_library_refuses_library_calls_clearly(tmp_path):
    import dataclasses

    from tfjit import pipeline
    from tfjit.aot import compile as aot
    from tfjit.aot import config as aot_config
    from tfjit.aot import frontend
    from tfjit.codegen.target import NotForTarget
    with tf.Graph().as_default() as g:
        a = tf.compat.v1.placeholder(tf.float32, [2, 3], name="a")
        tf.matmul(a, tf.ones([3, 2]), name="out")
    path = tmp_path / "g.pb"
    path.write_bytes(g.as_graph_def().SerializeToString())
    config = tmp_path / "c.pbtxt"
    config.write_text('feed { id { node_name: "a" } shape { dim { size: 2 } dim { size: 3 } } }\n'
                      'fetch { id { node_name: "out" } }\n')
    cluster = frontend.from_graph_def(frontend.read_graph_def(str(path)),
                                      aot_config.read(str(config)))
    # tfjit-aot links its own runtime (tests/test_aot_models.py); a target without one says so
    # (all of the op library's entry points but those only TF's kernels have: the FFTs)
    assert aot.compile_cluster(cluster, "m").runtime == ["tfjit_aot_rt_" + s[len("tfjit_rt_"):]
                                                         for s in _runtime_symbols()
                                                         if not s.startswith("tfjit_rt_fft_")]
    m = aot.lower_cluster(aot.Graph.from_bytes(cluster.graph_def), cluster.signature, "m")
    bare = dataclasses.replace(pipeline.jit_target(), name="bare", library_prefix="")
    with pytest.raises(NotForTarget, match=r"bare code cannot call the runtime library"):
        pipeline.emit(pipeline.optimize(m), bare, "m")


def _runtime_symbols():
    from tfjit.codegen.library import runtime_symbols
    return runtime_symbols()
