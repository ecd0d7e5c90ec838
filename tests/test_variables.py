"""Resource variables and optimizer ops inside compiled clusters (issue 4, part 3).

Every test runs the same steps twice, on two sets of variables with equal
initial values: once compiled by tfjit, once by TensorFlow, and compares the
returned values and the variables' values after each step.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit.runtime import launch

R = tf.raw_ops


def run_both(make, args, steps=3, rtol=None, atol=None):
    """make() -> (variables, step_fn); runs steps under tfjit and TF, compares everything."""
    results = {}
    for mode in ("tfjit", "tf"):
        variables, fn = make()
        f = tfjit.function(fn, jit_compile=True) if mode == "tfjit" else tf.function(fn)
        outs = [f(*args) for _ in range(steps)]
        results[mode] = (outs, [v.numpy() for v in variables], f)
    (got, got_vars, jit), (want, want_vars, _) = results["tfjit"], results["tf"]
    for k, (g, w) in enumerate(zip(got, want)):
        for a, b in zip(tf.nest.flatten(g), tf.nest.flatten(w)):
            assert_matches(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol, what=f"step {k}")
    for k, (g, w) in enumerate(zip(got_vars, want_vars)):
        assert_matches(g, w, rtol=rtol, atol=atol, what=f"variable {k}")
    return jit


def test_reads_and_assignments_in_order():
    def make():
        v = tf.Variable(tf.reshape(tf.range(32, dtype=tf.float32), [4, 8]) / 7.0)
        w = tf.Variable(tf.zeros([8]))

        def step(x):
            before = v * 2.0 + x                 # read before the write
            v.assign(before * 0.5 - 1.0)
            w.assign_add(tf.reduce_sum(v, axis=0))   # read after it
            w.assign_sub(tf.ones([8]) * 0.25)
            return tf.reduce_sum(before), w.read_value()
        return [v, w], step
    x = tf.constant(np.random.default_rng(0).standard_normal((4, 8), dtype=np.float32))
    jit = run_both(make, (x,))
    assert jit.experimental_get_compile_count() == 1
    assert len(jit.compiled(x).fusions) >= 1


@pytest.mark.parametrize("dtype", [tf.float64, tf.int32, tf.int64])
def test_integer_and_double_variables(dtype):
    def make():
        v = tf.Variable(tf.cast(tf.range(6), dtype))

        def step(x):
            v.assign_add(x * 3)
            v.assign_sub(tf.ones_like(x))
            return v.read_value() * 2
        return [v], step
    run_both(make, (tf.cast(tf.range(6), dtype),))


def test_assign_with_a_new_shape():
    def make():
        v = tf.Variable(tf.zeros([2, 3]), shape=tf.TensorShape(None))

        def step(x):
            v.assign(tf.concat([x, x], axis=0))
            return tf.reduce_sum(v)
        return [v], step
    run_both(make, (tf.ones([2, 3]),), steps=1)


def test_a_variable_only_read_is_not_written():
    v = tf.Variable(tf.ones([3]))
    f = tfjit.function(lambda x: v * x + 1.0)
    assert_matches(f(tf.constant([1.0, 2.0, 3.0])).numpy(), np.array([2.0, 3.0, 4.0], np.float32))
    assert f.compiled(tf.constant([1.0, 2.0, 3.0])).code is not None
    v.assign([5.0, 5.0, 5.0])                      # a new value, same compiled code
    assert_matches(f(tf.constant([1.0, 2.0, 3.0])).numpy(), np.array([6.0, 11.0, 16.0], np.float32))
    assert f.experimental_get_compile_count() == 1


def _hyper(fn):
    """Optimizer ops take their scalar hyper-parameters in the variable's dtype."""
    def apply(v, s, g):
        return fn(v, s, g, lambda x: tf.constant(x, v.dtype))
    return apply


