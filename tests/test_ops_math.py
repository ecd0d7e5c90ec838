"""The op table's trigonometric and hyperbolic rows, and NextAfter, Cross,
EuclideanNorm, ToBool and BroadcastArgs (tests/test_ops.py's harness and
special values), compiled by tfjit and compared with TF's executor.

Tan, Sinh, Cosh, Asinh, Acosh (and Asin, Acos on float64) are the C library's
function in TF's kernels and in tfjit's code, so results are bit-identical; the
table's tolerances still apply.  Asin, Acos, Atan, Atanh on float32 (and Atan,
Atanh on float64) are Eigen's vector polynomials in TF, tfjit's own in tfjit's
(codegen/mathlib.py, within 2 ulp).  Halves are computed in float32, as TF does.
"""
from __future__ import annotations

import numpy as np
import pytest

from test_ops import (ALL, FLOAT, HALF, NP_DTYPES, R, Elementwise, _case, _denormal, _unary, check,
                      elementwise_cases, params, ramp, sample, specials, unary_values)


def _vector_polynomial_denormal(d, v):
    """Denormal operands of TF's vectorised kernels: Eigen's vector body reads them as
    0 (DAZ) and its scalar tail calls the C library, which returns them unchanged, so
    TF's answer depends on the element's position (asin(1e-40) is 0 in a 64-element
    tensor, 1e-40 in a 3-element one).  Left out; tfjit gives the DAZ answer."""
    return _denormal(d, v) & (d != "f64")


def _f64_vector_denormal(d, v):
    """As ``_vector_polynomial_denormal``; Atan and Atanh are vectorised on float64 too."""
    return _denormal(d, v)


ROWS = [
    _unary("Tan", FLOAT + HALF), _unary("Sinh", FLOAT + HALF), _unary("Cosh", FLOAT + HALF),
    _unary("Asinh", FLOAT + HALF), _unary("Acosh", FLOAT + HALF),
    _unary("Asin", FLOAT + HALF, exclude=_vector_polynomial_denormal),
    _unary("Acos", FLOAT + HALF, exclude=_vector_polynomial_denormal),
    _unary("Atan", FLOAT + HALF, exclude=_f64_vector_denormal),
    _unary("Atanh", FLOAT + HALF, exclude=_f64_vector_denormal),
    # one representable step: compared exactly (a step the wrong way is within any tolerance)
    Elementwise("NextAfter", lambda x, y: R.NextAfter(x1=x, x2=y), FLOAT, arity=2,
                tol={"f32": (0, 0), "f64": (0, 0)}),
]


def domain_cases() -> list:
    """Asin, Acos, Atanh over their domain [-1, 1] densely (the table's values cover it
    sparsely), and Tan near its poles, where an ulp of the operand moves the result most."""
    cases = []
    for d in FLOAT + HALF:
        inside = lambda rng, d=d: np.concatenate(
            [np.linspace(-1, 1, 401), rng.uniform(-1, 1, 600), 1 - rng.uniform(0, 1e-3, 100)]
        ).astype(NP_DTYPES[d])
        for op in ("Asin", "Acos", "Atanh"):
            cases.append(_case(op, d, "domain", lambda x, op=op: getattr(R, op)(x=x), inside))
        poles = lambda rng, d=d: (np.pi / 2 * rng.integers(-41, 41, 300) * 1.0
                                  + rng.uniform(-1e-3, 1e-3, 300)).astype(NP_DTYPES[d])
        cases.append(_case("Tan", d, "poles", lambda x: R.Tan(x=x), poles))
    return cases


def other_cases() -> list:
    cases = []
    for d in ("f32", "f64", "f16", "bf16", "i32", "i64", "u8"):
        like = lambda shape, d=d: (lambda rng: sample(d, shape, rng))
        cases.append(_case("Cross", d, "shapes", lambda a, b, c, e, f, g: [
            R.Cross(a=a, b=b), R.Cross(a=c, b=e), R.Cross(a=f, b=g)],
            like((3,)), like((3,)), like((2, 4, 3)), like((2, 4, 3)), like((0, 3)), like((0, 3))))
    for d in HALF:     # each product rounded to half, as TF's Eigen arithmetic: exact
        a = lambda rng, d=d: sample(d, (400, 3), np.random.default_rng(7))
        near = lambda rng, d=d, a=a: (a(rng).astype(np.float32) * 1.001).astype(NP_DTYPES[d])
        cases.append(_case("Cross", d, "cancelling", lambda a, b: R.Cross(a=a, b=b), a, near,
                           tol=(0, 0)))
    for d in ("f32", "f64", "bf16", "i32", "i64"):
        x = (lambda rng, d=d: sample(d, (3, 4, 5), rng, ramp(d))) if d[0] != "i" else \
            (lambda rng, d=d: sample(d, (3, 4, 5), rng, specials(d)))        # squares and sums wrap
        cases.append(_case("EuclideanNorm", d, "axes", lambda x, e: [
            R.EuclideanNorm(input=x, axis=np.array([1], np.int32)),
            R.EuclideanNorm(input=x, axis=np.array([0, -1], np.int32), keep_dims=True),
            R.EuclideanNorm(input=x, axis=np.array([], np.int32)),
            R.EuclideanNorm(input=e, axis=np.array([0], np.int64))], x, np.zeros((0, 2), NP_DTYPES[d])))
    for d in FLOAT:
        cases.append(_case("EuclideanNorm", d, "specials",
                           lambda x: R.EuclideanNorm(input=x, axis=np.array([0], np.int32)),
                           specials(d).reshape(-1, 1)))
    for d in ALL + ("u8",):
        cases.append(_case("ToBool", d, "scalars-and-shapes",
                           lambda *xs: [R.ToBool(input=x) for x in xs],
                           *[v for v in unary_values(d)[:24]], np.zeros((0, 2), NP_DTYPES[d]),
                           unary_values(d)[:3]))
    for d in ("i32", "i64"):
        t = NP_DTYPES[d]
        cases.append(_case("BroadcastArgs", d, "pairs", lambda *ss: [
            R.BroadcastArgs(s0=ss[k], s1=ss[k + 1]) for k in range(0, len(ss), 2)],
            *[np.array(s, t) for pair in (([2, 1, 3], [4, 1]), ([], [5]), ([0, 1], [1, 7]), ([3], [3]))
              for s in pair]))
    return cases


@pytest.mark.parametrize("case", params(other_cases()))
def test_other_ops(case):
    check(case)


@pytest.mark.parametrize("case", params(elementwise_cases(ROWS) + domain_cases()))
def test_trig_and_hyperbolic(case):
    check(case)
