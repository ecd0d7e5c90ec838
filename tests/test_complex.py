"""complex64/complex128 (tfjit/lower/complex.py, complex_math.py) against TF's executor.

Each table row is one op; a row compiles once per dtype with every shape as one
argument of the same function (scalar, one element, a prime size, a matrix, and a
broadcast pair for binary ops), so the table stays cheap.  Rows marked ``special``
also get inf, NaN and -0.0 components, where TF's result does not depend on which of
Eigen's code paths (vectorised or scalar tail) computed an element.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit import dtypes as dt
from tfjit.ir import interp, text

DTYPES = {"c64": np.complex64, "c128": np.complex128}
SHAPES = [(), (1,), (7,), (3, 5)]
BINARY_SHAPES = [((), ()), ((1,), (1,)), ((7,), (7,)), ((3, 5), (5,)), ((4, 1), (1, 3))]
SPECIALS = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0])
# rtol beyond the oracle's default: results of several roundings (division, hypot)
RTOL = {"c64": 1e-5, "c128": 1e-12}


def _values(rng, shape, dtype, special):
    parts = rng.standard_normal((2,) + shape) * 2
    if special:
        mask = rng.random(parts.shape) < 0.3
        parts = np.where(mask, rng.choice(SPECIALS, parts.shape), parts)
    out = np.empty(shape, dtype)
    out.real, out.imag = parts      # never 1j * inf (NaN real part)
    return out


def _check(got, want, d, what):
    for k, (g, w) in enumerate(zip(tf.nest.flatten(got), tf.nest.flatten(want))):
        g, w = np.asarray(g), np.asarray(w)
        if w.dtype.kind == "c":            # each part as the oracle compares floats
            assert g.dtype == w.dtype, f"{what}: {g.dtype} != TF's {w.dtype}"
            for part in ("real", "imag"):
                assert_matches(getattr(g, part), getattr(w, part), rtol=RTOL[d], what=f"{what}[{k}].{part}")
        elif w.dtype.kind == "f":
            assert_matches(g, w, rtol=RTOL[d], what=f"{what}[{k}]")
        else:
            assert_matches(g, w, what=f"{what}[{k}]")


def _compare(fn, args, d, what):
    got = tfjit.function(fn, jit_compile=True)(*args)
    want = tf.function(fn)(*args)
    _check(got, want, d, what)


# (name, fn, special values defined)
UNARY = [
    ("real", tf.math.real, True),
    ("imag", tf.math.imag, True),
    ("conj", tf.math.conj, True),
    ("neg", tf.negative, True),
    ("abs", tf.abs, True),
    ("complex_abs", lambda z: tf.raw_ops.ComplexAbs(x=z, Tout=z.dtype.real_dtype), True),
    ("angle", tf.math.angle, True),
    ("identity", lambda z: tf.identity(z), True),
    ("square", tf.square, False),
    ("reciprocal", tf.math.reciprocal, False),
    ("sign", tf.sign, False),
    ("zeros_like", lambda z: (tf.zeros_like(z), z), True),
    ("ones_like", lambda z: tf.ones_like(z) - z, True),
    ("fill", lambda z: tf.fill([2, 3], tf.reduce_sum(z)), False),
    ("cast_f32", lambda z: tf.cast(z, tf.float32), True),
    ("cast_f64", lambda z: tf.cast(z, tf.float64), True),
    ("cast_i32", lambda z: tf.cast(z, tf.int32), False),
    ("cast_c64", lambda z: tf.cast(z, tf.complex64), True),
    ("cast_c128", lambda z: tf.cast(z, tf.complex128), True),
    ("from_real", lambda z: tf.cast(tf.math.real(z), z.dtype) + tf.cast(3, z.dtype), True),
    ("const", lambda z: z * tf.constant(1.5 - 2j, z.dtype) + tf.constant([[0.25j]], z.dtype), False),
    ("sum", lambda z: tf.reduce_sum(z), False),
    ("sum_axis", lambda z: tf.reduce_sum(z, axis=-1, keepdims=True) if z.shape.rank else z, False),
    ("mean", lambda z: (tf.reduce_mean(z), tf.reduce_mean(z, axis=-1) if z.shape.rank else z), True),
    ("add_n", lambda z: tf.add_n([z, z * 2, tf.math.conj(z)]), True),
    ("sqrt", tf.sqrt, True),
    ("exp", tf.exp, True),
    ("expm1", tf.math.expm1, True),
    ("sin", tf.sin, True),
    ("cos", tf.cos, True),
    ("sinh", tf.sinh, True),
    ("cosh", tf.cosh, True),
    ("tanh", tf.tanh, True),
    ("tan", tf.tan, True),
    ("asin", tf.asin, True),
    ("acos", tf.acos, True),
    ("atan", tf.atan, True),
    ("asinh", tf.asinh, True),
    ("acosh", tf.acosh, True),
    ("atanh", tf.atanh, True),
    ("log", tf.math.log, True),
]

BINARY = [
    ("add", tf.add, True),
    ("sub", tf.subtract, True),
    ("mul", tf.multiply, False),
    ("div", tf.math.divide, False),
    ("real_div", lambda a, b: tf.raw_ops.RealDiv(x=a, y=b), False),
    ("div_no_nan", tf.math.divide_no_nan, False),
    ("squared_difference", tf.math.squared_difference, False),
    ("equal", tf.equal, True),
    ("not_equal", tf.not_equal, True),
    ("select", lambda a, b: tf.where(tf.math.real(a) > tf.math.imag(a), a, a * 0 + b), True),
    ("complex", lambda a, b: tf.complex(tf.math.real(a), tf.math.imag(b)), True),
]


@pytest.mark.parametrize("d", sorted(DTYPES))
@pytest.mark.parametrize("row", UNARY, ids=[r[0] for r in UNARY])
def test_unary(row, d):
    name, fn, special = row
    rng = np.random.default_rng(zlib.crc32(f"u{name}{d}".encode()))
    args = [tf.constant(_values(rng, s, DTYPES[d], special)) for s in SHAPES]
    _compare(lambda *zs: [fn(z) for z in zs], args, d, name)


@pytest.mark.parametrize("d", sorted(DTYPES))
@pytest.mark.parametrize("row", BINARY, ids=[r[0] for r in BINARY])
def test_binary(row, d):
    name, fn, special = row
    rng = np.random.default_rng(zlib.crc32(f"b{name}{d}".encode()))
    args = []
    for sa, sb in BINARY_SHAPES:
        a, b = _values(rng, sa, DTYPES[d], special), _values(rng, sb, DTYPES[d], special)
        if special and a.size > 1:
            a.flat[0] = b.flat[0]      # equal pairs (Equal / NotEqual), the rest random
        args += [tf.constant(a), tf.constant(b)]
    if name == "div_no_nan":
        args[-1] = tf.constant(np.where(np.arange(3) == 1, 0, args[-1].numpy()).astype(DTYPES[d]))
    _compare(lambda *xs: [fn(a, b) for a, b in zip(xs[::2], xs[1::2])], args, d, name)


MOVEMENT = [
    ("reshape", lambda z: tf.reshape(z, [5, 4, 3])),
    ("expand_squeeze", lambda z: tf.squeeze(tf.expand_dims(z, 1), 1)),
    ("transpose", lambda z: tf.transpose(z, [2, 0, 1])),
    ("conj_transpose", lambda z: tf.raw_ops.ConjugateTranspose(x=z, perm=[1, 2, 0])),
    ("slice", lambda z: z[1:, ::2, -1]),
    ("concat", lambda z: tf.concat([z, tf.math.conj(z)], axis=1)),
    ("stack_unstack", lambda z: tf.stack(tf.unstack(z, axis=2)[::-1], axis=0)),
    ("tile", lambda z: tf.tile(z, [1, 2, 1])),
    ("broadcast_to", lambda z: tf.broadcast_to(z[:1], [4, 5, 3])),
    ("pad", lambda z: tf.pad(z, [[1, 0], [0, 2], [1, 1]], constant_values=tf.constant(1 + 2j, z.dtype))),
    ("reverse", lambda z: tf.reverse(z, [0, 2])),
    ("gather", lambda z: tf.gather(z, [3, 0, 3], axis=1)),
    ("split", lambda z: tf.split(z, [1, 2], axis=2)),
    ("shape", lambda z: (tf.shape(z), tf.size(z), z + tf.cast(tf.rank(z), z.dtype))),
    ("identity_n", lambda z: tf.identity_n([tf.math.real(z) * 2, z * 2, tf.shape(z),
                                            tf.complex(tf.math.real(z), tf.math.real(z))])),
    ("bias_add", lambda z: tf.nn.bias_add(z, z[0, 0])),
    ("diag_band", lambda z: (tf.linalg.diag_part(z), tf.linalg.band_part(z, 1, 0),
                             tf.linalg.diag(z[0], k=1, padding_value=tf.constant(2j, z.dtype)))),
    ("depth_to_space", lambda z: tf.nn.depth_to_space(tf.reshape(z, [1, 3, 5, 4]), 2)),
    ("one_hot", lambda z: tf.one_hot([2, 0, 1], 3, on_value=z[0, 0, 0], off_value=z[1, 1, 1])),
    ("scatter_gather_nd", lambda z: (tf.gather_nd(z, [[1, 2], [3, 0]]),
                                     tf.tensor_scatter_nd_add(z, [[1], [1]], z[:2]))),
    ("segment_sum_cumsum", lambda z: (tf.math.unsorted_segment_sum(z, [1, 0, 1, 3], 4),
                                      tf.cumsum(z, axis=1, exclusive=True, reverse=True))),
]


@pytest.mark.parametrize("d", sorted(DTYPES))
@pytest.mark.parametrize("row", MOVEMENT, ids=[r[0] for r in MOVEMENT])
def test_movement(row, d):
    name, fn = row
    rng = np.random.default_rng(zlib.crc32(f"m{name}{d}".encode()))
    _compare(fn, [tf.constant(_values(rng, (4, 5, 3), DTYPES[d], True))], d, name)


PRODUCTS = [
    ("matmul", (3, 4), (4, 5), lambda a, b: tf.matmul(a, b)),
    ("transpose_a", (4, 3), (4, 5), lambda a, b: tf.raw_ops.MatMul(a=a, b=b, transpose_a=True)),
    ("adjoint_ab", (4, 3), (5, 4), lambda a, b: tf.matmul(a, b, adjoint_a=True, adjoint_b=True)),
    ("batch_adjoint", (2, 4, 3), (1, 4, 5), lambda a, b: tf.matmul(a, b, adjoint_a=True)),
    ("batch_adj_y", (2, 3, 4), (2, 5, 4), lambda a, b: tf.raw_ops.BatchMatMulV2(x=a, y=b, adj_y=True)),
    ("einsum", (2, 3, 4), (4, 5), lambda a, b: tf.einsum("bij,jk->bik", a, b)),
]


@pytest.mark.parametrize("d", sorted(DTYPES))
@pytest.mark.parametrize("row", PRODUCTS, ids=[r[0] for r in PRODUCTS])
def test_products(row, d):
    name, sa, sb, fn = row
    rng = np.random.default_rng(zlib.crc32(f"p{name}{d}".encode()))
    args = [tf.constant(_values(rng, s, DTYPES[d], False)) for s in (sa, sb)]
    _compare(fn, args, d, name)


def test_gradient_of_a_complex_program():
    """The tape's gradient of sum |z w| with respect to z and to a complex variable."""
    rng = np.random.default_rng(5)
    z = tf.constant(_values(rng, (6,), np.complex64, False))
    w = tf.Variable(_values(rng, (6,), np.complex64, False))

    def fn(z):
        with tf.GradientTape() as tape:
            tape.watch(z)
            loss = tf.reduce_sum(tf.abs(z * w))
        return loss, tape.gradient(loss, [z, w])
    _compare(fn, [z], "c64", "gradient")


