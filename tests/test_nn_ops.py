"""NN ops and gradient ops that lower onto elementwise/movement/reduce IR:
activation gradients, Erfc, OneHot, L2Loss, BiasAddGrad, softmax
cross-entropy, StridedSliceGrad, MirrorPad(Grad), ConcatOffset and
InvertPermutation.

Same harness as test_ops.py: each case builds a function from ``tf.raw_ops``,
compiles it with ``tfjit.function(jit_compile=True)`` and compares every
output with ``tf.function`` (TF's executor).  Gradient ops take two inputs
(gradient, features/outputs); their ``specials`` case is the cross product of
the dtype's special values, so every pair (NaN gradient at a negative feature,
inf gradient at 0, ...) meets once.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from test_ops import _case, _like
from test_ops import (NP_DTYPES, TF_DTYPES, bind, check, is_float, params, ramp, sample, specials,
                      unary_values)

R = tf.raw_ops
FLOAT = ("f32", "f64")
HALF = ("f16", "bf16")
SHAPES = [(), (0,), (3, 0), (1, 5), (5, 1), (2, 3, 4)]


def _ordinary(d, shape):
    return lambda rng: sample(d, shape, rng, ramp(d))


# ------------------------------------------------------------ activation gradients

def _grad_op(op, first, second, **attrs):
    return lambda a, b: getattr(R, op)(**{first: a, second: b}, **attrs)


# op -> (fn(a, b), dtypes, tolerances per dtype).  Inputs are (gradients, features)
# or (gradients, outputs) or (y, dy), in the op's own argument order.
_HALF_TOL: dict = {}
GRADS = {
    "ReluGrad": (_grad_op("ReluGrad", "gradients", "features"), FLOAT + HALF + ("i32", "i64"), {}),
    "Relu6Grad": (_grad_op("Relu6Grad", "gradients", "features"), FLOAT + HALF + ("i32", "i64"), {}),
    "LeakyReluGrad": (_grad_op("LeakyReluGrad", "gradients", "features", alpha=0.2), FLOAT + HALF, {}),
    "LeakyReluGrad(alpha=-1.5)": (_grad_op("LeakyReluGrad", "gradients", "features", alpha=-1.5), FLOAT, {}),
    "EluGrad": (_grad_op("EluGrad", "gradients", "outputs"), FLOAT + HALF, _HALF_TOL),
    "SeluGrad": (_grad_op("SeluGrad", "gradients", "outputs"), FLOAT + HALF, _HALF_TOL),
    "SoftplusGrad": (_grad_op("SoftplusGrad", "gradients", "features"), FLOAT + HALF, _HALF_TOL),
    "SoftsignGrad": (_grad_op("SoftsignGrad", "gradients", "features"), FLOAT + HALF, _HALF_TOL),
    "SigmoidGrad": (_grad_op("SigmoidGrad", "y", "dy"), FLOAT + HALF, _HALF_TOL),
    "TanhGrad": (_grad_op("TanhGrad", "y", "dy"), FLOAT + HALF, _HALF_TOL),
    "SqrtGrad": (_grad_op("SqrtGrad", "y", "dy"), FLOAT + HALF, _HALF_TOL),
    "RsqrtGrad": (_grad_op("RsqrtGrad", "y", "dy"), FLOAT + HALF, _HALF_TOL),
    "ReciprocalGrad": (_grad_op("ReciprocalGrad", "y", "dy"), FLOAT + HALF, _HALF_TOL),
    "InvGrad": (_grad_op("InvGrad", "y", "dy"), FLOAT, {}),
}


def _vector_body(xs: list) -> list:
    """1-D inputs padded with ones to a multiple of 64 elements.  TF's kernels
    run whole vector packets and finish with scalar code, which for some of
    these ops multiplies in another order (SqrtGrad: (0.5 * dy) / y instead of
    (0.5 / y) * dy, so 0.5 / -FLT_MAX is a flushed denormal only in the vector
    code): padding keeps every tested value in the vector code tfjit follows."""
    n = -(-xs[0].size // 64) * 64
    return [np.concatenate([x, np.ones(n - x.size, x.dtype)]) for x in xs]


def _pairs(d):
    a, b = np.meshgrid(specials(d), specials(d))
    return _vector_body([a.reshape(-1), b.reshape(-1)])


def grad_cases() -> list:
    cases = []
    for op, (fn, dtypes, tol) in GRADS.items():
        for d in dtypes:
            kw = dict(tol=tol.get(d))
            cases.append(_case(op, d, "specials", fn, *_pairs(d), **kw))
            cases.append(_case(op, d, "ramp", fn, *_vector_body([np.resize(unary_values(d), 95),
                                                                 np.resize(unary_values(d)[::-1], 95)]), **kw))
            # small shapes run TF's scalar code only: ordinary values, same result either way
            shapes = [g for s in SHAPES for g in (_ordinary(d, s), _ordinary(d, s))]
            cases.append(_case(op, d, "shapes",
                               lambda *xs, fn=fn: [fn(xs[k], xs[k + 1]) for k in range(0, len(xs), 2)],
                               *shapes, **kw))
            vals = _pairs(d)
            cases.append(_case(op, d, "folded", bind(lambda op, vals: op(*[tf.constant(v) for v in vals]),
                                                     op=fn, vals=vals), **kw))
    return cases


@pytest.mark.parametrize("case", params(grad_cases()))
def test_activation_gradients(case):
    check(case)


# ------------------------------------------------------------------- Erfc

def erfc_cases() -> list:
    cases = []
    tol = {"f16": None, "bf16": None, "f32": (2e-5, 1e-6), "f64": (1e-12, 1e-300)}
    for d in FLOAT + HALF:
        grid = np.concatenate([np.linspace(-12, 30, 421), [1.99, 2.0, 2.01, 9.9, 10.05, 26.5, 27.0, 27.5]])
        cases += [
            _case("Erfc", d, "specials", lambda x: R.Erfc(x=x), unary_values(d)),
            # relative accuracy where erfc is tiny: 2 to 27 (f64) / 10 (f32)
            _case("Erfc", d, "tail", lambda x: R.Erfc(x=x), grid.astype(NP_DTYPES[d]), tol=tol[d]),
            _case("Erfc", d, "shapes", lambda *xs: [R.Erfc(x=x) for x in xs], *[_like(d, s) for s in SHAPES]),
        ]
    return cases


@pytest.mark.parametrize("case", params(erfc_cases()))
def test_erfc(case):
    check(case)


def test_exact_gelu_matches_tf_and_its_loop_interleaves():
    """tf.nn.gelu (exact: 0.5 x erfc(-x / sqrt 2), Keras's default) over a large input
    matches TF, and the CPU element loop runs two vectors an iteration (emitter's
    _elements_md): one packed division each, where a loop of one vector has one."""
    x = tf.constant(np.random.default_rng(11).standard_normal((64, 4099)).astype(np.float32) * 6)
    fn = tfjit.function(tf.nn.gelu, jit_compile=True)
    assert_matches(fn(x).numpy(), tf.function(tf.nn.gelu)(x).numpy(), rtol=2e-5, atol=1e-6,
                   what="exact GELU")
    import re
    asm = fn.compiled(x).code.asm()
    assert len(re.findall(r"\bv?divps\b", asm)) >= 2, asm


# ------------------------------------------------- OneHot, L2Loss, BiasAddGrad

def _one_hot(on, off, depths=(4, 1, 0), axes=(-1, 0, 1)):
    def fn(i, on_t, off_t, v):
        out = {}
        for depth, axis in itertools.product(depths, axes):
            out[f"depth={depth} axis={axis}"] = R.OneHot(indices=i, depth=depth, on_value=on_t, off_value=off_t,
                                                         axis=axis)
        out["vector"] = R.OneHot(indices=v, depth=3, on_value=on_t, off_value=off_t)
        out["constant on/off"] = R.OneHot(indices=v, depth=3, on_value=tf.constant(on), off_value=tf.constant(off),
                                          axis=0)
        return out
    return fn


def misc_cases() -> list:
    cases = []
    indices = {"i32": np.array([[0, 3], [-1, 4]], np.int32), "i64": np.array([[2, 0], [5, -7]], np.int64),
               "u8": np.array([[0, 255], [1, 3]], np.uint8)}
    for it, idx in indices.items():
        for d in ("f32", "f64", "i32", "i64", "bool"):
            on, off = (np.array(True), np.array(False)) if d == "bool" else \
                (np.array(5, NP_DTYPES[d]), np.array(-1, NP_DTYPES[d]))
            cases.append(_case("OneHot", f"{d}-indices-{it}", "cases", _one_hot(on, off), idx, on, off,
                               idx.reshape(-1)[:3].copy()))
    for d in FLOAT + HALF:
        cases += [
            _case("L2Loss", d, "specials", lambda x: R.L2Loss(t=x), unary_values(d)),
            _case("L2Loss", d, "shapes", lambda *xs: [R.L2Loss(t=x) for x in xs],
                  *[(lambda rng, s=s, d=d: (rng.normal(size=s) * 3).astype(NP_DTYPES[d])) for s in SHAPES]),
        ]
    for d in FLOAT + HALF + ("i32",):
        moderate = (lambda s, d=d: (lambda rng: rng.integers(-8, 8, s).astype(NP_DTYPES[d])))
        cases += [
            _case("BiasAddGrad", d, "NHWC", lambda a, b, c, e: [R.BiasAddGrad(out_backprop=t) for t in (a, b, c, e)],
                  moderate((2, 3, 4, 5)), moderate((7, 3)), moderate((2, 1, 3, 2, 4)), moderate((0, 3))),
            _case("BiasAddGrad", d, "NCHW",
                  lambda a, b: [R.BiasAddGrad(out_backprop=t, data_format="NCHW") for t in (a, b)],
                  moderate((2, 3, 4, 5)), moderate((2, 3, 1, 2, 4))),
        ]
        if is_float(d):
            cases.append(_case("BiasAddGrad", d, "specials", lambda x: R.BiasAddGrad(out_backprop=x),
                               np.resize(unary_values(d), (6, 7))))
    return cases


@pytest.mark.parametrize("case", params(misc_cases()))
def test_onehot_l2loss_biasaddgrad(case):
    check(case)


# ---------------------------------------------------------- cross-entropy

def xent_logits(d, rng):
    x = (rng.integers(-16, 16, (8, 5)) / 4).astype(NP_DTYPES[d])
    x[1, :] = 0
    x[2, 0] = np.inf
    x[3, 1] = np.nan
    x[4, 2] = -np.inf
    x[5, :] = -np.inf
    x[6, :] = [1e4, -1e4, 3e4 if d in HALF else 1e30, 0, -0.0]
    return x


def xent_labels(d, rng):
    y = rng.random((8, 5)).astype(np.float64)
    y /= y.sum(1, keepdims=True)
    y[0] = [0, 0, 1, 0, 0]
    y[7] = [0.5, -0.5, 2, 0, 0]           # labels need not be a distribution
    return y.astype(NP_DTYPES[d])


def _xla(fn):
    f = tf.function(fn, jit_compile=True)
    return lambda *args: f(*args)


def xent_cases() -> list:
    cases = []
    tol = {"f16": (4e-3, 2e-3), "bf16": (3.2e-2, 2e-2)}
    for d in FLOAT + HALF:
        dense = lambda l, y: R.SoftmaxCrossEntropyWithLogits(features=l, labels=y)   # noqa: E731
        sparse = lambda l, y: R.SparseSoftmaxCrossEntropyWithLogits(features=l, labels=y)   # noqa: E731
        cases += [
            _case("SoftmaxCrossEntropyWithLogits", d, "specials", dense,
                  lambda rng, d=d: xent_logits(d, rng), lambda rng, d=d: xent_labels(d, rng), tol=tol.get(d)),
            _case("SoftmaxCrossEntropyWithLogits", d, "broadcast",
                  lambda l1, y1, l2, y2: [*dense(l1, y1), *dense(l2, y2)],
                  lambda rng, d=d: xent_logits(d, rng), lambda rng, d=d: xent_labels(d, rng)[:1].copy(),
                  lambda rng, d=d: xent_logits(d, rng)[:1].copy(), lambda rng, d=d: xent_labels(d, rng),
                  tol=tol.get(d)),
            _case("SoftmaxCrossEntropyWithLogits", d, "shapes",
                  lambda l1, y1, l2, y2, l3, y3: [*dense(l1, y1), *dense(l2, y2), *dense(l3, y3)],
                  _like(d, (1, 1)), _like(d, (1, 1)), _like(d, (0, 4)), _like(d, (0, 4)),
                  _like(d, (3, 1)), _like(d, (3, 1)), tol=tol.get(d)),
        ]
        for lt in ("i32", "i64"):
            labels = np.array([0, 1, 2, 3, 4, 0, 1, 4], NP_DTYPES[lt])
            cases += [
                _case("SparseSoftmaxCrossEntropyWithLogits", f"{d}-labels-{lt}", "specials", sparse,
                      lambda rng, d=d: xent_logits(d, rng), labels, tol=tol.get(d)),
                _case("SparseSoftmaxCrossEntropyWithLogits", f"{d}-labels-{lt}", "shapes",
                      lambda l1, y1, l2, y2: [*sparse(l1, y1), *sparse(l2, y2)],
                      _like(d, (1, 1)), np.zeros((1,), NP_DTYPES[lt]), _like(d, (0, 3)),
                      np.zeros((0,), NP_DTYPES[lt]), tol=tol.get(d)),
                # TF's CPU kernel raises on labels outside [0, classes); TF's XLA and GPU
                # kernels give NaN rows, as tfjit does: TF's XLA is the oracle here.
                _case("SparseSoftmaxCrossEntropyWithLogits", f"{d}-labels-{lt}", "out-of-range", sparse,
                      lambda rng, d=d: xent_logits(d, rng), np.array([0, 5, -1, 3, 4, 9, 1, -100], NP_DTYPES[lt]),
                      oracle=_xla(sparse), tol=tol.get(d)),
            ]
    return cases


@pytest.mark.parametrize("case", params(xent_cases()))
def test_cross_entropy(case):
    check(case)


def test_sparse_cross_entropy_constant_labels_out_of_range():
    """Compile-time labels outside [0, classes): refused with TF's CPU message."""
    def fn(logits):
        return R.SparseSoftmaxCrossEntropyWithLogits(features=logits, labels=tf.constant([0, 3]))
    x = tf.zeros([2, 3])
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside the valid range of \\[0, 3\\)"):
        tf.function(fn)(x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside the valid range of \\[0, 3\\)"):
        tfjit.function(fn, jit_compile=True)(x)


# ------------------------------------------------------------ movement gradients

# (input shape, begin, end, strides, begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask)
STRIDED = {
    "[1:3]": ((4, 5, 6), [1], [3], [1], 0, 0, 0, 0, 0),
    "[::-1]": ((4, 5, 6), [0], [0], [-1], 1, 1, 0, 0, 0),
    "[::2, 1]": ((4, 5, 6), [0, 1], [0, 2], [2, 1], 1, 1, 0, 0, 2),
    "[..., None, 0]": ((4, 5, 6), [0, 0, 0], [0, 0, 1], [1, 1, 1], 0, 0, 1, 2, 4),
    "[-1]": ((4, 5, 6), [-1], [0], [1], 0, 0, 0, 0, 1),
    "[:, -3:-1]": ((4, 5, 6), [0, -3], [0, -1], [1, 1], 1, 1, 0, 0, 0),
    "[3:1]": ((4, 5, 6), [3], [1], [1], 0, 0, 0, 0, 0),
    "[1::-2]": ((4, 5, 6), [1], [0], [-2], 0, 1, 0, 0, 0),
    "[:, ::-2, 1:]": ((4, 5, 6), [0, 0, 1], [0, 0, 0], [1, -2, 1], 7, 7, 0, 0, 0),
    "[-100:100, 2:-100]": ((4, 5, 6), [-100, 2], [100, -100], [1, 1], 0, 0, 0, 0, 0),
    "[None, 1, ..., ::3]": ((4, 5, 6), [0, 1, 0, 0], [0, 2, 0, 0], [1, 1, 1, 3], 9, 9, 4, 1, 2),
    "[0, 0, 0]": ((4, 5, 6), [0, 0, 0], [1, 1, 1], [1, 1, 1], 0, 0, 0, 0, 7),
    "[3:0:-2, -1:0:-2, 1:6:2]": ((4, 5, 6), [3, -1, 1], [0, 0, 6], [-2, -2, 2], 0, 0, 0, 0, 0),
    "[::3] of 1": ((1, 7), [0, 0], [0, 0], [3, 3], 3, 3, 0, 0, 0),
    "empty input": ((3, 0), [1, 0], [3, 0], [1, 1], 0, 2, 0, 0, 0),
}


def _strided_grad(spec):
    shape, begin, end, strides, bm, em, elm, nam, sam = spec
    masks = dict(begin_mask=bm, end_mask=em, ellipsis_mask=elm, new_axis_mask=nam, shrink_axis_mask=sam)
    dy_shape = tf.raw_ops.StridedSlice(input=tf.zeros(shape), begin=begin, end=end, strides=strides,
                                       **masks).shape
    fn = lambda dy: R.StridedSliceGrad(shape=list(shape), begin=begin, end=end, strides=strides,   # noqa: E731
                                       dy=dy, **masks)
    return fn, tuple(dy_shape)


MIRROR_PADS = {"REFLECT": [[1, 2], [0, 2], [2, 1]], "SYMMETRIC": [[2, 1], [3, 0], [0, 3]]}


def movement_cases() -> list:
    cases = []
    for d in ("f32", "f64", "i32", "i64", "bool", "bf16"):
        for name, spec in STRIDED.items():
            fn, dy_shape = _strided_grad(spec)
            cases.append(_case("StridedSliceGrad", d, name, fn, _like(d, dy_shape)))
        for mode, pads in MIRROR_PADS.items():
            cases.append(_case("MirrorPad", d, mode, lambda x, e, mode=mode, pads=pads: [
                R.MirrorPad(input=x, paddings=pads, mode=mode),
                R.MirrorPad(input=x, paddings=[[0, 0], [0, 0], [0, 0]], mode=mode),
                # an empty dim can be mirrored only with SYMMETRIC (TF rejects REFLECT there)
                R.MirrorPad(input=e, paddings=[[1, 1], [0, 0]], mode="SYMMETRIC")], _like(d, (3, 4, 4)),
                _like(d, (3, 0))))
    for d in FLOAT + ("i32", "f16"):
        for mode, pads in MIRROR_PADS.items():
            small = (lambda s, d=d: (lambda rng: rng.integers(-8, 8, s).astype(NP_DTYPES[d])))
            cases.append(_case("MirrorPadGrad", d, mode, lambda g, mode=mode, pads=pads: [
                R.MirrorPadGrad(input=g, paddings=pads, mode=mode),
                R.MirrorPadGrad(input=g, paddings=[[0, 0], [0, 0], [0, 0]], mode=mode)],
                small((3 + sum(pads[0]), 4 + sum(pads[1]), 4 + sum(pads[2])))))
    for d in ("i32", "i64"):
        t = TF_DTYPES[d]
        cases.append(_case("ConcatOffset", d, "cases", lambda x, t=t: [
            x, *R.ConcatOffset(concat_dim=tf.constant(1), shape=[tf.constant([2, 3], t), tf.constant([2, 5], t),
                                                                  tf.constant([2, 0], t)]),
            *R.ConcatOffset(concat_dim=tf.constant(-2), shape=[tf.constant([2, 3], t), tf.constant([4, 3], t)])],
            _like(d, (3,))))
        cases.append(_case("InvertPermutation", d, "cases", lambda x, t=t: [
            R.Transpose(x=x, perm=R.InvertPermutation(x=tf.constant([2, 0, 1], t))),
            R.InvertPermutation(x=tf.constant([3, 1, 0, 2], t))], _like(d, (2, 3, 4))))
    return cases


@pytest.mark.parametrize("case", params(movement_cases()))
def test_movement_gradients(case):
    check(case)


# ----------------------------------------------------------- through GradientTape

def _tape(fn, *xs):
    with tf.GradientTape() as tape:
        for x in xs:
            tape.watch(x)
        y = fn(*xs)
        loss = tf.reduce_sum(y * y * 0.5 + y)
    return [y, *tape.gradient(loss, list(xs))]


TAPES = {
    "pad": (lambda x: tf.pad(x, [[1, 2], [0, 1]]), [(3, 4)]),
    "pad reflect": (lambda x: tf.pad(x, [[1, 2], [0, 3]], mode="REFLECT"), [(4, 5)]),
    "pad symmetric": (lambda x: tf.pad(x, [[1, 2], [0, 3]], mode="SYMMETRIC"), [(4, 5)]),
    "tile": (lambda x: tf.tile(x, [2, 3]), [(3, 4)]),
    "strided slice": (lambda x: x[1:, ::-2], [(3, 4)]),
    "slice": (lambda x: tf.slice(x, [1, 1], [1, 2]), [(3, 4)]),
    "concat": (lambda x, y: tf.concat([x, y, x], 1), [(3, 4), (3, 2)]),
    "transpose": (lambda x: tf.transpose(x, [2, 0, 1]), [(2, 3, 4)]),
    "bias_add": (lambda x, b: tf.nn.bias_add(x, b), [(3, 4), (4,)]),
    "bias_add NCHW": (lambda x, b: tf.nn.bias_add(x, b, data_format="NCHW"), [(2, 4, 3, 3), (4,)]),
    "xent": (lambda x, y: tf.nn.softmax_cross_entropy_with_logits(tf.nn.softmax(y), x), [(3, 4), (3, 4)]),
    "sparse xent": (lambda x: tf.nn.sparse_softmax_cross_entropy_with_logits(tf.constant([0, 1, 3]), x), [(3, 4)]),
    "l2_loss": (lambda x: tf.nn.l2_loss(x), [(3, 4)]),
    "one_hot": (lambda x: tf.one_hot(tf.constant([0, 2, 5]), 4) * x, [(3, 4)]),
    "erfc": (lambda x: tf.math.erfc(x), [(3, 4)]),
    "reduce_max": (lambda x: tf.reduce_max(x, 1), [(3, 4)]),
    "moments": (lambda x: tf.nn.moments(x, [0])[1], [(3, 4)]),
}


@pytest.mark.parametrize("name", list(TAPES))
def test_gradient_tape(name):
    fn, shapes = TAPES[name]
    rng = np.random.default_rng(len(name))
    xs = [tf.constant(rng.normal(size=s).astype(np.float32)) for s in shapes]
    f = lambda *a: _tape(fn, *a)       # noqa: E731
    got = tfjit.function(f, jit_compile=True)(*xs)
    want = tf.function(f)(*xs)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_matches(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5, what=f"{name}: output {k}")


def test_broadcast_gradient_args_folds():
    """BroadcastGradientArgs of static shapes is a compile-time constant: its
    result can feed a reduction's axes (which must be constants)."""
    def fn(x, y):
        r0, r1 = R.BroadcastGradientArgs(s0=tf.shape(x), s1=tf.shape(y))
        g = x + y
        return (tf.reshape(tf.reduce_sum(g, axis=r0), tf.shape(x)),
                tf.reshape(tf.reduce_sum(g, axis=r1), tf.shape(y)), r0, r1)
    rng = np.random.default_rng(0)
    x, y = (tf.constant(rng.normal(size=s).astype(np.float32)) for s in ((3, 1, 4), (2, 1)))
    f = tfjit.function(fn, jit_compile=True)
    for k, (g, w) in enumerate(zip(f(x, y), tf.function(fn)(x, y))):
        assert_matches(g.numpy(), w.numpy(), what=f"output {k}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=lambda d: d.__name__)
def test_mish_matches_tf_and_its_factor_is_one_exp(dtype):
    """x * tanh(softplus(x)) (keras.activations.mish): passes/simplify.MishFactor makes
    tanh(softplus(x)) one exp and a division in float32/float64 (halves keep the ops).
    Specials, both sides of the switch to 1 at x = 20 (float64: 40), where e (e + 2)
    would overflow (x = 44 in float32), and tiny factors (x = -100)."""
    def mish(x):
        return x * tf.tanh(tf.nn.softplus(x))
    large = 40.0 if dtype is np.float64 else 20.0
    values = [0.0, -0.0, 1e-30, -1e-30, 0.5, -3.0, 5.0, -16.6, large - 0.1, large, large + 0.1,
              44.0, 45.0, 88.0, 89.0, 700.0, -87.0, -104.0, -200.0, np.inf, -np.inf, np.nan]
    with np.errstate(over="ignore"):
        x = tf.constant(np.concatenate([values, np.linspace(-30, 30, 2001)]).astype(dtype))
    f = tfjit.function(mish, jit_compile=True)
    assert_matches(f(x).numpy(), tf.function(mish)(x).numpy(), what=f"mish {dtype.__name__}")
    after = f.compiled(x).module_after
    rewritten = dtype is not np.float16
    assert ("softplus" in after) is not rewritten and ("tanh" in after) is not rewritten, after