OPTIMIZERS = {k: _hyper(f) for k, f in {
    "sgd": lambda v, s, g, c: R.ResourceApplyGradientDescent(var=v.handle, alpha=c(0.1), delta=g),
    "momentum": lambda v, s, g, c: R.ResourceApplyMomentum(
        var=v.handle, accum=s[0].handle, lr=c(0.05), grad=g, momentum=c(0.9)),
    "nesterov": lambda v, s, g, c: R.ResourceApplyMomentum(
        var=v.handle, accum=s[0].handle, lr=c(0.05), grad=g, momentum=c(0.9), use_nesterov=True),
    "keras_momentum": lambda v, s, g, c: R.ResourceApplyKerasMomentum(
        var=v.handle, accum=s[0].handle, lr=c(0.05), grad=g, momentum=c(0.9)),
    "keras_nesterov": lambda v, s, g, c: R.ResourceApplyKerasMomentum(
        var=v.handle, accum=s[0].handle, lr=c(0.05), grad=g, momentum=c(0.9), use_nesterov=True),
    "adam": lambda v, s, g, c: R.ResourceApplyAdam(
        var=v.handle, m=s[0].handle, v=s[1].handle, beta1_power=c(0.9), beta2_power=c(0.999), lr=c(0.01),
        beta1=c(0.9), beta2=c(0.999), epsilon=c(1e-7), grad=g),
    "adam_nesterov": lambda v, s, g, c: R.ResourceApplyAdam(
        var=v.handle, m=s[0].handle, v=s[1].handle, beta1_power=c(0.81), beta2_power=c(0.998), lr=c(0.01),
        beta1=c(0.9), beta2=c(0.999), epsilon=c(1e-7), grad=g, use_nesterov=True),
    "rmsprop": lambda v, s, g, c: R.ResourceApplyRMSProp(
        var=v.handle, ms=s[0].handle, mom=s[1].handle, lr=c(0.01), rho=c(0.9), momentum=c(0.5),
        epsilon=c(1e-7), grad=g),
    # TF 1's and tf_keras's
    "adagrad": lambda v, s, g, c: R.ResourceApplyAdagrad(var=v.handle, accum=s[0].handle, lr=c(0.1),
                                                         grad=g),
    "adagrad_no_slot_update": lambda v, s, g, c: R.ResourceApplyAdagrad(
        var=v.handle, accum=s[0].handle, lr=c(0.1), grad=g, update_slots=False),
    "adagrad_v2": lambda v, s, g, c: R.ResourceApplyAdagradV2(
        var=v.handle, accum=s[0].handle, lr=c(0.1), epsilon=c(1e-7), grad=g),
    "adadelta": lambda v, s, g, c: R.ResourceApplyAdadelta(
        var=v.handle, accum=s[0].handle, accum_update=s[1].handle, lr=c(1.0), rho=c(0.95),
        epsilon=c(1e-6), grad=g),
    "adamax": lambda v, s, g, c: R.ResourceApplyAdaMax(
        var=v.handle, m=s[0].handle, v=s[1].handle, beta1_power=c(0.81), lr=c(0.01), beta1=c(0.9),
        beta2=c(0.999), epsilon=c(1e-7), grad=g),
    "centered_rmsprop": lambda v, s, g, c: R.ResourceApplyCenteredRMSProp(
        var=v.handle, mg=s[2].handle, ms=s[0].handle, mom=s[1].handle, lr=c(0.01), rho=c(0.9),
        momentum=c(0.5), epsilon=c(1e-2), grad=g),
    "ftrl": lambda v, s, g, c: R.ResourceApplyFtrl(
        var=v.handle, accum=s[0].handle, linear=s[1].handle, grad=g, lr=c(0.1), l1=c(0.01), l2=c(0.02),
        lr_power=c(-0.5)),
    "ftrl_power": lambda v, s, g, c: R.ResourceApplyFtrl(
        var=v.handle, accum=s[0].handle, linear=s[1].handle, grad=g, lr=c(0.1), l1=c(0.01), l2=c(0.02),
        lr_power=c(-0.6)),
    "adam_amsgrad": lambda v, s, g, c: R.ResourceApplyAdamWithAmsgrad(
        var=v.handle, m=s[0].handle, v=s[1].handle, vhat=s[2].handle, beta1_power=c(0.81),
        beta2_power=c(0.998), lr=c(0.01), beta1=c(0.9), beta2=c(0.999), epsilon=c(1e-7), grad=g),
    "proximal_sgd": lambda v, s, g, c: R.ResourceApplyProximalGradientDescent(
        var=v.handle, alpha=c(0.1), l1=c(0.05), l2=c(0.02), delta=g),
    "proximal_sgd_no_l1": lambda v, s, g, c: R.ResourceApplyProximalGradientDescent(
        var=v.handle, alpha=c(0.1), l1=c(0.0), l2=c(0.02), delta=g),
    "proximal_adagrad": lambda v, s, g, c: R.ResourceApplyProximalAdagrad(
        var=v.handle, accum=s[0].handle, lr=c(0.1), l1=c(0.05), l2=c(0.02), grad=g),
    "ftrl_v2_by_lr": lambda v, s, g, c: R.ResourceApplyFtrlV2(
        var=v.handle, accum=s[0].handle, linear=s[1].handle, grad=g, lr=c(0.1), l1=c(0.01), l2=c(0.02),
        l2_shrinkage=c(0.03), lr_power=c(-0.5), multiply_linear_by_lr=True),
}.items()}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_optimizer_ops(name, dtype):
    rng = np.random.default_rng(1)
    init = rng.standard_normal((16, 5))
    slot_init = np.abs(rng.standard_normal((3, 16, 5))) * 0.1     # (accumulators: positive)

    def make():
        v = tf.Variable(tf.constant(init, dtype))
        slots = [tf.Variable(tf.constant(s, dtype)) for s in slot_init]

        def step(x):
            grad = tf.tanh(v * x) - 0.25          # a gradient computed in the cluster
            OPTIMIZERS[name](v, slots, grad)
            return tf.reduce_sum(v * v)
        return [v] + slots, step
    x = tf.constant(rng.standard_normal((16, 5)), dtype)
    run_both(make, (x,), rtol=1e-5 if dtype == tf.float32 else 1e-12)


