"""``Where`` with one operand (tf.where(x), tf.boolean_mask; lower/where.py): a result
whose shape depends on the data, computed into its bound and handed to TF as its first
count rows by the launch op (abi.h output_rows).  Exact against TF's CPU kernel; a
consumer in the same cluster is refused naming the node (must-compile) or cut off by
auto clustering."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit import config
from tfjit.api import autojit
from tfjit.api.tracing import tensor_info
from tfjit.graph import auto
from tfjit.ir import interp
from tfjit.ir.text import module_str, parse_module

DTYPES = [tf.bool, tf.bfloat16, tf.float32, tf.float64, tf.int8, tf.int16, tf.int32,
          tf.int64, tf.uint8, tf.uint16, tf.uint32, tf.uint64, tf.complex64, tf.complex128]
SHAPES = [(0,), (4, 0, 2), (1,), (7,), (3, 5), (2, 3, 4), (2, 1, 3, 2), (3, 1, 2, 1, 3)]


def _patterns(dtype: tf.DType, shape: tuple) -> list:
    """Seeded inputs of ``shape``: all zero, all non-zero, a random mix (with -0.0 and
    NaN for floats, which are zero and non-zero)."""
    rng = np.random.default_rng(zlib.crc32(f"{dtype.name}{shape}".encode()))
    np_type = dtype.as_numpy_dtype
    mix = rng.random(shape) < 0.4
    if dtype == tf.bool:
        return [np.zeros(shape, bool), np.ones(shape, bool), mix]
    values = np.where(mix, rng.integers(1, 100, shape), 0)
    if dtype.is_floating or dtype.is_complex:
        values = values.astype(np.float64)
        values[(~mix) & (rng.random(shape) < 0.5)] = -0.0
        if values.size > 2:
            values.flat[1] = np.nan
    out = values.astype(np_type)
    if dtype.is_complex and out.size > 3:
        out.flat[3] = 1j                       # real part 0, imaginary part not
    return [np.zeros(shape, np_type), np.ones(shape, np_type), out]


@pytest.fixture(scope="module")
def where_fn():
    return tfjit.function(lambda x: tf.where(x), jit_compile=True)


def _check(fn, dtype, shape):
    for x in _patterns(dtype, shape):
        got = fn(tf.constant(x, dtype))
        want = tf.where(tf.constant(x, dtype))
        assert got.shape == want.shape, (dtype, shape, x)
        assert_matches(got.numpy(), want.numpy(), what=f"where of {dtype.name}{list(shape)}")


@pytest.mark.parametrize("dtype", DTYPES, ids=[d.name for d in DTYPES])
def test_every_dtype(where_fn, dtype):
    for shape in ((0,), (2, 3, 5)):
        _check(where_fn, dtype, shape)


@pytest.mark.parametrize("dtype", [tf.bool, tf.float32, tf.int32], ids=["bool", "f32", "i32"])
@pytest.mark.parametrize("shape", SHAPES, ids=[str(list(s)) for s in SHAPES])
def test_every_rank_and_edge_size(where_fn, dtype, shape):
    _check(where_fn, dtype, shape)


def test_half_which_tfs_cpu_kernel_refuses_is_refused(where_fn):
    with pytest.raises(tf.errors.UnimplementedError):
        tf.where(tf.zeros([2], tf.float16))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Where has no tfjit lowering for dtype half"):
        where_fn(tf.zeros([2], tf.float16))


def test_past_the_size_where_tfs_kernel_is_faster_it_is_refused(where_fn):
    from tfjit.lower.where import MAX_ELEMENTS
    x = np.zeros(MAX_ELEMENTS, np.float32)
    x[[0, 5, MAX_ELEMENTS // 3, MAX_ELEMENTS - 1]] = 1.0
    assert_matches(where_fn(tf.constant(x)).numpy(), tf.where(x).numpy(), what="at the bound")
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"slower than TF's kernel past {MAX_ELEMENTS}"):
        where_fn(tf.zeros([MAX_ELEMENTS + 1], tf.float32))


def test_a_scalar_is_tfs_error(where_fn):
    with pytest.raises(tf.errors.InvalidArgumentError, match="Unhandled input dimensions: 0"):
        tf.where(tf.constant(True))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Unhandled input dimensions: 0"):
        where_fn(tf.constant(True))


def test_it_compiles_with_the_mask_in_one_kernel_sequence_and_outputs_beside_it():
    def fn(x, y):
        return tf.where(x * 2.0 > y), tf.reduce_sum(x)
    x = tf.constant([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    f = tfjit.function(fn, jit_compile=True)
    got, want = f(x, tf.constant(1.5)), tf.function(fn)(x, tf.constant(1.5))
    for g, w in zip(got, want):
        assert_matches(g.numpy(), w.numpy())
    assert f.experimental_get_compile_count() == 1


def test_a_consumer_in_the_cluster_is_refused_naming_the_node():
    def fn(x, v):
        return tf.gather_nd(v, tf.where(x, name="the_where"))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"GatherNd .*the_where.* depends on its "
                       r"input's values: tfjit compiles it only as a cluster output"):
        tfjit.function(fn, jit_compile=True)(tf.constant([True, False]), tf.constant([1.0, 2.0]))


def test_a_where_returned_by_a_branch_is_refused_naming_the_caller():
    def fn(p, x):
        return tf.cond(p, lambda: tf.where(x), lambda: tf.where(tf.logical_not(x)))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"shape depends on its input's values "
                       r"\(Where\): tfjit compiles that only as a cluster output, not as a function's "
                       r"result"):
        tfjit.function(fn, jit_compile=True)(tf.constant(True), tf.constant([True, False]))


def test_the_module_text_round_trips_and_the_interpreter_agrees():
    x = tf.constant([[0, 3, 0], [7, 0, 1]], tf.int16)
    compiled = tfjit.function(lambda x: tf.where(x), jit_compile=True).compiled(x)
    m = parse_module(compiled.module_before)
    assert module_str(m) == compiled.module_before and m.output_rows == {0: 1}
    coords, count = interp.evaluate(m, [x.numpy()])
    want = tf.where(x).numpy()
    assert int(count) == len(want)
    assert_matches(np.asarray(coords)[:len(want)], want)
    assert not np.asarray(coords)[len(want):].any()     # the rows past the count: zeros


def test_the_gpu_and_aot_targets_refuse_it_with_a_reason():
    from tfjit import pipeline
    from tfjit.codegen.target import NotForTarget
    from tfjit.codegen.target import Target
    compiled = tfjit.function(lambda x: tf.where(x), jit_compile=True).compiled(tf.constant([1.0, 0.0]))
    with pytest.raises(NotForTarget, match="nvptx-sm_90 code cannot return a result whose shape "
                       "depends on the data"):
        pipeline.ptx_of(compiled)
    aot = Target("tfjit-aot", "x86_64-unknown-linux-gnu", "", runtime_calls=False)
    optimized = pipeline.optimize(parse_module(compiled.module_before))
    with pytest.raises(NotForTarget, match="tfjit-aot code cannot return"):
        pipeline.emit(optimized, aot, "m")


# -- auto mode -------------------------------------------------------------------------

def _analyse(fn, *args, **options):
    cf = tf.function(fn).get_concrete_function(*args)
    return auto.cluster_graph(cf.graph.as_graph_def(), tensor_info(cf.graph), auto.Options(**options),
                              outputs=[(t.op.name, t.value_index) for t in cf.outputs])


def _masked(t, m):
    return tf.reduce_sum(tf.boolean_mask(t * 2.0 + 1.0, m > 0.0), axis=0)


def test_clustering_cuts_after_where():
    t, m = tf.ones([6, 3]), tf.ones([6])
    result = _analyse(_masked, t, m, min_size=1)
    owner = result.cluster_of()
    where = next(n for n in owner if n.endswith("Where"))
    consumers = [n.name for n in result.graph.nodes.values()
                 if any(src == where for src, _ in n.inputs)]
    assert consumers and all(owner.get(c) != owner[where] for c in consumers), (owner, consumers)


@pytest.fixture
def auto_mode(auto_mode):
    """conftest's, with every op a cluster and no fallback (a failed compile raises)."""
    config.set_flags(tfjit_min_cluster_size=1, tfjit_fallback=False)
    yield auto_mode


