"""SpaceToBatch(ND), BatchToSpace(ND), Roll, ExtractImagePatches, DataFormatVecPermute and
DataFormatDimMap (lower/space_batch.py), compiled by tfjit and compared with TF's executor.

Data movement only, so every result must equal TF's exactly (floats included: the
sign of zero and NaN payload positions too, through ``assert_matches`` with zero
tolerance).  The operand is a function argument (the compiled kernel moves it);
block shapes, paddings, crops, shifts and formats are constants, as TF's XLA op
tests (spacetobatch_op_test, manip_ops_test, extract_image_patches_op_test,
data_format_ops_test) build them.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches

R = tf.raw_ops


def _values(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, shape).astype(dtype)
    if x.dtype.kind == "f" and x.size > 3:
        flat = x.reshape(-1)
        flat[0], flat[1], flat[2] = -0.0, np.nan, np.inf
    return x


# (id, fn of the operand, operand shape, dtypes)
CASES = [
    ("S2BND-2d-pad", lambda x: R.SpaceToBatchND(input=x, block_shape=[2, 3],
                                                 paddings=[[1, 1], [0, 3]]), (2, 4, 6, 3),
     (np.float32, np.float16, np.int64)),
    ("S2BND-1d", lambda x: R.SpaceToBatchND(input=x, block_shape=[3], paddings=[[1, 3]]),
     (3, 5, 2), (np.float64, np.int32)),
    ("S2BND-no-blocks", lambda x: R.SpaceToBatchND(
        input=x, block_shape=np.zeros([0], np.int32), paddings=np.zeros([0, 2], np.int32)),
     (3, 5, 2), (np.int32,)),
    ("S2BND-block-1", lambda x: R.SpaceToBatchND(input=x, block_shape=[1, 2],
                                                  paddings=[[0, 0], [1, 1]]), (1, 2, 2, 1),
     (np.float32,)),
    ("S2BND-3d", lambda x: R.SpaceToBatchND(input=x, block_shape=[2, 1, 2],
                                             paddings=[[0, 0], [1, 0], [0, 2]]), (2, 4, 3, 2, 2),
     (np.float32,)),
    ("B2SND-crops", lambda x: R.BatchToSpaceND(input=x, block_shape=[2, 3],
                                                crops=[[1, 0], [2, 3]]), (12, 2, 3, 2),
     (np.float32, np.uint8)),
    ("B2SND-1d", lambda x: R.BatchToSpaceND(input=x, block_shape=[4], crops=[[0, 1]]),
     (8, 3, 2), (np.int64,)),
    ("S2B", lambda x: R.SpaceToBatch(input=x, paddings=[[0, 2], [1, 1]], block_size=2),
     (2, 4, 6, 3), (np.float32, np.int8)),
    ("B2S", lambda x: R.BatchToSpace(input=x, crops=[[0, 1], [1, 2]], block_size=2),
     (8, 2, 3, 2), (np.float32,)),
    ("S2BND-then-B2SND", lambda x: R.BatchToSpaceND(
        input=R.SpaceToBatchND(input=x, block_shape=[2, 2], paddings=[[1, 1], [2, 0]]),
        block_shape=[2, 2], crops=[[1, 1], [2, 0]]), (2, 4, 4, 3), (np.float32,)),
    ("Roll-two-axes", lambda x: R.Roll(input=x, shift=[2, -1], axis=[1, 0]), (3, 5, 2),
     (np.float32, np.int32, np.bool_)),
    ("Roll-same-axis-twice", lambda x: R.Roll(input=x, shift=[2, 7], axis=[1, -2]), (3, 5, 2),
     (np.int32,)),
    ("Roll-full-turn", lambda x: R.Roll(input=x, shift=[10], axis=[1]), (3, 5, 2), (np.int32,)),
    ("Roll-empty", lambda x: R.Roll(input=x, shift=[1], axis=[0]), (0, 3), (np.float32,)),
    ("Patches-1x1", lambda x: _patches(x, (1, 1), (1, 1), (1, 1), "VALID"), (2, 7, 6, 3),
     (np.float32,)),
    ("Patches-strided", lambda x: _patches(x, (1, 1), (2, 3), (1, 1), "VALID"), (2, 7, 6, 3),
     (np.int32,)),
    ("Patches-2x2-same", lambda x: _patches(x, (2, 2), (1, 1), (1, 1), "SAME"), (2, 7, 6, 3),
     (np.float32, np.float16)),
    ("Patches-dilated", lambda x: _patches(x, (2, 2), (1, 1), (2, 2), "VALID"), (2, 7, 6, 3),
     (np.float32,)),
    ("Patches-all-same", lambda x: _patches(x, (3, 2), (2, 3), (2, 1), "SAME"), (2, 7, 6, 3),
     (np.float64,)),
    ("Patches-uneven", lambda x: _patches(x, (3, 3), (1, 1), (3, 2), "VALID"), (1, 7, 6, 2),
     (np.uint8,)),
    ("VecPermute-NHWC-NCHW", lambda x: R.DataFormatVecPermute(x=x, src_format="NHWC",
                                                             dst_format="NCHW"), (4,),
     (np.int32, np.int64)),
    ("VecPermute-HWNC-NHWC-2d", lambda x: R.DataFormatVecPermute(x=x, src_format="HWNC",
                                                                dst_format="NHWC"), (4, 2),
     (np.int32,)),
    ("VecPermute-spatial", lambda x: R.DataFormatVecPermute(x=x, src_format="NHWC",
                                                           dst_format="HWNC"), (2,), (np.int64,)),
    ("VecPermute-spatial-2d", lambda x: R.DataFormatVecPermute(x=x, src_format="NHWC",
                                                              dst_format="HWNC"), (2, 2),
     (np.int32,)),
    ("DimMap-NHWC-NCHW", lambda x: R.DataFormatDimMap(x=x % 8 - 4, src_format="NHWC",
                                                     dst_format="NCHW"), (3, 4), (np.int32,)),
    ("DimMap-NDHWC", lambda x: R.DataFormatDimMap(x=x % 10 - 5, src_format="NDHWC",
                                                 dst_format="NCDHW"), (7,), (np.int64,)),
]


def _patches(x, ksize, strides, rates, padding):
    return R.ExtractImagePatches(images=x, ksizes=[1, *ksize, 1], strides=[1, *strides, 1],
                                 rates=[1, *rates, 1], padding=padding)


def _params():
    for case_id, fn, shape, dtypes in CASES:
        for d in dtypes:
            yield pytest.param(fn, shape, d, id=f"{case_id}-{np.dtype(d).name}")


@pytest.mark.parametrize("fn, shape, dtype", list(_params()))
def test_matches_tf_exactly(fn, shape, dtype):
    x = tf.constant(_values(shape, dtype, seed=len(shape) * 7 + np.dtype(dtype).itemsize))
    want = tf.function(fn)(x)
    got = tfjit.function(fn, jit_compile=True)(x)
    assert_matches(got.numpy(), want.numpy(), rtol=0, atol=0)
