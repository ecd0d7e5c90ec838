"""Grappler's fused nodes, which tfjit's graph pass meets in tf.function graphs (the
remapper runs before it): _FusedMatMul with each fused-op list TF's CPU kernel
takes, compiled from the node itself (imported from a GraphDef) against TF's kernel."""
import json
import os
import subprocess
import sys

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


# -- the remapper's other fused nodes (lower/grappler_fused.py) ---------------------------

def _node_fn(op, inputs, attrs, outputs=1):
    """A function running one ``op`` node (imported from a GraphDef) on its arguments."""
    gd = graph_pb2.GraphDef()
    names = [f"in{k}" for k in range(len(inputs))]
    for n, v in zip(names, inputs):
        gd.node.add(name=n, op="Placeholder").attr["dtype"].type = v.dtype.as_datatype_enum
    nd = gd.node.add(name="fused", op=op, input=names)
    for key, value in attrs.items():
        if isinstance(value, tf.dtypes.DType):
            nd.attr[key].type = value.as_datatype_enum
        elif isinstance(value, bool):
            nd.attr[key].b = value
        elif isinstance(value, int):
            nd.attr[key].i = value
        elif isinstance(value, float):
            nd.attr[key].f = value
        elif isinstance(value, bytes):
            nd.attr[key].s = value
        elif value and isinstance(value[0], bytes):
            nd.attr[key].list.s.extend(value)
        elif value and isinstance(value[0], tf.dtypes.DType):
            nd.attr[key].list.type.extend(v.as_datatype_enum for v in value)
        else:
            nd.attr[key].list.i.extend(value)

    def fn(*xs):
        return tf.graph_util.import_graph_def(
            gd, input_map={f"{n}:0": v for n, v in zip(names, xs)},
            return_elements=[f"fused:{k}" for k in range(outputs)], name="")
    return fn


def _bn(y, scale, offset, mean, var, eps):
    return tf.compat.v1.nn.fused_batch_norm(y, scale, offset, mean, var, epsilon=eps,
                                            is_training=False)[0]


ACTS = {"Relu": tf.nn.relu, "Relu6": tf.nn.relu6, "Elu": tf.nn.elu, "Tanh": tf.tanh,
        "Sigmoid": tf.sigmoid, "LeakyRelu": lambda y: tf.nn.leaky_relu(y, 0.3),
        "GeluExact": lambda y: tf.nn.gelu(y, approximate=False),
        "GeluApproximate": lambda y: tf.nn.gelu(y, approximate=True),
        "_MklSwish": lambda y: y * tf.sigmoid(y),
        "_FusedHardSwish": lambda y: y * tf.nn.relu6(y + 3.0) / 6.0}
CONV_FUSED = [("BiasAdd",), ("BiasAdd", "Relu"), ("BiasAdd", "Relu6"), ("BiasAdd", "Elu"),
              ("BiasAdd", "LeakyRelu"), ("BiasAdd", "_MklSwish"), ("BiasAdd", "GeluExact"),
              ("BiasAdd", "Add"), ("BiasAdd", "Add", "Relu"), ("FusedBatchNorm",),
              ("FusedBatchNorm", "Relu"), ("FusedBatchNorm", "_FusedHardSwish")]


