"""Bad attributes and operands get TF's (or XLA's) error: must-compile names them in
TF's words, auto mode raises what TF raises (issue: defects found by outside suites)."""
import dataclasses
import re

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
    # TF's XLA op tests (reduce_ops_test): one dimension named twice is TF's error.
    ("sum-duplicate-axes", lambda tf: lambda x: tf.reduce_sum(x * 2.0, axis=[0, -2]) + 1.0,
     (2, 3), "Axes contains duplicate dimension: 0", "Axes contains duplicate dimension: 0"),
    ("mean-duplicate-axes", lambda tf: lambda x: tf.reduce_mean(x * 2.0, axis=[1, 1]) + 1.0,
     (2, 3), "Axes contains duplicate dimension: 1", "Axes contains duplicate dimension: 1"),
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


@pytest.fixture
def session_auto_mode(tfjit):
    """TF1 Session graphs auto-clustered as TF's XLA op tests run them: every op a
    cluster, compiled at once.  Flags are restored afterwards."""
    from tfjit.api import autojit
    saved = dataclasses.replace(tfjit.config.flags())
    tfjit.config.set_flags(tfjit_cpu_global_jit=True, tfjit_min_cluster_size=1,
                           tfjit_enable_lazy_compilation=False)
    autojit.activate()
    autojit.recent.clear()
    yield autojit
    for f in dataclasses.fields(saved):
        setattr(tfjit.config.flags(), f.name, getattr(saved, f.name))


AXES_FED = ([0], [1], [-1], [0, 1], [0, 0], [1, -1], [-2, 1, 0], [2], [-3], [0, -33])


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean", "reduce_max", "reduce_all"])
def test_reduction_axes_fed_at_run_time(tf, tfjit, session_auto_mode, op):
    """Axes fed to a Session at run time are compiled per value (constant arguments):
    valid ones give TF's result; one dimension named twice, or an axis out of range,
    TF's InvalidArgumentError in TF's words, raised by the launch op itself (as XLA
    does), not by TF's kernel run as a fallback."""
    from tfjit.api.service import SERVICE
    dtype, value = ((tf.bool, np.arange(6).reshape(2, 3) % 4 == 1) if op == "reduce_all" else
                    (tf.float32, np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5))
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(dtype, [2, 3])
        axes = tf.compat.v1.placeholder(tf.int32, [None])
        y = getattr(tf, op)(x, axes)

    def run(auto_jit):
        tfjit.config.set_flags(tfjit_auto_jit=auto_jit)
        out = []
        with tf.compat.v1.Session(graph=g) as sess:
            for a in AXES_FED:
                try:
                    out.append(sess.run(y, {x: value, axes: a}))
                except tf.errors.InvalidArgumentError as e:   # the kernel's words
                    out.append(re.search(r"Invalid reduction (dimension \(-?\d+ for input "
                                         r"with \d+|arguments: .*?\d+)", e.message)[0])
        return out

    want, got = run(-1), run(2)
    (spec,) = [s for r in session_auto_mode.recent for s in r.specs]
    assert len(SERVICE.variants[spec.key]) == 4          # the four valid values compiled
    assert SERVICE.fallbacks[spec.key] == 0              # and tfjit raised the errors
    for a, w, v in zip(AXES_FED, want, got):
        if isinstance(w, str):
            assert ("Axes contains duplicate dimension" in w
                    or "Invalid reduction dimension" in w) and v == w, (a, w, v)
        else:
            np.testing.assert_array_equal(v, w, err_msg=str(a))


# Ops whose operands TF's kernel refuses, in Session graphs as TF's XLA op tests build
# them: (case, build(tf) -> (output, {placeholder: value}), TF's words).
SESSION_ERRORS = [
    ("broadcast-args", lambda tf: _fed(tf, lambda a, b: tf.raw_ops.BroadcastArgs(s0=a, s1=b),
                                       [np.int32([2, 3, 5]), np.int32([2, 3, 4])]),
     "Incompatible shapes: [2,3,5] vs. [2,3,4]"),
    # scan_ops_test: an axis that is a vector was compiled as its one element
    ("cumsum-axis-vector", lambda tf: _fed(tf, lambda x: tf.cumsum(x, [0]),
                                           [np.ones((2, 5), np.float32)]),
     "ScanOp: axis must be a scalar, not [1]"),
    ("cumprod-axis-vector", lambda tf: _fed(tf, lambda x: tf.math.cumprod(x, [1]),
                                            [np.ones((2, 5), np.float32)]),
     "ScanOp: axis must be a scalar, not [1]"),
    ("logsumexp-axis-vector", lambda tf: _fed(tf, lambda x: tf.math.cumulative_logsumexp(x, [1]),
                                              [np.ones((2, 5), np.float32)]),
     "ScanOp: axis must be a scalar, not [1]"),
    ("cumsum-axis-2", lambda tf: _fed(tf, lambda x: tf.cumsum(x, 2), [np.ones((2, 5), np.float32)]),
     "Expected scan axis in the range [-2, 2), but got 2"),
    ("sum-axis-2", lambda tf: _fed(tf, lambda x, a: tf.reduce_sum(x, a),
                                   [np.ones((2, 3), np.float32), np.int64([2])]),
     "Invalid reduction dimension (2 for input with 2 dimension(s)"),
]


