"""ReverseV2 and MatrixBandPart, against TF's kernels (a bidirectional LSTM reverses
its sequences; band parts build attention masks)."""
import numpy as np
import pytest

from oracle import assert_matches

REVERSE = [((5,), [0]), ((3, 4), [1]), ((3, 4), [-2]), ((2, 3, 4), [0, 2]), ((2, 3, 4), []),
           ((2, 0, 3), [1]), ((1, 7, 1), [0, 1, 2])]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool", "bfloat16"])
@pytest.mark.parametrize("shape, axes", REVERSE, ids=[f"{s}-{a}" for s, a in REVERSE])
def test_reverse(tf, tfjit, dtype, shape, axes):
    rng = np.random.default_rng(len(shape) * 10 + len(axes))
    x = tf.cast(tf.constant(rng.integers(-9, 9, size=shape)), getattr(tf, dtype))
    fn = lambda x: tf.reverse(x, axes)                    # noqa: E731
    want = tf.function(fn)(x)
    assert_matches(tfjit.function(fn, jit_compile=True)(x).numpy(), want.numpy())
    fused = lambda x: tf.reverse(tf.cast(x, tf.float32) * 2.0 + 1.0, axes)   # noqa: E731
    assert_matches(tfjit.function(fused, jit_compile=True)(x).numpy(), tf.function(fused)(x).numpy())


BANDS = [((4, 4), 0, 0), ((4, 6), 1, -1), ((6, 4), -1, 2), ((2, 3, 5, 5), 2, 1), ((3, 3), -1, -1),
]


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
@pytest.mark.parametrize("shape, lower, upper", BANDS, ids=[f"{s}-{lo}-{up}" for s, lo, up in BANDS])
def test_matrix_band_part(tf, tfjit, dtype, shape, lower, upper):
    x = tf.cast(tf.constant(np.random.default_rng(2).integers(1, 9, size=shape)), getattr(tf, dtype))
    fn = lambda x: tf.linalg.band_part(x, lower, upper)      # noqa: E731
    assert_matches(tfjit.function(fn, jit_compile=True)(x).numpy(), tf.function(fn)(x).numpy())
    # band limits fed at run time
    run = lambda x, lo, up: tf.linalg.band_part(x, lo, up)   # noqa: E731
    args = (x, tf.constant(lower, tf.int64), tf.constant(upper, tf.int64))
    assert_matches(tfjit.function(run, jit_compile=True)(*args).numpy(), tf.function(run)(*args).numpy())


def test_a_band_wider_than_the_matrix_is_tfs_error(tf, tfjit):
    fn = lambda x: tf.linalg.band_part(x * 2.0, 7, 0)       # noqa: E731
    x = tf.ones([5, 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_lower must be negative or less"):
        tf.function(fn)(x)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"num_lower must be negative or less or equal to number of rows \(5\) got: 7"):
        tfjit.function(fn, jit_compile=True)(x)
