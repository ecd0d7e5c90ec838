"""tfjit.function: must-compile semantics, caching, errors, threads, fusion shape.

Results are always compared with the same function run by TF's executor.
"""
import re
import threading

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from tests.oracle import assert_matches


def seed(x, y, z):
    return tf.reduce_sum(x + y * z)


def test_seed_is_one_fused_kernel_and_matches_tf(rng):
    x, y, z = (tf.constant(rng.standard_normal((256, 300), dtype=np.float32)) for _ in range(3))
    f = tfjit.function(seed, jit_compile=True)
    scale = float(np.sum(np.abs(x.numpy()) + np.abs(y.numpy() * z.numpy())))
    assert_matches(f(x, y, z).numpy(), seed(x, y, z).numpy(), rtol=0, atol=1e-6 * scale)
    compiled = f.compiled(x, y, z)
    assert compiled.num_kernels == 1, compiled.fusions
    # x, y and z are read by that one kernel; nothing else is materialised
    assert compiled.plan.temp_bytes == [] or len(compiled.plan.scratch) == 1


def test_seed_inner_loop_is_vectorised(rng):
    x = tf.constant(rng.standard_normal((512, 512), dtype=np.float32))
    asm = tfjit.function(seed).compiled(x, x, x).code.asm()
    packed = re.findall(r"\bv(?:add|mul|fmadd\w*)ps\s+.*%[yz]mm", asm)
    assert packed, "no packed AVX float arithmetic in the seed kernel"


def test_softmax_is_one_pass_over_memory(rng):
    x = tf.constant(rng.standard_normal((64, 1000), dtype=np.float32))
    f = tfjit.function(tf.nn.softmax)
    assert_matches(f(x).numpy(), tf.nn.softmax(x).numpy())
    compiled = f.compiled(x)
    assert compiled.num_kernels <= 2
    kernel = compiled.fusions[0]
    assert kernel.kind == "loop" and len(kernel.hoisted) == 2   # row max and row sum in registers
    assert compiled.plan.temp_bytes == []                       # nothing written but the output


def test_exp_scales_by_vscalef_where_the_host_has_avx512(rng):
    """The JIT's target takes exp's 2^n as AVX-512's vscalefps where this CPU has it
    (decided at run time from the features it compiles for) and integer ops elsewhere;
    tests/test_mathlib.py compiles both kinds on any host and checks they agree bit
    for bit."""
    from tfjit.codegen import llvm_target
    x = tf.constant(rng.standard_normal((64, 1000), dtype=np.float32))
    f = tfjit.function(tf.nn.softmax)
    assert_matches(f(x).numpy(), tf.nn.softmax(x).numpy())
    asm = f.compiled(x).code.asm()
    scalef = llvm_target.vector_ldexp(llvm_target.features())
    assert bool(re.search(r"vscalefps\s+.*%zmm", asm)) is scalef
    assert "ldexpf" not in asm


def test_recompiles_once_per_signature():
    f = tfjit.function(lambda a, b: a + b)
    f(tf.ones([1, 10]), tf.ones([1, 10]))
    assert f.experimental_get_compile_count() == 1
    f(tf.ones([1, 10]), tf.ones([1, 10]))
    assert f.experimental_get_compile_count() == 1
    out = f(tf.ones([1, 100]), tf.ones([1, 100]))
    assert f.experimental_get_compile_count() == 2
    assert out.shape == (1, 100)
    f(tf.ones([1, 10], tf.int32), tf.ones([1, 10], tf.int32))     # a new dtype: a new compile
    assert f.experimental_get_compile_count() == 3


def test_launch_op_cache_hits_without_python_compile():
    from tfjit.runtime import launch
    f = tfjit.function(lambda a: a * 3.0 + 1.0)
    x = tf.ones([7, 3])
    f(x)
    before = launch.stats()
    for _ in range(5):
        f(x)
    after = launch.stats()
    assert after["misses"] == before["misses"]
    assert after["hits"] >= before["hits"] + 5


