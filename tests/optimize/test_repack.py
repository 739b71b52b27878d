"""Weights repacked for the packed rules (``tvm_hetero/optimize/repack.py``): a weight given at run
time packed by a kernel, and weights lifted to a second device packed once when the model loads."""

import numpy as np

import tvm_hetero as th
from tvm_hetero import optimize
from tvm_hetero.testing import max_relative_error, onnx_reference

from tests.helpers.models import zoo_direct


def _conv_with_weight_input():
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [32, 8, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 10, 10])
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "conv_weight_input", [x, w], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_weight_given_at_run_time_is_packed_by_a_kernel(cpu_devices):
    import onnxruntime as ort

    onnx_model = _conv_with_weight_input()
    model = th.load_model(onnx_model, name="conv_weight_input")
    compiled = th.build(model, "all:cpu", cpu_devices)
    assert list(compiled.stats.rules.values()) == ["packed-weights"]
    assert "call  pack_weight" in compiled.executable.as_text()  # each call, before the conv
    inputs = model.random_inputs(seed=3)
    expected = ort.InferenceSession(onnx_model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, inputs)
    assert max_relative_error(compiled.run(inputs), expected) < 1e-5


def test_weights_lifted_to_a_second_device_are_packed_once_when_the_model_loads(cpu_devices):
    model = zoo_direct("resnet")
    layers = th.extract_layers(model)
    # the convolutions on the second device: their weights are lifted into hetero_weights()
    placement = th.Placement({layer.name: "cpu-generic" if "conv2d" in layer.op_kinds else "cpu"
                              for layer in layers})
    compiled = th.build(model, placement, cpu_devices)
    assert "packed-weights" in compiled.stats.rules.values()
    assert "call  pack_weight" not in compiled.executable.as_text()  # not at each call
    _, weights = compiled._session()
    assert any(len(w.shape) == 5 for w in weights)  # [F/lanes, C, KH, KW, lanes]
    inputs = model.random_inputs(seed=4)
    reference = onnx_reference(th.zoo_model("resnet"), inputs, model)
    assert max_relative_error(compiled.run(inputs), reference) < 1e-4


def test_pack_weight_along_axis_1_makes_panels_of_columns():
    w = np.arange(6 * 8, dtype="float32").reshape(6, 8)  # [K, N]
    packed = optimize.pack_weight(w, 4, axis=1)
    assert packed.shape == (2, 6, 4)
    np.testing.assert_array_equal(packed[1, 5], w[5, 4:8])
    padded = optimize.pack_weight(w[:, :7], 4, axis=1, blocks=3)  # ragged: zeros
    assert padded.shape == (3, 6, 4) and not padded[1, :, 3:].any() and not padded[2].any()
