"""Device status: compute rate, memory and copy bandwidth of each device, and a score that
weights them for the task at hand.

- compute rate: GFLOP/s of a 256x256x256 float32 matmul compiled for the device with the rules
  tvm_hetero builds matmul layers with (the optimization table), measured on it;
- memory: the user's cap when given, else the device's total memory (host RAM for CPUs);
- bandwidth: GB/s of copies to and from the first device of the set (for the first device
  itself: from the second), fitted over several sizes.

The score is ``w_compute * rate + w_memory * memory + w_bandwidth * bandwidth``, each term
normalised by the best device of the set. The weights depend on the model: with ``I`` its
FLOPs per parameter byte, ``w_compute = I / (I + 100)`` and the rest split 2:1 between memory
and bandwidth. A compute-heavy CNN (ResNet-50: I ~ 80) weighs compute ~0.45; a
parameter-heavy MLP (I ~ 4) weighs memory ~0.64.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import numpy as np

from ..devices import Device, DeviceSet

logger = logging.getLogger(__name__)

INTENSITY_KNEE = 100.0  # FLOP per parameter byte at which compute and memory weigh the same
MATMUL_N = 256


@dataclass
class TaskWeights:
    """How much compute, memory and bandwidth matter for one model."""

    compute: float
    memory: float
    bandwidth: float

    @classmethod
    def for_layers(cls, layers) -> "TaskWeights":
        flops = sum(layer.flops for layer in layers)
        from ..layers.extract import distinct_param_bytes

        params = distinct_param_bytes(layers)
        intensity = flops / max(params, 1)
        compute = intensity / (intensity + INTENSITY_KNEE)
        return cls(compute, (1 - compute) * 2 / 3, (1 - compute) / 3)

    @classmethod
    def equal(cls) -> "TaskWeights":
        return cls(1 / 3, 1 / 3, 1 / 3)


@dataclass
class DeviceStatus:
    """The probed state of one device."""

    name: str
    gflops: float
    memory_bytes: int
    bandwidth_gbs: float
    memory_is_cap: bool = False
    score: float = 0.0

    def to_json(self):
        return asdict(self)


def _total_memory(device: Device) -> int:
    if device.memory_cap is not None:
        return device.memory_cap
    if device.family == "cpu":
        import psutil

        return int(psutil.virtual_memory().total)
    try:
        return int(device.runtime_device().total_global_memory)
    except Exception:  # the runtime does not report it
        return 0


def measure_gflops(device: Device, n: int = MATMUL_N) -> float:
    """GFLOP/s of an n x n x n float32 matmul built for `device` and run on it."""
    from tvm import te

    from ..optimize.kernel import kernel_for, time_kernel

    a = te.placeholder((n, n), "float32", name="A")
    b = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    from ..relax_ir import OP_KINDS_ATTR

    # tagged as a matmul layer: scheduled by the same rules as the model's matmul layers
    func = te.create_prim_func([a, b, c]).with_attr(OP_KINDS_ATTR, ["matmul"])
    ms = time_kernel(*kernel_for(func, device), device)
    return 2.0 * n**3 / (ms * 1e-3) / 1e9


def probe(devices: DeviceSet, weights: TaskWeights | None = None) -> list[DeviceStatus]:
    """Measure every device of the set and score it with `weights` (equal by default)."""
    from .profiles import measure_transfer

    devices.check_runtime()
    weights = weights or TaskWeights.equal()
    statuses = []
    for index, device in enumerate(devices):
        if len(devices) > 1:
            other = devices[1] if index == 0 else devices[0]
            fits = [measure_transfer(device, other), measure_transfer(other, device)]
            bandwidth = float(np.mean([f.bandwidth_gbs for f in fits]))
        else:
            bandwidth = measure_transfer(device, device).bandwidth_gbs
        statuses.append(DeviceStatus(device.name, measure_gflops(device), _total_memory(device),
                                     bandwidth, device.memory_cap is not None))
    score(statuses, weights)
    return statuses


def score(statuses: list[DeviceStatus], weights: TaskWeights) -> None:
    """Set each status's score: the weighted sum of its metrics over the best of the set."""
    best = {key: max(getattr(s, key) for s in statuses) or 1.0
            for key in ("gflops", "memory_bytes", "bandwidth_gbs")}
    for status in statuses:
        status.score = (weights.compute * status.gflops / best["gflops"]
                        + weights.memory * status.memory_bytes / best["memory_bytes"]
                        + weights.bandwidth * status.bandwidth_gbs / best["bandwidth_gbs"])


def probe_cached(devices: DeviceSet, weights: TaskWeights, path: str) -> list[DeviceStatus]:
    """:func:`probe`, measured once per device set and kept in `path` (a search that resumes
    must see the same statuses to propose the same candidates). The memory figures are not
    kept: they are read afresh, so that they follow the memory caps given now."""
    import json
    import os

    key = devices.fingerprint()
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        if data.get("devices") == key:
            statuses = [DeviceStatus(**s) for s in data["statuses"]]
            for status, device in zip(statuses, devices):
                # the key leaves the caps out: the memory figure follows the caps given now
                status.memory_bytes = _total_memory(device)
                status.memory_is_cap = device.memory_cap is not None
            score(statuses, weights)
            return statuses
    except (OSError, ValueError, KeyError, TypeError):
        pass
    statuses = probe(devices, weights)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"devices": key, "statuses": [s.to_json() for s in statuses]}, handle)
    os.replace(tmp, path)
    return statuses