def test_a_training_step_with_tape_and_keras_optimizer():
    import keras
    rng = np.random.default_rng(2)
    x = tf.constant(rng.standard_normal((32, 8), dtype=np.float32))
    y = tf.constant(rng.standard_normal((32, 1), dtype=np.float32))
    w0 = rng.standard_normal((8, 1)).astype(np.float32) * 0.1

    def make():
        w = tf.Variable(w0)
        b = tf.Variable(tf.zeros([1]))
        opt = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
        opt.build([w, b])

        def step(x, y):
            with tf.GradientTape() as tape:
                pred = tf.reduce_sum(tf.expand_dims(x, 2) * tf.expand_dims(w, 0), axis=1) + b
                loss = tf.reduce_mean(tf.square(pred - y))
            grads = tape.gradient(loss, [w, b])
            opt.apply_gradients(zip(grads, [w, b]))
            return loss
        return [w, b], step
    run_both(make, (x, y), steps=4, rtol=1e-5, atol=1e-6)


def test_session_training_updates_variables_in_the_cluster():
    from tfjit import config
    from tfjit.api import autojit
    saved = (config.flags().tfjit_auto_jit, config.flags().tfjit_cpu_global_jit)
    config.set_flags(tfjit_auto_jit=0, tfjit_cpu_global_jit=True)
    autojit.activate()
    autojit.recent.clear()
    try:
        values = {}
        for level in (tf.compat.v1.OptimizerOptions.OFF, tf.compat.v1.OptimizerOptions.ON_1):
            g = tf.Graph()
            with g.as_default():
                x = tf.compat.v1.placeholder(tf.float32, [None, 4])
                w = tf.compat.v1.Variable(tf.ones([4]) * 0.5, use_resource=True)
                loss = tf.reduce_mean(tf.square(tf.tanh(x * w) - 0.5))
                train = tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(loss)
                init = tf.compat.v1.global_variables_initializer()
            cfg = tf.compat.v1.ConfigProto()
            cfg.graph_options.optimizer_options.global_jit_level = level
            data = np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32)
            with tf.compat.v1.Session(graph=g, config=cfg) as sess:
                sess.run(init)
                for _ in range(5):
                    sess.run(train, {x: data})
                values[level] = sess.run(w)
        assert_matches(values[tf.compat.v1.OptimizerOptions.ON_1],
                       values[tf.compat.v1.OptimizerOptions.OFF], rtol=1e-5)
        ops = {r.graph.nodes[n].op for r in autojit.recent for s in r.specs for n in s.nodes}
        assert "ResourceApplyGradientDescent" in ops and "ReadVariableOp" in ops
    finally:
        config.set_flags(tfjit_auto_jit=saved[0], tfjit_cpu_global_jit=saved[1])


