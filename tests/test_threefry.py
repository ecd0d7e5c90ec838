"""Stateless RNG with alg THREEFRY (2): tfjit against TF's XLA, the only implementation.

TF's CPU kernels refuse alg 2 ("Unsupported algorithm id: 2", checked below), so
the oracle is the same graph under ``tf.function(jit_compile=True)`` (TF's XLA
bridge, lower/threefry.py follows its definition).  Bits, uniforms and ints must
equal XLA's to the bit.  Normals and truncated normals: XLA's CPU code uses a
vectorised f32 log of its own and fuses multiply-adds where the host has FMA,
so its last bits change with the tensor size and the CPU: f16/bf16 and f64
normals must still be bit-exact, f32 normals within 2 ulp, truncated normals
within a few ulp of 1 (2p - 1 cancels near 0).  tfjit's own values are checked
bit for bit between its interpreter (constant key and counter: the graph folds
while lowering) and compiled code.

XLA's f16 truncated normal also depends on the CPU: on a host with AVX512-FP16
(Sapphire Rapids) XLA's code contracts the f16 multiply-add that maps the uniform
onto [-1, 1] into one native f16 FMA (one rounding where the graph has two), so up
to a quarter of its values move (by up to 0.01 there, 80 ulp near 0).  tfjit gives
the same bits on every CPU; where the host has native f16 it is compared with XLA
within that, and bit for bit with XLA capped at AVX2 (``--xla_cpu_max_isa=AVX2``,
in a subprocess, since XLA reads its flags once): that check runs on every host.

Shapes cover XLA's choices of the dimension it halves for 32-bit outputs (first
even dimension; none even: the first largest), scalars, odd sizes and 0 sizes.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from test_random_ops import assert_bits_equal

R = tf.raw_ops
THREEFRY = 2
SHAPES = [(), (3, 0), (7,), (8,), (5, 4, 3), (5, 9, 9), (1031,)]   # each adds a kernel a case
# Normals draw their uniforms through the same bit layout: fewer shapes keep the file fast
NORMAL_SHAPES = [(), (7,), (5, 4, 3), (5, 9, 9), (1031,)]
KEYS_COUNTERS = [  # (key, counter): counters of lengths 1-3 (only counter[0] counts), wrapping round 2^64
    (0, [0]),
    (0x123456789ABCDEF0, [5, 7]),
    (2**64 - 1, [2**64 - 3, 1, 2]),
    (0xDEADBEEF, [2**32 - 2]),
]
FLOATS = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def _ints(d):
    return {"minval": tf.constant(-7, d), "maxval": tf.constant(1000, d)}


OPS = {  # op -> (dtypes, extra inputs)
    "StatelessRandomUniformV2": (FLOATS, lambda d: {"dtype": d}),
    "StatelessRandomUniformFullIntV2": ((tf.int32, tf.int64, tf.uint32, tf.uint64), lambda d: {"dtype": d}),
    "StatelessRandomUniformIntV2": ((tf.int32, tf.int64), _ints),
    "StatelessRandomNormalV2": (FLOATS, lambda d: {"dtype": d}),
    "StatelessTruncatedNormalV2": (FLOATS, lambda d: {"dtype": d}),
}
# the largest difference from XLA allowed, in ulp (None: bit-exact) or as atol
ULPS = {("StatelessRandomNormalV2", "float32"): 2}
ATOL = {("StatelessTruncatedNormalV2", "float32"): 2e-6, ("StatelessTruncatedNormalV2", "float64"): 4e-15}
# on hosts with native f16 only (module docstring); measured up to 0.0098 on Sapphire Rapids
F16_FMA_ATOL = {("StatelessTruncatedNormalV2", "float16"): 0.02}


def host_has_native_f16() -> bool:
    """Whether this CPU has AVX512-FP16, where XLA's f16 code fuses multiply-adds (decided
    at run time: the same suite runs on AMD EPYC, which has none, and Sapphire Rapids)."""
    from tfjit.codegen import llvm_target      # the features tfjit compiles for
    return llvm_target.has_feature(llvm_target.features(), "avx512fp16")


def _graph(op: str, d, shapes=SHAPES):
    extra = OPS[op][1]

    def fn(key, counter):
        return [getattr(R, op)(shape=list(s), key=key, counter=counter, alg=THREEFRY, **extra(d)) for s in shapes]
    return fn


def _args(key, counter):
    # through numpy: in a graph, tf.constant of a Python int >= 2^63 goes through a float
    return tf.constant(np.array([key], np.uint64)), tf.constant(np.array(counter, np.uint64))


def _ulps(got: np.ndarray, want: np.ndarray) -> int:
    if not got.size:
        return 0
    width = got.dtype.itemsize * 8
    g, w = (np.ascontiguousarray(x).view(f"i{width // 8}").astype(np.int64) for x in (got, want))
    return int(np.abs(g - w).max())


def _assert_close_to_xla(got, want, op: str, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    key = (op, want.dtype.name)
    atol = ATOL.get(key, F16_FMA_ATOL.get(key) if host_has_native_f16() else None)
    if atol is not None:
        assert got.dtype == want.dtype and got.shape == want.shape, what
        err = np.abs(got.astype(np.float64) - want.astype(np.float64)).max() if got.size else 0.0
        assert err <= atol, f"{what}: differs from XLA by {err} > {atol}"
    elif key in ULPS:
        assert got.dtype == want.dtype and got.shape == want.shape, what
        assert _ulps(got, want) <= ULPS[key], f"{what}: {_ulps(got, want)} ulp from XLA"
    else:
        assert_bits_equal(got, want, what)


@pytest.mark.parametrize("op, d", [pytest.param(op, d, id=f"{op}-{d.name}") for op in OPS for d in OPS[op][0]])
def test_threefry_matches_tf_xla(op, d):
    shapes = NORMAL_SHAPES if "Normal" in op else SHAPES
    fn = _graph(op, d, shapes)
    compiled, xla = tfjit.function(fn, jit_compile=True), tf.function(fn, jit_compile=True)
    for key, counter in KEYS_COUNTERS:
        args = _args(key, counter)
        for shape, g, w in zip(shapes, compiled(*args), xla(*args)):
            what = f"{op} {d.name} {list(shape)} key={key:#x} counter={counter}"
            _assert_close_to_xla(g.numpy(), w.numpy(), op, what)


_XLA_WITHOUT_F16_FMA = """
import sys, numpy as np, tensorflow as tf
sys.path.insert(0, sys.argv[1])
import test_threefry as T
fn = tf.function(T._graph("StatelessTruncatedNormalV2", tf.float16, T.NORMAL_SHAPES), jit_compile=True)
np.savez(sys.argv[2], *[t.numpy() for key, counter in T.KEYS_COUNTERS for t in fn(*T._args(key, counter))])
"""


def test_f16_truncated_normal_is_xla_without_native_f16(tmp_path):
    """The bit-exact side of the f16 truncated normal on every host: XLA with its ISA
    capped at AVX2 has no f16 FMA to contract into, and tfjit then equals it to the bit."""
    import subprocess
    import sys
    out = tmp_path / "xla_avx2.npz"
    env = dict(os.environ, XLA_FLAGS="--xla_cpu_max_isa=AVX2")
    done = subprocess.run([sys.executable, "-c", _XLA_WITHOUT_F16_FMA, os.path.dirname(__file__), str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    want = np.load(out)
    fn = tfjit.function(_graph("StatelessTruncatedNormalV2", tf.float16, NORMAL_SHAPES), jit_compile=True)
    got = [t.numpy() for key, counter in KEYS_COUNTERS for t in fn(*_args(key, counter))]
    assert len(got) == len(want.files)
    for k, g in enumerate(got):
        assert_bits_equal(g, want[f"arr_{k}"], f"f16 truncated normal, output {k}, vs XLA capped at AVX2")


def test_interpreter_agrees_with_codegen():
    """Constant key and counter fold through the IR interpreter while lowering; the
    same graph with runtime key and counter is compiled: the two agree to the bit."""
    shapes = [(), (5, 4, 3)]       # a scalar; 32-bit outputs halve the middle dimension
    key, counter = 0x0123456789ABCDEF, [2**64 - 9, 4]
    for op, (dtypes, _) in OPS.items():
        fns = [_graph(op, d, shapes) for d in dtypes]
        runtime = tfjit.function(lambda k, c: [f(k, c) for f in fns], jit_compile=True)(*_args(key, counter))
        folded = tfjit.function(lambda: [f(*_args(key, counter)) for f in fns], jit_compile=True)()
        for d, gs, fs in zip(dtypes, runtime, folded):
            for shape, g, f in zip(shapes, gs, fs):
                assert_bits_equal(g.numpy(), f.numpy(), f"{op} {d.name} {list(shape)}: compiled vs interpreter")


def test_public_api_with_alg_threefry():
    """tf.random's stateless functions with alg="threefry": TF builds the key from the
    seed (seed[0] | seed[1] << 32) and a zero counter u64[1]."""
    def fn(seed):
        return [tf.random.stateless_uniform([4, 7], seed, alg="threefry"),
                tf.random.stateless_uniform([9], seed, minval=-3, maxval=50, dtype=tf.int64, alg="threefry"),
                tf.random.stateless_uniform([3, 3], seed, minval=None, maxval=None, dtype=tf.uint32, alg="threefry"),
                tf.random.stateless_normal([5, 5], seed, dtype=tf.float64, alg="threefry"),
                tf.random.stateless_truncated_normal([6], seed, dtype=tf.bfloat16, alg="threefry")]
    compiled, xla = tfjit.function(fn, jit_compile=True), tf.function(fn, jit_compile=True)
    for seed in ([1, 2], [-1, 2**31 - 1]):
        s = tf.constant(seed)
        for k, (g, w) in enumerate(zip(compiled(s), xla(s))):
            assert_bits_equal(g.numpy(), w.numpy(), f"output {k} seed={seed}")


def test_auto_select_is_philox():
    """Auto-select is Philox in TF's CPU kernels (and in XLA on CPU and GPU); tfjit
    matches TF's CPU kernel, not THREEFRY.  A counter longer than Philox's 2 words
    is used up to its second word, as TF's kernel does."""
    def fn(key, counter):
        return [R.StatelessRandomUniformV2(shape=[9], key=key, counter=counter, alg=a) for a in (1, 3)]
    args = _args(77, [1, 2, 99])
    auto, philox = tfjit.function(fn, jit_compile=True)(*args)
    assert_bits_equal(auto.numpy(), tf.function(fn)(*args)[1].numpy(), "auto-select vs TF's CPU kernel")
    assert_bits_equal(auto.numpy(), philox.numpy(), "auto-select vs Philox")


