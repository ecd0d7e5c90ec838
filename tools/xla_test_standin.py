"""A stand-in for TensorFlow's ``tensorflow/compiler/tests/xla_test.py`` (used by
tools/xla_op_tests.py): ``XLATestCase`` as TF's XLA op tests see it on the CPU
backend, but its Session graphs run on TF's CPU device under tfjit auto-clustering
instead of on the ``XLA_CPU`` device.

What a test sees is what TF's harness gives a ``--test_device=XLA_CPU`` run:
``self.device == "XLA_CPU"``, ``self.float_types``/``int_types``/``numeric_types``/
``all_types``/``complex_types`` ... from the type list the runner sets
(``configure``), ``self.session()`` (a fresh graph, grappler's constant folding off,
``global_jit_level`` ON_1) and ``self.test_scope()`` (the ops under test), numpy and
``random`` seeded in ``setUp``.  Differences: ``test_scope`` places on
``/device:CPU:0``; ``cached_session``/``test_session`` are ``session`` (TF's raise,
but older copies of the tests call them); no disabled-test manifest.

Written for tfjit from the behaviour of TF's file (Apache-2.0); none of its code.
"""
from __future__ import annotations

import contextlib
import random

import numpy as np
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
from tensorflow.python.client import session as session_lib
from tensorflow.python.framework import dtypes, ops, random_seed
from tensorflow.python.platform import test

DEVICE = "XLA_CPU"          # what tests compare self.device with
PLACEMENT = "/device:CPU:0"
_types = None


def configure(types: str) -> None:
    """Sets the comma-separated ``DT_*`` list that every XLATestCase made afterwards tests
    (the runner's ``--types``; TF's build_defs.bzl gives the cpu backend its list)."""
    global _types
    for name in types.split(","):
        types_pb2.DataType.Value(name)      # a ValueError names an unknown type now
    _types = types


class XLATestCase(test.TestCase):
    """XLA op test case: parameterised by the configured types, graphs under tfjit."""

    def __init__(self, method_name="runTest"):
        super().__init__(method_name)
        if _types is None:
            raise RuntimeError("xla_test_standin.configure(types) first")
        self.device = DEVICE
        self.has_custom_call = True
        all_tf = {dtypes.as_dtype(types_pb2.DataType.Value(n)) for n in _types.split(",")}
        self.int_tf_types = {t for t in all_tf if t.is_integer}
        self._float_tf_types = {t for t in all_tf if t.is_floating}
        self.complex_tf_types = {t for t in all_tf if t.is_complex}
        self._numeric_tf_types = self.int_tf_types | self._float_tf_types | self.complex_tf_types
        self.quantized_tf_types = {t for t in all_tf if t.is_quantized}
        self._all_tf_types = all_tf
        self._all_types = {t.as_numpy_dtype for t in all_tf if not t.is_quantized}
        self._int_types = {t.as_numpy_dtype for t in self.int_tf_types}
        self.signed_int_types = {t.as_numpy_dtype for t in self.int_tf_types if not t.is_unsigned}
        self.unsigned_int_types = {t.as_numpy_dtype for t in self.int_tf_types if t.is_unsigned}
        self._float_types = {t.as_numpy_dtype for t in self._float_tf_types}
        self.complex_types = {t.as_numpy_dtype for t in self.complex_tf_types}
        self._numeric_types = self._int_types | self._float_types | self.complex_types
        self.disabled_regex = None
        self._method_types_filter = {}

    # TF's per-method type filters come from a manifest; with none they are the full sets.
    all_tf_types = property(lambda self: set(self._all_tf_types))
    float_types = property(lambda self: set(self._float_types))
    float_tf_types = property(lambda self: set(self._float_tf_types))
    int_types = property(lambda self: set(self._int_types))
    numeric_tf_types = property(lambda self: set(self._numeric_tf_types))
    numeric_types = property(lambda self: set(self._numeric_types))
    all_types = property(lambda self: set(self._all_types))

    def setUp(self):
        super().setUp()
        random.seed(random_seed.DEFAULT_GRAPH_SEED)
        np.random.seed(random_seed.DEFAULT_GRAPH_SEED)

    @contextlib.contextmanager
    def session(self):
        """A Session on a fresh graph, that graph the default, as TF's harness; its
        ConfigProto asks for auto-clustering (ON_1), which tfjit follows."""
        graph = ops.Graph()
        config = config_pb2.ConfigProto()
        # As TF's harness: grappler would fold the graphs under test away.
        config.graph_options.rewrite_options.constant_folding = rewriter_config_pb2.RewriterConfig.OFF
        config.graph_options.optimizer_options.global_jit_level = config_pb2.OptimizerOptions.ON_1
        with session_lib.Session(graph=graph, config=config) as sess, graph.as_default():
            yield sess

    def cached_session(self, *args, **kwargs):
        return self.session()

    def test_session(self, *args, **kwargs):
        return self.session()

    @contextlib.contextmanager
    def test_scope(self):
        """Places the ops under test on TF's CPU device (which tfjit clusters)."""
        with ops.device(PLACEMENT):
            yield

    device_scope = test_scope        # XLATestCase's newer name (qr_op_test uses it)