def test_unsupported_op_error_names_op_node_and_user_line():
    def not_compilable(x):
        return tf.unique(x)     # the error must point at this line
    line = not_compilable.__code__.co_firstlineno + 1
    f = tfjit.function(not_compilable, jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        f(tf.constant([1, 2, 2]))
    msg = str(info.value)
    assert "Detected unsupported operations when trying to compile graph" in msg
    assert "Unique (no tfjit lowering for 'Unique': output shape depends on input values)" in msg
    assert "{{node Unique}}" in msg
    assert f'test_function.py", line {line}, in not_compilable' in msg


def test_must_compile_never_falls_back_after_an_error():
    f = tfjit.function(lambda x: tf.unique(x)[0], jit_compile=True)
    for _ in range(2):
        with pytest.raises(tf.errors.InvalidArgumentError):
            f(tf.constant([3, 1]))


def test_auto_mode_leaves_unique_to_tf_with_identical_results(rng):
    def fn(x):
        y = tf.nn.relu(x * 2.0 + 1.0) - tf.abs(x) * 0.5 + tf.square(x)
        values, idx = tf.unique(tf.cast(tf.round(y), tf.int32))
        return values, idx, tf.reduce_sum(y)
    auto = tfjit.function(fn, jit_compile=None)
    x = tf.constant(rng.standard_normal(500, dtype=np.float32))
    got, want = auto(x), tf.function(fn)(x)
    for g, w in zip(got, want):
        assert_matches(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-4)
    clusters = auto.clusters(x)
    assert len(clusters) == 1
    assert not any("Unique" in n for n in clusters[0][1])


def test_plain_tf_function_when_jit_compile_false():
    f = tfjit.function(lambda x: x + 1, jit_compile=False)
    assert f(tf.constant(1)).numpy() == 2
    assert f.experimental_get_compile_count() == 0


def test_nested_outputs_and_python_values_are_preserved():
    f = tfjit.function(lambda x, scale: {"a": x * scale, "b": (x + 1, None)})
    out = f(tf.constant([1.0, 2.0]), 3.0)
    np.testing.assert_array_equal(out["a"].numpy(), [3.0, 6.0])
    np.testing.assert_array_equal(out["b"][0].numpy(), [2.0, 3.0])
    assert out["b"][1] is None
    f(tf.constant([1.0, 2.0]), 4.0)        # a different Python value is a new signature
    assert f.experimental_get_compile_count() == 2


def test_wrong_dtype_or_rank_retraces_instead_of_reinterpreting():
    f = tfjit.function(lambda x: x * 2)
    np.testing.assert_array_equal(f(tf.constant([1.0, 2.0])).numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(f(tf.constant([[1, 2]], tf.int64)).numpy(), [[2, 4]])
    np.testing.assert_array_equal(f(np.array([3.0])).numpy(), [6.0])


def test_integer_division_by_zero_is_an_error_like_tf():
    f = tfjit.function(lambda a, b: a // b)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Integer division by zero"):
        f(tf.constant([7, 1]), tf.constant([0, 1]))
    np.testing.assert_array_equal(f(tf.constant([7, -7]), tf.constant([2, 2])).numpy(), [3, -4])


def test_shape_overflowing_int64_is_rejected_before_allocation():
    f = tfjit.function(lambda x: tf.broadcast_to(x, [2**40, 2**40]), jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="too large"):
        f(tf.constant(1.0))


def test_failed_compile_leaves_the_process_usable():
    bad = tfjit.function(lambda x: tf.unique(x)[0])
    with pytest.raises(tf.errors.InvalidArgumentError):
        bad(tf.constant([1]))
    good = tfjit.function(lambda x: x - 1)
    assert good(tf.constant([5])).numpy().tolist() == [4]


def test_threads_calling_one_function_with_different_shapes(rng):
    f = tfjit.function(lambda x, y: tf.nn.softmax(x * y) + tf.reduce_max(x, axis=-1, keepdims=True))
    shapes = [(3, 5), (8, 2), (1, 7), (16, 33)]
    inputs = {s: (tf.constant(rng.standard_normal(s, dtype=np.float32)),
                  tf.constant(rng.standard_normal(s, dtype=np.float32))) for s in shapes}
    want = {s: (tf.nn.softmax(x * y) + tf.reduce_max(x, axis=-1, keepdims=True)).numpy()
            for s, (x, y) in inputs.items()}
    errors = []

    def worker(k):
        try:
            for n in range(20):
                s = shapes[(k + n) % len(shapes)]
                assert_matches(f(*inputs[s]).numpy(), want[s])
        except Exception as e:     # collected and re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert f.experimental_get_compile_count() == len(shapes)


def test_inside_tf_function_the_launch_op_is_part_of_the_graph(rng):
    inner = tfjit.function(lambda x: tf.tanh(x) * 2.0)

    @tf.function
    def outer(x):
        return inner(x) + 1.0

    x = tf.constant(rng.standard_normal((4, 4), dtype=np.float32))
    assert_matches(outer(x).numpy(), (tf.tanh(x) * 2.0 + 1.0).numpy())
    ops = {op.type for op in outer.get_concrete_function(x).graph.get_operations()}
    assert "TfjitLaunch" in ops


def test_large_kernel_sharded_result_matches(rng):
    x = tf.constant(rng.standard_normal((2048, 1024), dtype=np.float32))
    f = tfjit.function(lambda a: tf.reduce_max(tf.exp(a) * 0.5 - a, axis=1))
    assert_matches(f(x).numpy(), tf.reduce_max(tf.exp(x) * 0.5 - x, axis=1).numpy())


def test_dead_temps_share_buffers_and_live_ones_do_not(rng):
    # A residual chain of matmuls (each a library call, so every activation is a temp):
    # temps whose last reader has run are reused (buffers.place_temps), while the skip
    # connections keep h1 and h2 alive across later kernels -- a wrong reuse there would
    # overwrite them before they are read, and the results would differ from TF's.
    widths = [48, 96, 128, 96, 160, 96]
    x = tf.constant(rng.standard_normal((32, widths[0]), dtype=np.float32))
    ws = [tf.constant(rng.standard_normal((a, b), dtype=np.float32) * 0.2)
          for a, b in zip(widths, widths[1:])]

    def f(x, w1, w2, w3, w4, w5):
        h1 = tf.nn.relu(tf.matmul(x, w1))
        h2 = tf.nn.relu(tf.matmul(h1, w2))
        h3 = tf.nn.relu(tf.matmul(h2, w3)) + h1
        h4 = tf.tanh(tf.matmul(h3, w4))
        h5 = tf.matmul(h4, w5) * h3
        return tf.reduce_sum(h5, axis=1), h2[:, :8] * 2.0

    compiled = tfjit.function(f).compiled(x, *ws)
    plan = compiled.plan
    temps = {v for v, slots in plan.slots.items()
             if slots[0] >= plan.num_inputs + plan.num_outputs}
    unshared = sum(v.size * v.dtype.itemsize for v in temps)
    ranges = sorted((o, o + b) for o, b in zip(plan.temp_offsets, plan.temp_bytes) if b)
    assert any(b0 > a1 for (_, b0), (a1, _) in zip(ranges, ranges[1:])), ranges   # shared bytes
    assert plan.arena_bytes < unshared, (plan.arena_bytes, unshared)
    for got, want in zip(tfjit.function(f)(x, *ws), tf.function(f)(x, *ws)):
        assert_matches(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