def test_gradient_through_a_compiled_call():
    """A tape outside the compiled function: complex inputs and variables are
    differentiable (the backward compiles as its own cluster)."""
    rng = np.random.default_rng(4)
    z = tf.constant(_values(rng, (5,), np.complex64, False))
    w = tf.Variable(_values(rng, (5,), np.complex64, False))
    fn = lambda z: tf.reduce_sum(tf.abs(z * w) + tf.math.real(z * tf.math.conj(w)))  # noqa: E731
    grads = []
    for f in (tfjit.function(fn, jit_compile=True), tf.function(fn)):
        with tf.GradientTape() as tape:
            tape.watch(z)
            y = f(z)
        grads.append([y] + tape.gradient(y, [z, w]))
    assert all(g is not None for g in grads[0]), grads[0]
    _check(grads[0], grads[1], "c64", "outer gradient")


def test_complex_variable_is_read_and_assigned():
    rng = np.random.default_rng(6)
    init = _values(rng, (5,), np.complex128, False)
    v_jit, v_tf = tf.Variable(init), tf.Variable(init)
    step = _values(rng, (5,), np.complex128, False)

    def make(v):
        def fn(s):
            v.assign(v * s + tf.math.conj(s))
            return v.read_value() * 2
        return fn
    got = tfjit.function(make(v_jit), jit_compile=True)(tf.constant(step))
    want = tf.function(make(v_tf))(tf.constant(step))
    _check([got, v_jit.read_value()], [want, v_tf.read_value()], "c128", "variable")


