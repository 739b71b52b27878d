"""Models and references for tests, benchmarks and tutorials: the onnx package's real model
graphs and backend-test cases, onnxruntime references, random placements, the runner's error
measure."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..placement import Placement

LIGHT_MODELS = ("bvlc_alexnet", "squeezenet", "resnet50", "vgg19", "zfnet512", "inception_v1",
                "inception_v2", "densenet121", "shufflenet")


def light_model_path(name: str) -> str:
    """Path of a real model graph shipped by the onnx package (``light_NAME.onnx``)."""
    import onnx

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    return path


def light_model(name: str, seed: int = 0):
    """A light model with random weights in place of its ConstantOfShape fills.

    The onnx package ships these graphs with every weight a constant fill, which makes outputs
    nearly input-independent; seeded random weights (He-scaled for conv and dense weights,
    positive variances for batch norm) make a wrong placement show in the outputs.
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.load(light_model_path(name))
    rng = np.random.default_rng(seed)
    inits = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    bn_var_inputs = {node.input[4] for node in model.graph.node
                     if node.op_type == "BatchNormalization" and len(node.input) > 4}
    nodes = []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in inits:
            nodes.append(node)
            continue
        shape = tuple(int(d) for d in inits[node.input[0]])
        out = node.output[0]
        if out in bn_var_inputs:
            data = rng.uniform(0.5, 1.5, shape)
        elif len(shape) >= 2:
            data = rng.standard_normal(shape) * (2.0 / max(int(np.prod(shape[1:])), 1)) ** 0.5
        else:
            data = rng.standard_normal(shape) * 0.1
        model.graph.initializer.append(numpy_helper.from_array(data.astype(np.float32), out))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.ir_version = max(model.ir_version, 4)  # initializers need not be listed as inputs
    return model


def onnx_reference(onnx_model, inputs: dict[str, np.ndarray], model=None) -> list[np.ndarray]:
    """Outputs of onnxruntime (CPU) for the same inputs (keys: Relax or ONNX input names)."""
    import onnxruntime as ort

    if model is not None:
        inputs = {spec.source_name or spec.name: inputs[spec.name] for spec in model.inputs}
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(onnx_model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def onnx_case_dir(name: str) -> str:
    """Folder of one of the onnx package's backend-test cases, e.g. ``simple/test_sign_model``."""
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", name)


def onnx_case(case_dir: str):
    """(model, inputs by graph input name, expected outputs) of an onnx backend-test case
    folder (``model.onnx`` + ``test_data_set_0``); sequences come as lists."""
    import glob

    import onnx
    from onnx import numpy_helper

    model = onnx.load(os.path.join(case_dir, "model.onnx"))
    data_dir = sorted(glob.glob(os.path.join(case_dir, "test_data_set_*")))[0]

    def read(path, type_proto):
        with open(path, "rb") as file:
            raw = file.read()
        if type_proto.HasField("sequence_type"):
            proto = onnx.SequenceProto()
            proto.ParseFromString(raw)
            return numpy_helper.to_list(proto)
        if type_proto.HasField("optional_type"):
            proto = onnx.OptionalProto()
            proto.ParseFromString(raw)
            return numpy_helper.to_optional(proto)
        proto = onnx.TensorProto()
        proto.ParseFromString(raw)
        return numpy_helper.to_array(proto)

    init_names = {init.name for init in model.graph.initializer}
    graph_inputs = [v for v in model.graph.input if v.name not in init_names]
    inputs = {}
    for index, value in enumerate(graph_inputs):
        path = os.path.join(data_dir, f"input_{index}.pb")
        if os.path.exists(path):
            inputs[value.name] = read(path, value.type)
    outputs = [read(os.path.join(data_dir, f"output_{i}.pb"), value.type)
               for i, value in enumerate(model.graph.output)]
    return model, inputs, outputs


def random_placement(layers, device_names: list[str], rng: np.random.Generator) -> Placement:
    """Each layer on a uniformly random device."""
    return Placement({layer.name: str(rng.choice(device_names)) for layer in layers})


def max_relative_error(got: list[np.ndarray], want: list[Any]) -> float:
    """max |got - want| / max |want| over all outputs; infinite for NaN, a shape or a dtype
    mismatch (the runner's verification measure)."""
    from ..measure.task import relative_errors

    errors = relative_errors([np.asarray(a) for a in got], [np.asarray(b) for b in want])
    return max(errors, default=0.0)
