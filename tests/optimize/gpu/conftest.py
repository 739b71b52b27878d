"""Fixtures of the GPU rules' tests."""

import pytest

from tvm_hetero.target import arch_multiprocessors


@pytest.fixture
def sm_90_from_the_table(monkeypatch):
    """The GPU rules count the SMs of a GPU present of the target's arch (an H100 PCIe is an
    sm_90 of 114): none here, so that the table's 132 make the same tile on every host."""
    monkeypatch.setattr("tvm_hetero.target.present_gpu", lambda index: None)
    arch_multiprocessors.cache_clear()
    yield
    arch_multiprocessors.cache_clear()
