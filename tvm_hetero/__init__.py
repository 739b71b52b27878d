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
``tvm_hetero.prepare``). Importing the package has no side effects: TVM's CPU thread count is
set where kernels first run (see :func:`tvm_hetero.devices.use_every_cpu_thread`).
"""

from .build import (AnnotateDevice, CompiledModel, KernelProfile, LatencySummary, ProfileRow,
                    build, load, memory_use, over_cap, time_function)
from .devices import Device, DeviceSet, parse_device, parse_size
from .errors import (BuildError, DeviceError, HeteroError, InputError, ModelError,
                     PlacementError, VerificationError)
from .frontend import ZOO, InputSpec, Model, load_model, zoo_model
from .frontend.shape_ranges import ShapeRange
from .layers import Layer, extract_layers
from .measure import (ErrorKind, LocalBuilder, LocalRunner, MeasureResult, MeasureTask,
                      Measurer)
from .measure.profiles import Profile, profile_model
from .measure.status import DeviceStatus, TaskWeights, probe
from .optimize.metaschedule import KernelTuningDatabase, TuningSummary, tune_kernels
from .placement import Placement
from .prepare import PrepareConfig, prepare
from .search import STRATEGIES, PlacementRecords, TuneResult, candidates, tune, write_report

__version__ = "0.1.0"

__all__ = [
    "AnnotateDevice", "BuildError", "CompiledModel", "Device", "DeviceError",
    "DeviceSet", "DeviceStatus", "ErrorKind", "HeteroError", "InputError", "InputSpec",
    "KernelProfile", "KernelTuningDatabase", "LatencySummary", "Layer", "LocalBuilder",
    "LocalRunner", "MeasureResult", "MeasureTask", "Measurer", "Model", "ModelError",
    "Placement", "PlacementError", "PlacementRecords", "PrepareConfig", "Profile", "ProfileRow",
    "ShapeRange",
    "TaskWeights",
    "TuningSummary", "ZOO",
    "build", "candidates",
    "extract_layers", "load", "load_model", "memory_use", "over_cap", "parse_device", "parse_size",
    "prepare", "probe", "profile_model", "STRATEGIES", "TuneResult", "time_function", "tune",
    "tune_kernels", "VerificationError", "write_report", "zoo_model",
]
