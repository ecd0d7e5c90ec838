"""Data-dependent indexing ops (issue 4, part 2), compiled by tfjit and run by TF.

One table row per op x dtype x shape/attrs: each builds a small function from
``tf.raw_ops``, compiles it with ``tfjit.function(jit_compile=True)`` and compares
it with ``tf.function`` (TF's executor) through ``oracle.assert_matches``.  Every
op here moves or combines elements in TF's own order (gathers copy; segment sums
and scans add in input order, as TF's CPU kernels do; top-k copies), so floats
are compared *bit for bit* (rtol = atol = 0; NaN positions and zero signs too).

Where TF is not a usable oracle the row says so: TF's top-k order of NaN depends
on the algorithm its kernel picks for k (Eigen's max for k=1, a heap for k<n,
std::sort for k=n; each meets a comparison that is no order once NaN is in the
row), so rows holding NaN are checked against tfjit's documented rule (NaN above
every number, as XLA ranks it) computed by numpy; ``sorted=False`` leaves TF's
order unspecified (tfjit returns it sorted), so it is compared as sets.
"""
from __future__ import annotations

import dataclasses
import re
import zlib
from typing import Callable

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

R = tf.raw_ops
TF = {"f16": tf.float16, "bf16": tf.bfloat16, "f32": tf.float32, "f64": tf.float64,
      "i32": tf.int32, "i64": tf.int64, "u8": tf.uint8, "i16": tf.int16, "u32": tf.uint32,
      "bool": tf.bool}
ALL = ("f32", "f64", "i32", "i64", "bool")
NUM = ("f32", "f64", "i32", "i64")
HALF = ("f16", "bf16")


def np_dtype(d: str):
    return np.dtype(ml_dtypes.bfloat16) if d == "bf16" else np.dtype(TF[d].as_numpy_dtype)


def values(rng, d: str, shape, specials: bool = False) -> np.ndarray:
    """Random values of dtype ``d``; floats with NaN, ±inf and ±0 when ``specials``."""
    if d == "bool":
        return rng.random(shape) < 0.5
    if d[0] in "iu":
        return rng.integers(-50 if d[0] == "i" else 0, 50, shape).astype(np_dtype(d))
    x = rng.standard_normal(shape) * 4
    if specials and x.size:
        pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30])
        x = np.where(rng.random(shape) < 0.3, rng.choice(pool, shape), x)
    with np.errstate(over="ignore"):      # 1e30 is inf in half precision
        return x.astype(np_dtype(d))


@dataclasses.dataclass
class Case:
    id: str
    fn: Callable                       # tensors -> tensor(s)
    inputs: Callable                   # rng -> list of numpy arrays
    oracle: Callable | None = None     # tensors -> expected, instead of tf.function(fn)
    kernels: int | None = None         # the compiled module's kernel count, when it matters
    tol: tuple = (0, 0)                # (rtol, atol); None: oracle's per-dtype defaults


def check(case: Case) -> None:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    args = [tf.constant(a) for a in case.inputs(rng)]
    jit = tfjit.function(case.fn, jit_compile=True)
    got = tf.nest.flatten(jit(*args))
    want = tf.nest.flatten(case.oracle(*args) if case.oracle else tf.function(case.fn)(*args))
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        with np.errstate(invalid="ignore"):      # inf - inf while measuring errors
            assert_matches(np.asarray(g), np.asarray(w), rtol=case.tol[0], atol=case.tol[1],
                           what=f"{case.id}: output {k}")
    if case.kernels is not None:
        assert len(jit.compiled(*args).fusions) == case.kernels, jit.compiled(*args).module_after


def params(cases: list) -> list:
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    return [pytest.param(c, id=c.id) for c in cases]


# ------------------------------------------------------------------ gathers