def test_elementwise_chain_is_one_kernel_and_edges_are_views():
    """z * w + conj(z): the split of each input and the stacking of the result stay in
    the one fused kernel; the IR reads and writes the complex buffers as real views."""
    rng = np.random.default_rng(7)
    z, w = (tf.constant(_values(rng, (64, 33), np.complex64, False)) for _ in range(2))
    f = tfjit.function(lambda z, w: z * w + tf.math.conj(z), jit_compile=True)
    _check(f(z, w), z * w + tf.math.conj(z), "c64", "chain")
    compiled = f.compiled(z, w)
    assert compiled.num_kernels == 1, compiled.module_after
    assert "f32[64,33,2] parameter(0), complex=c64" in compiled.module_before
    assert "complex=c64)" in compiled.module_before     # the ROOT names the output's view
    # the text form reads back with its complex edges, and the interpreter runs it
    m = text.parse_module(compiled.module_before)
    assert text.module_str(m) == compiled.module_before
    assert m.boundary_params() == [(dt.C64, (64, 33))] * 2 and m.complex_outputs == {0: dt.C64}
    views = [np.ascontiguousarray(x.numpy()).view(np.float32).reshape(64, 33, 2) for x in (z, w)]
    out, = interp.evaluate(m, views)
    _check([out.view(np.complex64)[..., 0]], [z * w + tf.math.conj(z)], "c64", "interp")


