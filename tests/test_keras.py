"""The Keras front door (issue 4): model.compile(jit_compile=True / "auto") with tfjit.

Every model is trained twice from the same seed, with tfjit and with
``jit_compile=False`` (TensorFlow's executor), and its losses, metrics, weights
and predictions are compared.  Most tests use a small "dense" layer made of
elementwise ops and a reduction, so that they check the hook rather than the
kernels; Keras's own layers trained end to end are in test_keras_models.py.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import keras

import tfjit
from oracle import assert_matches
from tfjit.api.service import SERVICE
from tfjit.runtime import launch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTOL = 1e-3


class ElementwiseDense(keras.layers.Layer):
    """x @ w + b without MatMul: a broadcast multiply and a sum over the input axis."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], self.units), initializer="glorot_uniform")
        self.b = self.add_weight(shape=(self.units,), initializer="zeros")

    def call(self, x):
        return tf.reduce_sum(tf.expand_dims(x, -1) * self.w, axis=-2) + self.b


class Softsign(keras.layers.Layer):
    def call(self, x):
        return x / (1.0 + tf.abs(x))


class Checked(keras.layers.Layer):
    """A layer with an op tfjit never compiles (assertions stay in TensorFlow)."""

    def call(self, x):
        return tf.debugging.check_numerics(x, "activations")   # the error must name this line


CHECKED_LINE = Checked.call.__code__.co_firstlineno + 1


def sum_squares(y_true, y_pred):
    """A loss whose gradient needs no GatherV2 when the batch dimension is unknown
    (Keras's "mse" takes a mean over the last axis: its gradient gathers the shape)."""
    return tf.reduce_sum(tf.square(y_true - y_pred), axis=-1)


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    return x, np.stack([x.sum(1), x[:, 0] * x[:, 1]], 1).astype(np.float32) * 0.5


def make_model(jit_compile, optimizer="adam", extra=(), loss="mse", **compile_args):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), ElementwiseDense(8), Softsign(), *extra,
                              ElementwiseDense(2)])
    opt = keras.optimizers.get(optimizer) if isinstance(optimizer, str) else optimizer()
    model.compile(optimizer=opt, loss=loss, metrics=["mae"], jit_compile=jit_compile,
                  **compile_args)
    return model


ALL = ("fit", "evaluate", "predict")


def run(model, x, y, parts=ALL, batch_size=8, epochs=2):
    out = {}
    if "fit" in parts:
        out["fit"] = model.fit(x, y, epochs=epochs, batch_size=batch_size, verbose=0,
                               shuffle=False).history
        out["weights"] = [w.numpy() for w in model.weights]
    if "evaluate" in parts:
        out["evaluate"] = model.evaluate(x, y, batch_size=batch_size, verbose=0)
    if "predict" in parts:
        out["predict"] = model.predict(x, batch_size=batch_size, verbose=0)
    return out


_REFERENCES = {}


def reference(key, make, x, y, parts=ALL):
    """``run(make(), ...)`` without tfjit (``jit_compile=False``), computed once per key."""
    if (key, parts) not in _REFERENCES:
        _REFERENCES[(key, parts)] = run(make(), x, y, parts)
    return _REFERENCES[(key, parts)]


def assert_same_training(got, want):
    assert sorted(got) == sorted(want)
    for name in want.get("fit", {}):
        assert_matches(np.float32(got["fit"][name]), np.float32(want["fit"][name]),
                       rtol=RTOL, atol=1e-5, what=f"history {name}")
    for k, (g, w) in enumerate(zip(got.get("weights", []), want.get("weights", []))):
        assert_matches(g, w, rtol=RTOL, atol=1e-5, what=f"weight {k}")
    if "evaluate" in want:
        assert_matches(np.float32(got["evaluate"]), np.float32(want["evaluate"]), rtol=RTOL,
                       atol=1e-5, what="evaluate")
    if "predict" in want:
        assert_matches(got["predict"], want["predict"], rtol=RTOL, atol=1e-5, what="predict")


STEP_OF = {"fit": "train", "evaluate": "test", "predict": "predict"}


