"""What every command of the interface does with its arguments: the devices (with memory caps),
the model, an output path, the layers of a build."""

from __future__ import annotations

import os
from typing import Any, Sequence

from ..devices import DeviceSet
from ..errors import HeteroError
from ..frontend.load import Model, load_model
from ..layers.extract import Layer, extract_layers
from ..prepare import PrepareConfig


def device_set(devices: DeviceSet | Sequence[str],
               memory: dict[str, str | int] | None = None) -> DeviceSet:
    """A device set from device strings (or a set), with `memory` caps (``{name: "64MiB"}``)
    replacing its own."""
    if isinstance(devices, DeviceSet):
        return devices.with_memory_caps(memory) if memory else devices
    return DeviceSet.parse(list(devices), memory=memory)


def as_model(model: Any, input_shapes: dict[str, tuple] | None,
             shape_ranges: dict | None = None) -> Model:
    """`model` loaded (with `input_shapes` and `shape_ranges` for dynamic inputs), unless it
    is a Model already."""
    if isinstance(model, Model):
        return model
    return load_model(model, input_shapes=input_shapes or {}, shape_ranges=shape_ranges)


def writable(path: str) -> str:
    """`path`, when the directory it goes into exists."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise HeteroError(f"output directory does not exist: {directory}")
    return path


def layers_for(model: Model, devices: DeviceSet) -> list[Layer]:
    """The layers a build for `devices` has (their preparation, not the host's)."""
    return extract_layers(model, PrepareConfig.for_devices(devices))
