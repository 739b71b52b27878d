"""Per-layer, per-device profiles (``tvm_hetero/measure/profiles.py``): every layer and device
pair measured once and reused from its file, and a placement's estimate counting one copy per
tensor and device."""

import pytest

import tvm_hetero as th
from tvm_hetero.measure.profiles import Profile, TransferFit, profile_model

from tests.helpers.models import zoo


def test_profile_covers_every_layer_and_pair_and_is_reused(tmp_path, cpu_devices):
    model = zoo("cnn")
    layers = th.extract_layers(model)
    path = str(tmp_path / "profile.json")
    profile = profile_model(model, layers, cpu_devices, path)
    assert set(profile.layer_ms) == {l.name for l in layers}
    assert all(ms > 0 for costs in profile.layer_ms.values() for ms in costs.values())
    assert set(profile.transfer) == {("cpu", "cpu-generic"), ("cpu-generic", "cpu")}
    assert all(f.ms_per_byte > 0 and f.fixed_ms >= 0 for f in profile.transfer.values())
    # all on one device: the estimate is the sum of that device's layer costs, no copies
    everything = th.Placement.all_on(layers, "cpu")
    assert profile.estimate_ms(layers, everything) == pytest.approx(
        sum(profile.layer_ms[l.name]["cpu"] for l in layers))
    reused = profile_model(model, layers, cpu_devices, path)
    assert reused.layer_ms == profile.layer_ms  # read from the file, not measured again
    assert Profile.load(path, "another model", cpu_devices.fingerprint()) is None


def test_estimate_counts_one_copy_per_tensor_and_device():
    # a feeds b and c, both on the other device: its output is copied once
    from tests.helpers.layers import layer

    layers = [layer("a", 0, 10, 1000), layer("b", 0, 1000, 10, preds=["a"]),
              layer("c", 0, 1000, 10, preds=["a"])]
    profile = Profile("m", "d", {n: {"x": 1.0, "y": 1.0} for n in "abc"},
                      {("x", "y"): TransferFit(0.5, 0.001), ("y", "x"): TransferFit(0.5, 0.001)})
    placement = th.Placement({"a": "x", "b": "y", "c": "y"})
    assert profile.estimate_ms(layers, placement) == pytest.approx(3.0 + 0.5 + 1.0)