def _unfused_epilogue(fused, y, args, eps):
    args = list(args)
    for op in fused:
        if op == "BiasAdd":
            y = tf.nn.bias_add(y, args.pop(0))
        elif op == "Add":
            y = y + args.pop(0)
        elif op == "FusedBatchNorm":
            y = _bn(y, *args[:4], eps)
            del args[:4]
        else:
            y = ACTS[op](y)
    return y


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
@pytest.mark.parametrize("fused", CONV_FUSED, ids="+".join)
def test_fused_convolutions_match_the_ops_they_stand_for(fused, depthwise, rng):
    """_FusedConv2D / _FusedDepthwiseConv2dNative against TF running the unfused ops
    (an odd spatial size, stride 2, SAME padding; a prime channel count)."""
    c = 7
    x = rng.standard_normal((2, 9, 11, c))
    w = rng.standard_normal((3, 3, c, 1 if depthwise else 5))
    depth = c if depthwise else 5
    args = []
    for op in fused:
        if op == "BiasAdd":
            args.append(rng.standard_normal(depth))
        elif op == "Add":
            args.append(rng.standard_normal((2, 5, 6, depth)))
        elif op == "FusedBatchNorm":
            args += [rng.standard_normal(depth), rng.standard_normal(depth),
                     rng.standard_normal(depth), rng.uniform(0.5, 2.0, depth)]
    inputs = [tf.constant(v, tf.float32) for v in [x, w, *args]]
    op = "_FusedDepthwiseConv2dNative" if depthwise else "_FusedConv2D"
    attrs = {"T": tf.float32, "num_args": len(args), "strides": [1, 2, 2, 1],
             "padding": b"SAME", "data_format": b"NHWC", "dilations": [1, 1, 1, 1],
             "fused_ops": [f.encode() for f in fused], "epsilon": 0.001,
             "leakyrelu_alpha": 0.3}
    if not depthwise:
        attrs["TArgs"] = [tf.float32] * len(args)
    jit = tfjit.function(_node_fn(op, inputs, attrs))
    got, = jit(*inputs)
    conv = (tf.nn.depthwise_conv2d(inputs[0], inputs[1], [1, 2, 2, 1], "SAME") if depthwise
            else tf.nn.conv2d(inputs[0], inputs[1], 2, "SAME"))
    want = _unfused_epilogue(fused, conv, inputs[2:], 0.001)
    assert_matches(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    assert [n.split("/")[-1] for n in jit.clusters(*inputs)[0][1]].count("fused") == 1


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("side, mode", [(0, b"Identity"), (0, b"Relu"), (1, b"Relu")])
def test_fused_batch_norm_ex_matches_the_ops_it_stands_for(training, side, mode, rng):
    x = rng.standard_normal((3, 5, 4, 8)) * 2 + 1    # TF's shape function: channels % 4 == 0
    stats = [rng.standard_normal(8), rng.standard_normal(8), rng.standard_normal(8),
             rng.uniform(0.5, 2.0, 8)]
    extra = [rng.standard_normal((3, 5, 4, 8))] if side else []
    inputs = [tf.constant(v, tf.float32) for v in [x, *stats, *extra]]
    attrs = {"T": tf.float32, "U": tf.float32, "epsilon": 0.001, "exponential_avg_factor": 1.0,
             "num_side_inputs": side, "activation_mode": mode, "data_format": b"NHWC",
             "is_training": training}
    got = tfjit.function(_node_fn("_FusedBatchNormEx", inputs, attrs, outputs=3))(*inputs)
    y, mean, var = tf.compat.v1.nn.fused_batch_norm(
        inputs[0], inputs[1], inputs[2], None if training else inputs[3],
        None if training else inputs[4], epsilon=0.001, is_training=training)[:3]
    y = y + inputs[5] if side else y
    y = tf.nn.relu(y) if mode == b"Relu" else y
    for g, w in zip(got, (y, mean, var)):
        assert_matches(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op, want", [
    ("_MklSwish", lambda x: x * tf.sigmoid(x)),
    ("_MklFusedMish", lambda x: x * tf.tanh(tf.nn.softplus(x)))])
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_fused_activations_match_the_ops_they_stand_for(op, want, dtype):
    # both tails and the switch points of softplus's and Mish's own formulas
    x = tf.cast(tf.constant(np.concatenate([np.linspace(-30, 30, 601), [0.0, -0.0, 20.5, 40.5,
                                                                         np.inf, -np.inf, np.nan]]),
                            tf.float32), dtype)
    got, = tfjit.function(_node_fn(op, [x], {"T": dtype}))(x)
    tol = 1e-6 if dtype == tf.float32 else 2e-2
    assert_matches(got.numpy().astype(np.float32),
                   tf.cast(want(tf.cast(x, tf.float32)), tf.float32).numpy(), rtol=tol, atol=tol)


def test_fused_arguments_must_all_be_used():
    x, w, b = tf.ones([1, 4, 4, 2]), tf.ones([1, 1, 2, 3]), tf.ones([3])
    attrs = {"T": tf.float32, "TArgs": [tf.float32] * 2, "num_args": 2, "strides": [1, 1, 1, 1],
             "padding": b"VALID",
             "data_format": b"NHWC", "dilations": [1, 1, 1, 1], "fused_ops": [b"BiasAdd"]}
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"_FusedConv2D.*argument.*left"):
        tfjit.function(_node_fn("_FusedConv2D", [x, w, b, b], attrs))(x, w, b, b)


