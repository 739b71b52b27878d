import os
import subprocess
import sys

import numpy as np
import pytest

import tvm_hetero as th


def pytest_collection_modifyitems(config, items):
    import tvm

    has_gpu = tvm.runtime.enabled("cuda") and tvm.cuda(0).exist
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none here)")
    for item in items:
        if "gpu" in item.keywords and not has_gpu:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def cpu_devices():
    """The device set every CPU-only machine tests with: host CPU + generic x86-64."""
    return th.DeviceSet.parse(["cpu", "cpu-generic"])


_MODELS = {}


def zoo(name):
    if name not in _MODELS:
        _MODELS[name] = th.load_model(f"zoo:{name}")
    return _MODELS[name]


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def run_cli(*args, cwd=None, timeout=600):
    """Run `tvm-hetero ARGS` in a fresh process; returns CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "tvm_hetero.cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
