"""Deep and wide graphs compile or are refused cleanly, never with a RecursionError:
every graph walk (marking, clustering, lowering, the passes, printing and parsing, the
kernel emitter) is iterative, and recursion in a function library is an error that
names the function.  The time bounds are generous guards against quadratic walks
(each stage here takes a few seconds at most), not performance assertions."""
import sys
import time

import numpy as np
import pytest

from oracle import assert_matches

BOUND_S = 120.0


def _bounded(what, fn):
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    print(f"{what}: {seconds:.2f} s")
    assert seconds < BOUND_S, f"{what} took {seconds:.0f} s"
    return result


def test_a_100000_op_chain_through_the_ir_stages(tfjit):
    from tfjit import dtypes as dt
    from tfjit.codegen import llvm_cpu
    from tfjit.codegen.target import Target
    from tfjit.ir import text
    from tfjit.ir.module import Module
    from tfjit.ir.ops import Op
    from tfjit.ir.parse import parse_module
    from tfjit.passes import buffers, fusion
    from tfjit.passes.simplify import CSE, DCE

    def chain(n):
        m = Module("deep")
        x = m.parameter(dt.F32, (8,))
        half = m.broadcast(m.scalar(0.5, dt.F32), (8,), ())
        for k in range(n):
            x = m.elementwise(Op.ADD, x, half) if k % 3 == 0 else \
                m.elementwise(Op.TANH if k % 3 == 1 else Op.NEG, x)
        m.outputs = [x]
        return m
    m = chain(100_000)
    printed = _bounded("print", lambda: text.module_str(m))
    assert text.module_str(_bounded("parse", lambda: parse_module(printed))) == printed
    _bounded("cse+dce", lambda: (CSE().run(m), DCE().run(m)))
    fusions = _bounded("fusion", lambda: fusion.fuse(m))
    assert len(fusions) == 1
    _bounded("buffers", lambda: buffers.assign(m, fusions))
    small = chain(20_000)                         # LLVM IR of 20,000 fused ops, not compiled
    fs = fusion.fuse(small)
    jit_like = Target("test", "x86_64-unknown-linux-gnu", "", runtime_calls=True)
    _bounded("emit", lambda: llvm_cpu.emit_module("deep", fs, buffers.assign(small, fs), [], jit_like))


def test_marking_and_clustering_a_100000_node_chain(tf):
    from tensorflow.core.framework import attr_value_pb2, graph_pb2

    from tfjit.graph import auto
    from tfjit.graph.graphdef import Graph
    gd = graph_pb2.GraphDef()
    f32 = attr_value_pb2.AttrValue(type=tf.float32.as_datatype_enum)
    gd.node.add(name="x", op="Placeholder").attr["dtype"].CopyFrom(f32)
    prev = "x"
    for k in range(100_000):
        nd = gd.node.add(name=f"n{k}", op="Exp" if k % 2 else "Neg", input=[prev])
        nd.attr["T"].CopyFrom(f32)
        prev = nd.name
    result = _bounded("cluster", lambda: auto.cluster_graph(
        gd, lambda n, i: (tf.float32.as_datatype_enum, None), auto.Options(fallback=True)))
    assert len(result.specs) == 1
    Graph(result.graph_def).topological()


def test_long_fused_chains_and_wide_sums_compile(tf, tfjit):
    def chain(x):
        for _ in range(350):                  # was a RecursionError from ~330 ops
            x = tf.tanh(x) + 0.5
        return x
    x = tf.constant(np.linspace(-2, 2, 64, dtype=np.float32))
    assert_matches(tfjit.function(chain, jit_compile=True)(x).numpy(), tf.function(chain)(x).numpy(),
                   rtol=1e-5, atol=1e-5)

    def wide(*xs):                            # 2000 arguments, one add_n
        return tf.add_n(list(xs)) * 2.0
    xs = [tf.constant(np.full([16], k % 7, np.float32)) for k in range(2000)]
    assert_matches(tfjit.function(wide, jit_compile=True)(*xs).numpy(), tf.function(wide)(*xs).numpy())