# (name, params shape, indices shape, axis, batch_dims)
GATHER_SHAPES = [
    ("axis0", (7, 3), (5,), 0, 0),
    ("rank3-axis1", (2, 5, 3), (2, 4), 1, 0),
    ("negative-axis", (2, 3, 4), (6,), -1, 0),
    ("scalar-index", (5, 3), (), 0, 0),
    ("empty-indices", (5, 3), (0,), 0, 0),
    ("empty-rows", (4, 0), (3,), 0, 0),
    ("size1", (1,), (1, 1), 0, 0),
    ("odd-large", (33, 17), (9, 7), 1, 0),
    ("batch_dims1", (3, 5, 2), (3, 4), 1, 1),
    ("batch_dims-negative", (3, 5), (3, 4), 1, -1),
]


def _gather_case(d, index_dtype, name, pshape, ishape, axis, batch_dims):
    n = pshape[axis]

    def inputs(rng):
        return [values(rng, d, pshape, specials=True), rng.integers(0, n, ishape).astype(index_dtype)]

    return Case(f"GatherV2-{d}-{index_dtype}-{name}",
                lambda p, i: R.GatherV2(params=p, indices=i, axis=axis, batch_dims=batch_dims), inputs)


GATHERS = [_gather_case(d, "int32", *s) for d in ALL + HALF + ("u8",) for s in GATHER_SHAPES[:4]]
GATHERS += [_gather_case(d, ix, *s) for d in ("f32", "i64") for ix in ("int32", "int64")
            for s in GATHER_SHAPES[4:]]
GATHERS += [
    Case("Gather-v1-f32", lambda p, i: R.Gather(params=p, indices=i),
         lambda rng: [values(rng, "f32", (6, 2)), rng.integers(0, 6, (3, 2)).astype(np.int32)]),
    Case("GatherV2-fused-one-kernel", lambda x, i: tf.gather(x * 2.0, i) + 1.0,
         lambda rng: [values(rng, "f32", (9, 5)), rng.integers(0, 9, (4,)).astype(np.int32)],
         kernels=1),
    Case("GatherV2-computed-indices-one-kernel", lambda x, i: tf.gather(tf.exp(x), (i * 3) % 9, axis=1),
         lambda rng: [values(rng, "f64", (4, 9)), rng.integers(0, 50, (6,)).astype(np.int64)],
         kernels=1),
    Case("GatherV2-of-reduction", lambda x, i: tf.gather(tf.reduce_sum(x, axis=1), i),
         lambda rng: [values(rng, "f32", (8, 5)), rng.integers(0, 8, (11,)).astype(np.int32)]),
]


@pytest.mark.parametrize("case", params(GATHERS))
def test_gather(case):
    check(case)


@pytest.mark.parametrize("d", ["f32", "i64", "bool", "bf16"])
def test_resource_gather(d):
    rng = np.random.default_rng(7)
    v = tf.Variable(values(rng, d, (6, 4)))
    idx = tf.constant(rng.integers(0, 6, (2, 3)).astype(np.int64))

    def f(i):
        return R.ResourceGather(resource=v.handle, indices=i, dtype=v.dtype)
    assert_matches(tfjit.function(f, jit_compile=True)(idx).numpy(), tf.function(f)(idx).numpy(),
                   rtol=0, atol=0)


# Out of range: TF's CPU kernel raises "indices[k] = v is not in [0, n)"; tfjit raises
# InvalidArgumentError with the same text after "gather {{node <name>}}: ", reads nothing
# out of bounds, and runs on afterwards.
_BAD_INDICES = [("minus-one", -1, np.int32), ("n", 5, np.int32), ("int32-max", 2**31 - 1, np.int32),
                ("int64-huge", 2**40, np.int64), ("int64-min", -2**63, np.int64)]


def tf_error(fn, *args) -> str:
    """TF's own text of the index error fn(*args) raises."""
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        tf.function(fn)(*args)
    found = re.search(r"(indices|segment_ids)(\[[\d,]*\])? = -?\d+ is (not in|out of range) \[0, \d+\)",
                      e.value.message)
    assert found, e.value.message
    return found.group(0)


