"""Optional dependencies in tests."""

import os

import pytest

# `make test` sets it: PyTorch is installed there, and a test that needs it must not skip
TORCH_REQUIRED_ENV = "TVM_HETERO_TEST_TORCH"


def import_torch():
    """``torch``; without it the test skips (PyTorch is an optional dependency), or fails
    where ``TVM_HETERO_TEST_TORCH=1`` says it is installed (``make test``)."""
    if os.environ.get(TORCH_REQUIRED_ENV) == "1":
        try:
            import torch
        except ImportError as err:
            pytest.fail(f"{TORCH_REQUIRED_ENV}=1 but PyTorch does not import: {err}")
        return torch
    return pytest.importorskip("torch", reason="PyTorch is an optional dependency "
                                               "(pip install -e '.[torch]')")
