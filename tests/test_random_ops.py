"""Stateless RNG and bitwise ops: tfjit against TensorFlow's executor, bit for bit.

Random ops: every op x dtype compiles once per seed dtype (seeds are runtime
tensors; the shapes, part of the cluster key, are fixed per case) and runs with
several seeds, including extreme ones.  Every output must equal TF's to the bit
(uniforms, ints, normals and truncated normals alike: tfjit calls the C
library's logf/sinf/cosf as TF's kernels do).  A ``folded`` case passes the
seed as a constant, so the key/counter derivation folds through the IR
interpreter while lowering.

Bitwise ops run on cross products of special values (shift amounts negative and
beyond the width included).  The IR interpreter is checked against codegen on
the new IR ops, and the IR text round-trips.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Callable

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import tfjit

R = tf.raw_ops

# ------------------------------------------------------------------ helpers

SHAPES = [(), (0,), (3, 0), (7,), (2, 3, 5), (1031,)]   # groups of 4 or 2: odd sizes end mid-group
SEEDS = {
    "int32": [[0, 0], [1, 2], [-1, -1], [2**31 - 1, -2**31], [12345, -777]],
    "int64": [[0, 0], [-1, -1], [2**62 + 5, -2**63], [-2**63, 2**63 - 1], [2**32, 2**32 - 1]],
}
FLOATS = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def assert_bits_equal(got, want, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != TF's {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != TF's {want.shape}"
    g = np.ascontiguousarray(got).view(np.uint8).reshape(got.size, -1) if got.size else got.reshape(0, 1)
    w = np.ascontiguousarray(want).view(np.uint8).reshape(want.size, -1) if want.size else want.reshape(0, 1)
    bad = np.flatnonzero((g != w).any(axis=1)) if got.size else []
    assert len(bad) == 0, (f"{what}: {len(bad)} of {got.size} elements differ from TF's bits; first at flat "
                           f"index {bad[0]}: {got.reshape(-1)[bad[0]]!r} vs TF {want.reshape(-1)[bad[0]]!r}")


def _flat(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


# ------------------------------------------------------------ random ops

@dataclasses.dataclass(frozen=True)
class RandomRow:
    name: str
    dtypes: tuple
    draw: Callable        # (shape, dtype, seed tensor) -> tensor


def _v2(op, kw):
    """A V2 op fed by StatelessRandomGetKeyCounter (compiled too), alg Philox or auto-select."""
    def draw(shape, dtype, seed, alg=1):
        key, counter = R.StatelessRandomGetKeyCounter(seed=seed)
        return getattr(R, op)(shape=shape, key=key, counter=counter, alg=alg, **kw(dtype))
    return draw


def _int_bounds(lo, hi):
    return lambda dtype: {"minval": tf.constant(lo, dtype), "maxval": tf.constant(hi, dtype)}


def _typed(dtype):
    return {"dtype": dtype}


RANDOM_ROWS = [
    RandomRow("StatelessRandomUniform", FLOATS,
              lambda shape, d, s: R.StatelessRandomUniform(shape=shape, seed=s, dtype=d)),
    RandomRow("StatelessRandomNormal", FLOATS,
              lambda shape, d, s: R.StatelessRandomNormal(shape=shape, seed=s, dtype=d)),
    RandomRow("StatelessTruncatedNormal", FLOATS,
              lambda shape, d, s: R.StatelessTruncatedNormal(shape=shape, seed=s, dtype=d)),
    RandomRow("StatelessRandomUniformInt", (tf.int32, tf.int64),
              lambda shape, d, s: R.StatelessRandomUniformInt(shape=shape, seed=s, **_int_bounds(-5, 1000)(d))),
    RandomRow("StatelessRandomUniformFullInt", (tf.int32, tf.int64, tf.uint32, tf.uint64),
              lambda shape, d, s: R.StatelessRandomUniformFullInt(shape=shape, seed=s, dtype=d)),
    RandomRow("StatelessRandomUniformV2", FLOATS, _v2("StatelessRandomUniformV2", _typed)),
    RandomRow("StatelessRandomNormalV2", FLOATS,
              lambda shape, d, s: _v2("StatelessRandomNormalV2", _typed)(shape, d, s, alg=3)),
    RandomRow("StatelessTruncatedNormalV2", FLOATS, _v2("StatelessTruncatedNormalV2", _typed)),
    RandomRow("StatelessRandomUniformIntV2", (tf.int32, tf.int64),
              lambda shape, d, s: _v2("StatelessRandomUniformIntV2", _int_bounds(-2**31, 2**31 - 1))(shape, d, s)),
    RandomRow("StatelessRandomUniformFullIntV2", (tf.int32, tf.int64, tf.uint32, tf.uint64),
              _v2("StatelessRandomUniformFullIntV2", _typed)),
    # the public API: V2 ops plus TF's own scaling arithmetic
    RandomRow("stateless_uniform(2, 5)", FLOATS,
              lambda shape, d, s: tf.random.stateless_uniform(shape, s, minval=2, maxval=5, dtype=d)),
    RandomRow("stateless_uniform(int)", (tf.int32, tf.int64),
              lambda shape, d, s: tf.random.stateless_uniform(shape, s, minval=-3, maxval=7, dtype=d)),
    RandomRow("stateless_normal(1, 3)", FLOATS,
              lambda shape, d, s: tf.random.stateless_normal(shape, s, mean=1.0, stddev=3.0, dtype=d)),
    RandomRow("stateless_truncated_normal", FLOATS,
              lambda shape, d, s: tf.random.stateless_truncated_normal(shape, s, stddev=0.5, dtype=d)),
]


def _random_cases() -> list:
    cases = []
    for row in RANDOM_ROWS:
        for d in row.dtypes:
            for seed_dtype in SEEDS:
                if seed_dtype == "int64" and (d != row.dtypes[0] or row.name.startswith("stateless_")):
                    continue     # int64 seeds change only the key derivation: once per op is enough
                cases.append(pytest.param(row, d, seed_dtype, id=f"{row.name}-{d.name}-seed_{seed_dtype}"))
    return cases


@pytest.mark.parametrize("row, dtype, seed_dtype", _random_cases())
def test_random_op_matches_tf_bits(row, dtype, seed_dtype):
    def fn(seed):
        return [row.draw(tf.constant(shape, tf.int32), dtype, seed) for shape in SHAPES]
    compiled, reference = tfjit.function(fn, jit_compile=True), tf.function(fn)
    for seed in SEEDS[seed_dtype]:
        s = tf.constant(seed, getattr(tf, seed_dtype))
        for shape, g, w in zip(SHAPES, compiled(s), reference(s)):
            assert_bits_equal(g.numpy(), w.numpy(), f"{row.name} {dtype.name} {list(shape)} seed={seed}")


@pytest.mark.parametrize("row", [pytest.param(r, id=r.name) for r in RANDOM_ROWS])
def test_random_op_with_constant_seed(row):
    """The seed is a graph constant: key and counter fold while lowering (interp.py)."""
    dtype = row.dtypes[-1]

    def fn():
        return [row.draw([5, 3], dtype, tf.constant(seed, tf.int64)) for seed in SEEDS["int64"][1:3]]
    for k, (g, w) in enumerate(zip(tfjit.function(fn, jit_compile=True)(), tf.function(fn)())):
        assert_bits_equal(g.numpy(), w.numpy(), f"{row.name} {dtype.name} constant seed {k}")


@pytest.mark.parametrize("seed_dtype", list(SEEDS))
def test_get_key_counter_matches_tf(seed_dtype):
    def fn(seed):
        key, counter, alg = R.StatelessRandomGetKeyCounterAlg(seed=seed)
        return [key, counter, alg, R.StatelessRandomGetAlg(), *R.StatelessRandomGetKeyCounter(seed=seed)]
    compiled, reference = tfjit.function(fn, jit_compile=True), tf.function(fn)
    for seed in SEEDS[seed_dtype]:
        s = tf.constant(seed, getattr(tf, seed_dtype))
        for k, (g, w) in enumerate(zip(compiled(s), reference(s))):
            assert_bits_equal(g.numpy(), w.numpy(), f"output {k} seed={seed}")


def test_large_normal_and_truncated_normal_are_bit_exact():
    """Enough samples that truncated normals reject many times and every lane,
    group boundary and Box–Muller corner (u1 clamped to 1e-7 aside) is met."""
    def fn(seed):
        return [tf.random.stateless_normal([333, 301], seed), tf.random.stateless_truncated_normal([333, 301], seed),
                tf.random.stateless_normal([1001], seed, dtype=tf.float64),
                tf.random.stateless_truncated_normal([1001], seed, dtype=tf.float64)]
    seed = tf.constant([7, 11])
    for k, (g, w) in enumerate(zip(tfjit.function(fn, jit_compile=True)(seed), tf.function(fn)(seed))):
        assert_bits_equal(g.numpy(), w.numpy(), f"output {k}")


def test_random_fuses_with_its_consumer():
    def fn(x, seed):
        return x * tf.cast(tf.random.stateless_uniform(tf.shape(x), seed) > 0.5, x.dtype)
    x = tf.constant(np.arange(6 * 35, dtype=np.float32).reshape(6, 35))
    seed = tf.constant([3, 4])
    f = tfjit.function(fn, jit_compile=True)
    assert_bits_equal(f(x, seed).numpy(), tf.function(fn)(x, seed).numpy(), "masked x")
    assert f.compiled(x, seed).num_kernels == 1


def test_dropout_with_a_seed_tensor_matches_tf():
    """Keras 3's Dropout draws its mask with tf.random.stateless_uniform from a seed that
    its SeedGenerator keeps in a tf.Variable; here the seed is passed as a tensor.  As
    Keras does, x is scaled by a multiplication (TF computes x / c by a constant c as
    x * (1 / c), which tfjit's exact division does not reproduce bit for bit)."""
    def dropout(x, seed, rate=0.3):
        keep = tf.random.stateless_uniform(tf.shape(x), seed) >= rate
        return tf.where(keep, x * (1 / (1 - rate)), tf.zeros_like(x))
    x = tf.constant(np.random.default_rng(0).standard_normal((8, 129)).astype(np.float32))
    f = tfjit.function(dropout, jit_compile=True)
    for seed in ([1, 2], [2**31 - 1, -5]):
        s = tf.constant(seed)
        assert_bits_equal(f(x, s).numpy(), tf.function(dropout)(x, s).numpy(), f"dropout seed={seed}")


def test_keras_dropout_layer_matches_tf():
    keras = pytest.importorskip("keras")
    x = tf.constant(np.random.default_rng(1).standard_normal((4, 33)).astype(np.float32))
    ours, theirs = keras.layers.Dropout(0.3, seed=7), keras.layers.Dropout(0.3, seed=7)
    compiled = tfjit.function(lambda t: ours(t, training=True), jit_compile=True)
    reference = tf.function(lambda t: theirs(t, training=True))
    got = [compiled(x).numpy() for _ in range(3)]
    for k, g in enumerate(got):       # the seed generator advances identically each call
        assert_bits_equal(g, reference(x).numpy(), f"dropout call {k}")


def test_uniform_int_with_runtime_bounds():
    def fn(seed, lo, hi):
        return R.StatelessRandomUniformInt(shape=[4, 9], seed=seed, minval=lo, maxval=hi)
    f, ref = tfjit.function(fn, jit_compile=True), tf.function(fn)
    seed = tf.constant([5, 6])
    for lo, hi in ((0, 1), (-7, 7), (-2**31, 2**31 - 1), (2**31 - 2, 2**31 - 1)):
        args = (seed, tf.constant(lo), tf.constant(hi))
        assert_bits_equal(f(*args).numpy(), ref(*args).numpy(), f"[{lo}, {hi})")
    with pytest.raises(tf.errors.InvalidArgumentError):
        ref(seed, tf.constant(3), tf.constant(3))        # TF: "Need minval < maxval"
    with pytest.raises(tf.errors.InvalidArgumentError, match="Integer division by zero"):
        f(seed, tf.constant(3), tf.constant(3))          # tfjit's message differs (see lower/random.py)


def test_unsupported_alg_is_refused_with_a_reason():
    """Algorithm ids other than 1-3 (THREEFRY, 2, is tests/test_threefry.py's)."""
    def fn(key, counter):
        return R.StatelessRandomUniformV2(shape=[3], key=key, counter=counter, alg=5)
    key, counter = R.StatelessRandomGetKeyCounter(seed=tf.constant([1, 2]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Unsupported algorithm id: 5"):
        tfjit.function(fn, jit_compile=True)(key, counter)


# ------------------------------------------------------------ bitwise ops

BIT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def bit_values(d: str) -> np.ndarray:
    info = np.iinfo(d)
    common = [-1000, -65, -64, -33, -32, -9, -8, -2, -1, 0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33,
              63, 64, 65, 100, 0x5A5A, 2**31 - 1, 2**40 + 3]
    vals = [info.min, info.min + 1, info.max - 1, info.max] + [v for v in common if info.min <= v <= info.max]
    return np.array(sorted(set(vals)), d)


def _pairs(d: str) -> tuple:
    x, y = np.meshgrid(bit_values(d), bit_values(d))
    return x.reshape(-1), y.reshape(-1)


def _bitwise_fn(x, y):
    return {op: getattr(R, op)(x=x, y=y) for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor", "LeftShift",
                                                   "RightShift")} | {"Invert": R.Invert(x=x),
                                                                      "PopulationCount": R.PopulationCount(x=x)}


@pytest.mark.parametrize("d", BIT_DTYPES)
def test_bitwise_ops_match_tf(d):
    x, y = _pairs(d)
    args = (tf.constant(x), tf.constant(y))
    got, want = tfjit.function(_bitwise_fn, jit_compile=True)(*args), tf.function(_bitwise_fn)(*args)
    for op in want:
        assert_bits_equal(got[op].numpy(), want[op].numpy(), f"{op} {d}")
    # folded: constant operands go through the IR interpreter while lowering
    folded = lambda: _bitwise_fn(tf.constant(x[:200]), tf.constant(y[:200]))
    got, want = tfjit.function(folded, jit_compile=True)(), tf.function(folded)()
    for op in want:
        assert_bits_equal(got[op].numpy(), want[op].numpy(), f"{op} {d} folded")


def test_bitwise_broadcasting():
    def fn(a, b, c):
        return [R.BitwiseXor(x=a, y=b), R.LeftShift(x=a, y=c), R.RightShift(x=b, y=c)]
    a = tf.constant(np.arange(12, dtype=np.int32).reshape(3, 4) - 6)
    b = tf.constant(np.array([-1, 5, 2**30, -2**31], np.int32))
    c = tf.constant(np.int32(3))
    for k, (g, w) in enumerate(zip(tfjit.function(fn, jit_compile=True)(a, b, c), tf.function(fn)(a, b, c))):
        assert_bits_equal(g.numpy(), w.numpy(), f"output {k}")


_SPECIAL_BITS = {16: [0, 1, 0x3C00, 0x7C00, 0xFC00, 0x7C01, 0x7E00, 0xFE01, 0x8000, 0x03FF, 0xFFFF, 0x7F80, 0x7FC1],
                 32: [0, 1, 0x3F800000, 0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00000, 0xFFC00001, 0x80000000,
                      0x007FFFFF, 0xFFFFFFFF],
                 64: [0, 1, 0x3FF0000000000000, 0x7FF0000000000000, 0xFFF0000000000000, 0x7FF0000000000001,
                      0x7FF8000000000000, 0x8000000000000000, 0x000FFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF],
                 8: [0, 1, 0x7F, 0x80, 0xFF]}
_BITCAST_TYPES = {16: ("float16", "bfloat16", "int16", "uint16"), 32: ("float32", "int32", "uint32"),
                  64: ("float64", "int64", "uint64"), 8: ("int8", "uint8")}


def _np(d: str):
    return np.dtype(ml_dtypes.bfloat16) if d == "bfloat16" else np.dtype(d)


@pytest.mark.parametrize("src, dst", [(a, b) for types in _BITCAST_TYPES.values()
                                      for a, b in itertools.permutations(types, 2)])
def test_bitcast_same_width_matches_tf(src, dst):
    bits = _np(src).itemsize * 8
    x = np.array(_SPECIAL_BITS[bits], f"u{bits // 8}").view(_np(src))
    fn = lambda t: R.Bitcast(input=t, type=getattr(tf, dst))
    arg = tf.constant(x)
    assert_bits_equal(tfjit.function(fn, jit_compile=True)(arg).numpy(), tf.function(fn)(arg).numpy(),
                      f"Bitcast {src} -> {dst}")
    folded = lambda: [fn(tf.constant(x)), fn(tf.constant(x[2]))]      # through the interpreter; a scalar too
    for k, (g, w) in enumerate(zip(tfjit.function(folded, jit_compile=True)(), tf.function(folded)())):
        assert_bits_equal(g.numpy(), w.numpy(), f"Bitcast {src} -> {dst} folded {k}")


# (source, target, shape): narrowing adds a last dimension of the pieces, widening
# joins the last dimension (TF's memory order); every width pair, special bit patterns
_WIDTH_CASES = [("float32", "int8", (11,)), ("float32", "uint16", (11,)), ("float64", "int32", (10,)),
                ("float64", "float16", (10,)), ("int64", "uint8", (2, 5)), ("uint32", "bfloat16", (11,)),
                ("int8", "float32", (5, 4)), ("uint8", "int64", (8,)), ("int16", "float64", (3, 4)),
                ("float16", "uint32", (4, 2)), ("int32", "float64", (5, 2)), ("uint16", "int32", (1, 2))]


@pytest.mark.parametrize("src, dst, shape", _WIDTH_CASES, ids=[f"{a}-{b}" for a, b, _ in _WIDTH_CASES])
def test_bitcast_of_another_width_matches_tf(src, dst, shape):
    bits = _np(src).itemsize * 8
    pool = np.array(_SPECIAL_BITS[bits] + list(range(2, 40, 3)), f"u{bits // 8}")
    x = np.resize(pool, shape).view(_np(src))
    fn = lambda t: R.Bitcast(input=t, type=getattr(tf, dst))
    arg = tf.constant(x)
    assert_bits_equal(tfjit.function(fn, jit_compile=True)(arg).numpy(), tf.function(fn)(arg).numpy(),
                      f"Bitcast {src} -> {dst}")
    folded = lambda: fn(tf.constant(x))
    assert_bits_equal(tfjit.function(folded, jit_compile=True)().numpy(), tf.function(folded)().numpy(),
                      f"Bitcast {src} -> {dst} folded")


# -------------------------------------------------- interpreter vs codegen, text

_IR_CASES = {
    "bits": ("""\
module bits {
  %p0 = {t}[{n}] parameter(0)
  %p1 = {t}[{n}] parameter(1)
  %xor.0 = {t}[{n}] xor(%p0, %p1)
  %shift.1 = {t}[{n}] shift-left(%p0, %p1)
  %shift.2 = {t}[{n}] shift-right-logical(%p0, %p1)
  %shift.3 = {t}[{n}] shift-right-arithmetic(%p0, %p1)
  %bitcast.4 = {u}[{n}] bitcast-convert(%p0)
  ROOT (%xor.0, %shift.1, %shift.2, %shift.3, %bitcast.4)
}
"""),
    "libm": ("""\
module libm {
  %p0 = {t}[{n}] parameter(0)
  %log.0 = {t}[{n}] log-libm(%p0)
  %sin.1 = {t}[{n}] sin-libm(%p0)
  %cos.2 = {t}[{n}] cos-libm(%p0)
  %bitcast.3 = {u}[{n}] bitcast-convert(%p0)
  ROOT (%log.0, %sin.1, %cos.2, %bitcast.3)
}
"""),
    "truncated": ("""\
module truncated {
  %p0 = u32[{n}] parameter(0)
  %p1 = u32[{n}] parameter(1)
  %p2 = u32[{n}] parameter(2)
  %truncated.0 = {t}[{n}] truncated-normal(%p0, %p1, %p1, %p0, %p1, %p0, %p2)
  ROOT (%truncated.0)
}
"""),
}
_INT_PARTNER = {"i8": "u8", "i16": "u16", "i32": "f32", "i64": "f64", "u8": "i8", "u16": "f16", "u32": "i32",
                "u64": "i64"}


def _ir_inputs(case: str, t: str, n: int, rng) -> list:
    from tfjit import dtypes as dt
    d = dt.from_name(t)
    if case == "bits":
        bits = d.bits
        x = rng.integers(0, 2**bits, n, dtype=np.uint64).astype(f"u{bits // 8}").view(d.numpy())
        y = rng.integers(-3, bits + 4, n).astype(d.numpy())
        return [x, y]
    if case == "libm":
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 6, n)
        x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1.0, 2.0**60]
        return [x.astype(d.numpy())]
    k = rng.integers(0, 2**32, (2, n), dtype=np.uint64).astype(np.uint32)
    return [k[0], k[1], (np.arange(n) % 4).astype(np.uint32)]


