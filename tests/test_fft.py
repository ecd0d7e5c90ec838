"""TF's FFT ops (lower/fft.py: one ``fft`` runtime-library call running TF's own
kernel under the launch op) against TF's executor, bit for bit.

Each row is one op; a row compiles once per dtype with all of its shapes as arguments
of one function (one element, a prime length, batch dims, cropped RFFT/IRFFT inputs,
an empty batch), so the table stays cheap.  The interpreter (numpy's FFT) is checked
within tolerance on the same modules.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit.api.service import SERVICE
from tfjit.ir import interp, text

COMPLEX = {"c64": np.complex64, "c128": np.complex128}
REAL = {"c64": np.float32, "c128": np.float64}
SPECIALS = np.array([np.inf, -np.inf, np.nan, -0.0])

# (name, TF op, shapes) for the complex -> complex transforms
C2C = [
    ("fft", tf.signal.fft, [(1,), (7,), (2, 3, 8), (0, 4)]),
    ("ifft", tf.signal.ifft, [(1,), (13,), (2, 3, 8)]),
    ("fft2d", tf.signal.fft2d, [(1, 1), (3, 5), (2, 4, 6)]),
    ("ifft2d", tf.signal.ifft2d, [(1, 1), (3, 5), (2, 4, 6)]),
    ("fft3d", tf.signal.fft3d, [(1, 1, 1), (2, 3, 5), (2, 2, 3, 4)]),
    ("ifft3d", tf.signal.ifft3d, [(1, 1, 1), (2, 3, 5), (2, 2, 3, 4)]),
]
# (name, TF op, [(input shape, fft_length)]) for the real transforms: inputs longer than
# fft_length are cropped by TF's kernel; IRFFT's last input dim needs n // 2 + 1
REAL_FFTS = [
    ("rfft", tf.signal.rfft, [((1,), [1]), ((7,), [7]), ((2, 3, 8), [8]), ((2, 9), [6]),
                              ((0, 8), [8])]),
    ("irfft", tf.signal.irfft, [((1,), [1]), ((7,), [12]), ((2, 3, 5), [8]), ((2, 9), [9])]),
    ("rfft2d", tf.signal.rfft2d, [((1, 1), [1, 1]), ((3, 7), [3, 7]), ((2, 5, 6), [4, 5])]),
    ("irfft2d", tf.signal.irfft2d, [((1, 1), [1, 1]), ((3, 4), [3, 7]), ((2, 5, 6), [4, 8])]),
    ("rfft3d", tf.signal.rfft3d, [((1, 1, 1), [1, 1, 1]), ((2, 3, 4, 5), [3, 4, 5])]),
    ("irfft3d", tf.signal.irfft3d, [((1, 1, 1), [1, 1, 1]), ((2, 3, 4, 3), [3, 4, 4])]),
]


def _complex(rng, shape, d, special=False):
    parts = rng.standard_normal((2,) + shape)
    if special:
        mask = rng.random(parts.shape) < 0.2
        parts = np.where(mask, rng.choice(SPECIALS, parts.shape), parts)
    out = np.empty(shape, COMPLEX[d])
    out.real, out.imag = parts
    return out


def _bits(x):
    x = np.ascontiguousarray(np.asarray(x))
    return x.dtype, x.shape, x.view(np.uint8).tobytes()


def _assert_same_bits(got, want, what):
    for k, (g, w) in enumerate(zip(tf.nest.flatten(got), tf.nest.flatten(want))):
        assert _bits(g) == _bits(w), f"{what}[{k}]: {np.asarray(g)} != TF's {np.asarray(w)}"


def _check_interpreter(compiled, args, want, d):
    """The module before optimisation, run by the interpreter (numpy's FFT)."""
    m = text.parse_module(compiled.module_before)
    views = [np.ascontiguousarray(a).view(REAL[d]).reshape(a.shape + (2,)) if a.dtype.kind == "c"
             else a for a in args]
    outs = interp.evaluate(m, views)
    rtol = {"c64": 2e-5, "c128": 1e-12}[d]
    for k, (o, w) in enumerate(zip(outs, want)):
        w = np.asarray(w)
        if w.dtype.kind == "c":
            o = o.view(w.dtype)[..., 0]
            for part in ("real", "imag"):
                assert_matches(getattr(o, part), getattr(w, part), rtol=rtol, atol=rtol * 10,
                               what=f"interp[{k}].{part}", check_zero_sign=False)
        else:
            assert_matches(o, w, rtol=rtol, atol=rtol * 10, what=f"interp[{k}]", check_zero_sign=False)


@pytest.mark.parametrize("d", sorted(COMPLEX))
@pytest.mark.parametrize("row", C2C, ids=[r[0] for r in C2C])
def test_complex_to_complex(row, d):
    name, op, shapes = row
    rng = np.random.default_rng(len(name) + 7 * len(shapes[-1]))
    args = [_complex(rng, s, d) for s in shapes]
    fn = lambda *xs: [op(x) for x in xs]      # noqa: E731
    f = tfjit.function(fn, jit_compile=True)
    want = tf.function(fn)(*args)
    _assert_same_bits(f(*args), want, name)
    _check_interpreter(f.compiled(*args), args, want, d)


@pytest.mark.parametrize("d", sorted(COMPLEX))
@pytest.mark.parametrize("row", REAL_FFTS, ids=[r[0] for r in REAL_FFTS])
def test_real_transforms(row, d):
    name, op, cases = row
    rng = np.random.default_rng(len(name))
    forward = not name.startswith("i")
    args = [rng.standard_normal(s).astype(REAL[d]) if forward else _complex(rng, s, d) for s, _ in cases]
    lengths = [n for _, n in cases]
    fn = lambda *xs: [op(x, fft_length=n) for x, n in zip(xs, lengths)]    # noqa: E731
    f = tfjit.function(fn, jit_compile=True)
    want = tf.function(fn)(*args)
    _assert_same_bits(f(*args), want, name)
    _check_interpreter(f.compiled(*args), args, want, d)


@pytest.mark.parametrize("d", sorted(COMPLEX))
def test_special_values_and_a_fed_fft_length(d):
    """inf/NaN/-0 parts go through TF's kernel as they are; a fed fft_length is a
    constant argument (one compile per value), as XLA's must-be-constant operand."""
    rng = np.random.default_rng(3)
    z = _complex(rng, (4, 16), d, special=True)
    x = np.where(rng.random((4, 16)) < 0.2, rng.choice(SPECIALS, (4, 16)),
                 rng.standard_normal((4, 16))).astype(REAL[d])

    def fn(z, x, n):
        return tf.signal.fft(z), tf.signal.ifft2d(z), tf.signal.rfft(x, n), tf.signal.irfft(z, n)
    f = tfjit.function(fn, jit_compile=True)
    for n in ([16], [11]):
        args = (z, x, tf.constant(n, tf.int32))
        _assert_same_bits(f(*args), tf.function(fn)(*args), f"special, fft_length {n}")
    (entry,) = f._entries.values()
    assert entry.spec.constant_args and len(SERVICE.variants[entry.spec.key]) == 2


def test_auto_clustering_compiles_an_fft_chain():
    """jit_compile=None: a spectral filter (rfft, scale, irfft) clusters and compiles."""
    rng = np.random.default_rng(4)
    x = tf.constant(rng.standard_normal((3, 32)))

    def fn(x):
        spectrum = tf.signal.rfft(x, [32]) * tf.complex(tf.linspace(1.0, 0.0, 17), tf.zeros([17]))
        return tf.signal.irfft(tf.cast(spectrum, tf.complex128), [32]) * 2.0
    fn64 = lambda x: fn(tf.cast(x, tf.float32))      # noqa: E731
    f = tfjit.function(fn64, jit_compile=None)
    _assert_same_bits(f(x), tf.function(fn64)(x), "auto")
    assert f.experimental_get_compile_count() >= 1


def test_fft_of_a_computed_value_and_its_result_in_a_product():
    """The operand is packed into its real view where it is computed; the result's parts
    feed an elementwise kernel."""
    rng = np.random.default_rng(5)
    z, w = (tf.constant(_complex(rng, (5, 6), "c64")) for _ in range(2))
    fn = lambda z, w: tf.signal.fft2d(z * w + 1) * tf.math.conj(w)       # noqa: E731
    _assert_same_bits(tfjit.function(fn, jit_compile=True)(z, w), tf.function(fn)(z, w), "chain")


def test_a_zero_fft_length_gives_an_empty_result():
    """fft_length 0 on a non-empty input: TF's shape function says the result is empty,
    and so is tfjit's (no call is made).  TF's kernel itself aborts the process there
    (DUCC's "no zero-sized FFTs" / "axis length mismatch" assertions, TF 2.21), so this
    is checked against TF's static shapes, not its executor."""
    x, z = np.ones((3, 4), np.float32), np.ones((3, 4), np.complex64)
    fn = lambda x, z: (tf.signal.rfft(x, [0]), tf.signal.irfft(z, [0]))     # noqa: E731
    got = tfjit.function(fn, jit_compile=True)(x, z)
    shapes = [t.shape for t in tf.function(fn).get_concrete_function(x, z).structured_outputs]
    assert [g.shape for g in got] == shapes == [(3, 0), (3, 0)]
    assert [g.dtype for g in got] == [tf.complex64, tf.float32]


@pytest.mark.parametrize("fn, args, reason", [
    (lambda x: tf.raw_ops.RFFT(input=x, fft_length=[4]), [np.zeros((3, 0), np.float32)],
     "RFFT of an empty \\[3, 0\\] input to a non-empty result"),
    (lambda x, n: tf.raw_ops.RFFT(input=x, fft_length=n), [np.zeros((3, 4), np.float32),
                                                           np.array([6], np.int32)],
     "input dimension 1 must have length of at least 6 but got 4"),
])
def test_refusals_name_the_reason(fn, args, reason):
    with pytest.raises(tf.errors.InvalidArgumentError, match=reason):
        tfjit.function(fn, jit_compile=True)(*[tf.constant(a) for a in args])


def test_tfjit_aot_refuses_ffts(tmp_path):
    """tfjit-aot's runtime has no FFT (TF's CPU FFT is DUCC's): the compile says so."""
    from tfjit.aot import compile as aot
    from tfjit.aot import config as aot_config
    from tfjit.aot import frontend
    from tfjit.aot.config import AotError
    with tf.Graph().as_default() as g:
        x = tf.compat.v1.placeholder(tf.float32, [2, 8], name="x")
        tf.math.real(tf.signal.fft(tf.complex(x, x)), name="out")
    path = tmp_path / "g.pb"
    path.write_bytes(g.as_graph_def().SerializeToString())
    config = tmp_path / "c.pbtxt"
    config.write_text('feed { id { node_name: "x" } shape { dim { size: 2 } dim { size: 8 } } }\n'
                      'fetch { id { node_name: "out" } }\n')
    cluster = frontend.from_graph_def(frontend.read_graph_def(str(path)), aot_config.read(str(config)))
    with pytest.raises(AotError, match="cannot compile fft {{node FFT}}: tfjit-aot code cannot run TF's "
                       "FFT kernel"):
        aot.compile_cluster(cluster, "m")


def test_the_host_runner_fails_an_fft_with_the_reason():
    """Outside TfjitLaunch (runtime/host.py: tools, run-module) there is no FFT: the run
    fails naming the op, its node and why, never a wrong result."""
    from tfjit.runtime import host
    z = tf.constant(np.ones([2, 8], np.complex64))
    compiled = tfjit.function(lambda z: tf.signal.fft(z) * 2, jit_compile=True).compiled(z)
    with pytest.raises(ValueError, match="TensorFlow's FFT kernel failed .*node .*runs under "
                                         "TfjitLaunch only: tfjit's host runner has no FFT"):
        host.run_compiled(compiled, [z.numpy()])


def test_gradients_through_ffts():
    """TF's gradients of RFFT, FFT2D and IRFFT are FFTs too: the whole step compiles,
    the FFTs bit for bit (the gradient here), the sum within tolerance."""
    x = tf.constant(np.random.default_rng(6).standard_normal((3, 16)))

    def fn(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            s = tf.signal.rfft(tf.cast(x, tf.float32), [16])
            z = tf.signal.fft2d(s * s)
            y = tf.reduce_sum(tf.abs(tf.signal.irfft(z, [16])))
        return y, tape.gradient(y, x)
    (y, dx), (y_tf, dx_tf) = tfjit.function(fn, jit_compile=True)(x), tf.function(fn)(x)
    assert_matches(y.numpy(), y_tf.numpy(), what="sum")
    _assert_same_bits([dx], [dx_tf], "gradient")