def assert_steps_compiled(model, parts=ALL):
    kinds = [STEP_OF[p] for p in parts]
    steps = tfjit.keras.step_functions(model)
    assert sorted(steps) == sorted(kinds), steps
    for kind in kinds:
        step = steps[kind]
        assert step.experimental_get_compile_count() >= 1, kind
        for entry in step._entries.values():
            assert entry.latest() is not None, f"{kind} step did not compile"
    return steps


OPTIMIZERS = {
    "sgd_nesterov": lambda: keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
    "adam": lambda: keras.optimizers.Adam(0.01),
    "rmsprop_centered": lambda: keras.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
    "adamw_clipnorm": lambda: keras.optimizers.AdamW(0.01, clipnorm=1.0),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fit_matches_tensorflow_with_keras_optimizers(name):
    x, y = data(16)                      # 2 full batches: every shape is static
    before = launch.stats()["hits"] + launch.stats()["misses"]
    jit = make_model(True, OPTIMIZERS[name])
    got = run(jit, x, y, parts=("fit",))
    assert_same_training(got, reference(name, lambda: make_model(False, OPTIMIZERS[name]), x, y,
                                        parts=("fit",)))
    assert_steps_compiled(jit, parts=("fit",))
    runs = launch.stats()["hits"] + launch.stats()["misses"] - before
    assert runs >= 2 * 2, runs            # every step ran as a TfjitLaunch


@pytest.mark.parametrize("steps_per_execution", [1, 2])
def test_fit_evaluate_predict_with_an_unknown_batch_dimension_compile_per_batch_shape(
        steps_per_execution):
    # One step per execution: Keras's outer step runs as Python and calls the step with
    # each batch's shape. Two: the outer train and test steps are tf.functions that
    # trace the step with [None, 4], and the launch compiles per batch shape when it runs
    # (predict's outer function traces each list of batches with its shapes).
    x, y = data(20)                      # batches of 8, 8, 4
    jit = make_model(True, loss=sum_squares, steps_per_execution=steps_per_execution)
    got = run(jit, x, y)
    assert_same_training(got, reference(f"sum{steps_per_execution}", lambda: make_model(
        False, loss=sum_squares, steps_per_execution=steps_per_execution), x, y))
    steps = assert_steps_compiled(jit)
    for kind, step in steps.items():
        entries = list(step._entries.values())
        lazy = any(e.lazy for e in entries)
        assert lazy == (steps_per_execution > 1 and kind != "predict"), (kind, entries)
        assert sum(SERVICE.compile_counts[e.spec.key] for e in entries) == 2, kind  # batch 8, 4


def test_steps_per_execution_runs_the_launch_in_keras_while_loop():
    # Keras runs the steps in a tf.while_loop.  While TfjitLaunch was registered
    # stateless, the loop did not wait for one step's launch before starting the
    # next, so steps could update the weights out of order: intermittently a weight
    # 0.2-0.3% off TF's (test_function_in_graphs.py checks the order directly).
    x, y = data(24)
    parts = ("fit",)
    got = run(make_model(True, "adam", steps_per_execution=2, loss=sum_squares), x, y, parts)
    assert_same_training(got, reference("spe", lambda: make_model(
        False, "adam", steps_per_execution=2, loss=sum_squares), x, y, parts))


def outer_function(model, attr):
    """Keras's outer function of a step: ``predict_function`` itself; for train and test
    steps, the ``multi_step_on_iterator`` that Keras's ``function`` closes over."""
    function = getattr(model, attr)
    if attr == "predict_function":
        return function
    for cell in function.__closure__ or ():
        value = cell.cell_contents
        if getattr(value, "__name__", "") == "multi_step_on_iterator":
            return value
    raise AssertionError(f"no multi_step_on_iterator in Keras's {attr}")


def runs_as_python(function) -> bool:
    """Is Keras's outer step plain Python, not a tf.function?"""
    return callable(function) and not hasattr(function, "get_concrete_function")


def test_keras_outer_step_runs_as_python_around_a_compiled_step():
    # Its graph would hold only the launch, which TF's executor runs on an inter-op
    # thread: slower than the launch called directly (tfjit/api/keras.py _runs_eagerly).
    # A dataset of unknown length: each epoch ends with get_next's OutOfRangeError,
    # raised eagerly here where the outer graph raised it before. The reference reads
    # the same batches from a dataset of known length: TF's executor, given the unknown
    # one, also runs the optimizer's step count increment in the call that finds the
    # data at its end (4 iterations after one epoch of 3 batches), so its second epoch
    # differs (Adam's bias correction).
    x, y = data(20)

    def dataset(known_length):
        rows = tf.data.Dataset.from_tensor_slices((x, y))
        return (rows if known_length else rows.filter(lambda a, b: True)).batch(8)

    def train(model, known_length=False):
        out = {"fit": model.fit(dataset(known_length), epochs=2, verbose=0).history}
        out["weights"] = [w.numpy() for w in model.weights]
        out["evaluate"] = model.evaluate(dataset(known_length), verbose=0)
        out["predict"] = model.predict(dataset(known_length), verbose=0)
        return out
    jit = make_model(True, loss=sum_squares)
    assert_same_training(train(jit), train(make_model(False, loss=sum_squares), True))
    assert int(jit.optimizer.iterations.numpy()) == 2 * 3
    assert_steps_compiled(jit)
    for attr in ("train_function", "test_function", "predict_function"):
        assert runs_as_python(outer_function(jit, attr)), attr
    batch = jit.predict_on_batch(x[:8])
    assert_matches(batch, jit.predict(x[:8], verbose=0), rtol=0, atol=0, what="predict_on_batch")


def test_keras_outer_step_stays_a_tf_function_where_it_holds_more_than_the_step():
    reference = make_model(False)
    reference.make_predict_function()
    assert not runs_as_python(reference.predict_function)     # no tfjit step: Keras's own
    looped = make_model(True, steps_per_execution=2)           # a tf.while_loop of steps
    looped.make_train_function()
    looped.make_predict_function()
    assert not runs_as_python(outer_function(looped, "train_function"))
    assert not runs_as_python(looped.predict_function)


def test_auto_compiles_a_model_tfjit_can_compile(caplog):
    x, y = data(16)
    model = make_model("auto")
    assert model.jit_compile is True        # Keras alone says False on a CPU-only machine
    parts = ("fit", "predict")
    with caplog.at_level(logging.INFO, logger="tfjit"):
        got = run(model, x, y, parts)
    assert not [r for r in caplog.records if "runs in TensorFlow" in r.getMessage()]
    assert_steps_compiled(model, parts)
    assert_same_training(got, reference("auto", lambda: make_model(False), x, y, parts))


def test_auto_falls_back_to_tensorflow_with_one_log_line(caplog):
    x, y = data(16)
    model = make_model("auto", extra=[Checked()])
    with caplog.at_level(logging.INFO, logger="tfjit"):
        got = run(model, x, y)
    lines = [r.getMessage() for r in caplog.records if "runs in TensorFlow" in r.getMessage()]
    assert len(lines) == 1, lines            # one line for the model, not one per step
    assert "CheckNumerics" in lines[0] and "\n" not in lines[0]
    assert_same_training(got, reference("checked", lambda: make_model(False, extra=[Checked()]),
                                        x, y))


def test_must_compile_error_names_the_op_the_node_and_the_layer_line():
    x, y = data(16)
    model = make_model(True, extra=[Checked()])
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    msg = str(info.value)
    assert "Detected unsupported operations when trying to compile graph" in msg
    assert "CheckNumerics (no tfjit lowering for 'CheckNumerics': assertions must run in " \
           "TensorFlow)" in msg
    assert "{{node " in msg and "checked" in msg.split("{{node ")[1].split("}}")[0]
    assert f'test_keras.py", line {CHECKED_LINE}, in call' in msg


def find_step(model, attr="train_function"):
    """The object Keras wraps its train/test step in (a tf.function or a tfjit.Function)."""
    for cell in getattr(model, attr).__closure__ or ():
        value = cell.cell_contents
        if getattr(value, "__name__", "") == "one_step_on_data":
            return getattr(value, "__wrapped__", value)
    raise AssertionError("no one_step_on_data in Keras's step function")


def test_disable_gives_keras_its_own_xla_back():
    from tensorflow.python.eager.polymorphic_function.polymorphic_function import Function as TFFunction
    auto = make_model("auto")
    auto.make_train_function()
    assert isinstance(find_step(auto), tfjit.Function)
    tfjit.keras.disable()
    try:
        assert not tfjit.keras.is_enabled()
        assert auto.jit_compile is False and auto.train_function is None   # Keras's own "auto"
        model = make_model(True)
        model.make_train_function()
        step = find_step(model)
        assert isinstance(step, TFFunction) and step._jit_compile is True   # TF's XLA
        assert tfjit.keras.step_functions(model) == {}
        x, y = data(16)
        model.fit(x, y, epochs=1, batch_size=8, verbose=0)     # runs under XLA
    finally:
        tfjit.keras.enable()
    model = make_model(True)
    model.make_train_function()
    assert isinstance(find_step(model), tfjit.Function)


def test_keras_dense_layers_without_bias_compile_with_matmul():
    def make(jit):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, use_bias=False),
                                  Softsign(), keras.layers.Dense(2, use_bias=False)])
        model.compile(optimizer="adam", loss="mse", jit_compile=jit)
        return model
    x, y = data(16)
    jit = make(True)
    assert_same_training(run(jit, x, y), run(make(False), x, y))
    assert_steps_compiled(jit)


