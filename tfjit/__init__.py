"""tfjit: an XLA-style JIT compiler for TensorFlow, written in Python.

    import tfjit

    @tfjit.function(jit_compile=True)
    def f(x, y, z):
        return tf.reduce_sum(x + y * z)
"""
from tfjit.api.function import Function, function

__all__ = ["Function", "function"]
__version__ = "0.1.0"
