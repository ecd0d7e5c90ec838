"""The Keras front door: Keras 3's TensorFlow trainer compiles its steps with tfjit.

Where it hooks.  Keras makes each step in ``make_train_function`` /
``make_test_function`` / ``make_predict_function`` (keras/src/backend/tensorflow/
trainer.py), and the one place where ``jit_compile`` takes effect is the
``tf.function(one_step_on_data, reduce_retracing=True, jit_compile=...)`` those
make.  The hook therefore replaces the trainer module's ``tf`` by a stand-in
(``_TensorFlow``): the same module for every other name, and a ``function`` that,
while one of those three methods runs for a model, turns a ``jit_compile=True``
step into a must-compile ``tfjit.Function``.  Everything around it stays Keras's:
the outer ``multi_step_on_iterator`` (fit, evaluate) and predict functions,
``steps_per_execution``'s while loop, the distribution wrapper.  Where that outer
function would hold nothing but the step (no strategy, one step per execution),
it runs as plain Python, as Keras runs it with ``run_eagerly=True``: the step is
then called eagerly, once per batch shape compiled, and its launch runs on the
calling thread (``_runs_eagerly`` says why).  Otherwise the outer function is a
tf.function, the step runs there as a TfjitLaunch node, traced with an unknown
batch dimension, and compiles for each concrete batch shape when it first runs.

``jit_compile="auto"``.  Keras resolves it in ``Trainer._resolve_auto_jit_compile``
and says no on machines without a GPU.  With the hook, "auto" on a CPU machine is
True when Keras itself finds the model jit-able (every layer ``supports_jit``, no
op determinism), and the model is marked: its steps are
``Function(fall_back=...)``, so a model tfjit cannot compile runs in TensorFlow,
said in one log line per model (logger ``tfjit``, INFO).  On a machine with a GPU,
"auto" keeps Keras's choice (TF's XLA); tfjit compiles for the CPU.

Under a ``tf.distribute`` strategy, Keras calls the step through
``strategy.run`` inside its outer tf.function: the step compiles per replica,
with the collectives (gradient aggregation) left to TensorFlow (api/replica.py).

``disable()`` puts back every attribute it replaced, so Keras behaves exactly as
without tfjit: models whose "auto" tfjit resolved get Keras's own resolution
back, and steps tfjit made are dropped, so Keras makes its own at the next
``fit``/``evaluate``/``predict``.
"""
from __future__ import annotations

import functools
import inspect
import logging
import sys
import threading
import weakref

log = logging.getLogger("tfjit")

TRAINER_MODULE = "keras.src.backend.tensorflow.trainer"
BASE_TRAINER_MODULE = "keras.src.trainers.trainer"
_MAKERS = {"make_train_function": "train", "make_test_function": "test",
           "make_predict_function": "predict"}
_STEP_ATTRS = {"train": "train_function", "test": "test_function", "predict": "predict_function"}

_lock = threading.RLock()
_saved: dict | None = None            # (owner, name) -> original, while enabled
_making = threading.local()           # .current: a _Making while Keras makes a step
_auto = weakref.WeakKeyDictionary()   # model -> True: "auto" resolved by tfjit
_steps = weakref.WeakKeyDictionary()  # model -> {kind: weakref to its tfjit Function}
_said = weakref.WeakKeyDictionary()   # model -> True: its fallback line was logged
_warned = set()


def is_enabled() -> bool:
    return _saved is not None


def step_functions(model) -> dict:
    """{"train" | "test" | "predict": tfjit.Function} that tfjit made for ``model``."""
    steps = {kind: ref() for kind, ref in _steps.get(model, {}).items()}
    return {kind: step for kind, step in steps.items() if step is not None}


