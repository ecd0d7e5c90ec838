"""Shared by the tests of module passes: run one pass on IR text, and compare the
module's values before and after it with the IR interpreter (no TensorFlow)."""
from __future__ import annotations

import numpy as np

from tfjit.ir import interp, verify
from tfjit.ir.parse import parse_module
from tfjit.passes.simplify import DCE


def run_pass(p, text: str):
    """(the module as parsed, the module after pass ``p`` and DCE, whether ``p`` changed
    it); the result verified after each."""
    before, after = parse_module(text), parse_module(text)
    changed = p.run(after)
    verify.module(after, p.name)
    DCE().run(after)
    verify.module(after, "dce")
    return before, after, changed


def same_values(before, after, seed: int = 0, exact: bool = False) -> None:
    """Both modules compute the same outputs on random float inputs: bit for bit with
    ``exact`` (a pass that only moves or copies work), else within float32 rounding."""
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(p.shape).astype(p.dtype.numpy()) for p in before.params]
    for got, want in zip(interp.evaluate(after, args), interp.evaluate(before, args)):
        if exact:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
