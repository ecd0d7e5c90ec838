"""TF's special functions (lower/special.py, codegen/special.py) against TF's kernels.

Igamma, Igammac, Betainc, Zeta and Polygamma in f32 and f64 (the only dtypes TF's
CPU kernels register) are Eigen's scalar code step by step, so the compiled results
must be TF's bit for bit: random inputs over each function's useful domain, grids of
special values (NaN, ±inf, ±0, negatives, poles, denormals, huge values) for every
operand, fused with neighbours.  The interpreter (ir/interp_special.py), which also
folds constant inputs, must give TF's bits too wherever no intermediate is a
denormal (TF's FTZ/DAZ flushes those; numpy does not).
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit.ir import interp
from tfjit.ir.ops import SPECIAL
from tfjit.ir.text import parse_module

F32, F64 = np.float32, np.float64


def _specials(t) -> np.ndarray:
    tiny = np.finfo(t).tiny
    return np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, -2.0, -2.5, 0.5, 1.0, 2.0, 3.0,
                     10.0, 1e-30, tiny / 8, 1e30, np.finfo(t).max, 1 + np.finfo(t).eps], t)


def _logu(rng, lo, hi, n):
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n))


def _pairs(t, first, second, extra_first=None):
    """Random pairs plus every pair of special values (and of ``extra_first`` for operand 0)."""
    s = _specials(t)
    a, x = np.meshgrid(np.concatenate([s] + ([extra_first] if extra_first is not None else [])), s)
    return (np.concatenate([first, a.ravel()]).astype(t), np.concatenate([second, x.ravel()]).astype(t))


def _igamma_inputs(t, rng):
    n = 300
    a = np.concatenate([_logu(rng, 1e-3, 1e3, n), rng.uniform(0, 30, n)])
    x = np.concatenate([_logu(rng, 1e-3, 1e3, n), rng.uniform(0, 30, n)])
    near = rng.uniform(0.5, 50, 200)             # x close to a: where series and fraction meet
    a = np.concatenate([a, near])
    x = np.concatenate([x, near * rng.uniform(0.9, 1.1, 200)])
    return _pairs(t, a, x)


def _zeta_inputs(t, rng):
    n = 300
    x = np.concatenate([rng.uniform(1, 30, n), _logu(rng, 1, 1e3, n), np.arange(-3, 20, 0.5)])
    q = np.concatenate([_logu(rng, 1e-3, 1e3, n), rng.uniform(-10, 30, n),
                        rng.choice([-4.0, -3.5, -1.0, -0.5, 0.25], len(x) - 2 * n)])
    return _pairs(t, x, q)


def _polygamma_inputs(t, rng):
    n = 300
    order = np.concatenate([rng.integers(0, 7, 2 * n), [0.5, -1.0, 1.5, 30.0, 100.0] * 10])
    x = np.concatenate([rng.uniform(-10, 30, n), _logu(rng, 1e-3, 1e3, n),
                        rng.choice([-3.0, -2.5, -0.5, 1e-5, 7.0], 50)])
    return _pairs(t, order, x, extra_first=np.arange(5.0))


def _betainc_inputs(t, rng):
    n = 400
    a = np.concatenate([_logu(rng, 1e-3, 1e3, n), rng.uniform(0, 20, n)])
    b = np.concatenate([_logu(rng, 1e-3, 1e3, n), rng.uniform(0, 20, n)])
    x = np.concatenate([rng.uniform(0, 1, n), rng.beta(0.5, 0.5, n)])
    s = np.array([np.nan, np.inf, 0.0, -1.0, 1e-20, 0.5, 1.0, 2.0, 11.0, 1e20], t)
    xs = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -0.5, 1.5, 1e-10, 0.3, 0.96, 0.999], t)
    g = np.stack(np.meshgrid(s, s, xs), -1).reshape(-1, 3)
    return tuple(np.concatenate([v, g[:, i]]).astype(t) for i, v in enumerate((a, b, x)))


CASES = {
    "igamma": (tf.math.igamma, _igamma_inputs),
    "igammac": (tf.math.igammac, _igamma_inputs),
    "zeta": (tf.math.zeta, _zeta_inputs),
    "polygamma": (tf.math.polygamma, _polygamma_inputs),
    "betainc": (tf.math.betainc, _betainc_inputs),
}


def _fn(op):
    return lambda *xs: (op(*xs), op(*xs) * 2.0 + 1.0)      # and fused with neighbours


@pytest.fixture(scope="module")
def compiled():
    """(inputs, TF's results, tfjit.function) per (case, dtype), compiled once."""
    out = {}

    def get(name, t):
        if (name, t) not in out:
            op, make = CASES[name]
            xs = [tf.constant(v) for v in make(t, np.random.default_rng(len(name) + t(0).itemsize))]
            want = [w.numpy() for w in _fn(op)(*xs)]
            out[name, t] = (xs, want, tfjit.function(_fn(op), jit_compile=True))
        return out[name, t]
    return get


def _glibc_logf_differs(name, t, xs) -> np.ndarray:
    """Where TF's answer depends on which glibc ``logf`` runs: f32 igammac(a, x) of a
    subnormal x is the one input that reaches logf with a subnormal operand under
    DAZ (the others return first: DAZ reads it as 0).  TF's kernels call
    ``logf@GLIBC_2.27`` (log(2**-150) there); tfjit's loaded code binds the
    unversioned reference to glibc's oldest ``logf@GLIBC_2.2.5``, whose wrapper
    sees x <= 0 and returns -inf, so igammac is 1 where TF's is 0."""
    x = np.abs(xs[1].numpy())
    return (name == "igammac") & (t is F32) & (x > 0) & (x < np.finfo(t).tiny)


@pytest.mark.parametrize("t", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(CASES))
def test_special_function_is_tfs_bit_for_bit(compiled, name, t):
    xs, want, f = compiled(name, t)
    keep = ~_glibc_logf_differs(name, t, xs)
    for got, w, what in zip(f(*xs), want, ("value", "value * 2 + 1")):
        assert_matches(got.numpy()[keep], w[keep], rtol=0, atol=0, what=f"{name} {t.__name__} {what}")
    kernels = [k for k in f.compiled(*xs).fusions if any(i.op in SPECIAL for i in k.instrs)]
    assert len(kernels) == 1                  # computed once; its neighbour reads the output


@pytest.mark.parametrize("name", list(CASES))
def test_neighbours_fuse_into_the_special_functions_kernel(compiled, name):
    op = CASES[name][0]
    xs = compiled(name, F32)[0]

    def fn(*xs):
        return tf.sqrt(op(*[tf.abs(x) for x in xs]) * 2.0 + 1.0)
    f = tfjit.function(fn, jit_compile=True)
    keep = ~_glibc_logf_differs(name, F32, xs)
    assert_matches(f(*xs).numpy()[keep], fn(*xs).numpy()[keep], rtol=0, atol=0)
    assert len(f.compiled(*xs).fusions) == 1


@pytest.mark.parametrize("t", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(CASES))
def test_the_interpreter_gives_tfs_values(compiled, name, t):
    xs, want, f = compiled(name, t)
    module = parse_module(f.experimental_get_compiler_ir(*xs)())
    got = interp.evaluate(module, [x.numpy() for x in xs])[0]
    keep = ~_glibc_logf_differs(name, t, xs)
    # where an intermediate underflows, TF's FTZ flushes it and numpy does not: those
    # results are tiny (zeta's terms), compared within atol; every other one bit for bit
    small = 1e-25 if t is F32 else 1e-290
    tiny = keep & ((np.abs(want[0]) < small) | (np.abs(got) < small))
    exact = keep & ~tiny
    assert exact.sum() > 0.6 * keep.size, exact.sum()
    assert_matches(got[exact], want[0][exact], rtol=0, atol=0, what=f"{name} {t.__name__}")
    assert_matches(got[tiny], want[0][tiny], rtol=0, atol=small, what=f"{name} {t.__name__} (tiny)",
                   check_zero_sign=False)


def test_constant_operands_fold_to_tfs_values():
    def fn():
        a = tf.constant([0.5, 2.0, 7.5, 30.0, -1.0, np.nan], tf.float64)
        x = tf.constant([0.1, 3.0, 7.0, 20.0, 1.0, 1.0], tf.float64)
        return (tf.math.igamma(a, x), tf.math.igammac(a, x), tf.math.zeta(a + 2.0, x),
                tf.math.polygamma(tf.floor(a * 0 + 2.0), x), tf.math.betainc(a, a + 1.0, x / 40.0))
    f = tfjit.function(fn, jit_compile=True)
    assert "igamma" not in f.compiled().module_after      # folded while lowering
    for got, want in zip(f(), fn()):
        assert_matches(got.numpy(), want.numpy(), rtol=0, atol=0)


def test_binary_ops_broadcast_and_betainc_broadcasts_scalars(rng):
    a = tf.constant(_logu(rng, 0.1, 20, 6).reshape(6, 1).astype(F32))
    x = tf.constant(_logu(rng, 0.1, 20, 5).astype(F32))
    for op in (tf.math.igamma, tf.math.igammac, tf.math.zeta, tf.math.polygamma):
        fn = (lambda a, x, op=op: op(tf.floor(a), x)) if op is tf.math.polygamma else op
        assert_matches(tfjit.function(fn, jit_compile=True)(a, x).numpy(), fn(a, x).numpy(), rtol=0, atol=0)
    b = tf.constant(rng.uniform(0.5, 5, (3, 4)).astype(F64))
    xb = tf.constant(rng.uniform(0, 1, (3, 4)).astype(F64))
    for args in ((tf.constant(2.5, tf.float64), b, xb), (b, tf.constant(0.5, tf.float64), xb),
                 (b, b, tf.constant(0.25, tf.float64))):
        got = tfjit.function(tf.math.betainc, jit_compile=True)(*args)
        assert_matches(got.numpy(), tf.math.betainc(*args).numpy(), rtol=0, atol=0)


def test_what_is_not_compiled_is_refused_with_a_reason():
    from tfjit import dtypes as dt
    from tfjit.graph.graphdef import Node, TFType
    from tfjit.ir.module import Module
    from tfjit.lower.registry import Unsupported, lower_node
    # TF's shape function refuses what it can see; shapes known only at run time reach
    # the lowering, which refuses them as TF's kernel does
    m = Module("betainc")
    ab, x = m.parameter(dt.F32, (3, 4)), m.parameter(dt.F32, (1, 4))
    node = Node("Betainc", "Betainc", [], [], {"T": TFType(tf.float32.as_datatype_enum, "float")})
    with pytest.raises(Unsupported, match=r"Betainc: shapes of a \[3, 4\], b \[3, 4\] and x \[1, 4\] "
                                          r"are inconsistent"):
        lower_node(m, node, [ab, ab, x])
    h = tf.ones([4], tf.float16)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Igamma has no tfjit lowering for dtype half"):
        tfjit.function(lambda a: tf.raw_ops.Igamma(a=a, x=a), jit_compile=True)(h)
