"""Placement: which device runs each layer. Plain JSON, written and read by hand or by tools.

The file format::

    {
      "format": "tvm_hetero.placement",
      "version": 1,
      "model": "resnet",                         # informative
      "devices": ["cpu", "cpu-generic"],         # informative
      "placement": {"conv2d_0": "cpu", "conv2d_1": "cpu-generic", ...}
    }

A bare ``{"layer": "device", ...}`` object is accepted too.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from .errors import PlacementError, error_message
from .schemas import PLACEMENT, validation_error

FORMAT = "tvm_hetero.placement"
VERSION = 1


@dataclass
class Placement:
    """A mapping from layer name to device name.

    Parameters
    ----------
    assignment : dict of str to str
        ``{layer name: device name}`` covering every layer of the model.
    model : str, optional
        The model's name, kept in the file for the reader.
    """

    assignment: dict[str, str]
    model: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, layer: str) -> str:
        return self.assignment[layer]

    def __len__(self) -> int:
        return len(self.assignment)

    def __eq__(self, other) -> bool:
        return isinstance(other, Placement) and self.assignment == other.assignment

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.assignment.items())))

    def key(self) -> str:
        """Canonical JSON of the assignment: equal placements, equal keys."""
        return json.dumps(self.assignment, sort_keys=True)

    @property
    def devices_used(self) -> list[str]:
        return sorted(set(self.assignment.values()))

    @classmethod
    def all_on(cls, layers: Iterable, device: str, model: str | None = None) -> "Placement":
        """Every layer on one device."""
        return cls({_name(layer): device for layer in layers}, model)

    def validate(self, layers: Iterable, devices) -> None:
        """Check this placement against a model's layers and a device set.

        Raises
        ------
        PlacementError
            Naming the missing layers, the unknown layers or the unknown devices.
        """
        names = [_name(layer) for layer in layers]
        missing = [n for n in names if n not in self.assignment]
        unknown = sorted(set(self.assignment) - set(names))
        if unknown:
            raise PlacementError(f"placement names unknown layer(s): {_short(unknown)}; "
                                 f"see `tvm-hetero inspect` for the layer names")
        if missing:
            raise PlacementError(f"placement is missing {len(missing)} layer(s): {_short(missing)}")
        device_names = list(devices.names) if hasattr(devices, "names") else list(devices)
        bad = sorted(set(self.assignment.values()) - set(device_names))
        if bad:
            raise PlacementError(f"placement names unknown device(s): {', '.join(bad)}; "
                                 f"the devices are {', '.join(device_names)}")

    def to_json(self, devices=None) -> dict[str, Any]:
        out: dict[str, Any] = {"format": FORMAT, "version": VERSION}
        if self.model:
            out["model"] = self.model
        if devices is not None:
            out["devices"] = list(devices.names) if hasattr(devices, "names") else list(devices)
        out.update(self.meta)
        out["placement"] = dict(self.assignment)
        return out

    def save(self, path: str | os.PathLike, devices=None) -> None:
        """Write the placement as JSON (atomically: a temporary file renamed into place)."""
        path = os.fspath(path)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(self.to_json(devices), handle, indent=2)
            handle.write("\n")
        os.replace(tmp, path)

    @classmethod
    def from_json(cls, data: Any, source: str = "placement") -> "Placement":
        """A placement from parsed JSON, validated against ``schemas.PLACEMENT``."""
        if isinstance(data, dict) and "placement" in data:
            if data.get("format", FORMAT) != FORMAT:
                raise PlacementError(f"{source}: format is {data.get('format')!r}, not {FORMAT}")
            if isinstance(data.get("version"), int) and data["version"] > VERSION:
                raise PlacementError(f"{source}: placement version {data['version']} is newer "
                                     f"than this tvm_hetero reads ({VERSION})")
        if isinstance(data, dict) and not data:
            raise PlacementError(f"{source}: the placement is empty")
        if not isinstance(data, dict):
            raise PlacementError(f"{source}: expected a JSON object")
        if isinstance(data.get("placement"), dict) and not data["placement"]:
            raise PlacementError(f"{source}: the placement is empty")
        problem = validation_error(data, PLACEMENT)
        if problem:
            raise PlacementError(f"{source}: not a placement: \"placement\" must map layer "
                                 f"names to device names ({problem})")
        if "placement" in data:
            model = data.get("model")
            return cls(dict(data["placement"]), model if isinstance(model, str) else None)
        return cls(dict(data))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Placement":
        """Read a placement JSON file."""
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            raise PlacementError(f"placement file not found: {path}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise PlacementError(f"placement file {path} is not valid JSON: "
                                 f"{error_message(err)}") from None
        except OSError as err:
            raise PlacementError(f"cannot read placement file {path}: {err.strerror}") from None
        return cls.from_json(data, path)

    @classmethod
    def parse(cls, text: str, layers: Iterable) -> "Placement":
        """``all:DEVICE`` or the path of a placement JSON file."""
        if text.startswith("all:"):
            device = text[4:]
            if not device:
                raise PlacementError("`all:` needs a device name, e.g. all:cpu")
            return cls.all_on(layers, device)
        return cls.load(text)


def _name(layer) -> str:
    return layer if isinstance(layer, str) else layer.name


def _short(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (and {len(names) - limit} more)" if len(names) > limit else "")