@pytest.mark.parametrize("name, bad, index_dtype", _BAD_INDICES, ids=[b[0] for b in _BAD_INDICES])
@pytest.mark.parametrize("fn", [
    pytest.param(lambda x, i: tf.gather(x, i), id="plain"),
    pytest.param(lambda x, i: tf.gather(x * 2.0, i) + 1.0, id="fused"),
    pytest.param(lambda x, i: tf.gather(tf.transpose(x), i, axis=1), id="axis1"),
    pytest.param(lambda x, i: tf.gather(x, tf.reshape(i, [1, 3])), id="2d-indices"),
])
def test_gather_out_of_range(fn, name, bad, index_dtype):
    x = tf.constant(np.arange(15, dtype=np.float32).reshape(5, 3))
    good = tf.constant(np.array([4, 0, 2], index_dtype))
    wrong = tf.constant(np.array([4, bad, 2], index_dtype))
    want = tf_error(fn, x, wrong)
    assert want.endswith("is not in [0, 5)") and f"= {bad} " in want, want
    jit = tfjit.function(fn, jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        jit(x, wrong)
    assert f"gather {{{{node GatherV2}}}}: {want}" in e.value.message
    assert_matches(jit(x, good).numpy(), tf.function(fn)(x, good).numpy(), rtol=0, atol=0)


def _reverse_sequence_case(d, shape, seq, batch, index_dtype=np.int64):
    def inputs(rng):
        lengths = rng.integers(0, shape[seq] + 1, shape[batch]).astype(index_dtype)
        return [values(rng, d, shape, specials=True), lengths]
    return Case(f"ReverseSequence-{d}-{'x'.join(map(str, shape))}-seq{seq}-batch{batch}",
                lambda x, n: R.ReverseSequence(input=x, seq_lengths=n, seq_dim=seq, batch_dim=batch),
                inputs)


REVERSE_SEQUENCES = [
    _reverse_sequence_case("f32", (4, 7, 3), 1, 0),                 # Keras's [batch, time, features]
    _reverse_sequence_case("f32", (7, 4, 3), 0, 1),                 # time-major
    _reverse_sequence_case("i32", (3, 2, 5, 2), 2, 3, np.int32),    # batch after seq, more dims
    _reverse_sequence_case("bool", (1, 1), 1, 0),                   # one batch, one step
    _reverse_sequence_case("bf16", (5, 13), 1, 0),                  # prime length
    Case("ReverseSequence-fused-one-kernel", lambda x, n: tf.reverse_sequence(tf.exp(x), n, 1, 0) + 1.0,
         lambda rng: [values(rng, "f32", (6, 9)), rng.integers(0, 10, (6,)).astype(np.int32)], kernels=1,
         tol=(1e-6, 0)),                                          # (exp: TF's and tfjit's round apart)
]


@pytest.mark.parametrize("case", params(REVERSE_SEQUENCES))
def test_reverse_sequence(case):
    check(case)


def test_reverse_sequence_longer_than_the_sequence_is_an_error():
    fn = lambda x, n: tf.reverse_sequence(x, n, 1, 0)        # noqa: E731
    x, n = tf.ones([2, 3]), tf.constant([4, 1])
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape("seq_lens(0) > input.dims(1)")):
        tf.function(fn)(x, n)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"ReverseSequence.*is not in \[0, 3\)"):
        tfjit.function(fn, jit_compile=True)(x, n)


def test_gather_from_empty_params_is_an_error():
    def f(x, i):
        return tf.gather(x, i)
    x, i = tf.zeros([0, 3]), tf.constant([0])
    want = tf_error(f, x, i)
    assert want == "indices[0] = 0 is not in [0, 0)"
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(want)):
        tfjit.function(f, jit_compile=True)(x, i)


def test_resource_gather_out_of_range():
    v = tf.Variable(tf.ones([4, 2]))

    def f(i):
        return tf.gather(v, i)
    want = tf_error(f, tf.constant([1, 4]))
    assert want == "indices[1] = 4 is not in [0, 4)"
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=re.escape(f"gather {{{{node Gather}}}}: {want}")):
        tfjit.function(f, jit_compile=True)(tf.constant([1, 4]))


# --------------------------------------------------------- segment sums

