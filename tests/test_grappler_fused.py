"""Grappler's fused nodes, which tfjit's graph pass meets in tf.function graphs (the
remapper runs before it): _FusedMatMul with each fused-op list TF's CPU kernel
takes, compiled from the node itself (imported from a GraphDef) against TF's kernel."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, graph_pb2

import tfjit
from oracle import assert_matches

# the lists TF's default CPU kernel runs (it refuses the others as Unimplemented)
FUSED = [("BiasAdd",), ("BiasAdd", "Relu"), ("BiasAdd", "Relu6"), ("BiasAdd", "Elu"),
         ("BiasAdd", "LeakyRelu"), ("BiasAdd", "Tanh"), ("BiasAdd", "Sigmoid")]
# the lists the remapper makes only for oneDNN (it turns on by itself on some CPUs):
# compared with the unfused ops they stand for, run by TensorFlow
ONEDNN_FUSED = {
    ("BiasAdd", "GeluExact"): lambda y, _: tf.nn.gelu(y, approximate=False),
    ("BiasAdd", "GeluApproximate"): lambda y, _: tf.nn.gelu(y, approximate=True),
    ("BiasAdd", "Add"): lambda y, addend: y + addend,
    ("BiasAdd", "Add", "Relu"): lambda y, addend: tf.nn.relu(y + addend),
}
TOL = {tf.float32: 2e-5, tf.bfloat16: 5e-2}    # bf16: as test_linalg's MatMul


def _fused_graph(fused, dtype, ta, tb):
    gd = graph_pb2.GraphDef()
    names = ["a", "b", "bias"] + (["addend"] if "Add" in fused else [])
    for n in names:
        nd = gd.node.add(name=n, op="Placeholder")
        nd.attr["dtype"].type = dtype.as_datatype_enum
    nd = gd.node.add(name="fused", op="_FusedMatMul", input=names)
    nd.attr["T"].type = dtype.as_datatype_enum
    nd.attr["num_args"].i = len(names) - 2
    nd.attr["transpose_a"].b, nd.attr["transpose_b"].b = ta, tb
    nd.attr["fused_ops"].CopyFrom(attr_value_pb2.AttrValue(
        list=attr_value_pb2.AttrValue.ListValue(s=[f.encode() for f in fused])))
    nd.attr["epsilon"].f = 0.0001
    nd.attr["leakyrelu_alpha"].f = 0.3
    return gd, names


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])   # the types TF registers it for on CPU
@pytest.mark.parametrize("fused", FUSED, ids="+".join)
def test_fused_matmul_matches_tf(fused, dtype, rng):
    ta, tb = len(fused) % 2 == 0, "Tanh" in fused
    gd, names = _fused_graph(fused, dtype, ta, tb)
    m, k, n = 13, 37, 21
    shapes = {"a": (k, m) if ta else (m, k), "b": (n, k) if tb else (k, n), "bias": (n,),
              "addend": (m, n)}
    args = [tf.cast(tf.constant(rng.standard_normal(shapes[x]) * 2, tf.float32), dtype) for x in names]

    def fn(*xs):
        out, = tf.graph_util.import_graph_def(gd, input_map={f"{x}:0": v for x, v in zip(names, xs)},
                                              return_elements=["fused:0"], name="")
        return out
    jit = tfjit.function(fn)
    got = jit(*args)
    assert [n.split("/")[-1] for n in jit.clusters(*args)[0][1]].count("fused") == 1
    if dtype == tf.bfloat16:
        # TF's bf16 kernel for the fused node accumulates in bf16 (up to 16% off its own
        # MatMul here); the remapper makes bf16 fused nodes only with oneDNN, whose kernel
        # does not: the oracle is the unfused ops the node stands for
        want = _unfused(fused, *args, ta=ta, tb=tb)
    else:
        want = tf.function(fn)(*args)
    assert_matches(got.numpy(), want.numpy(), rtol=TOL[dtype], atol=TOL[dtype])


def _unfused(fused, a, b, bias, ta, tb):
    acts = {"Relu": tf.nn.relu, "Relu6": tf.nn.relu6, "Elu": tf.nn.elu, "Tanh": tf.tanh,
            "Sigmoid": tf.sigmoid, "LeakyRelu": lambda y: tf.nn.leaky_relu(y, 0.3)}
    y = tf.nn.bias_add(tf.matmul(a, b, transpose_a=ta, transpose_b=tb), bias)
    return acts[fused[1]](y) if len(fused) > 1 else y


@pytest.mark.parametrize("fused", ONEDNN_FUSED, ids="+".join)
def test_onednn_fused_lists_match_the_ops_they_stand_for(fused, rng):
    gd, names = _fused_graph(fused, tf.float32, False, True)
    a, b = rng.standard_normal((9, 17)), rng.standard_normal((11, 17))
    bias, addend = rng.standard_normal(11), rng.standard_normal((9, 11))
    args = [tf.constant(v, tf.float32) for v in (a, b, bias, addend)][:len(names)]

    def fn(*xs):
        return tf.graph_util.import_graph_def(gd, input_map={f"{x}:0": v for x, v in zip(names, xs)},
                                              return_elements=["fused:0"], name="")[0]
    got = tfjit.function(fn)(*args)
    y = tf.nn.bias_add(tf.matmul(args[0], args[1], transpose_b=True), args[2])
    want = ONEDNN_FUSED[fused](y, args[3] if len(args) > 3 else None)
    assert_matches(got.numpy(), want.numpy(), rtol=2e-5, atol=2e-5)


def test_an_unknown_fused_op_names_the_node():
    gd, names = _fused_graph(("BiasAdd", "Softsign"), tf.float32, False, False)
    args = [tf.ones([2, 3]), tf.ones([3, 4]), tf.ones([4])]

    def fn(*xs):
        return tf.graph_util.import_graph_def(gd, input_map={f"{x}:0": v for x, v in zip(names, xs)},
                                              return_elements=["fused:0"], name="")[0]
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"_FusedMatMul.*Softsign.*node fused"):
        tfjit.function(fn)(*args)
