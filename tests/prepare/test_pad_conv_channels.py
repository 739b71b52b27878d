"""PadConvChannels (``tvm_hetero/prepare/pad_conv_channels.py``): output channels padded to whole
vectors of the configuration's lanes."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_hetero as th
from tvm_hetero.prepare.pad_conv_channels import PadConvChannels

from tests.helpers.relax_modules import conv2d, random_weights, relax_module


@pytest.mark.parametrize("lanes, padded", [(16, 1008), (8, None)])
def test_pad_conv_channels_pads_to_whole_vectors_of_its_lanes(lanes, padded):
    weight = random_weights(1000, 4, 1, 1)
    params = [("x", (1, 4, 4, 4))]
    before = relax_module(params, lambda bb, x: conv2d(x, weight))
    after = PadConvChannels(lanes, max_waste=0.05)(before)
    if padded is None:  # 1000 is a multiple of 8
        tvm.ir.assert_structural_equal(after, before)
        return
    zeros = np.zeros((padded - 1000, 4, 1, 1), "float32")

    def expected(bb, x):
        conv = bb.emit(conv2d(x, np.concatenate([weight, zeros])))
        return relax.op.strided_slice(conv, axes=[1], begin=[0], end=[1000])

    tvm.ir.assert_structural_equal(after, relax_module(params, expected))
    # 1000 -> 1024 would be 2.4 % more work: over a 1 % limit, nothing changes
    tvm.ir.assert_structural_equal(PadConvChannels(32, max_waste=0.01)(before), before)


def _conv_to(channels: int):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 9, 9])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 9, 9])
    weight = numpy_helper.from_array(
        rng.standard_normal((channels, 64, 1, 1)).astype("float32"), "w")
    bias = numpy_helper.from_array(rng.standard_normal(channels).astype("float32"), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv_to_channels", [x], [y], [weight, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_conv_output_channels_are_padded_to_whole_vectors_where_that_is_cheap(cpu_devices):
    import onnxruntime as ort

    from tvm_hetero.testing import max_relative_error

    onnx_model = _conv_to(1000)
    model = th.load_model(onnx_model, name="conv_to_1000")
    (layer,) = th.extract_layers(model)
    # 1008 filters (8 of zeros), the slice back to 1000 fused into the same layer
    assert layer.op_kinds == ["conv2d", "strided_slice", "add", "relu"]
    assert layer.outputs[0].shape == (1, 1000, 9, 9)
    compiled = th.build(model, "all:cpu", cpu_devices)
    assert list(compiled.stats.rules.values()) == ["packed-weights"]  # whole channel vectors
    inputs = model.random_inputs(seed=1)
    expected = ort.InferenceSession(onnx_model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, inputs)
    assert max_relative_error(compiled.run(inputs), expected) < 1e-5
    # 24 channels would need a third more filters: left as they are
    (layer,) = th.extract_layers(th.load_model(_conv_to(24), name="conv_to_24"))
    assert layer.op_kinds == ["conv2d", "add", "relu"]