# (name, data shape, ids shape, num_segments, low id)
SEGMENT_SHAPES = [
    ("vector", (6,), (6,), 4, 0),
    ("rows", (7, 3), (7,), 5, 0),
    ("dropped-negative-ids", (9, 2), (9,), 3, -3),
    ("rank3-2d-ids", (2, 3, 4), (2, 3), 5, -1),
    ("empty-data", (0, 3), (0,), 3, 0),
    ("zero-segments", (4, 2), (4,), 0, -4),
    ("size1", (1, 1), (1,), 1, 0),
    ("parallel-segments", (3000, 160), (3000,), 700, -1),     # 5 segment ranges
    ("column-blocks", (50, 1100), (50,), 9, 0),               # 3 column blocks
]


def _segment_case(op, d, index_dtype, name, dshape, ishape, segments, low):
    def inputs(rng):
        return [values(rng, d, dshape, specials=True),
                rng.integers(low, segments, ishape).astype(index_dtype)]

    fn = getattr(R, op)
    return Case(f"{op}-{d}-{index_dtype}-{name}",
                lambda x, i: fn(data=x, segment_ids=i, num_segments=segments), inputs)


SEGMENTS = [_segment_case("UnsortedSegmentSum", d, "int32", *s)
            for d in NUM + HALF for s in SEGMENT_SHAPES[:3]]
SEGMENTS += [_segment_case("UnsortedSegmentSum", d, ix, *s) for d in ("f32", "i32")
             for ix in ("int32", "int64") for s in SEGMENT_SHAPES[3:]]
SEGMENTS += [_segment_case("UnsortedSegmentProd", d, "int64", *s) for d in ("f32", "f64", "i64")
             for s in SEGMENT_SHAPES[1:4]]
SEGMENTS += [
    Case("UnsortedSegmentSum-fused-one-kernel",
         lambda x, i: tf.math.unsorted_segment_sum(tf.abs(x) * 2.0 + 1.0, i, 6),
         lambda rng: [values(rng, "f32", (40, 7)), rng.integers(-1, 6, (40,)).astype(np.int32)],
         kernels=1),
]


# max/min: TF's CPU kernel combines as cwiseMax(v, acc) from numeric_limits::lowest()
# (an empty segment is -FLT_MAX, not -inf; ties and NaNs take the later value)
SEGMENTS += [_segment_case(f"UnsortedSegment{k}", d, "int32", *s) for k in ("Max", "Min")
             for d in NUM + HALF + ("u8", "i16") for s in SEGMENT_SHAPES[:3]]
SEGMENTS += [_segment_case(f"UnsortedSegment{k}", "f32", "int64", *s) for k in ("Max", "Min")
             for s in SEGMENT_SHAPES[3:]]


@pytest.mark.parametrize("case", params(SEGMENTS))
def test_unsorted_segment(case):
    check(case)


def _segment_v2_case(op, d, name, dshape, ishape, segments, low):
    # TF has no CPU kernel for these (only XLA runs them): the oracle is TF's XLA, on
    # sorted ids (as the op asks) running past num_segments, which XLA drops.  (XLA
    # refuses num_segments=0 with an empty scatter; tfjit returns the empty result.)
    def inputs(rng):
        return [values(rng, d, dshape, specials=True),
                np.sort(rng.integers(low, segments + 2, ishape)).astype(np.int32)]

    fn = getattr(R, op)
    f = lambda x, i: fn(data=x, segment_ids=i, num_segments=segments)
    return Case(f"{op}-{d}-{name}", f, inputs, oracle=tf.function(f, jit_compile=True))


SEGMENTS_V2 = [_segment_v2_case(f"Segment{k}V2", d, *s) for k in ("Sum", "Prod", "Max", "Min")
               for d in ("f32", "i32") for s in SEGMENT_SHAPES[:3] + SEGMENT_SHAPES[6:7]]
SEGMENTS_V2 += [_segment_v2_case(f"Segment{k}V2", d, *SEGMENT_SHAPES[1]) for k in ("Sum", "Max")
                for d in ("f64", "i64", "f16")]


@pytest.mark.parametrize("case", params(SEGMENTS_V2))
def test_segment_v2_matches_xla(case):
    check(case)


