"""Shared fixtures: TensorFlow and tfjit are imported once per test process."""
import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


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
