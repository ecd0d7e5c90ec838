"""pipeline.gc_held: Python's cyclic collector is off while tfjit compiles and comes back
on after, whatever the compile's outcome; a collector the user turned off stays off."""
import gc
import threading

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from tfjit import pipeline


@pytest.fixture
def collector():
    """Whatever a test does, the collector is on afterwards, as every other test expects."""
    yield
    gc.enable()


@pytest.fixture
def emit_spy(monkeypatch):
    """Records gc.isenabled() at each emit of a compile (the middle of compile_module)."""
    seen = []
    real = pipeline.emit

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)
    monkeypatch.setattr(pipeline, "emit", spy)
    return seen


def _compile_fresh(scale: float):
    """A must-compile call of a function never compiled before (so it compiles now)."""
    f = tfjit.function(lambda a: tf.nn.relu(a * scale + 1.0), jit_compile=True)
    x = np.arange(-3, 3, dtype=np.float32)
    np.testing.assert_array_equal(f(tf.constant(x)).numpy(), np.maximum(x * scale + 1.0, 0))


def test_off_during_a_compile_and_on_after(collector, emit_spy):
    assert gc.isenabled()
    _compile_fresh(2.0)
    assert emit_spy == [False]
    assert gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off(collector, emit_spy):
    gc.disable()
    _compile_fresh(3.0)
    assert emit_spy == [False]
    assert not gc.isenabled()


def test_back_on_after_a_failed_compile(collector, monkeypatch):
    def broken(*args, **kwargs):
        assert not gc.isenabled()
        raise RuntimeError("emit failed on purpose")
    monkeypatch.setattr(pipeline, "emit", broken)
    f = tfjit.function(lambda a: a * 5.0 - 2.0, jit_compile=True)
    with pytest.raises(Exception, match="emit failed on purpose"):
        f(tf.constant([1.0, 2.0]))
    assert gc.isenabled()


def test_on_only_when_the_last_of_concurrent_compiles_ends(collector):
    """Two threads hold it at once (the launch op may compile on several of TF's threads):
    the first to finish must not turn the collector on under the other."""
    a_in, b_done, a_release = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with pipeline.gc_held():
            a_in.set()
            a_release.wait(10)
            seen["a at end"] = gc.isenabled()

    def b():
        a_in.wait(10)
        with pipeline.gc_held():
            seen["b inside"] = gc.isenabled()
        seen["after b"] = gc.isenabled()
        b_done.set()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    b_done.wait(10)
    a_release.set()
    for t in threads:
        t.join(10)
    assert seen == {"b inside": False, "after b": False, "a at end": False}
    assert gc.isenabled()
