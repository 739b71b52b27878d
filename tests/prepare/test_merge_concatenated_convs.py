"""MergeConcatenatedConvs (``tvm_hetero/prepare/merge_concatenated_convs.py``) on a small module
against the module it should give (``tvm.ir.assert_structural_equal``)."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_hetero as th
from tvm_hetero.prepare.merge_concatenated_convs import MergeConcatenatedConvs

from tests.helpers.models import zoo
from tests.helpers.relax_modules import conv2d, random_weights, relax_module


def test_merge_concatenated_convs_makes_one_convolution_with_the_chain_after_it():
    w1, w2 = random_weights(2, 4, 1, 1, seed=1), random_weights(3, 4, 1, 1, seed=2)
    b1, b2 = random_weights(1, 2, 1, 1, seed=3), random_weights(1, 3, 1, 1, seed=4)

    def before(bb, x):
        heads = []
        for w, b in ((w1, b1), (w2, b2)):
            conv = bb.emit(conv2d(x, w))
            biased = bb.emit(relax.op.add(conv, relax.const(b)))
            heads.append(bb.emit(relax.op.nn.relu(biased)))
        return relax.op.concat(heads, axis=1)

    def expected(bb, x):
        conv = bb.emit(conv2d(x, np.concatenate([w1, w2])))
        biased = bb.emit(relax.op.add(conv, relax.const(np.concatenate([b1, b2], axis=1))))
        return relax.op.nn.relu(biased)

    params = [("x", (1, 4, 8, 8))]
    after = relax.transform.DeadCodeElimination()(MergeConcatenatedConvs()(
        relax_module(params, before)))
    tvm.ir.assert_structural_equal(after, relax_module(params, expected))


def _branches(variant: str):
    """x -> two 1x1 convolutions (bias, relu) joined by a Concat; `variant` breaks the merge."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    second_kernel = 3 if variant == "kernels" else 1
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype("float32"), name)
             for name, shape in [("wa", (16, 8, 1, 1)), ("ba", (16,)),
                                 ("wb", (16, 8, second_kernel, second_kernel)), ("bb", (16,))]]
    plain = variant == "plain"  # neither bias nor activation: the convolutions alone
    nodes = [helper.make_node("Conv", ["x", "wa"] + ([] if plain else ["ba"]), ["ca"]),
             helper.make_node("Conv", ["x", "wb"] + ([] if plain else ["bb"]), ["cb"],
                              pads=[second_kernel // 2] * 4)]
    if not plain:
        nodes.append(helper.make_node("Relu", ["ca"], ["ra"]))
    if variant not in ("plain", "chains"):
        nodes.append(helper.make_node("Relu", ["cb"], ["rb"]))
    joined = {"plain": ["ca", "cb"], "chains": ["ra", "cb"]}.get(variant, ["ra", "rb"])
    if variant == "shared":  # the first branch's output is read twice
        joined.append("ra")
    nodes.append(helper.make_node("Concat", joined, ["y"], axis=1))
    graph = helper.make_graph(
        nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_convolutions_joined_by_a_concat_merge_into_one(cpu_devices):
    import onnxruntime as ort

    from tvm_hetero.testing import max_relative_error

    onnx_model = _branches("merge")
    model = th.load_model(onnx_model, name="branches")
    (layer,) = th.extract_layers(model)  # was three: two convolutions and the Concat
    assert layer.op_kinds == ["conv2d", "add", "relu"]
    assert layer.outputs[0].shape == (1, 32, 8, 8)
    assert layer.param_bytes == 4 * (32 * 8 + 32)  # both filter sets, both biases
    inputs = model.random_inputs(seed=3)
    expected = ort.InferenceSession(onnx_model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, inputs)
    for optimize in (True, False):
        compiled = th.build(model, "all:cpu", cpu_devices, optimize=optimize)
        assert max_relative_error(compiled.run(inputs), expected) < 1e-5
    onnx_model = _branches("plain")
    model = th.load_model(onnx_model, name="branches_plain")
    (layer,) = th.extract_layers(model)
    assert layer.op_kinds == ["conv2d"] and layer.outputs[0].shape == (1, 32, 8, 8)
    expected = ort.InferenceSession(onnx_model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, inputs)
    compiled = th.build(model, "all:cpu", cpu_devices)
    assert max_relative_error(compiled.run(inputs), expected) < 1e-5
    # the zoo ResNet's two heads: the Concat is gone, one 32-channel 1x1 convolution
    layers = {l.name: l for l in th.extract_layers(zoo("resnet"))}
    assert not any("concatenate" in l.op_kinds for l in layers.values())
    assert layers["conv2d_8"].op_kinds == ["conv2d", "add", "relu"]
    assert layers["conv2d_8"].outputs[0].shape == (1, 2, 16, 16, 16)  # 32 channels, blocked


@pytest.mark.parametrize("variant", ["kernels", "chains", "shared"])
def test_convolutions_that_differ_or_are_read_elsewhere_stay_apart(variant):
    layers = th.extract_layers(th.load_model(_branches(variant), name=f"branches_{variant}"))
    assert sum(l.kind == "conv2d" for l in layers) == 2
    assert any("concatenate" in l.op_kinds for l in layers)