def _fed(tf, fn, values):
    """fn of one placeholder per value; the output and its feed dict."""
    xs = [tf.compat.v1.placeholder(tf.as_dtype(v.dtype), v.shape) for v in values]
    return fn(*xs), dict(zip(xs, values))


@pytest.mark.parametrize("case", SESSION_ERRORS, ids=[c[0] for c in SESSION_ERRORS])
def test_session_errors_are_raised_by_tfjit(tf, tfjit, session_auto_mode, case):
    """Auto mode raises TF's InvalidArgumentError, in TF's words, from the launch op
    itself (as XLA does): no cluster falls back to TF's kernel to raise it."""
    from tfjit.api.service import SERVICE
    _, build, words = case
    g = tf.Graph()
    with g.as_default():
        y, feed = build(tf)
    messages = []
    for auto_jit in (-1, 2):
        tfjit.config.set_flags(tfjit_auto_jit=auto_jit)
        with tf.compat.v1.Session(graph=g) as sess:
            with pytest.raises(tf.errors.InvalidArgumentError) as e:
                sess.run(y, feed)
        messages.append(e.value.message)
    assert words in messages[0], messages[0]
    assert words in messages[1], messages[1]
    specs = [s for r in session_auto_mode.recent for s in r.specs]
    assert specs and all(SERVICE.fallbacks[s.key] == 0 for s in specs)


def _frozen_graph_fn(tf):
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [8], name="x")
        tf.identity(tf.unique(x * 2.0)[0] + 1.0, name="y")
    graph_def = g.as_graph_def()

    def f(x):
        (out,) = tf.graph_util.import_graph_def(graph_def, input_map={"x:0": x},
                                                return_elements=["y:0"])
        return out * 3.0
    return f


def test_an_imported_graph_with_an_op_tfjit_cannot_compile(tf, tfjit, caplog):
    # Ops imported from a GraphDef carry no traceback: the must-compile error names
    # the op (it was a TypeError), and fall-back functions run the graph in TF.
    import logging
    f = _frozen_graph_fn(tf)
    x = tf.constant(np.arange(8, dtype=np.float32) % 3)
    want = tf.function(f)(x).numpy()
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Unique \(no tfjit lowering"):
        tfjit.function(f, jit_compile=True)(x)
    np.testing.assert_array_equal(tfjit.function(f, jit_compile=None)(x).numpy(), want)
    from tfjit.api.function import Function
    with caplog.at_level(logging.INFO, logger="tfjit"):
        got = Function(f, jit_compile=True, fall_back=True)(x)
    np.testing.assert_array_equal(got.numpy(), want)
    assert "Unique" in caplog.text


def _while_graph(tf, damage):
    tf.compat.v1.enable_control_flow_v2()
    with tf.Graph().as_default() as g:
        a = tf.compat.v1.placeholder(tf.float32, [4], name="a")
        out = tf.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, tf.tanh(x) * 2.0), [0, a])[1]
        tf.identity(out, name="out")
    gd = g.as_graph_def()
    (w,) = [n for n in gd.node if n.op in ("While", "StatelessWhile")]
    (fd,) = [f for f in gd.library.function if f.signature.name == w.attr["body"].func.name]
    (nd,) = [n for n in fd.node_def if n.op == "Tanh"]
    damage(tf, nd)
    return gd


MALFORMED = {
    "missing-attr": (lambda tf, nd: nd.attr.pop("T"), "NodeDef missing attr 'T'"),
    "ill-typed-attr": (lambda tf, nd: nd.attr["T"].CopyFrom(tf.compat.v1.AttrValue(i=3)),
                       "when 'type' expected"),
    "dtype-mismatch": (lambda tf, nd: nd.attr["T"].CopyFrom(
        tf.compat.v1.AttrValue(type=tf.float64.as_datatype_enum)), "incompatible with expected double"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_function_body_is_refused(tf, tfjit, tmp_path, capsys, case):
    from tfjit.aot.cli import main
    damage, words = MALFORMED[case]
    gd = _while_graph(tf, damage)
    (tmp_path / "g.pb").write_bytes(gd.SerializeToString())
    (tmp_path / "c.pbtxt").write_text('feed { id { node_name: "a" } shape { dim { size: 4 } } }\n'
                                      'fetch { id { node_name: "out" } }\n')
    assert main(["--graph", str(tmp_path / "g.pb"), "--config", str(tmp_path / "c.pbtxt"),
                 "--cpp_class", "V", "--out_prefix", str(tmp_path / "v")]) == 1
    err = capsys.readouterr().err
    assert "is invalid" in err and words in err, err
    assert not (tmp_path / "v.o").exists()

    def f(x):
        (y,) = tf.graph_util.import_graph_def(gd, input_map={"a:0": x}, return_elements=["out:0"])
        return y
    with pytest.raises(tf.errors.InvalidArgumentError, match=words):
        tfjit.function(f, jit_compile=True)(tf.ones([4]))
