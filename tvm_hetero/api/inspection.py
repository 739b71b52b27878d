"""The commands that look without building: ``inspect`` (a model's layers), ``devices`` (each
device probed), ``optimizations`` (the optimization table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..devices import DeviceSet
from ..frontend.load import Model
from ..layers.table import layers_table
from ..layers.extract import Layer
from .common import as_model, device_set, layers_for


# -- inspect -----------------------------------------------------------------------------------

@dataclass
class ModelLayers:
    """A model and its operator-level layers (what ``tvm-hetero inspect`` shows)."""

    model: Model
    layers: list[Layer]

    def table(self) -> str:
        """The layers as a text table."""
        return layers_table(self.layers)

    def to_json(self) -> dict[str, Any]:
        """The model's name and inputs, and every layer's fields."""
        return {
            "model": self.model.name,
            "inputs": [spec.to_json() for spec in self.model.inputs],
            "layers": [{"name": layer.name, "kind": layer.kind, "ops": layer.op_kinds,
                        "flops": layer.flops, "param_bytes": layer.param_bytes,
                        "activation_bytes_in": layer.activation_bytes_in,
                        "activation_bytes_out": layer.activation_bytes_out,
                        "outputs": [list(t.shape) for t in layer.outputs],
                        "predecessors": layer.predecessors, "model_inputs": layer.model_inputs}
                       for layer in self.layers],
        }


def inspect_model(model: Any, devices: DeviceSet | Sequence[str] | None = None, *,
                  input_shapes: dict[str, tuple] | None = None,
                  shape_ranges: dict | None = None) -> ModelLayers:
    """The operator-level layers of a model, as a build for `devices` has them.

    Parameters
    ----------
    model : Model, str or anything :func:`~tvm_hetero.load_model` accepts
    devices : DeviceSet or list of str, optional
        The devices whose preparation (vector lanes, blocked layout) the layers follow
        (default: ``["cpu"]``, the host CPU).
    input_shapes : dict of str to tuple, optional
        Shapes for dynamic inputs (a dimension a size, or a name `shape_ranges` gives).
    shape_ranges : dict, optional
        ``{dimension: (min, max[, opt])}``: dimensions kept dynamic (see
        :func:`~tvm_hetero.load_model`).

    Returns
    -------
    ModelLayers
    """
    devices = device_set(devices or ["cpu"])
    loaded = as_model(model, input_shapes, shape_ranges)
    return ModelLayers(loaded, layers_for(loaded, devices))


# -- devices -----------------------------------------------------------------------------------

def device_status(devices: DeviceSet | Sequence[str], *, model: Any = None,
                  memory: dict[str, str | int] | None = None,
                  input_shapes: dict[str, tuple] | None = None,
                  shape_ranges: dict | None = None):
    """Probe each device: compute rate, memory, copy bandwidth, and a score weighted for a
    model (equal weights without one).

    Parameters
    ----------
    devices : DeviceSet or list of str
    model : optional
        The model to weight the score for; its layers are those of a build for `devices`.
    memory : dict of str to str or int, optional
        Memory caps by device name.
    input_shapes, shape_ranges : dict, optional
        As for :func:`~tvm_hetero.load_model`.

    Returns
    -------
    tuple of (DeviceSet, TaskWeights, list of DeviceStatus)
        The devices, the weights, one status per device.
    """
    from ..measure.status import TaskWeights, probe

    devices = device_set(devices, memory)
    weights = TaskWeights.equal()
    if model is not None:
        loaded = as_model(model, input_shapes, shape_ranges)
        weights = TaskWeights.for_layers(layers_for(loaded, devices))
    return devices, weights, probe(devices, weights)


# -- optimizations -----------------------------------------------------------------------------

def optimization_table() -> list[tuple[str, str, list[str]]]:
    """The default optimization table: (device family, layer kind, rule names in the order
    tried)."""
    from ..optimize import default_table

    return default_table().rows()


def optimization_rules() -> dict[str, str]:
    """Every rule of the default table, by name: its description."""
    from ..optimize import default_table

    table = default_table()
    return {rule.name: rule.description for family, kind, _ in table.rows()
            for rule in table.rules_for(family, kind)}