def test_boolean_mask_in_auto_mode(auto_mode):
    rng = np.random.default_rng(3)
    t = tf.constant(rng.standard_normal((9, 4)).astype(np.float32))
    for mask in (rng.standard_normal(9), np.zeros(9), np.ones(9)):
        m = tf.constant(mask.astype(np.float32))
        got = tf.function(_masked)(t, m)
        config.set_flags(tfjit_auto_jit=-1)
        want = tf.function(_masked)(t, m)
        config.set_flags(tfjit_auto_jit=2)
        assert_matches(got.numpy(), want.numpy())
    result = next(r for r in reversed(autojit.recent) if any(n.endswith("Where") for n in r.graph.nodes))
    where = next(n for n in result.graph.nodes if n.endswith("Where"))
    assert where in result.cluster_of(), "Where was not compiled"


def test_the_host_runner_against_the_interpreter_and_tf(tmp_path, capsys):
    """tfjit-run-module compares the whole bound and the count with the interpreter, and
    the first count rows with TF running the dumped cluster (the host runner's view)."""
    from tfjit.api.run_module import main
    config.set_flags(tfjit_dump_to=str(tmp_path))
    try:
        tfjit.function(lambda x: tf.where(x > 50), jit_compile=True)(tf.ones([5, 4], tf.int32))
    finally:
        config.set_flags(tfjit_dump_to="")
    path, = [str(p) for p in tmp_path.glob("*.before_optimizations.txt")]
    assert main([path, "--iterations", "3"]) == 0
    assert main([path, "--iterations", "3", "--reference", "tf"]) == 0
    assert capsys.readouterr().out.count("0/3 runs miscompared") == 2
