"""Diag, DiagPart and the MatrixDiag/MatrixDiagPart/MatrixSetDiag family (V1-V3),
compiled by tfjit and compared with TF's executor (tests/test_ops.py's harness).

Cases cover square, wide and tall matrices, batches, empty dims, single diagonals
and bands (below, across and above the main one), every ``align``, and explicit
or inferred num_rows/num_cols."""
from __future__ import annotations

import numpy as np
import pytest

from test_ops import NP_DTYPES, R, _case, check, params, sample

DTYPES = ("f32", "i32", "bool", "f16")
ALIGNS = ("LEFT_RIGHT", "RIGHT_LEFT", "LEFT_LEFT", "RIGHT_RIGHT")


def _k(k):
    return np.array(k, np.int32)


def diag_cases() -> list:
    cases = []
    for d in DTYPES:
        like = lambda shape, d=d: (lambda rng: sample(d, shape, rng))
        pad = np.array(7, NP_DTYPES[d]) if d != "bool" else np.array(True)
        cases += [] if d == "bool" else [      # TF's Diag and DiagPart take numbers only
            _case("Diag", d, "ranks", lambda a, b, c: [R.Diag(diagonal=a), R.Diag(diagonal=b), R.Diag(diagonal=c)],
                  like((5,)), like((2, 3)), like((0, 2))),
            _case("DiagPart", d, "ranks", lambda a, b: [R.DiagPart(input=a), R.DiagPart(input=b)],
                  like((4, 4)), like((2, 3, 2, 3))),
        ]
        cases += [
            _case("MatrixDiag", d, "v1", lambda a, b: [R.MatrixDiag(diagonal=a), R.MatrixDiag(diagonal=b)],
                  like((4,)), like((2, 3, 0))),
            _case("MatrixDiagPart", d, "v1", lambda a, b, c: [R.MatrixDiagPart(input=x) for x in (a, b, c)],
                  like((4, 4)), like((2, 3, 5)), like((2, 6, 3))),
            _case("MatrixSetDiag", d, "v1", lambda a, b, c, e: [R.MatrixSetDiag(input=a, diagonal=b),
                                                                  R.MatrixSetDiag(input=c, diagonal=e)],
                  like((2, 3, 5)), like((2, 3)), like((6, 4)), like((4,))),
        ]
        for align in ALIGNS if d == "f32" else ("RIGHT_LEFT",):     # TF's default for the others
            for k, shape in (((-1, 2), (2, 4, 5)), ((-3, -1), (5, 3)), ((1, 3), (3, 6)), ((0, 0), (4, 4)),
                             ((2, 2), (2, 3, 5)), ((-2, 0), (0, 4, 3))):
                kname = f"{align}-k{k[0]}_{k[1]}-{'x'.join(map(str, shape))}"
                cases.append(_case("MatrixDiagPartV3", d, kname,
                                   lambda x, k, p, align=align: R.MatrixDiagPartV3(
                                       input=x, k=k, padding_value=p, align=align),
                                   like(shape), _k(k), pad))
                width = min(shape[-2] + min(k[1], 0), shape[-1] - max(k[0], 0))
                dshape = shape[:-2] + ((width,) if k[0] == k[1] else (k[1] - k[0] + 1, width))
                cases.append(_case("MatrixSetDiagV3", d, kname,
                                   lambda x, v, k, align=align: R.MatrixSetDiagV3(
                                       input=x, diagonal=v, k=k, align=align),
                                   like(shape), like(dshape), _k(k)))
                # the same diagonals back into a matrix: inferred size, then the exact shape
                cases.append(_case("MatrixDiagV3", d, kname,
                                   lambda v, k, r, c, p, align=align: [
                                       R.MatrixDiagV3(diagonal=v, k=k, num_rows=-1, num_cols=-1,
                                                      padding_value=p, align=align),
                                       R.MatrixDiagV3(diagonal=v, k=k, num_rows=r, num_cols=c,
                                                      padding_value=p, align=align)],
                                   like(dshape), _k(k), np.int32(shape[-2]), np.int32(shape[-1]), pad))
        cases.append(_case("MatrixDiagPartV2", d, "k-1_1", lambda x, k, p: R.MatrixDiagPartV2(
            input=x, k=k, padding_value=p), like((3, 4)), _k((-1, 1)), pad))
        cases.append(_case("MatrixDiagV2", d, "k1-rows", lambda v, k, p: R.MatrixDiagV2(
            diagonal=v, k=k, num_rows=np.int32(5), num_cols=np.int32(-1), padding_value=p),
            like((2, 4)), _k(1), pad))
    return cases


@pytest.mark.parametrize("case", params(diag_cases()))
def test_diag(case):
    check(case)


def test_a_diagonal_of_the_wrong_shape_is_an_error_naming_the_op():
    import tensorflow as tf
    import tfjit

    def fn(x, v):
        return R.MatrixSetDiagV3(input=x, diagonal=v, k=np.int32(0))
    args = (tf.ones([3, 4]), tf.ones([2]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="diagonal"):
        tf.function(fn)(*args)                  # the oracle: TF raises too
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"MatrixSetDiagV3 \(diagonal must have shape \[3\]"):
        tfjit.function(fn, jit_compile=True)(*args)