@pytest.mark.parametrize("bad", [3, 4, 2**31 - 1])
def test_segment_id_out_of_range(bad):
    def f(x, i):
        return tf.math.unsorted_segment_sum(x, i, 3)
    x, ids = tf.ones([4, 2]), tf.constant([0, -1, bad, 1])
    want = tf_error(f, x, ids)
    assert want == f"segment_ids[2] = {bad} is out of range [0, 3)"
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=re.escape(f"scatter {{{{node UnsortedSegmentSum}}}}: {want}")):
        tfjit.function(f, jit_compile=True)(x, ids)


# ------------------------------------------------------------------ scans

# (name, shape, axis)
SCAN_SHAPES = [("vector", (9,), 0), ("rows", (4, 5), 0), ("columns", (4, 5), 1),
               ("negative-axis", (2, 3, 4), -2), ("empty", (0,), 0), ("empty-inner", (3, 0), 1),
               ("size1", (1,), 0), ("column-blocks", (3, 1100), 0)]


def _scan_case(op, d, name, shape, axis, exclusive, reverse, specials=True):
    fn = getattr(R, op)
    flags = ("-exclusive" if exclusive else "") + ("-reverse" if reverse else "")
    return Case(f"{op}-{d}-{name}{flags}",
                lambda x: fn(x=x, axis=axis, exclusive=exclusive, reverse=reverse),
                lambda rng: [values(rng, d, shape, specials)])


SCANS = [_scan_case("Cumsum", d, *s, ex, rev) for d in NUM for s in SCAN_SHAPES[:4]
         for ex in (False, True) for rev in (False, True)]
SCANS += [_scan_case("Cumsum", d, *s, ex, rev) for d in HALF for s in SCAN_SHAPES[1:3]
          for ex in (False, True) for rev in (False, True)]
SCANS += [_scan_case("Cumsum", d, *s, False, False) for d in ("f32", "i64") for s in SCAN_SHAPES[4:]]
SCANS += [_scan_case("Cumprod", d, *s, ex, rev, specials=False) for d in ("f32", "f64", "i32")
          for s in SCAN_SHAPES[1:3] for ex in (False, True) for rev in (False, True)]
SCANS += [
    Case("Cumsum-specials-exclusive-reverse",
         lambda x: tf.math.cumsum(x, exclusive=True, reverse=True),
         lambda rng: [np.array([1.0, np.nan, 2.0, np.inf, -np.inf, -0.0, -0.0, 3.0], np.float32)]),
    Case("Cumsum-negative-zeros", lambda x: (tf.math.cumsum(x), tf.math.cumsum(x, exclusive=True)),
         lambda rng: [np.array([-0.0, -0.0, -0.0], np.float64)]),
    Case("Cumsum-fused-one-kernel", lambda x: tf.math.cumsum(tf.exp(x) * 0.5, axis=1),
         lambda rng: [values(rng, "f32", (6, 33))], kernels=1,
         tol=(None, None)),       # exp is tfjit's polynomial, within TF's accuracy, not bitwise
]


def _logsumexp_case(d, name, shape, axis, exclusive, reverse, specials=True):
    case = _scan_case("CumulativeLogsumexp", d, name, shape, axis, exclusive, reverse, specials)
    return dataclasses.replace(case, tol=(None, None))   # exp/log1p: tfjit's math, not Eigen's


SCANS += [_logsumexp_case(d, *s, ex, rev) for d in ("f32", "f64") for s in SCAN_SHAPES[:4]
          for ex in (False, True) for rev in (False, True)]
SCANS += [_logsumexp_case(d, *s, ex, False) for d in HALF for s in SCAN_SHAPES[1:3]
          for ex in (False, True)]