@pytest.mark.parametrize("case, t", [("bits", t) for t in _INT_PARTNER] + [("libm", "f32"), ("libm", "f64"),
                                     ("truncated", "f32"), ("truncated", "f64")])
def test_interpreter_agrees_with_codegen(case, t, rng):
    from tfjit.ir import interp
    from tfjit.ir.text import module_str, parse_module
    from tfjit.pipeline import compile_module
    from tfjit.runtime.host import run_compiled
    partner = {"f32": "i32", "f64": "u64"}.get(t, _INT_PARTNER.get(t))
    text = _IR_CASES[case].replace("{t}", t).replace("{u}", partner).replace("{n}", "301")
    m = parse_module(text)
    assert module_str(m) == text               # print -> parse -> print is the identity
    inputs = _ir_inputs(case, t, 301, rng)
    want = interp.evaluate(m, inputs)
    got = run_compiled(compile_module(parse_module(text), m.name), inputs)
    for k, (g, w) in enumerate(zip(got, want)):
        if g.dtype.kind == "f":           # NaN payloads are the C library's either way; compare positions
            assert (np.isnan(g) == np.isnan(w)).all(), f"{case} {t} output {k}: NaN positions"
            g, w = np.where(np.isnan(g), 0, g), np.where(np.isnan(w), 0, w)
        assert_bits_equal(g, w, f"{case} {t} output {k}")


