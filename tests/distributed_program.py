"""Run by tests/test_distribute.py in a fresh process (logical devices must be set
before TensorFlow starts): ``python distributed_program.py CASE DEVICES`` prints one
line ``RESULT <json>``."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import tensorflow as tf

case, n = sys.argv[1], int(sys.argv[2])
if n > 1:
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)

import keras  # noqa: E402

import tfjit  # noqa: E402
from tfjit.api import autojit  # noqa: E402
from tfjit.runtime import launch  # noqa: E402

if n > 0:
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(n)])
else:          # one worker of a MultiWorkerMirroredStrategy (TF_CONFIG says which)
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.eager import context
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    spec = resolver.cluster_spec()
    # Both workers share the test machine's cores and compile at their first steps, so
    # one can run tens of seconds behind the other: past TF's default 10 s heartbeat and
    # shutdown-barrier timeouts, after which the early one's exit is reported as "tasks
    # are unhealthy" to the late one (seen once under load).  The strategy keeps a
    # coordination service configured before it; a killed peer is still found by its
    # broken connection within seconds (test_a_killed_worker_fails_its_peer...).
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=[coordination_config_pb2.CoordinatedJob(
            name="worker", num_tasks=spec.num_tasks("worker"))],
        heartbeat_timeout_in_ms=30_000, shutdown_barrier_timeout_in_ms=180_000)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)


def local(values):
    return [np.asarray(v).tolist() for v in strategy.experimental_local_results(values)]


def report(**extra):
    clusters = [(s.name, sorted(s.nodes)) for r in autojit.recent for s in r.specs]
    print("RESULT " + json.dumps(dict(extra, clusters=clusters, launch=launch.stats())))


def seed():
    """The issue's example, as written, with tfjit.function in place of tf.function."""
    def step_fn():
        t = tf.ones(shape=[100], dtype=tf.float32)
        ctx = tf.distribute.get_replica_context()
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, t)

    def shifted_fn(x):          # compiled code on both sides of the collective
        ctx = tf.distribute.get_replica_context()
        t = tf.exp(x * 0.5) + tf.cast(ctx.replica_id_in_sync_group, tf.float32)
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, t) * 2.0 - tf.reduce_max(t)

    def auto_fn(x):             # jit_compile=None: tf.unique stays TF's, the rest compiles
        u, _ = tf.unique(tf.cast(x, tf.int32) % 3)
        t = tf.exp(x * 0.25) * tf.cast(tf.size(u), tf.float32)
        return tf.distribute.get_replica_context().all_reduce("SUM", t) - 1.0

    out = {}
    for name, fn, args, jit_compile in [("seed", step_fn, (), True),
                                        ("auto", auto_fn, (tf.range(8.0),), None),
                                        ("shifted", shifted_fn, (tf.range(8.0),), True)]:
        jit = tfjit.function(fn, jit_compile=jit_compile)
        run_jit = tf.function(lambda *a, f=jit: strategy.run(f, args=a))
        run_ref = tf.function(lambda *a, f=fn: strategy.run(f, args=a))
        out[name] = (local(run_jit(*args)), local(run_ref(*args)))
    explained = tfjit.explain(run_jit, verbose=False)(tf.range(8.0))
    report(results=out, stats=autojit.stats, explain=dict(
        clusters=[c.nodes for c in explained.clusters], boundaries=explained.boundaries,
        text=str(explained)))


def train(trace: bool = True):
    """A custom loop: strategy.run(train_step) where train_step is a tfjit.function;
    ``trace``: profile steps 40-42 and count the TfjitLaunch events."""
    rng = np.random.default_rng(0)
    x_all = rng.standard_normal((64 * 5, 16)).astype(np.float32)
    y_all = rng.standard_normal((64 * 5, 4)).astype(np.float32)

    def run(jit: bool):
        with strategy.scope():
            keras.utils.set_random_seed(1)
            model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                                      keras.layers.Dense(4)])
            opt = keras.optimizers.Adam(0.01)
            opt.build(model.trainable_variables)

        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum((model(x) - y) ** 2) / 64.0
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        step = tfjit.function(train_step) if jit else train_step

        @tf.function
        def dist_step(x, y):
            return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step, args=(x, y)), None)
        data = tf.data.Dataset.from_tensor_slices((x_all, y_all)).batch(64).repeat(10)
        losses = []
        for k, (x, y) in enumerate(strategy.experimental_distribute_dataset(data)):
            if trace and jit and k == 40:
                tf.profiler.experimental.start(trace_dir)
            losses.append(float(dist_step(x, y)))
            if trace and jit and k == 42:
                tf.profiler.experimental.stop()
        return losses, [w.tolist() for w in model.get_weights()]
    trace_dir = tempfile.mkdtemp(prefix="tfjit_trace_")
    ref_losses, ref_weights = run(False)
    before = launch.stats()
    losses, weights = run(True)
    report(steps=len(losses), losses=losses, ref_losses=ref_losses, weights=weights,
           ref_weights=ref_weights, before=before, trace_launches=_launch_events(trace_dir))
    shutil.rmtree(trace_dir, ignore_errors=True)