SCANS += [_logsumexp_case("f32", *s, False, False) for s in SCAN_SHAPES[4:]]
SCANS += [
    Case("CumulativeLogsumexp-specials",
         lambda x: (tf.math.cumulative_logsumexp(x), tf.math.cumulative_logsumexp(x, exclusive=True)),
         lambda rng: [np.array([-np.inf, -np.inf, 1.0, 2.0, -np.inf, np.inf, 3.0, np.nan, 1.0],
                               np.float32)], tol=(None, None)),
    Case("CumulativeLogsumexp-large", lambda x: tf.math.cumulative_logsumexp(x, axis=1),
         lambda rng: [np.array([[1e30, 1.0, 1e30], [-1e30, 80.0, 88.0]], np.float32)],
         tol=(None, None)),
]


@pytest.mark.parametrize("case", params(SCANS))
def test_scan(case):
    check(case)


# ------------------------------------------------------------------ top-k

def _numpy_top_k(x: np.ndarray, k: int):
    """tfjit's rule: descending, NaN above every number, ties (±0 too) by lower index."""
    wide = x.astype(np.float64) if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else x
    order = x.shape[-1] - 1 - np.argsort(wide[..., ::-1], axis=-1, kind="stable")[..., ::-1][..., :k]
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int32)


def _ties(rng, d, shape):
    """Few distinct values (both zeros among them): many ties."""
    pool = np.array([-2, -1, -0.0, 0.0, 1, 3]) if d not in ("i32", "i64") else np.array([-3, 0, 1, 2])
    return rng.choice(pool, shape).astype(np_dtype(d))


# (name, shape, k); k > 16 and over half the vector: a merge sort, else a heap of k
TOPK_SHAPES = [("vector", (10,), 3), ("k1", (4, 10), 1), ("k-equals-n", (4, 10), 10),
               ("rank3", (2, 3, 7), 4), ("merge-k-equals-n", (3, 40), 40), ("merge-odd", (2, 37), 30),
               ("k0", (3, 5), 0), ("size1", (1, 1), 1), ("wide", (2, 600), 50),
               ("many-vectors", (130, 9), 2)]


def _topk_case(d, name, shape, k, make=_ties):
    return Case(f"TopKV2-{d}-{name}", lambda x: R.TopKV2(input=x, k=k),
                lambda rng: [make(rng, d, shape)])


TOPKS = [_topk_case(d, *s) for d in NUM + HALF for s in TOPK_SHAPES[:6]]
TOPKS += [_topk_case(d, *s) for d in ("f32", "i32") for s in TOPK_SHAPES[6:]]
TOPKS += [_topk_case("f64", "distinct-wide", (3, 257), 20, lambda rng, d, s: values(rng, d, s)),
          _topk_case("f32", "distinct-merge", (3, 300), 290, lambda rng, d, s: values(rng, d, s)),
          _topk_case("f32", "denormals", (2, 8), 8,
                     lambda rng, d, s: rng.choice(np.array([1e-40, -1e-40, 0.0, -0.0, 1e-38], np.float32), s))]
TOPKS += [
    Case(f"TopKV2-f32-nan-k{k}", lambda x, k=k: R.TopKV2(input=x, k=k),
         lambda rng: [values(rng, "f32", (5, 9), specials=True)],
         oracle=lambda x, k=k: _numpy_top_k(x.numpy(), k)) for k in (1, 3, 9)
]
TOPKS += [
    Case(f"TopKV2-{d}-nan-merge", lambda x: R.TopKV2(input=x, k=30),
         lambda rng, d=d: [values(rng, d, (3, 40), specials=True)],
         oracle=lambda x: _numpy_top_k(x.numpy(), 30)) for d in ("f64", "bf16")
]
TOPKS += [
    Case("TopKV2-f32-unsorted-as-set", lambda x: tf.sort(R.TopKV2(input=x, k=4, sorted=False)[0]),
         lambda rng: [values(rng, "f32", (3, 11))],
         oracle=lambda x: tf.sort(R.TopKV2(input=x, k=4, sorted=True)[0])),
    Case("TopKV2-fused-values", lambda x: tf.math.top_k(x * -1.0, 3).values + 1.0,
         # the top-k computes x * -1 itself and the values' kernel again where it gathers
         # (passes/copies.py: a cheap value is recomputed by each reader, not written)
         lambda rng: [values(rng, "f32", (4, 12))], kernels=2),
]