def test_keras_dense_tanh_mse_with_an_unknown_batch():
    def make(jit):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                                  keras.layers.Dense(2)])
        model.compile(optimizer="adam", loss="mse", metrics=["mae"], jit_compile=jit)
        return model
    x, y = data(20)
    jit = make(True)
    assert_same_training(run(jit, x, y), run(make(False), x, y))
    assert_steps_compiled(jit)


UNMODIFIED = '''
import numpy as np, tensorflow as tf, keras

class Dense(keras.layers.Layer):
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], 2), initializer="glorot_uniform")
    def call(self, x):
        return tf.reduce_sum(tf.expand_dims(x, -1) * self.w, axis=-2)

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
model = keras.Sequential([keras.Input((4,)), Dense(), Dense()])
model.compile(optimizer="sgd", loss="mse", jit_compile=True)
history = model.fit(x, x[:, :2] * 0.5, epochs=2, batch_size=8, verbose=0, shuffle=False)
print("RESULT", " ".join(str(v) for v in history.history["loss"]))
'''

# Runs the unmodified program, then reports what tfjit's launch op did, if tfjit was loaded.
RUNNER = '''
import runpy, sys
runpy.run_path(sys.argv[1], run_name="__main__")
launch = sys.modules.get("tfjit.runtime.launch")
steps = sys.modules.get("tfjit.api.keras")
print("LAUNCH", launch.stats()["hits"] + launch.stats()["misses"] if launch else None)
print("STEPS", sum(len(s) for s in steps._steps.values()) if steps else None)
'''


