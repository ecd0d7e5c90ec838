"""The op table's trigonometric and hyperbolic rows (tests/test_ops.py's harness and
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

from test_ops import (FLOAT, HALF, NP_DTYPES, R, _case, _denormal, _unary, check, elementwise_cases,
                      params)


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


@pytest.mark.parametrize("case", params(elementwise_cases(ROWS) + domain_cases()))
def test_trig_and_hyperbolic(case):
    check(case)
