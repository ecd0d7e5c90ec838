"""Bad attributes and operands get TF's (or XLA's) error: must-compile names them in
TF's words, auto mode raises what TF raises (issue: defects found by outside suites)."""
import numpy as np
import pytest


def _cumsum(tf, axis):
    return lambda x: tf.cumsum(x * 2.0 + 1.0, axis=axis) * 3.0


def _pool(tf, ksize, strides):
    return lambda x: tf.nn.max_pool2d(x * 2.0, ksize=ksize, strides=strides, padding="VALID") + 1.0


CASES = [
    # (case, fn maker, input shape, must-compile words, TF's words)
    ("cumsum-axis-5", lambda tf: _cumsum(tf, 5), (2, 3),
     "ScanOp: Expected scan axis in the range [-2, 2), but got 5", "Expected scan axis"),
    ("cumsum-axis--3", lambda tf: _cumsum(tf, -3), (2, 3),
     "ScanOp: Expected scan axis in the range [-2, 2), but got -3", "Expected scan axis"),
    ("maxpool-ksize-0", lambda tf: _pool(tf, [1, 0, 1, 1], 1), (1, 4, 4, 1),
     "Sliding window ksize field for dimension 1 must be positive but is 0", "ksize must be positive"),
    ("avgpool-ksize-0", lambda tf: lambda x: tf.nn.avg_pool2d(x + 1.0, [1, 2, 0, 1], 1, "VALID") * 2.0,
     (1, 4, 4, 1), "Sliding window ksize field for dimension 2 must be positive but is 0",
     "ksize must be a positive"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_errors_are_tfs(tf, tfjit, case):
    _, make, shape, words, tf_words = case
    x = tf.constant(np.ones(shape, np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError) as want:
        tf.function(make(tf))(x)
    assert tf_words in str(want.value)
    with pytest.raises(tf.errors.InvalidArgumentError) as must:
        tfjit.function(make(tf), jit_compile=True)(x)
    assert words in str(must.value), str(must.value)
    with pytest.raises(tf.errors.InvalidArgumentError) as auto:
        tfjit.function(make(tf), jit_compile=None)(x)
    assert tf_words in str(auto.value)
