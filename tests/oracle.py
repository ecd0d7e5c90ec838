"""Comparison against TensorFlow's executor, the oracle of every test.

Integers and bools must match exactly; floats within per-dtype tolerances,
with NaN positions, ±inf positions and the sign of zero identical.
"""
from __future__ import annotations

import numpy as np

# (rtol, atol) per dtype name, for results of a few fused elementwise ops.
TOLERANCE = {
    "float16": (2e-3, 1e-3),
    "bfloat16": (1.6e-2, 1e-2),
    "float32": (2e-5, 1e-6),
    "float64": (1e-12, 1e-14),
}


def assert_matches(actual, expected, *, rtol=None, atol=None, what="result", check_zero_sign=True):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != TF's {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != TF's {expected.shape}"
    kind = expected.dtype.kind
    if kind not in "fc" and expected.dtype.name != "bfloat16":
        mismatch = actual != expected
        assert not mismatch.any(), (f"{what}: {int(mismatch.sum())} of {mismatch.size} elements differ; "
                                    f"first at {np.argwhere(mismatch)[0].tolist()}: "
                                    f"{actual[mismatch][0]!r} vs TF {expected[mismatch][0]!r}")
        return
    name = expected.dtype.name
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    r0, a0 = TOLERANCE.get(name, (1e-5, 1e-6))
    rtol = r0 if rtol is None else rtol
    atol = a0 if atol is None else atol
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    assert (nan_a == nan_e).all(), f"{what}: NaN positions differ at {np.argwhere(nan_a != nan_e)[:5].tolist()}"
    inf_a, inf_e = np.isinf(a), np.isinf(e)
    same_inf = (inf_a == inf_e) & (np.where(inf_e, np.sign(a) == np.sign(e), True))
    assert same_inf.all(), (f"{what}: ±inf differ at {np.argwhere(~same_inf)[:5].tolist()}: "
                            f"{a[~same_inf][:5]} vs TF {e[~same_inf][:5]}")
    finite = ~(nan_e | inf_e)
    with np.errstate(invalid="ignore"):          # inf - inf where both are inf: not counted
        err = np.abs(a - e)
        bad = finite & (err > atol + rtol * np.abs(e))
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} elements beyond rtol={rtol} atol={atol}; "
                           f"worst at {np.argwhere(bad)[0].tolist()}: {a[bad][0]!r} vs TF {e[bad][0]!r}")
    if check_zero_sign:
        zeros = finite & (e == 0) & (a == 0)
        sign_bad = zeros & (np.signbit(a) != np.signbit(e))
        assert not sign_bad.any(), f"{what}: sign of zero differs at {np.argwhere(sign_bad)[:5].tolist()}"