def _refusal(alg, key, counter):
    def fn(k, c):
        return R.StatelessRandomNormalV2(shape=[3], key=k, counter=c, alg=alg)
    return fn, (tf.constant(np.array(key, np.uint64)), tf.constant(np.array(counter, np.uint64)))


@pytest.mark.parametrize("alg, key, counter, message", [
    (THREEFRY, [1], np.zeros(0, np.uint64), r"counter must be a vector with length at least 1; got shape: \[0\]"),
    (1, [1], [3], r"counter must be a vector with length at least 2; got shape: \[1\]"),
    (3, [1], np.zeros(0, np.uint64), r"counter must be a vector with length at least 2; got shape: \[0\]"),
    (4, [1], [3, 4], r"Unsupported algorithm id: 4"),
])
def test_bad_key_counter_alg_is_refused_like_tf_xla(alg, key, counter, message):
    """TF's XLA raises InvalidArgumentError for each; tfjit too, naming the op.  (A key
    not of shape [1] or a counter not of rank 1 fails TF's shape inference first.)
    TF's CPU kernel compares Philox's counter length with 1 (it passes the alg id as
    the minimum length) and then reads counter[1] past the end; tfjit, as XLA, refuses."""
    fn, args = _refusal(alg, key, counter)
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.function(fn, jit_compile=True)(*args)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message) as err:
        tfjit.function(fn, jit_compile=True)(*args)
    assert "StatelessRandomNormalV2" in str(err.value)


def test_tf_cpu_kernels_refuse_threefry():
    """Why XLA is the oracle here: TF's executor has no THREEFRY kernel."""
    fn, args = _refusal(THREEFRY, [1], [3, 4])
    with pytest.raises(tf.errors.InvalidArgumentError, match="Unsupported algorithm id: 2"):
        tf.function(fn)(*args)