@pytest.mark.parametrize("case", params(TOPKS))
def test_top_k(case):
    check(case)


# ---------------------------------------------------------------- one-hot

def _one_hot_case(d, index_dtype, shape, depth, axis):
    def inputs(rng):
        return [rng.integers(-1 if index_dtype != "uint8" else 0, depth + 2, shape).astype(index_dtype)]

    on, off = (True, False) if d == "bool" else (np_dtype(d).type(3), np_dtype(d).type(-1))
    return Case(f"OneHot-{d}-{index_dtype}-{list(shape)}-depth{depth}-axis{axis}",
                lambda i: R.OneHot(indices=i, depth=depth, on_value=on, off_value=off, axis=axis),
                inputs)


ONE_HOTS = [_one_hot_case(d, "int32", (5,), 4, -1) for d in ALL + ("bf16",)]
ONE_HOTS += [_one_hot_case("f32", ix, shape, depth, axis) for ix in ("int64", "uint8")
             for shape, depth, axis in (((2, 3), 5, 0), ((2, 3), 5, 1), ((2, 3), 3, -1),
                                        ((), 4, -1), ((4,), 0, -1))]


@pytest.mark.parametrize("case", params(ONE_HOTS))
def test_one_hot(case):
    check(case)


# ------------------------------------------------------------- composites

# Indexing ops next to the other kernel kinds: hoisted reductions over gathered rows,
# gathers of reductions and library results, indices computed by argmax, scans and
# top-k of fused math, gathers inside pads/concats.  Transcendentals are tfjit's
# polynomials (TF's accuracy, not its bits), so these use the oracle's tolerances.
def _composite(name, fn, *arrays, kernels=None):
    return Case(f"composite-{name}", fn, lambda rng: [a(rng) for a in arrays], kernels=kernels,
                tol=(None, None))


def _f32(*shape):
    return lambda rng: values(rng, "f32", shape)


def _ids(n, *shape):
    return lambda rng: rng.integers(0, n, shape).astype(np.int32)


COMPOSITES = [
    _composite("softmax-of-gathered-rows", lambda x, i: tf.nn.softmax(tf.gather(x, i) * 2.0),
               _f32(9, 17), _ids(9, 5)),
    _composite("gather-of-softmax", lambda x, i: tf.gather(tf.nn.softmax(x), i, axis=1) + 1.0,
               _f32(4, 17), _ids(17, 6)),
    _composite("gather-by-argmax", lambda x, y: tf.gather(y, tf.argmax(x, axis=1), axis=1, batch_dims=1),
               _f32(5, 8), _f32(5, 8)),
    _composite("gather-of-matmul", lambda a, b, i: tf.gather(tf.matmul(a, b), i) - 1.0,
               _f32(6, 4), _f32(4, 3), _ids(6, 7)),
    _composite("pad-concat-of-gathers", lambda x, i: tf.concat(
        [tf.pad(tf.gather(x, i), [[1, 0], [0, 2]]), tf.gather(x, tf.concat([i, i[:1]], 0)) * 3.0], axis=1),
        _f32(7, 3), _ids(7, 6)),
    _composite("cumsum-of-row-sums", lambda x: tf.math.cumsum(tf.reduce_sum(x * x, axis=1), reverse=True),
               _f32(9, 6)),
    _composite("top-k-of-softmax", lambda x: tf.math.top_k(tf.nn.softmax(x), 3), _f32(4, 11)),
    _composite("segment-sum-of-gather", lambda x, i, j: tf.math.unsorted_segment_sum(
        tf.gather(x, i) * 0.5, j, 5), _f32(8, 3), _ids(8, 10), _ids(5, 10), kernels=1),
    _composite("scan-then-gather", lambda x, i: tf.gather(tf.math.cumsum(x, axis=1), i, axis=1),
               _f32(3, 12), _ids(12, 5)),
    _composite("one-hot-matmul", lambda i, w: tf.matmul(tf.one_hot(i, 6), w), _ids(6, 5), _f32(6, 3)),
    _composite("sum-of-gathered-rows", lambda x, i: tf.reduce_sum(tf.gather(x, i), axis=0),
               _f32(20, 40), _ids(20, 300)),
    _composite("tf.sort-ascending", lambda x: tf.sort(x, axis=-1), _f32(3, 50)),      # top-k of -x, k = n
    _composite("tf.argsort-ties", lambda x: tf.argsort(x, direction="DESCENDING", stable=True),
               lambda rng: _ties(rng, "i32", (4, 33))),
]