class _TensorFlow:
    """Stands for ``tensorflow`` in Keras's trainer module; see the module docstring."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        return getattr(self._module, name)

    def __dir__(self):
        return dir(self._module)

    def function(self, func=None, **kwargs):
        if func is None:
            return lambda f: self.function(f, **kwargs)
        current = getattr(_making, "current", None)
        if current is not None and not kwargs.get("jit_compile") and _runs_eagerly(current):
            return func         # Keras's own run_eagerly code, around a compiled step
        if current is None or not kwargs.get("jit_compile"):
            return self._module.function(func, **kwargs)
        model, kind = current.model, current.kind
        unknown = sorted(set(kwargs) - _FUNCTION_OPTIONS)
        if unknown:     # a Keras newer than this hook: do what it asks, with TF
            _warn_once("options", f"tfjit: Keras asks tf.function for {unknown}; its steps are "
                       "left to TensorFlow's XLA")
            return self._module.function(func, **kwargs)
        from tfjit.api.function import Function
        auto = _auto.get(model, False)

        def make(fn, autograph=kwargs.get("autograph", True)):
            step = Function(fn, jit_compile=True, name=f"{model.name}.{kind}_step", autograph=autograph,
                            fall_back=functools.partial(_fell_back, weakref.ref(model)) if auto else False,
                            reduce_retracing=bool(kwargs.get("reduce_retracing", False)))
            _steps.setdefault(model, {})[kind] = weakref.ref(step)   # the model holds the step
            return step
        strategy = getattr(model, "_distribute_strategy", None)
        current.step_made = strategy is None
        if strategy is not None:
            # Keras's step calls strategy.run(train_step) itself: that cross-replica function
            # stays a tf.function, and the replica function it runs is the tfjit.Function
            # (Keras does not AutoGraph-convert train_step, nor does this)
            return self._module.function(_replicas_compiled(func, strategy,
                                                            functools.partial(make, autograph=False)),
                                         **{k: v for k, v in kwargs.items() if k != "jit_compile"})
        return make(func)


_FUNCTION_OPTIONS = frozenset({"jit_compile", "reduce_retracing", "autograph"})


def _replicas_compiled(func, strategy, make):
    """``func`` with each ``strategy.run(fn, ...)`` it makes while traced running
    ``make(fn)`` instead (one per fn, kept with the step).  The strategy's ``run`` is
    replaced on the instance for the length of the call, which is a trace: Keras calls
    the step only inside its outer tf.function."""
    made = {}

    @functools.wraps(func)
    def step(*args, **kwargs):
        run = strategy.run

        def run_compiled(fn, args=(), kwargs=None, options=None):
            if fn not in made:
                made[fn] = make(fn)
            return run(made[fn], args=args, kwargs=kwargs, options=options)
        saved = strategy.__dict__.get("run")
        strategy.run = run_compiled
        try:
            return func(*args, **kwargs)
        finally:
            if saved is None:
                del strategy.run
            else:
                strategy.run = saved
    step.made = made
    return step


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning("%s", message)


def _fell_back(model_ref, line: str) -> None:
    model = model_ref()
    if model is None or model not in _said:
        if model is not None:
            _said[model] = True
        log.info("%s", line)


class _Making:
    """The step Keras is making: for which model, which kind, and whether the step it
    asked tf.function for became a tfjit.Function outside any strategy."""

    def __init__(self, model, kind: str):
        self.model, self.kind, self.step_made = model, kind, False


def _runs_eagerly(making: _Making) -> bool:
    """Should Keras's outer step function (the tf.function around the compiled step that
    ``predict``, ``predict_on_batch``, ``fit`` and ``evaluate`` call) run as plain Python?

    Yes where its graph would hold nothing but tfjit's step: a step made here outside
    any strategy (Keras's default strategy runs it as a plain call), one batch per
    execution.  The launch then runs on the calling thread, as a tfjit.function called
    eagerly does, where inside the outer graph TF's executor hands it to an inter-op
    thread: measured on the resizing layer model (docs/performance.md, "Keras's outer
    step"), predict_on_batch 0.95 ms through the outer graph against 0.76 ms for the
    same launch called directly, its kernels alone 25% slower there.  Under a strategy
    the outer function stays a tf.function (it holds the cross-replica work), and with
    ``steps_per_execution`` > 1 too (its loop is a tf.while_loop)."""
    return making.step_made and getattr(making.model, "steps_per_execution", 1) == 1


def _maker(original, kind: str):
    @functools.wraps(original)
    def make(self, *args, **kwargs):
        outer = getattr(_making, "current", None)
        _making.current = _Making(self, kind)
        try:
            return original(self, *args, **kwargs)
        finally:
            _making.current = outer
    return make


def _tfjit_wants_auto(model) -> bool:
    """Would tfjit compile this model for ``jit_compile="auto"``?  Keras's own reasons
    for no stand (a layer without ``supports_jit``, op determinism); the lack of a GPU,
    Keras's reason to say no on CPU, is tfjit's reason to say yes.  A strategy is no
    reason: tfjit compiles the step of each replica (api/replica.py)."""
    import tensorflow as tf
    from keras.src import backend
    from keras.src.trainers.trainer import model_supports_jit
    if backend.backend() != "tensorflow":
        return False
    if tf.config.list_physical_devices("GPU"):
        return False
    return bool(model_supports_jit(model))


def _resolver(original):
    @functools.wraps(original)
    def resolve(self):
        if not _tfjit_wants_auto(self):
            return original(self)
        _auto[self] = True
        return True
    return resolve


def _compiler(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def compile(self, *args, **kwargs):
        _said.pop(self, None)
        try:
            requested = signature.bind(self, *args, **kwargs).arguments.get("jit_compile", "auto")
        except TypeError:          # Keras reports the bad call itself
            requested = None
        result = original(self, *args, **kwargs)
        if requested != "auto":    # Keras also resolves "auto" while it sets jit_compile
            _auto.pop(self, None)
        return result
    return compile


def enable() -> None:
    """Installs the hook (idempotent).  Imports Keras's TF trainer if it is not loaded."""
    global _saved
    import importlib
    with _lock:
        if _saved is not None:
            return
        trainer = importlib.import_module(TRAINER_MODULE)
        base = importlib.import_module(BASE_TRAINER_MODULE)
        cls, base_cls = trainer.TensorFlowTrainer, base.Trainer
        saved = {(trainer, "tf"): trainer.tf}
        for name in _MAKERS:
            saved[(cls, name)] = cls.__dict__[name]
        saved[(base_cls, "_resolve_auto_jit_compile")] = base_cls.__dict__["_resolve_auto_jit_compile"]
        saved[(base_cls, "compile")] = base_cls.__dict__["compile"]
        trainer.tf = _TensorFlow(trainer.tf)
        for name, kind in _MAKERS.items():
            setattr(cls, name, _maker(saved[(cls, name)], kind))
        base_cls._resolve_auto_jit_compile = _resolver(saved[(base_cls, "_resolve_auto_jit_compile")])
        base_cls.compile = _compiler(saved[(base_cls, "compile")])
        _saved = saved


def disable() -> None:
    """Gives Keras back its own behaviour (TF's XLA for ``jit_compile=True``)."""
    global _saved
    with _lock:
        if _saved is None:
            return
        for (owner, name), value in _saved.items():
            setattr(owner, name, value)
        resolve = _saved[(sys.modules[BASE_TRAINER_MODULE].Trainer, "_resolve_auto_jit_compile")]
        _saved = None
        for model in list(_auto.keys()):
            model.jit_compile = resolve(model)
        _auto.clear()
        for model, kinds in list(_steps.items()):
            for kind in kinds:      # Keras makes its own at the next fit/evaluate/predict
                setattr(model, _STEP_ATTRS[kind], None)
        _steps.clear()
        _said.clear()