EDGE_OPS = {"expm1": tf.math.expm1, "sin": tf.sin, "cos": tf.cos, "sinh": tf.sinh, "cosh": tf.cosh,
            "tanh": tf.tanh, "tan": tf.tan, "asin": tf.asin, "acos": tf.acos, "atan": tf.atan,
            "asinh": tf.asinh, "acosh": tf.acosh, "atanh": tf.atanh}


@pytest.mark.parametrize("d", sorted(DTYPES))
def test_libm_formulas_bit_for_bit_at_the_edges(d):
    """Expm1 (Eigen's scalar formula over the C library's expm1 and sin) and the
    trigonometric and hyperbolic functions and their inverses (the C library's csin ...
    per element), as TF's kernels: bit for
    bit, overflowing, tiny, huge and denormal parts included; the interpreter (the same
    C functions through ctypes) agrees on the module."""
    parts = [800.0, -800.0, 100.0, -100.0, 88.5, 1e-8, -1e-30, 3e5, 0.5, np.inf, np.nan, -0.0, 1e-40]
    grid = np.array([(a, b) for a in parts for b in parts])
    z = np.empty(len(grid), DTYPES[d])
    z.real, z.imag = grid[:, 0], grid[:, 1]
    fn = lambda z: {name: op(z) for name, op in EDGE_OPS.items()}      # noqa: E731
    f = tfjit.function(fn, jit_compile=True)
    got, want = f(tf.constant(z)), tf.function(fn)(tf.constant(z))
    m = text.parse_module(f.compiled(tf.constant(z)).module_before)
    normal = ~(np.abs(grid) == 1e-40).any(1)        # the interpreter runs without DAZ/FTZ
    view = np.ascontiguousarray(z).view(z.real.dtype).reshape(-1, 2)
    interpreted = dict(zip(sorted(EDGE_OPS), interp.evaluate(m, [view])))
    for name in EDGE_OPS:
        g, w = (np.asarray(v[name]).view(z.real.dtype) for v in (got, want))     # interleaved parts
        assert np.array_equal(np.isnan(g), np.isnan(w)), name
        assert np.nan_to_num(g).tobytes() == np.nan_to_num(w).tobytes(), name     # -0.0 kept
        assert_matches(interpreted[name].reshape(-1, 2)[normal], w.reshape(-1, 2)[normal], rtol=0,
                       atol=np.finfo(z.real.dtype).tiny, what=f"interp {name}")  # FTZ aside, equal


@pytest.mark.parametrize("fn, reason", [
    (lambda z: tf.math.log1p(z), "no tfjit lowering for 'Log1p' on complex64 tensors"),
    (lambda z: tf.reduce_prod(z), "Prod of complex tensors"),
    (lambda z: tf.cast(z, tf.bool), "Cast from complex to bool"),
    (lambda z: tf.pow(z, z), "no tfjit lowering for 'Pow' on complex64 tensors"),
    (lambda z: tf.math.rsqrt(z), "no tfjit lowering for 'Rsqrt' on complex64 tensors"),
])
def test_refused_ops_name_the_reason(fn, reason):
    z = tf.constant(np.ones([3], np.complex64))
    with pytest.raises(tf.errors.InvalidArgumentError, match=reason):
        tfjit.function(fn, jit_compile=True)(z)