@pytest.mark.parametrize("case", params(COMPOSITES))
def test_composite(case):
    check(case)


# -------------------------------------------------------------- gradients

def _tape(loss_of):
    def g(x, i):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = loss_of(x, i)
        return tf.convert_to_tensor(tape.gradient(loss, x))
    return g


GRADIENTS = [
    Case("grad-gather-axis0", _tape(lambda x, i: tf.reduce_sum(tf.gather(x * 2.0, i) ** 2)),
         lambda rng: [values(rng, "f32", (10, 4)), rng.integers(0, 10, (7,)).astype(np.int32)]),
    Case("grad-gather-axis1", _tape(lambda x, i: tf.reduce_sum(tf.sin(tf.gather(x, i, axis=1)))),
         lambda rng: [values(rng, "f64", (3, 8, 2)), rng.integers(0, 8, (2, 5)).astype(np.int64)]),
    Case("grad-gather-batch_dims",
         _tape(lambda x, i: tf.reduce_sum(tf.gather(x, i, axis=1, batch_dims=1) ** 2)),
         lambda rng: [values(rng, "f32", (3, 6, 2)), rng.integers(0, 6, (3, 4)).astype(np.int32)]),
    Case("grad-cumsum", _tape(lambda x, i: tf.reduce_sum(tf.math.cumsum(x, axis=1) * x)),
         lambda rng: [values(rng, "f32", (4, 6)), np.zeros(1, np.int32)]),
]


@pytest.mark.parametrize("case", params(GRADIENTS))
def test_gradient(case):
    check(case)


def test_keras_embedding_gradient():
    """The tape gradient of a Keras Embedding layer (an IndexedSlices made dense by
    UnsortedSegmentSum), compiled with the lookup, as tf.function computes it."""
    import keras
    layer = keras.layers.Embedding(50, 8)
    layer.build((None,))
    layer.embeddings.assign(np.random.default_rng(3).standard_normal((50, 8)).astype(np.float32))

    def step(ids, target):
        with tf.GradientTape() as tape:
            y = layer(ids)
            loss = tf.reduce_sum((y - target) ** 2)
        (g,) = tape.gradient(loss, layer.trainable_variables)
        return loss, tf.convert_to_tensor(g)
    rng = np.random.default_rng(4)
    ids = tf.constant(rng.integers(0, 50, (4, 6)).astype(np.int32))
    target = tf.constant(rng.standard_normal((4, 6, 8)).astype(np.float32))
    got = tfjit.function(step, jit_compile=True)(ids, target)
    want = tf.function(step)(ids, target)
    assert_matches(got[0].numpy(), want[0].numpy(), what="loss")
    assert_matches(got[1].numpy(), want[1].numpy(), rtol=0, atol=0, what="embedding gradient")


@pytest.mark.parametrize("exclusive", [False, True])
def test_the_interpreter_scans_logsumexp_as_tf(exclusive):
    """The IR interpreter (tfjit-run-module's reference) gives TF's values too."""
    from tfjit.ir import interp
    from tfjit.ir.text import parse_module
    x = np.array([[1.0, np.nan, 2.0, -np.inf, np.inf, np.inf, 3.0],
                  [-np.inf, np.nan, -np.inf, 1e30, -1e30, 0.5, 88.0]], np.float32)

    def fn(x):
        return tf.math.cumulative_logsumexp(x, axis=1, exclusive=exclusive)
    text = tfjit.function(fn, jit_compile=True).experimental_get_compiler_ir(tf.constant(x))()
    (got,) = interp.evaluate(parse_module(text), [x])
    assert_matches(got, fn(tf.constant(x)).numpy())
