"""Memory needed on each device by a placement, against the devices' caps.

The estimate for a device is the parameter bytes of its layers (a constant several of them
read counted once) plus its peak activation: the largest (inputs + outputs) of one of its
layers. Tensors alive across several layers are not summed: this is a lower bound of the
working set, like accelerate's device map, which counts weights and one layer's activations.
The VM also keeps the model's constant pool on the first device of the executable (see
docs/design.md); caps do not count that copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..devices import DeviceSet
from ..layers.extract import distinct_param_bytes
from ..placement import Placement


@dataclass(frozen=True)
class MemoryUse:
    """Estimated bytes on one device."""

    param_bytes: int
    peak_activation_bytes: int

    @property
    def total(self) -> int:
        return self.param_bytes + self.peak_activation_bytes


def memory_use(layers, placement: Placement) -> dict[str, MemoryUse]:
    """Estimated bytes per device used by `placement` (activations at the maximum of the
    model's shape ranges)."""
    on: dict[str, list] = {}
    peak: dict[str, int] = {}
    for layer in layers:
        device = placement[layer.name]
        on.setdefault(device, []).append(layer)
        peak[device] = max(peak.get(device, 0), layer.max_activation_bytes)
    return {device: MemoryUse(distinct_param_bytes(held), peak[device])
            for device, held in on.items()}


def over_cap(layers, placement: Placement, devices: DeviceSet) -> list[tuple[str, int, int]]:
    """``(device, needed bytes, cap)`` for every device whose cap the placement exceeds."""
    out = []
    for device, use in memory_use(layers, placement).items():
        cap = devices[device].memory_cap
        if cap is not None and use.total > cap:
            out.append((device, use.total, cap))
    return out


def describe_over_cap(exceeded: list[tuple[str, int, int]]) -> str:
    """``over_cap``'s result as one line."""
    return "; ".join(f"{device} needs {format_bytes(needed)} > cap {format_bytes(cap)}"
                     for device, needed, cap in exceeded)


def fits(layers, placement: Placement, devices: DeviceSet) -> bool:
    return not over_cap(layers, placement, devices)


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