def test_auto_mode_clusters_what_the_remapper_fused(auto_mode, rng):
    """Unmodified tf.functions whose graphs the remapper rewrites before the graph pass:
    every node that computes is clustered and the results are TF's.  (The tests run
    with oneDNN's rewrites off, conftest.py; the remapper still makes _FusedConv2D.)"""
    from tfjit.api import autojit
    x = tf.constant(rng.standard_normal((2, 8, 8, 4)), tf.float32)
    w = tf.constant(rng.standard_normal((3, 3, 4, 4)), tf.float32)
    b = tf.constant(rng.standard_normal(4), tf.float32)
    programs = {"mish": lambda a: a * tf.tanh(tf.nn.softplus(a)),
                "conv": lambda a: tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(a, w, 1, "SAME"), b))}
    for name, fn in programs.items():
        auto_mode.tfjit_auto_jit = 2
        autojit.recent.clear()
        got = tf.function(fn)(x)
        assert len(autojit.recent) == 1, name
        result = autojit.recent[0]
        computing = {n for n, node in result.graph.nodes.items()
                     if node.op not in ("_Arg", "_Retval", "Identity", "Const")}
        assert computing and computing <= set(result.specs[0].nodes), (name, result.marks)
        auto_mode.tfjit_auto_jit = -1
        want = tf.function(fn)(x)
        assert_matches(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


ONEDNN_PROGRAM = r"""
import json, numpy as np, tensorflow as tf
from tfjit import config
from tfjit.api import autojit
x = tf.constant(np.linspace(-30, 30, 4096, dtype=np.float32).reshape(64, 64))
q = tf.constant(np.random.default_rng(0).standard_normal((2, 4, 16, 8)), tf.float32)
mask = tf.constant(np.random.default_rng(1).standard_normal((2, 1, 16, 16)), tf.float32)
out = {}
for name, fn, x in [("mish", lambda a: a * tf.tanh(tf.nn.softplus(a)), x),
                    ("swish", lambda a: a * tf.sigmoid(a), x),
                    ("attention", lambda a: tf.nn.softmax(
                        tf.matmul(a, a, transpose_b=True) * 0.35 + mask), q)]:
    autojit.recent.clear()
    got = tf.function(fn)(x).numpy()
    ops = sorted({r.graph.nodes[n].op for r in autojit.recent for s in r.specs for n in s.nodes})
    config.set_flags(tfjit_auto_jit=-1)
    want = tf.function(fn)(x).numpy()
    config.set_flags(tfjit_auto_jit=2)
    out[name] = [ops, float(np.max(np.abs(got - want) / (1 + np.abs(want))))]
print("RESULT", json.dumps(out))
"""


def test_auto_mode_clusters_onednn_fused_activations_alone():
    """With oneDNN's rewrites on (TF's default on x86), the remapper turns Mish and
    Swish into one _MklFusedMish / _MklSwish node and attention's scaled, masked
    scores into _MklFusedBatchMatMulV2: auto mode clusters them (a lone node counts as
    the ops it stands for) and matches TF."""
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1",
               TFJIT_FLAGS="--tfjit_auto_jit=2 --tfjit_cpu_global_jit")
    run = subprocess.run([sys.executable, "-c", ONEDNN_PROGRAM], capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.split("RESULT", 1)[1])
    assert out["mish"][0] == ["_MklFusedMish"] and out["swish"][0] == ["_MklSwish"], out
    assert "_MklFusedBatchMatMulV2" in out["attention"][0], out
    assert all(err < 1e-6 for _, err in out.values()), out


def test_a_fused_convolution_with_another_filter_layout_is_refused():
    x, w, b = tf.ones([1, 4, 4, 2]), tf.ones([3, 2, 1, 1]), tf.ones([3])
    attrs = {"T": tf.float32, "TArgs": [tf.float32], "num_args": 1, "strides": [1, 1, 1, 1],
             "padding": b"VALID", "data_format": b"NHWC", "dilations": [1, 1, 1, 1],
             "fused_ops": [b"BiasAdd"], "filter_format": b"OIHW"}
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"_FusedConv2D.*filter_format.*OIHW"):
        tfjit.function(_node_fn("_FusedConv2D", [x, w, b], attrs))(x, w, b)


@pytest.mark.parametrize("adj", [(False, False), (False, True), (True, False)], ids=str)
@pytest.mark.parametrize("fused", [("Mul",), ("Mul", "Add"), ("Add",)], ids="+".join)
def test_fused_batch_matmul_matches_the_ops_it_stands_for(fused, adj, rng):
    a = rng.standard_normal((2, 3, 8, 5) if adj[0] else (2, 3, 5, 8))
    b = rng.standard_normal((2, 3, 7, 8) if adj[1] else (2, 3, 8, 7))
    args = [rng.standard_normal(()) if op == "Mul" else rng.standard_normal((2, 1, 5, 7))
            for op in fused]
    inputs = [tf.constant(v, tf.float32) for v in [a, b, *args]]
    attrs = {"T": tf.float32, "adj_x": adj[0], "adj_y": adj[1], "num_args": len(args),
             "fused_ops": [f.encode() for f in fused]}
    got, = tfjit.function(_node_fn("_MklFusedBatchMatMulV2", inputs, attrs))(*inputs)
    want = tf.matmul(inputs[0], inputs[1], adjoint_a=adj[0], adjoint_b=adj[1])
    for op, arg in zip(fused, inputs[2:]):
        want = want * arg if op == "Mul" else want + arg
    assert_matches(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_unary_ops_composition_matches_the_ops_it_stands_for():
    x = tf.constant(np.linspace(-4, 4, 37), tf.float32)
    names = [b"Abs", b"Neg", b"Exp", b"Tanh", b"Relu6"]
    got, = tfjit.function(_node_fn("_UnaryOpsComposition", [x],
                                   {"T": tf.float32, "op_names": names}))(x)
    want = tf.nn.relu6(tf.tanh(tf.exp(-tf.abs(x))))
    assert_matches(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
