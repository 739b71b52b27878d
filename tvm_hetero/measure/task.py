"""A measurement task: one model on one device set, with the fixed seeded inputs and the
reference outputs that every candidate is verified against: independent of the code under test
(onnxruntime, or the model built without the optimization rules; see
:mod:`tvm_hetero.measure.reference`)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..devices import DeviceSet
from ..frontend.load import Model, load_model
from ..layers.extract import Layer, extract_layers
from ..prepare import PrepareConfig

logger = logging.getLogger(__name__)

@dataclass
class MeasureTask:
    """What a builder and a runner need, written to `workdir` so worker processes can load it.

    Attributes
    ----------
    model_file : str
        The model as the workers load it (``model.onnx`` or ``model.json``, a Relax module).
    inputs_file, reference_file : str
        ``.npz`` of the seeded inputs and of the reference outputs.
    reference_source : str
        Where the reference outputs come from, as messages name it: ``onnxruntime`` for an
        ONNX model (when onnxruntime is installed and accepts it), else ``TVM's default loops
        on DEVICE`` (the model built without the optimization rules on the first device), or
        ``the reference given``.
    reference_detail : str
        onnxruntime's version, or why onnxruntime is not the reference.
    """

    model: Model
    devices: DeviceSet
    workdir: str
    layers: list[Layer]
    model_file: str
    input_shapes: dict[str, tuple[int, ...]]
    inputs_file: str
    reference_file: str
    reference: list[np.ndarray] = field(default_factory=list)
    reference_source: str = "the reference"
    reference_detail: str = ""

    @classmethod
    def create(cls, model: Any, devices: DeviceSet, workdir: str, seed: int = 0,
               reference: list[np.ndarray] | None = None) -> "MeasureTask":
        """Write the model, inputs and reference outputs under `workdir`; the reference is
        computed (:func:`tvm_hetero.measure.reference.reference_outputs`) unless given."""
        from ..frontend.shape_ranges import ranged_shapes
        from .reference import reference_outputs

        model = load_model(model)
        os.makedirs(workdir, exist_ok=True)
        if model.onnx_model is not None:
            import onnx

            model_file = os.path.join(workdir, "model.onnx")
            onnx.save(model.onnx_model, model_file)
        else:
            import tvm

            model_file = os.path.join(workdir, "model.json")
            with open(model_file, "w", encoding="utf-8") as handle:
                handle.write(tvm.ir.save_json(model.mod))
        input_shapes = {name: tuple(dims) for name, dims in ranged_shapes(model).items()}
        inputs = model.random_inputs(seed)
        inputs_file = os.path.join(workdir, "inputs.npz")
        np.savez(inputs_file, **inputs)
        layers = extract_layers(model, PrepareConfig.for_devices(devices))
        if reference is None:
            computed = reference_outputs(model, devices, inputs, layers)
            logger.info("candidates are checked against %s", computed.describe())
            reference, source, detail = computed.outputs, computed.label, computed.detail
        else:
            source, detail = "the reference given", ""
        reference_file = os.path.join(workdir, "reference.npz")
        np.savez(reference_file, *reference)
        # a dynamic model is timed at the tuning point (above) and checked at the ends of its
        # ranges too: each candidate runs these as well (worker.extra_checks)
        for where in ("min", "max"):
            dims = model.dims_at(where) if model.is_dynamic else None
            if dims is None or dims == model.dims_at("opt"):
                continue
            at_inputs = model.random_inputs(seed, dims)
            np.savez(os.path.join(workdir, f"inputs.at-{where}.npz"), **at_inputs)
            np.savez(os.path.join(workdir, f"reference.at-{where}.npz"),
                     *reference_outputs(model, devices, at_inputs, layers).outputs)
        return cls(model, devices, workdir, layers, model_file, input_shapes, inputs_file,
                   reference_file, list(reference), source, detail)

    def load_inputs(self) -> dict[str, np.ndarray]:
        with np.load(self.inputs_file, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
