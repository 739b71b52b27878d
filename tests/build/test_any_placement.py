"""Property: every placement computes the model. For any assignment of layers to `cpu` and
`cpu-generic` (and either device order: the first device holds the constant pool), the built
executable's outputs match onnxruntime's within 1e-4 relative to the largest output.

Hypothesis draws the model, the placement, the device order and the input seed; a failure
shrinks towards the fewest layers off the first device. Models, layers and onnxruntime
references are loaded once per process. The default run draws a few placements per model; the
`slow` variant many more (`make test-slow`).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tvm_hetero as th
from tvm_hetero.testing import light_model, max_relative_error, onnx_reference

TOLERANCE = 1e-4  # see tests/build/test_compile.py: FMA vs no FMA rounding, nothing more
DEVICES = ("cpu", "cpu-generic")
ZOO = ["zoo:mlp", "zoo:cnn", "zoo:vgg", "zoo:resnet", "zoo:transformer"]
LIGHT = ["squeezenet", "bvlc_alexnet"]

# no example database: it would write .hypothesis/ into the checkout; failures print their
# example (and the seed to reproduce it) instead
COMMON = dict(deadline=None, database=None, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@functools.lru_cache(maxsize=None)
def loaded(name: str):
    """(ONNX model, tvm_hetero Model, layer names) for a zoo name or a light graph."""
    onnx_model = th.zoo_model(name[4:]) if name.startswith("zoo:") else light_model(name)
    model = th.load_model(onnx_model, name=name.removeprefix("zoo:"))
    return onnx_model, model, tuple(layer.name for layer in th.extract_layers(model))


@functools.lru_cache(maxsize=None)
def reference(name: str, seed: int):
    """Seeded inputs and onnxruntime's outputs for them."""
    onnx_model, model, _ = loaded(name)
    inputs = model.random_inputs(seed=seed)
    return inputs, onnx_reference(onnx_model, inputs, model)


@functools.lru_cache(maxsize=None)
def device_set(order: tuple[str, ...]):
    return th.DeviceSet.parse(list(order))


def finite_relative_error(got, want) -> float:
    """max_relative_error, but NaN or inf where the reference is finite counts as infinitely
    wrong (max() over a NaN would hide it) and so does a shape mismatch."""
    if len(got) != len(want):
        return float("inf")
    for a, b in zip(got, want):
        b = np.asarray(b)
        if a.shape != b.shape or not np.array_equal(np.isfinite(a), np.isfinite(b)):
            return float("inf")
    return max_relative_error(got, want)


def check_placement(data, name: str) -> None:
    _, model, layer_names = loaded(name)
    devices = data.draw(st.lists(st.sampled_from(DEVICES), min_size=len(layer_names),
                                 max_size=len(layer_names)), label="devices by layer")
    order = data.draw(st.sampled_from([DEVICES, DEVICES[::-1]]), label="device order")
    seed = data.draw(st.integers(0, 2), label="input seed")
    placement = th.Placement(dict(zip(layer_names, devices)))
    inputs, want = reference(name, seed)
    got = th.build(model, placement, device_set(order)).run(inputs)
    error = finite_relative_error(got, want)
    assert error < TOLERANCE, (f"{name}: relative error {error:.3g} for placement "
                               f"{placement.assignment} on {order}")


# the light graphs' random placements in the default run: build/test_compile.py's (bvlc_alexnet)
# and optimize/test_pass.py's (squeezenet); here with the slow variants
@pytest.mark.parametrize("name", ZOO)
@settings(max_examples=4, **COMMON)
@given(data=st.data())
def test_any_placement_matches_onnxruntime(name, data):
    check_placement(data, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO + LIGHT)
@settings(max_examples=50, **COMMON)
@given(data=st.data())
def test_any_placement_matches_onnxruntime_many(name, data):
    check_placement(data, name)


@pytest.mark.slow
@settings(max_examples=8, **COMMON)
@given(data=st.data())
def test_any_placement_matches_onnxruntime_resnet50(data):
    check_placement(data, "resnet50")  # 62 layers, about 6 s per example


def test_finite_relative_error_catches_nan_and_shapes():
    """The comparison itself can fail: NaN, inf, a wrong shape or value."""
    want = [np.ones((2, 3), np.float32)]
    assert finite_relative_error([np.ones((2, 3), np.float32)], want) == 0
    assert finite_relative_error([np.full((2, 3), np.nan, np.float32)], want) == float("inf")
    assert finite_relative_error([np.ones((3, 2), np.float32)], want) == float("inf")
    assert finite_relative_error([], want) == float("inf")
    assert finite_relative_error([np.full((2, 3), 1.001, np.float32)], want) > TOLERANCE
