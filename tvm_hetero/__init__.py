"""tvm_hetero: run one neural network across several devices with Apache TVM (Relax).

The public API::

    model = tvm_hetero.load_model("zoo:resnet")            # or an .onnx path, IRModule, ...
    layers = tvm_hetero.extract_layers(model.mod)           # operator-level layers
    devices = tvm_hetero.DeviceSet.parse(["cpu", "cpu-generic"])
    placement = tvm_hetero.Placement({layer.name: "cpu" for layer in layers})
    compiled = tvm_hetero.build(model, placement, devices)  # ONE executable
    outputs = compiled.run(model.random_inputs())
    compiled.export_library("model.so")

``AnnotateDevice`` is the Relax pass underneath, for use in one's own pipeline (after
``tvm_hetero.prepare``).
"""

from .annotate import AnnotateDevice
from .build import CompiledModel, LatencySummary, build, load, time_function
from .devices import Device, DeviceSet, parse_device, parse_size
from .errors import (BuildError, DeviceError, HeteroError, InputError, ModelError,
                     PlacementError)
from .frontend import InputSpec, Model, load_model
from .layers import Layer, extract_layers, prepare
from .placement import Placement
from .zoo import ZOO, zoo_model

__version__ = "0.1.0"

__all__ = [
    "AnnotateDevice", "BuildError", "CompiledModel", "Device", "DeviceError", "DeviceSet",
    "HeteroError", "InputError", "InputSpec", "LatencySummary", "Layer", "Model", "ModelError",
    "Placement", "PlacementError", "ZOO", "build", "extract_layers", "load", "load_model",
    "parse_device", "parse_size", "prepare", "time_function", "zoo_model",
]
