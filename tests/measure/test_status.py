"""Device status (``tvm_hetero/measure/status.py``): task weights, the weighted score, a probe of
real devices, and statuses kept across runs under the memory caps given now."""

import pytest

import tvm_hetero as th
from tvm_hetero.measure.status import DeviceStatus, TaskWeights, probe, score

from tests.helpers.models import zoo, zoo_direct


def test_task_weights_follow_the_model():
    # zoo:mlp: ~4.2 MFLOP over ~1 MiB of parameters; zoo:resnet with direct convolutions:
    # ~28 MFLOP over ~0.15 MiB (as Winograd, ~13 MFLOP over ~0.55 MiB of transformed weights)
    mlp = TaskWeights.for_layers(th.extract_layers(zoo("mlp")))
    resnet = TaskWeights.for_layers(th.extract_layers(zoo_direct("resnet")))
    assert mlp.memory > mlp.compute and resnet.compute > resnet.memory
    for w in (mlp, resnet):
        assert w.compute + w.memory + w.bandwidth == pytest.approx(1.0)
        assert w.memory == pytest.approx(2 * w.bandwidth)


def test_score_is_weighted_and_normalised():
    statuses = [DeviceStatus("a", gflops=10, memory_bytes=100, bandwidth_gbs=4),
                DeviceStatus("b", gflops=5, memory_bytes=200, bandwidth_gbs=4)]
    score(statuses, TaskWeights(0.5, 0.3, 0.2))
    # a: 0.5*10/10 + 0.3*100/200 + 0.2*4/4 = 0.85 ; b: 0.5*5/10 + 0.3*200/200 + 0.2 = 0.75
    assert statuses[0].score == pytest.approx(0.85) and statuses[1].score == pytest.approx(0.75)


def test_probe_measures_real_devices():
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"], memory={"cpu-generic": "1GiB"})
    statuses = probe(devices)
    assert [s.name for s in statuses] == ["cpu", "cpu-generic"]
    assert all(s.gflops > 0 and s.bandwidth_gbs > 0 for s in statuses)
    assert statuses[1].memory_bytes == 2**30 and statuses[1].memory_is_cap
    assert statuses[0].memory_bytes > 2**30 and not statuses[0].memory_is_cap


def test_kept_statuses_follow_the_memory_caps_given_now(tmp_path):
    """status.json is keyed by the device set without its caps: the memory figures are read
    afresh, never the ones of the caps it was probed under."""
    import json

    import psutil

    from tvm_hetero.measure.status import probe_cached

    capped = th.DeviceSet.parse(["cpu", "cpu-generic"], memory={"cpu-generic": "1MiB"})
    path = tmp_path / "status.json"
    path.write_text(json.dumps({"devices": capped.fingerprint(), "statuses": [
        {"name": "cpu", "gflops": 50.0, "memory_bytes": 1 << 40, "bandwidth_gbs": 10.0},
        {"name": "cpu-generic", "gflops": 20.0, "memory_bytes": 1 << 20,
         "bandwidth_gbs": 10.0, "memory_is_cap": True}]}))
    free = th.DeviceSet.parse(["cpu", "cpu-generic"])
    statuses = probe_cached(free, TaskWeights.equal(), str(path))
    total = psutil.virtual_memory().total
    assert [s.memory_bytes for s in statuses] == [total, total]
    assert not any(s.memory_is_cap for s in statuses)
    assert statuses[0].gflops == 50.0  # the measured figures are kept
    other = free.with_memory_caps({"cpu": "2MiB"})
    statuses = probe_cached(other, TaskWeights.equal(), str(path))
    assert statuses[0].memory_bytes == 2 << 20 and statuses[0].memory_is_cap