def test_unmodified_keras_script_gets_the_hook_through_tfjit_flags(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(UNMODIFIED)
    procs = {}
    for mode, flags in (("xla", ""), ("tfjit", f"--tfjit_dump_to={tmp_path / 'dumps'}")):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        env.pop("TFJIT_FLAGS", None)
        if flags:
            env["TFJIT_FLAGS"] = flags
        procs[mode] = subprocess.Popen([sys.executable, "-c", RUNNER, str(script)], text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       env=env, cwd=ROOT)
    results = {}
    for mode, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr[-3000:]
        results[mode] = dict(line.split(" ", 1) for line in stdout.splitlines() if " " in line)
    assert results["xla"]["LAUNCH"] == "None"              # no TFJIT_FLAGS: tfjit not loaded
    assert int(results["tfjit"]["LAUNCH"]) >= 4             # 2 epochs x 2 batches, as TfjitLaunch
    assert int(results["tfjit"]["STEPS"]) == 1              # the train step, made by the hook
    dumps = [p.name for p in (tmp_path / "dumps").iterdir()]
    assert any("one_step_on_data" in n and n.endswith("before_optimizations.txt") for n in dumps), dumps
    got = np.array(results["tfjit"]["RESULT"].split(), np.float32)
    want = np.array(results["xla"]["RESULT"].split(), np.float32)
    assert_matches(got, want, rtol=RTOL, atol=1e-5, what="losses (tfjit vs TF's XLA)")