def _address(v) -> int:
    """Where the variable's value lives now (ReadVariableOp aliases it; nothing kept).
    ``_numpy()`` is the aliasing view: ``numpy()`` returns a copy, whose address is
    whatever malloc hands out (equal only by luck; a full CI run once got another).
    Garbage is collected first: a value read earlier and kept alive only by a reference
    cycle would make the launch op give the variable a fresh buffer."""
    gc.collect()
    return v.value()._numpy().ctypes.data


def test_optimizer_updates_are_written_in_place():
    v = tf.Variable(tf.reshape(tf.range(4096, dtype=tf.float32), [64, 64]) / 100.0)
    m = tf.Variable(tf.zeros([64, 64]))
    ref_v, ref_m = tf.Variable(v), tf.Variable(m)

    def step(vs, g):
        var, mom = vs
        R.ResourceApplyMomentum(var=var.handle, accum=mom.handle, lr=tf.constant(0.1), grad=g,
                                momentum=tf.constant(0.9))
        return tf.reduce_sum(var)
    jit = tfjit.function(lambda g: step((v, m), g))
    ref = tf.function(lambda g: step((ref_v, ref_m), g))
    g = tf.constant(np.random.default_rng(4).standard_normal((64, 64), dtype=np.float32))
    assert_matches(jit(g).numpy(), ref(g).numpy(), rtol=1e-5)      # compiles
    assert jit.compiled(g).plan.update_in_place == [True, True]
    before = (_address(v), _address(m))
    counts = launch.stats()
    for _ in range(3):
        assert_matches(jit(g).numpy(), ref(g).numpy(), rtol=1e-5)
    after = launch.stats()
    # counted by the launch op: an address alone can be a freed buffer handed out again
    assert after["updates_in_place"] - counts["updates_in_place"] == 6
    assert after["updates_fresh"] == counts["updates_fresh"]
    assert (_address(v), _address(m)) == before          # no fresh buffers
    assert_matches(v.numpy(), ref_v.numpy(), rtol=1e-6)
    assert_matches(m.numpy(), ref_m.numpy(), rtol=1e-6)


def test_a_held_old_value_is_not_overwritten():
    v = tf.Variable(tf.ones([128]))
    def step():
        v.assign_add(tf.ones([128]) * 2.0)
        return tf.constant(0.0)
    jit = tfjit.function(step)
    held = v.value()                           # someone still reads the old value
    jit()
    assert_matches(held.numpy(), np.ones([128], np.float32))
    assert_matches(v.numpy(), np.full([128], 3.0, np.float32))
    del held
    jit()                                      # now nobody does: written in place
    assert_matches(v.numpy(), np.full([128], 5.0, np.float32))


def test_an_update_that_reads_its_variable_across_a_row_gets_a_fresh_buffer():
    def make():
        v = tf.Variable(tf.reshape(tf.range(24, dtype=tf.float32), [4, 6]) / 5.0)

        def step():
            v.assign(tf.nn.softmax(v))         # each element needs the whole row's old value
            return tf.reduce_sum(v)
        return [v], step
    jit = run_both(make, (), steps=3)
    assert jit.compiled().plan.update_in_place == [False]