def test_auto_clustering_compiles_complex_ops():
    """jit_compile=None: the complex ops cluster and compile; log1p (refused) stays TF's."""
    rng = np.random.default_rng(8)
    z, w = (tf.constant(_values(rng, (9,), np.complex128, False)) for _ in range(2))

    def fn(z, w):
        y = tf.math.conj(z * w - z) / (w + 1)
        return tf.abs(tf.math.log1p(y) + y), tf.math.angle(y)
    f = tfjit.function(fn, jit_compile=None)
    _check(f(z, w), tf.function(fn)(z, w), "c128", "auto")
    assert f.experimental_get_compile_count() >= 1


def test_conjugate_transpose_with_a_fed_perm():
    """The perm is a constant argument (compiled per value), as Transpose's."""
    rng = np.random.default_rng(9)
    z = tf.constant(_values(rng, (2, 3, 4), np.complex64, True))
    _compare(lambda z, p: tf.raw_ops.ConjugateTranspose(x=z, perm=p), [z, tf.constant([2, 0, 1])],
             "c64", "conjugate_transpose")


def test_run_module_on_a_dumped_complex_module(tmp_path, capsys):
    """tfjit-run-module feeds complex parameters as their real views, against the IR
    interpreter and against TF running the dumped cluster graph."""
    from tfjit import config
    from tfjit.api.run_module import main
    config.set_flags(tfjit_dump_to=str(tmp_path))
    try:
        z = tf.constant(np.ones([4, 3], np.complex128))
        tfjit.function(lambda z, x: (z * tf.complex(x, x) / (z + 2), tf.abs(z)), jit_compile=True)(
            z, tf.ones([3], tf.float64))
    finally:
        config.set_flags(tfjit_dump_to="")
    path, = [str(p) for p in tmp_path.glob("*.before_optimizations.txt")]
    assert main([path, "--iterations", "2"]) == 0
    assert main([path, "--iterations", "2", "--reference", "tf"]) == 0
    assert capsys.readouterr().out.count("0/2 runs miscompared") == 2


SPECIAL_OPS = {
    "mul": tf.multiply, "div": tf.math.divide, "div_no_nan": tf.math.divide_no_nan,
    "squared_difference": tf.math.squared_difference, "add": tf.add, "equal": tf.equal,
    "square": lambda x, y: tf.square(x), "reciprocal": lambda x, y: tf.math.reciprocal(x),
    "sign": lambda x, y: tf.sign(x), "abs": lambda x, y: tf.abs(x),
    "angle": lambda x, y: tf.math.angle(x), "sqrt": lambda x, y: tf.sqrt(x),
    "exp": lambda x, y: tf.exp(x), "log": lambda x, y: tf.math.log(x),
    "expm1": lambda x, y: tf.math.expm1(x), "sin": lambda x, y: tf.sin(x),
    "cos": lambda x, y: tf.cos(x), "sinh": lambda x, y: tf.sinh(x), "cosh": lambda x, y: tf.cosh(x),
    "tanh": lambda x, y: tf.tanh(x), "tan": lambda x, y: tf.tan(x), "asin": lambda x, y: tf.asin(x),
    "acos": lambda x, y: tf.acos(x), "atan": lambda x, y: tf.atan(x), "asinh": lambda x, y: tf.asinh(x),
    "acosh": lambda x, y: tf.acosh(x), "atanh": lambda x, y: tf.atanh(x),
}


@pytest.mark.parametrize("d", sorted(DTYPES))
def test_every_pair_of_special_components(d):
    """Every (x, y) with parts from {inf, -inf, NaN, -0, 0, 1.5, -2}: TF's vectorised
    kernels' results (the length is a multiple of 64, so no element is left to Eigen's
    scalar tail code, whose inf/NaN rules for division differ: C99's recovery)."""
    parts = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1.5, -2.0]
    grid = np.array([(a, b) for a in parts for b in parts])          # 49 complex values
    xs, ys = np.repeat(grid, len(grid), axis=0), np.tile(grid, (len(grid), 1))
    pad = -len(xs) % 64
    xs, ys = (np.concatenate([v, np.ones((pad, 2))]) for v in (xs, ys))
    x, y = (np.empty(len(v), DTYPES[d]) for v in (xs, ys))
    for z, v in ((x, xs), (y, ys)):
        z.real, z.imag = v[:, 0], v[:, 1]

    def fn(x, y):
        return {name: op(x, y) for name, op in SPECIAL_OPS.items()}
    got = tfjit.function(fn, jit_compile=True)(tf.constant(x), tf.constant(y))
    want = tf.function(fn)(tf.constant(x), tf.constant(y))
    for name in SPECIAL_OPS:
        _check([got[name]], [want[name]], d, name)