def _launch_events(trace_dir: str) -> int:
    """How often the profiler's trace (xplane protos) names a TfjitLaunch op."""
    count = 0
    for root, _, names in os.walk(trace_dir):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                count += f.read().count(b"TfjitLaunch")
    return count


def fit():
    """Keras model.fit under the strategy, jit_compile True and "auto" against False."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((256, 12)).astype(np.float32)
    y = (x[:, :3] * 1.5 - 0.25).astype(np.float32)
    out = {}
    for jit in (False, True, "auto"):
        with strategy.scope():
            keras.utils.set_random_seed(3)
            model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(24, activation="tanh"),
                                      keras.layers.Dense(3)])
            model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", jit_compile=jit)
        hist = model.fit(x, y, epochs=3, batch_size=32, verbose=0)
        steps = tfjit.keras.step_functions(model)
        out[str(jit)] = dict(losses=hist.history["loss"], tfjit_steps=sorted(steps),
                             weights=[w.tolist() for w in model.get_weights()])
    report(fit=out)


def errors():
    """An op tfjit cannot compile in a replica: a must-compile error naming it; and
    strategy.run called eagerly on a function that synchronises: a clear error."""
    def unique_fn(x):
        u, _ = tf.unique(x)
        return tf.distribute.get_replica_context().all_reduce("SUM", tf.reduce_sum(u))

    def sync_fn():
        return tf.distribute.get_replica_context().all_reduce("SUM", tf.ones([4]))

    def cond_fn(x):
        ctx = tf.distribute.get_replica_context()
        return tf.cond(tf.reduce_sum(x) > 0, lambda: ctx.all_reduce("SUM", x), lambda: x)
    out = {}
    for name, call in [
            ("refused", lambda: tf.function(lambda x: strategy.run(tfjit.function(unique_fn),
                                                                    args=(x,)))(tf.constant([1, 2, 2]))),
            ("eager", lambda: strategy.run(tfjit.function(sync_fn))),
            ("in_cond", lambda: tf.function(lambda x: strategy.run(tfjit.function(cond_fn),
                                                                   args=(x,)))(tf.ones([3])))]:
        try:
            call()
            out[name] = None
        except tf.errors.InvalidArgumentError as e:
            out[name] = e.message
    report(errors=out)


def long_run():
    """Trains until stopped, saying each step: the test kills a peer worker mid-run."""
    with strategy.scope():
        w = tf.Variable(tf.ones([64, 64]) * 0.01)

    def train_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.tanh(x @ w))
        grad = tape.gradient(loss, w)
        grad = tf.distribute.get_replica_context().all_reduce("SUM", grad)
        w.assign_sub(grad * 1e-4)
        return loss
    step = tfjit.function(train_step)
    dist_step = tf.function(lambda x: strategy.run(step, args=(x,)))
    x = tf.ones([32, 64])
    for k in range(100000):
        dist_step(x)
        print(f"STEP {k}", flush=True)


def worker():
    """Both checks in one worker process: the code around a collective, and training.
    Without the profiler: TF's profiler_v2.stop() crashed a worker (a segfault, once
    "free(): invalid pointer") in about 1 of 5 runs with a CPU burner beside it
    (faulthandler's stack ends in profiler_v2.py stop); the launches' trace events are
    checked under MirroredStrategy (test_a_training_loop_under_mirrored_strategy)."""
    seed()
    train(trace=False)


{"seed": seed, "train": train, "fit": fit, "errors": errors, "worker": worker,
 "long": long_run}[case]()
