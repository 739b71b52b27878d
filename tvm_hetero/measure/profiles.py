"""Cost profiles: every layer's latency on every device, and the cost of copying bytes between
each pair of devices. They drive the min-cut and DP generators and the search's features.

Layer latencies come from the layer's kernel compiled alone for each device (the same kernel the
placed executable calls) and timed with random inputs. Transfer costs are measured with
``Tensor.copyto`` at several sizes and fitted as ``fixed_ms + bytes * ms_per_byte``.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..devices import Device, DeviceSet
from ..optimize.kernel import kernel_for, time_kernel
from ..placement import Placement

logger = logging.getLogger(__name__)

TRANSFER_SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20)
FORMAT = "tvm_hetero.profile"
VERSION = 1


@dataclass
class TransferFit:
    """Copy cost between two devices: ``fixed_ms + nbytes * ms_per_byte``."""

    fixed_ms: float
    ms_per_byte: float

    def cost_ms(self, nbytes: int) -> float:
        return self.fixed_ms + nbytes * self.ms_per_byte

    @property
    def bandwidth_gbs(self) -> float:
        return 1e-6 / self.ms_per_byte if self.ms_per_byte > 0 else float("inf")


@dataclass
class Profile:
    """Per-layer latency on each device (ms) and fitted transfer costs per device pair."""

    model: str
    devices: str
    layer_ms: dict[str, dict[str, float]]
    transfer: dict[tuple[str, str], TransferFit] = field(default_factory=dict)

    def transfer_ms(self, src: str, dst: str, nbytes: int) -> float:
        if src == dst:
            return 0.0
        return self.transfer[(src, dst)].cost_ms(nbytes)

    def estimate_ms(self, layers, placement: Placement) -> float:
        """Predicted latency: the sum of layer costs plus one copy per (tensor, consuming
        device) that crosses devices: the copies AnnotateDevice inserts."""
        by_name = {layer.name: layer for layer in layers}
        total = sum(self.layer_ms[layer.name][placement[layer.name]] for layer in layers)
        copies = set()
        for layer in layers:
            dst = placement[layer.name]
            for pred in layer.predecessors:
                src = placement[pred]
                if src != dst and (pred, dst) not in copies:
                    copies.add((pred, dst))
                    total += self.transfer_ms(src, dst, by_name[pred].activation_bytes_out)
        return total

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "model": self.model,
                "devices": self.devices, "layer_ms": self.layer_ms,
                "transfer": [{"src": s, "dst": d, "fixed_ms": f.fixed_ms,
                              "ms_per_byte": f.ms_per_byte}
                             for (s, d), f in self.transfer.items()]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Profile":
        return cls(data["model"], data["devices"],
                   {k: dict(v) for k, v in data["layer_ms"].items()},
                   {(t["src"], t["dst"]): TransferFit(t["fixed_ms"], t["ms_per_byte"])
                    for t in data["transfer"]})

    def save(self, path: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(self.to_json(), handle, indent=1)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str, model: str, devices: str) -> "Profile | None":
        """The stored profile for this model and device set, or None."""
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            if data.get("format") != FORMAT or (data["model"], data["devices"]) != (model, devices):
                return None
            return cls.from_json(data)
        except (OSError, ValueError, KeyError, TypeError):
            return None


def measure_transfer(src: Device, dst: Device, sizes=TRANSFER_SIZES,
                     repeat: int = 5) -> TransferFit:
    """Fit the copy cost from `src` to `dst` over several sizes."""
    import time

    import tvm

    src_dev, dst_dev = src.runtime_device(), dst.runtime_device()
    xs, ys = [], []
    for nbytes in sizes:
        tensor = tvm.runtime.tensor(np.zeros(nbytes // 4, np.float32), src_dev)
        tensor.copyto(dst_dev)  # warm-up (allocation)
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            tensor.copyto(dst_dev)
            dst_dev.sync()
            samples.append((time.perf_counter() - start) * 1e3)
        xs.append(nbytes)
        ys.append(float(np.median(samples)))
    slope, intercept = np.polyfit(np.array(xs, float), np.array(ys, float), 1)
    return TransferFit(max(float(intercept), 0.0), max(float(slope), 1e-12))


def profile_model(model, layers, devices: DeviceSet, path: str | None = None,
                  progress=None) -> Profile:
    """Measure (or load from `path`) the cost profile of a model's layers on `devices`.

    Parameters
    ----------
    model : Model
        The loaded model (its layered module provides the kernels).
    layers : list of Layer
    devices : DeviceSet
        Every device must be able to run here.
    path : str, optional
        A JSON file: reused when it holds this model's and device set's profile, else written.
    progress : callable, optional
        Called with a message per device (the CLI shows it).
    """
    from ..frontend.shape_ranges import module_ranges, point
    from ..layers.extract import extract_layers
    from ..layers.layered import cpu_only_layers, host_cpu, placed_module
    from ..placement import Placement
    from ..relax_ir import bounded_kernel, upper_bounds

    model_fp, devices_fp = model.fingerprint(), devices.fingerprint()
    if path:
        found = Profile.load(path, model_fp, devices_fp)
        if found is not None and set(found.layer_ms) == {l.name for l in layers}:
            logger.info("reusing the profile in %s", path)
            return found
    devices.check_runtime()
    layer_ms: dict[str, dict[str, float]] = {layer.name: {} for layer in layers}
    for device in devices:
        if progress:
            progress(f"profiling {len(layers)} layers on {device.name}")
        # each layer in the form of the device (its kernel differs, its name does not)
        mod = placed_module(model, devices, Placement.all_on(layers, device.name))
        bounds = upper_bounds(mod)  # shapes that depend on input values: timed at their bounds
        # a shape range's dimensions: the dynamic kernel, timed at the range's tuning point
        ranges = module_ranges(mod)
        tuning_point = {**bounds, **point(ranges, "opt")} if ranges else None
        # index checks run on a CPU wherever they are placed (build): timed there
        cpu_only = cpu_only_layers(mod) if device.family != "cpu" else set()
        cache: dict[str, float] = {}
        for layer in extract_layers(mod):
            if layer.name not in layer_ms:
                continue
            if layer.func_name not in cache:
                func = mod[mod.get_global_var(layer.func_name)]
                func = func if ranges else bounded_kernel(func, bounds)
                runs_on = host_cpu(devices) if layer.name in cpu_only else device
                cache[layer.func_name] = time_kernel(
                    *kernel_for(func, runs_on, dims=tuning_point), runs_on)
            layer_ms[layer.name][device.name] = cache[layer.func_name]
    transfer = {(a.name, b.name): measure_transfer(a, b)
                for a in devices for b in devices if a.name != b.name}
    profile = Profile(model_fp, devices_fp, layer_ms, transfer)
    if path:
        profile.save(path)
    return profile
