"""Tiered compilation (codegen/tiering.py): a big module's first calls run quick code, the
optimised build is swapped in behind them; both match TensorFlow.

``TIER_BYTES`` is lowered to 0 here, so the small modules of these tests are tiered as
a model's big ones are.  Whether a swap happened is read from the code's pipeline, the
executable's step addresses and ``tiering.stats()``, never from timings.
"""

import numpy as np
import pytest

from tests.oracle import assert_matches


def model(x, y, w):
    import tensorflow as tf
    h = tf.tanh(tf.matmul(x, w) + 0.5)
    return (tf.reduce_sum(tf.exp(-h * h) * y, axis=1),
            tf.reduce_max(x, axis=0) - tf.reduce_mean(tf.sigmoid(x), axis=0))


SHAPES = [((24, 70), (24, 33), (70, 33)), ((1, 7), (1, 5), (7, 5)), ((130, 3), (130, 16), (3, 16))]


@pytest.fixture()
def tiered(monkeypatch, flags):
    """Every module tiered (TIER_BYTES 0), the flag on, nothing compiled in memory."""
    from tfjit.api.service import SERVICE
    from tfjit.codegen import tiering
    monkeypatch.setattr(tiering, "TIER_BYTES", 0)
    flags.tfjit_tiered_compile = True
    SERVICE.forget_compiled()
    yield flags
    SERVICE.forget_compiled()


def _inputs(tf, rng, shapes):
    return [tf.constant(rng.standard_normal(s).astype(np.float32)) for s in shapes]


def _check(f, inputs, what):
    for k, (got, want) in enumerate(zip(f(*inputs), model(*inputs))):
        assert_matches(got.numpy(), want.numpy(), atol=1e-5, what=f"{what}, output {k}")


@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: "x".join(map(str, s[0])))
def test_quick_tier_then_optimised_both_match_tf(tiered, tf, tfjit, rng, shapes):
    from tfjit.codegen import tiering
    inputs = _inputs(tf, rng, shapes)
    f = tfjit.function(model, jit_compile=True)
    tiering.wait_all()     # optimised builds earlier tests queued must not count as this one's
    before = tiering.stats()
    _check(f, inputs, "first call")
    compiled = f.compiled(*inputs)
    quick_addresses = compiled.executable.step_addresses
    if compiled.code.pipeline == tiering.QUICK:     # not yet swapped: run the quick code
        _check(f, inputs, "quick tier")
    assert tiering.wait(compiled, timeout=120), "the optimised build did not finish"
    assert compiled.upgrade.error is None, compiled.upgrade.error
    assert compiled.code.pipeline == "default"
    assert compiled.executable.step_addresses != quick_addresses
    assert compiled.executable.keepalive is compiled.code
    assert len(compiled.executable.retired) == 1    # the quick code stays loaded
    _check(f, inputs, "optimised tier")
    after = tiering.stats()
    assert after["quick"] == before["quick"] + 1
    assert after["optimised"] == before["optimised"] + 1


def test_compiler_ir_shows_the_optimised_code(tiered, tf, tfjit, rng):
    inputs = _inputs(tf, rng, SHAPES[0])
    f = tfjit.function(model, jit_compile=True)
    llvm = f.experimental_get_compiler_ir(*inputs)(stage="llvm")
    compiled = f.compiled(*inputs)
    assert compiled.code.pipeline == "default" and llvm == compiled.code.optimized_ir


def _assert_untiered(tf, tfjit, rng, what):
    """A compile that runs the default pipeline at once: no quick code, nothing retired."""
    from tfjit.codegen import tiering
    inputs = _inputs(tf, rng, SHAPES[0])
    f = tfjit.function(model, jit_compile=True)
    before = tiering.stats()
    _check(f, inputs, what)
    compiled = f.compiled(*inputs)
    assert compiled.code.pipeline == "default" and compiled.upgrade is None
    assert compiled.executable.retired == []
    assert tiering.stats() == before


def test_flag_off_compiles_the_default_pipeline_only(tiered, tf, tfjit, rng):
    tiered.tfjit_tiered_compile = False
    _assert_untiered(tf, tfjit, rng, "untiered")


def test_op_determinism_compiles_the_default_pipeline_only(tiered, tf, tfjit, rng):
    """With TF's deterministic ops asked for, no quick tier: its results could round
    otherwise than the optimised code's that follows."""
    tf.config.experimental.enable_op_determinism()
    try:
        _assert_untiered(tf, tfjit, rng, "deterministic")
    finally:
        from tensorflow.python.framework import config as tf_config
        tf_config.disable_op_determinism()