def test_deeply_nested_conditionals(tf, tfjit):
    # TF's own tracing recurses per level: the depth is what it can trace here.
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)
    try:
        def nested(x, depth=60):
            if depth == 0:
                return x * 1.5 + 1.0
            return tf.cond(tf.reduce_sum(x) > -1e9, lambda: nested(x, depth - 1) - 0.25, lambda: x)
        x = tf.constant(np.ones(4, np.float32))
        got = tfjit.function(nested, jit_compile=True)(x)      # names stay under LLVM's bound
        assert_matches(got.numpy(), tf.function(nested)(x).numpy())
    finally:
        sys.setrecursionlimit(old)


def test_a_self_recursive_while_body_is_an_error_naming_the_function(tf, tmp_path, capsys):
    from tfjit.aot.cli import main
    with tf.Graph().as_default() as g:
        a = tf.compat.v1.placeholder(tf.float32, [4], name="a")
        out = tf.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2.0), [0, a])[1]
        tf.identity(out, name="out")
    gd = g.as_graph_def()
    (w,) = [n for n in gd.node if n.op in ("While", "StatelessWhile")]
    body = w.attr["body"].func.name
    (fd,) = [f for f in gd.library.function if f.signature.name == body]
    inner = fd.node_def.add()                 # the body runs the same loop: it calls itself
    inner.CopyFrom(w)
    inner.name = "recurse"
    del inner.input[:]
    inner.input.extend(arg.name for arg in fd.signature.input_arg)
    outs = fd.signature.output_arg           # the loop's own x, well typed (TF's importer
    k = next(k for k, o in enumerate(outs) if o.type == tf.float32.as_datatype_enum)  # checks)
    fd.ret[outs[k].name] = f"recurse:output:{k}"
    (tmp_path / "g.pb").write_bytes(gd.SerializeToString())
    (tmp_path / "c.pbtxt").write_text('feed { id { node_name: "a" } shape { dim { size: 4 } } }\n'
                                      'fetch { id { node_name: "out" } }\n')
    assert main(["--graph", str(tmp_path / "g.pb"), "--config", str(tmp_path / "c.pbtxt"),
                 "--cpp_class", "R", "--out_prefix", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert f"function {body} calls itself ({body} -> {body})" in err, err


@pytest.mark.parametrize("n, dtype, start, delta", [(5_000_000, "int32", 0, 1),
                                                    (10**7, "float32", 0.5, 0.25),
                                                    (300_001, "float64", 1.0, -1e-3),
                                                    (4096, "int64", -7, 3)])
def test_a_large_range_is_computed_by_its_kernel_not_folded(tf, tfjit, n, dtype, start, delta):
    # tf.range(5_000_000) took 40 s and 1.6 GB to fold into a constant at compile time
    def f():
        return tf.range(start, start + n * delta, delta, dtype=getattr(tf, dtype)) * 2
    fn = tfjit.function(f, jit_compile=True)
    got = _bounded(f"range({n})", lambda: fn())
    np.testing.assert_array_equal(got.numpy(), tf.function(f)().numpy())
    from tfjit.ir.module import FOLD_MAX_ELEMENTS
    assert ("iota" in fn.compiled().module_after) == (n > FOLD_MAX_ELEMENTS)


def test_a_large_constant_compiles_as_one_byte_string(tf, tfjit):
    # a 4M-float constant took 39 s: one LLVM constant per element; now its bytes
    c = np.random.default_rng(3).standard_normal(4_000_000).astype(np.float32)
    c[:4] = [np.nan, -0.0, np.inf, -np.inf]
    f = tfjit.function(lambda x: x * tf.constant(c) + 1.0, jit_compile=True)
    x = tf.ones([c.size])
    got = _bounded("4M constant", lambda: f(x))
    assert_matches(got.numpy(), c + 1.0)