def test_compiled_random_module_round_trips(tfjit):
    from tfjit.ir.text import module_str, parse_module
    fn = lambda s: [tf.random.stateless_normal([3, 5], s), tf.random.stateless_truncated_normal([4], s),
                    R.BitwiseXor(x=tf.random.stateless_uniform([2], s, minval=None, maxval=None, dtype=tf.int32),
                                 y=tf.constant([1, 2]))]
    compiled = tfjit.function(fn, jit_compile=True).compiled(tf.constant([1, 2]))
    for text in (compiled.module_before, compiled.module_after):
        assert module_str(parse_module(text)) == text


# lanes that reach Box–Muller's corners: u1 = 0 (clamped to 1e-7), u1 just above 1e-7,
# u = 0 and u just below 1 (angle near 2 pi), all bits set
_CORNER_LANES = np.array([[0, 0], [0, 0x7FFFFF], [1, 0], [0x800000, 1], [0xFFFFFFFF, 0xFFFFFFFF],
                          [2, 0x400000], [0x7FFFFF, 0x12345678], [0x55555555, 0xAAAAAAAA]], np.uint32)


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_box_muller_corners_agree_everywhere(wide):
    """Box–Muller at its corners, three ways: the IR lowering (lower/random.py) through
    the interpreter and through codegen, and codegen/random.py's LLVM (the
    truncated-normal loop's), each against the numpy reference (ir/interp_rng.py)."""
    from llvmlite import ir
    from tfjit import dtypes as dt
    from tfjit.codegen import random as llvm_random
    from tfjit.codegen.elemental import Elemental
    from tfjit.codegen.llvm_cpu import compile_ir
    from tfjit.ir import interp, interp_rng
    from tfjit.ir.module import Module
    from tfjit.lower import random as lower_random
    from tfjit.pipeline import compile_module
    from tfjit.runtime.host import run_compiled
    lanes = [np.ascontiguousarray(_CORNER_LANES[:, k % 2]) if not wide else
             np.ascontiguousarray(_CORNER_LANES[:, k % 2] ^ np.uint32(k)) for k in range(4 if wide else 2)]
    want = interp_rng.box_muller(tuple(lanes), wide)

    m = Module("bm")
    ps = [m.parameter(dt.U32, (len(_CORNER_LANES),)) for _ in lanes]
    m.outputs = list(lower_random._box_muller(m, ps, wide))
    for how, got in (("interp", interp.evaluate(m, lanes)), ("codegen", run_compiled(compile_module(m, "bm"), lanes))):
        for k in range(2):
            assert_bits_equal(got[k], want[k], f"lowered Box–Muller via {how}, output {k}")

    t = ir.DoubleType() if wide else ir.FloatType()
    mod = ir.Module("bm_llvm")
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.IntType(32)] * 4 + [ir.PointerType()] * 2), "bm")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    elemental = Elemental(b, None, None)
    s, c = llvm_random.box_muller(b, list(fn.args[:len(lanes)]), wide, elemental.libm)
    b.store(s, fn.args[4])
    b.store(c, fn.args[5])
    b.ret_void()
    from tfjit import pipeline
    code = compile_ir(str(mod), ["bm"], pipeline.jit_compiler())
    import ctypes
    ct = ctypes.c_double if wide else ctypes.c_float
    call = ctypes.CFUNCTYPE(None, *[ctypes.c_uint32] * 4, ctypes.POINTER(ct), ctypes.POINTER(ct))(code.addresses["bm"])
    out = np.zeros((2, len(_CORNER_LANES)), want[0].dtype)
    for i in range(len(_CORNER_LANES)):
        a, z = ct(), ct()
        call(*[int(x[i]) for x in lanes] + [0] * (4 - len(lanes)), ctypes.byref(a), ctypes.byref(z))
        out[0, i], out[1, i] = a.value, z.value
    for k in range(2):
        assert_bits_equal(out[k], want[k], f"codegen/random.py Box–Muller, output {k}")
