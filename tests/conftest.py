"""Shared fixtures: TensorFlow and tfjit are imported once per test process."""
import dataclasses
import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The oracle is TensorFlow's default CPU kernels, on every machine.  TF turns its
# oneDNN graph rewrite on by itself on CPUs with AVX512_VNNI/BF16 or AMX, and oneDNN's
# kernels differ from the default ones at the edges these tests check (NaN rows in
# Softmax, NaN ties in MaxPool, bf16 rounding, the shape of FusedBatchNormV3's
# reserve_space_3; MaxPoolGrad on an empty batch aborts the process).  Set before
# TensorFlow is imported (it reads the variable once); subprocesses inherit it.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


@pytest.fixture(scope="session", autouse=True)
def verify_ir():
    """The IR verifier runs after every pass in every test (pipeline.optimize)."""
    from tfjit import config
    config.set_flags(tfjit_verify_ir=True)


@pytest.fixture(scope="session", autouse=True)
def collect_for_ptx():
    """Keeps what test_ops/test_random_graphs optimise for test_nvptx's ptxas check."""
    import ptx_collect
    ptx_collect.install()


def pytest_addoption(parser):
    parser.addoption("--cuda-tensorflow", default=None,
                     help="the CUDA tensorflow wheel, or its unzipped tensorflow/include, for "
                          "test_gpu_launch.py's compile check of the GPU kernel")


def pytest_configure(config):
    config.addinivalue_line("markers", "after_all: runs after every other test of the session")


def pytest_collection_modifyitems(session, config, items):
    """``after_all`` tests last (test_nvptx checks what the other tests compiled)."""
    items.sort(key=lambda item: item.get_closest_marker("after_all") is not None)


@pytest.fixture(scope="session")
def tf():
    import tensorflow
    return tensorflow


@pytest.fixture(scope="session")
def tfjit():
    import tfjit as module
    from tfjit.api.service import SERVICE
    SERVICE.install()            # builds the launch op once for the whole session
    return module


@pytest.fixture()
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def flags():
    """tfjit's flags (config.flags()), every one restored after the test."""
    from tfjit import config
    saved = dataclasses.replace(config.flags())
    yield config.flags()
    for f in dataclasses.fields(saved):
        setattr(config.flags(), f.name, getattr(saved, f.name))


@pytest.fixture
def auto_mode(flags):
    """Auto-clustering on for CPU graphs (``--tfjit_auto_jit=2 --tfjit_cpu_global_jit``),
    its record of recent clusterings cleared; yields the flags, restored afterwards."""
    from tfjit import config
    from tfjit.api import autojit
    config.set_flags(tfjit_auto_jit=2, tfjit_cpu_global_jit=True)
    autojit.activate()
    autojit.recent.clear()
    yield flags
