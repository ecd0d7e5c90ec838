"""MaxPool/AvgPool and their gradients, compiled by tfjit and run by TF.

Table: op × dtype × geometry (window, stride, VALID/SAME/EXPLICIT padding,
odd sizes, size-1 and empty dims, windows as large as the input) × values:

* ``specials``  the dtype's special values (NaN, ±inf, ±0, extremes);
* ``ties``      few distinct values, so most windows hold several maxima and
                MaxPoolGrad's tie-breaking (first in scan order) decides;
* ``edges``     windows of -inf only (MaxPool gives -FLT_MAX there, as TF),
                NaN as a window's first element (MaxPoolGrad routes to it).

The gradient cases run the forward op in the same graph, as GradientTape does.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from test_ops import NP_DTYPES, Case, check, is_float, params, sample

R = tf.raw_ops

# name -> (input shape, ksize (h, w), strides (h, w), padding)
GEOMETRY = {
    "2x2/2 VALID": ((2, 7, 6, 3), (2, 2), (2, 2), "VALID"),
    "2x2/2 SAME": ((2, 7, 6, 3), (2, 2), (2, 2), "SAME"),
    "3x3/1 SAME": ((2, 7, 6, 3), (3, 3), (1, 1), "SAME"),
    "3x3/1 VALID": ((1, 5, 6, 2), (3, 3), (1, 1), "VALID"),
    "3x3/2 SAME": ((2, 7, 6, 17), (3, 3), (2, 2), "SAME"),
    "3x3/2 VALID": ((1, 8, 9, 2), (3, 3), (2, 2), "VALID"),
    "2x3/1x2 SAME": ((1, 5, 7, 2), (2, 3), (1, 2), "SAME"),
    "2x2/3 SAME": ((1, 7, 8, 2), (2, 2), (3, 3), "SAME"),
    "1x1/1": ((2, 3, 3, 2), (1, 1), (1, 1), "VALID"),
    "1x1/2 SAME": ((1, 5, 4, 2), (1, 1), (2, 2), "SAME"),
    "global": ((2, 4, 5, 3), (4, 5), (1, 1), "VALID"),
    "window > input SAME": ((1, 2, 3, 2), (5, 4), (1, 1), "SAME"),
    "size 1": ((1, 1, 1, 1), (1, 1), (1, 1), "SAME"),
    "empty batch": ((0, 4, 4, 2), (2, 2), (2, 2), "VALID"),
    "empty channels": ((2, 4, 4, 0), (2, 2), (1, 1), "SAME"),
}
MAX_DTYPES = ("f32", "f64", "f16", "bf16", "i32", "i64")
AVG_DTYPES = ("f32", "f64", "f16", "bf16")


def _attrs(k, s, padding):
    return dict(ksize=[1, *k, 1], strides=[1, *s, 1], padding=padding)


def max_pool(k, s, padding):
    return lambda x: R.MaxPool(input=x, **_attrs(k, s, padding))


def avg_pool(k, s, padding):
    return lambda x: R.AvgPool(value=x, **_attrs(k, s, padding))


def max_pool_grad(k, s, padding):
    def fn(x, g):
        y = R.MaxPool(input=x, **_attrs(k, s, padding))
        return R.MaxPoolGrad(orig_input=x, orig_output=y, grad=g, **_attrs(k, s, padding))
    return fn


def avg_pool_grad(shape, k, s, padding):
    return lambda g: R.AvgPoolGrad(orig_input_shape=list(shape), grad=g, **_attrs(k, s, padding))


def pooled_shape(shape, k, s, padding) -> tuple:
    return tuple(R.MaxPool(input=tf.zeros(shape), **_attrs(k, s, padding)).shape)


def values(d, shape, kind):
    def make(rng):
        if kind == "specials":
            return sample(d, shape, rng)
        if kind == "ties":
            return rng.integers(-1, 2, shape).astype(NP_DTYPES[d])
        x = rng.integers(-3, 4, shape).astype(NP_DTYPES[d])       # "edges"
        if is_float(d) and x.size:
            x[..., :2, :2, 0] = -np.inf
            x[..., 0, 0, -1] = np.nan
            x.reshape(-1)[::7] = np.nan
        return x
    return make


def _grad_values(d, shape):
    scale = 0.25 if is_float(d) else 1
    return lambda rng: (rng.integers(-8, 9, shape) * scale).astype(NP_DTYPES[d])


def pool_cases() -> list:
    cases = []
    for name, (shape, k, s, padding) in GEOMETRY.items():
        out = pooled_shape(shape, k, s, padding)
        kinds = ("specials", "ties", "edges") if np.prod(shape) else ("specials",)
        for d in MAX_DTYPES:
            for kind in kinds:
                make = values(d, shape, kind)
                cases.append(Case("MaxPool", d, f"{name}-{kind}", max_pool(k, s, padding),
                                  lambda rng, make=make: [make(rng)]))
                cases.append(Case("MaxPoolGrad", d, f"{name}-{kind}", max_pool_grad(k, s, padding),
                                  lambda rng, make=make, g=_grad_values(d, out): [make(rng), g(rng)]))
        for d in AVG_DTYPES:
            for kind in kinds[:1] + ("ties",) * (len(kinds) > 1):
                make = values(d, shape, kind)
                cases.append(Case("AvgPool", d, f"{name}-{kind}", avg_pool(k, s, padding),
                                  lambda rng, make=make: [make(rng)]))
            g = _grad_values(d, out)
            cases.append(Case("AvgPoolGrad", d, name, avg_pool_grad(shape, k, s, padding),
                              lambda rng, g=g: [g(rng)]))
            cases.append(Case("AvgPoolGrad", d, f"{name}-specials", avg_pool_grad(shape, k, s, padding),
                              lambda rng, d=d, out=out: [sample(d, out, rng)]))
    return cases


def variant_cases() -> list:
    """MaxPoolV2/MaxPoolGradV2 (ksize and strides as inputs) and EXPLICIT padding."""
    cases = []
    shape, k, s = (2, 7, 6, 3), [1, 3, 2, 1], [1, 2, 1, 1]
    for d in ("f32", "i32", "f16"):
        def v2(x, g):
            y = R.MaxPoolV2(input=x, ksize=k, strides=s, padding="SAME")
            return y, R.MaxPoolGradV2(orig_input=x, orig_output=y, grad=g, ksize=k, strides=s, padding="SAME")
        out = pooled_shape(shape, k[1:3], s[1:3], "SAME")
        cases.append(Case("MaxPoolV2", d, "SAME", v2, lambda rng, d=d, out=out: [
            values(d, shape, "ties")(rng), _grad_values(d, out)(rng)]))

        def explicit(x):
            kw = dict(ksize=[1, 3, 3, 1], strides=[1, 2, 1, 1], padding="EXPLICIT",
                      explicit_paddings=[0, 0, 2, 1, 0, 2, 0, 0])
            y = R.MaxPool(input=x, **kw)
            return y, R.MaxPoolGrad(orig_input=x, orig_output=y, grad=y, **kw)
        cases.append(Case("MaxPool", d, "EXPLICIT", explicit, lambda rng, d=d: [values(d, shape, "ties")(rng)]))
    return cases


@pytest.mark.parametrize("case", params(pool_cases() + variant_cases()))
def test_pooling(case):
    check(case)


def test_max_pool_grad_tie_breaking():
    """All-equal windows: the first element in scan order gets the whole gradient,
    also at SAME-padded borders where the window starts in the padding."""
    x = tf.ones([1, 4, 4, 1])
    g = tf.reshape(tf.range(1, 5, dtype=tf.float32), [1, 2, 2, 1])
    fn = max_pool_grad((3, 3), (2, 2), "SAME")
    got = tfjit.function(fn, jit_compile=True)(x, g).numpy()
    want = tf.function(fn)(x, g).numpy()
    assert_matches(got, want)
    assert got.sum() == 10 and np.count_nonzero(got) == 4


def test_max_pool_unused_orig_output():
    """TF's CPU MaxPoolGrad recomputes the argmax from orig_input; a wrong
    orig_output changes nothing (tfjit does not read it either)."""
    def fn(x, g, junk):
        return R.MaxPoolGrad(orig_input=x, orig_output=junk, grad=g, **_attrs((2, 2), (2, 2), "VALID"))
    rng = np.random.default_rng(3)
    args = [tf.constant(rng.normal(size=s).astype(np.float32)) for s in ((1, 4, 4, 2), (1, 2, 2, 2), (1, 2, 2, 2))]
    assert_matches(tfjit.function(fn, jit_compile=True)(*args).numpy(), tf.function(fn)(*args).numpy())


def test_nchw_compiles_and_pooling_across_depth_is_refused():
    # NCHW, which TF's CPU kernel refuses, compiles (tests/test_nchw.py has the table)
    fn = lambda x: R.MaxPool(input=x, ksize=[1, 1, 2, 2], strides=[1, 1, 2, 2], padding="VALID",  # noqa: E731
                             data_format="NCHW")
    x = tf.reshape(tf.range(32.0), [1, 2, 4, 4])
    want = tf.transpose(tf.nn.max_pool2d(tf.transpose(x, [0, 2, 3, 1]), 2, 2, "VALID"), [0, 3, 1, 2])
    np.testing.assert_array_equal(tfjit.function(fn, jit_compile=True)(x).numpy(), want.numpy())
    depthwise = lambda x: R.MaxPool(input=x, ksize=[1, 1, 1, 2], strides=[1, 1, 1, 2],  # noqa: E731
                                    padding="VALID")
    with pytest.raises(tf.errors.InvalidArgumentError, match="across batch or depth"):
        tfjit.function(depthwise, jit_compile=True)(tf.zeros([1, 2, 4, 4]))


# ------------------------------------------------------- kernels and compile time

POOLS = {
    "MaxPool 3x3/1 SAME": (lambda x: R.MaxPool(input=x, **_attrs((3, 3), (1, 1), "SAME")), 1),
    "AvgPool 3x3/2 SAME": (lambda x: R.AvgPool(value=x, **_attrs((3, 3), (2, 2), "SAME")), 1),
    # argmax kernel + scatter kernel
    "MaxPoolGrad 3x3/1 SAME": (lambda x: max_pool_grad((3, 3), (1, 1), "SAME")(
        x, R.MaxPool(input=x, **_attrs((3, 3), (1, 1), "SAME"))), None),
    "AvgPoolGrad 2x2/2 VALID": (lambda x: avg_pool_grad((8, 64, 64, 4), (2, 2), (2, 2), "VALID")(
        x[:, :32, :32, :]), None),
}


@pytest.mark.parametrize("name", list(POOLS))
def test_pool_kernels(name, capsys):
    """A pool is one loop kernel; compile time is printed (measured, not asserted)."""
    fn, kernels = POOLS[name]
    shape = (8, 64, 64, 4) if "AvgPoolGrad" in name else (8, 32, 32, 16)
    x = tf.constant(np.random.default_rng(0).normal(size=shape).astype(np.float32))
    f = tfjit.function(fn, jit_compile=True)
    start = time.perf_counter()
    compiled = f.compiled(x)
    seconds = time.perf_counter() - start
    with capsys.disabled():
        print(f"\n{name} on {list(shape)}: {compiled.num_kernels} kernel(s), compiled in {seconds:.2f} s "
              f"(pipeline {compiled.seconds:.2f} s)")
    if kernels is not None:
        assert compiled.num_kernels == kernels, [fu.notes for fu in compiled.fusions]
    assert_matches(f(x).numpy(), tf.function(fn)(x).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("src,dst,groups", [
    ((128, 26, 26, 32), (128, 1, 13, 2, 13, 2, 32, 1),     # a pool gradient's interleave
     [([0], [0]), ([1], [2, 3]), ([2], [4, 5]), ([3], [6])]),
    ((6,), (2, 3), [([0], [0, 1])]),
    ((2, 3), (3, 2), [([0, 1], [0, 1])]),                    # no finer grouping exists
    ((4, 1, 6), (2, 2, 6), [([0], [0, 1]), ([2], [2])]),
    ((1,), (1, 1), []),
    ((0, 3), (3, 0), [([0, 1], [0, 1])]),
])
def test_reshape_index_groups(src, dst, groups):
    # codegen maps a reshape's index group by group (MaxPoolGrad's kernel: 3.1x faster)
    from tfjit.ir.indexing import reshape_groups
    assert reshape_groups(src, dst) == groups