def test_small_modules_are_not_tiered(tf, tfjit, rng, flags):
    from tfjit.api.service import SERVICE
    from tfjit.codegen import tiering
    assert tiering.TIER_BYTES > 0
    flags.tfjit_tiered_compile = True
    SERVICE.forget_compiled()
    inputs = _inputs(tf, rng, SHAPES[1])
    f = tfjit.function(model, jit_compile=True)
    _check(f, inputs, "small module")
    assert f.compiled(*inputs).code.pipeline == "default"


def test_in_process_llvm_is_not_tiered(tiered, tf, tfjit, rng):
    tiered.tfjit_compile_in_process = True
    inputs = _inputs(tf, rng, SHAPES[2])
    f = tfjit.function(model, jit_compile=True)
    _check(f, inputs, "in process")
    compiled = f.compiled(*inputs)
    assert compiled.code.pipeline == "default" and compiled.upgrade is None


def test_persistent_cache_stores_only_the_optimised_build(tiered, tf, tfjit, rng, tmp_path,
                                                           monkeypatch):
    from tfjit.api.service import SERVICE
    from tfjit.codegen import objcache
    from tfjit.runtime import diskcache
    tiered.tfjit_persistent_cache_directory = str(tmp_path / "cache")
    puts = []
    real_put = diskcache.DiskCache.put
    monkeypatch.setattr(diskcache.DiskCache, "put",
                        lambda self, key, payload: (puts.append((key, payload)),
                                                    real_put(self, key, payload))[1])
    inputs = _inputs(tf, rng, SHAPES[0])
    f = tfjit.function(model, jit_compile=True)
    _check(f, inputs, "first process's call")
    compiled = f.compiled(*inputs)
    assert tiering_wait(compiled)
    assert len(compiled.executable.retired) == 1, "no quick tier ran"
    assert len(puts) == 1, f"{len(puts)} entries stored"
    symbols = list(compiled.code.addresses)
    _, cached_ir = objcache.unpack_payload(
        puts[0][1], objcache.source_digest(compiled.code.llvm_ir, symbols))
    assert cached_ir == compiled.code.optimized_ir      # the default pipeline's build
    assert cached_ir != compiled.executable.retired[0].optimized_ir   # not the quick one
    SERVICE.forget_compiled()       # a later compile (as in a new process) hits the cache
    g = tfjit.function(model, jit_compile=True)
    _check(g, inputs, "from the cache")
    again = g.compiled(*inputs)
    assert again.code.from_cache and again.code.pipeline == "default"
    assert again.upgrade is None and len(puts) == 1


def tiering_wait(compiled):
    from tfjit.codegen import tiering
    return tiering.wait(compiled, timeout=120) and compiled.upgrade.error is None


def test_swap_code_checks_its_addresses(tfjit):
    from tfjit.runtime import launch
    exe = launch.make_executable(input_dtypes=[], output_dtypes=[], output_shapes=[],
                                 output_source=[], output_forward=[], temp_bytes=[],
                                 steps=[(1, 1, 1), (2, 1, 1)], messages=[])
    with pytest.raises(ValueError, match="1 addresses for 2 steps"):
        exe.swap_code([5], None)
    with pytest.raises(ValueError):
        exe.swap_code([5, 0], None)
    exe.swap_code([5, 6], "new")
    assert exe.step_addresses == [5, 6] and exe.keepalive == "new" and exe.retired == [None]


def test_training_steps_across_the_swap_match_tf(tiered, tf, tfjit, rng):
    """Variables updated in place by steps that run quick code, then optimised code (the
    swap lands between two calls or inside one): the same values as TF's steps."""
    from tfjit.codegen import tiering
    x = tf.constant(rng.standard_normal((32, 12)).astype(np.float32))
    y = tf.constant(rng.standard_normal((32, 4)).astype(np.float32))
    w0 = rng.standard_normal((12, 4)).astype(np.float32) * 0.3

    def make_step(w):
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.tanh(tf.matmul(x, w)) - y))
            w.assign_sub(0.1 * tape.gradient(loss, w))
            return loss
        return step
    w_tf, w_jit = tf.Variable(w0), tf.Variable(w0)
    step_tf = tf.function(make_step(w_tf))
    step_jit = tfjit.function(make_step(w_jit), jit_compile=True)
    for k in range(6):
        if k == 3:
            assert tiering.wait(step_jit.compiled(x, y), timeout=120)
        assert_matches(step_jit(x, y).numpy(), step_tf(x, y).numpy(), rtol=1e-4, atol=1e-5,
                       what=f"loss of step {k}")
        assert_matches(w_jit.numpy(), w_tf.numpy(), rtol=1e-4, atol=1e-5,
                       what=f"weights after step {k}")
    compiled = step_jit.compiled(x, y)
    assert compiled.code.pipeline == "default" and len(compiled.executable.retired) == 1
