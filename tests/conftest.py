"""Fixtures and hooks every test shares; plain helper functions are in ``tests/helpers``."""

import os

import numpy as np
import pytest

import tvm_hetero as th

# a rule that raises fails the test (in use: one warning, then the next rule)
os.environ.setdefault("TVM_HETERO_STRICT_RULES", "1")


def pytest_collection_modifyitems(config, items):
    import tvm

    has_gpu = tvm.runtime.enabled("cuda") and tvm.cuda(0).exist
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none here)")
    for item in items:
        # the marker, not a keyword: keywords hold the path's folder names too (a checkout
        # in a folder called gpu would skip every test)
        if item.get_closest_marker("gpu") is not None and not has_gpu:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def cpu_devices():
    """The device set every CPU-only machine tests with: host CPU + generic x86-64."""
    return th.DeviceSet.parse(["cpu", "cpu-generic"])


@pytest.fixture
def prepare_for_devices(monkeypatch):
    """``prepare_for_devices(**fields)``: every ``PrepareConfig.for_devices`` in the test (the
    preparation builds and layer extraction take for a device set) then sets those fields,
    e.g. ``blocked_min_model_flops=0`` for the blocked layout on a small model."""
    from dataclasses import replace

    from tvm_hetero.prepare import PrepareConfig

    def override(**fields):
        for_devices = PrepareConfig.for_devices.__func__
        monkeypatch.setattr(PrepareConfig, "for_devices", classmethod(
            lambda cls, devices, **more: replace(for_devices(cls, devices, **more), **fields)))

    return override


@pytest.fixture
def rng():
    """A seeded NumPy generator, fresh per test."""
    return np.random.default_rng(0)
