import subprocess
import sys

import numpy as np
import pytest

import tvm_hetero as th
from tvm_hetero.layers.classify import LAYER_KINDS
from tvm_hetero.prepare import prepare
from tvm_hetero.relax_ir import is_layered

from tests.helpers.models import conv_chain, light, zoo, zoo_direct


def test_a_fused_group_is_one_layer():
    layers = th.extract_layers(zoo_direct("cnn"))
    assert [(l.name, l.op_kinds) for l in layers] == [
        ("conv2d_0", ["conv2d", "add", "relu"]),  # conv + bias + relu: one layer, not three
        ("max_pool2d_0", ["max_pool2d"]),
        ("conv2d_1", ["conv2d", "add", "relu"]),
        ("max_pool2d_1", ["max_pool2d"]),
        ("reshape_0", ["reshape"]),
        ("matmul_0", ["matmul", "add"]),
    ]
    assert [l.kind for l in layers] == ["conv2d", "pooling", "conv2d", "pooling", "elementwise",
                                        "matmul"]
    assert all(l.kind in LAYER_KINDS for l in layers)


def test_layer_configuration_numbers():
    # zoo:mlp is 8x256 -> Gemm(512)+Relu -> Gemm(256)+Relu -> Gemm(10), float32
    first, second, last = th.extract_layers(zoo("mlp").mod)
    # weights 256x512 and bias 512, 4 bytes each
    assert first.param_bytes == (256 * 512 + 512) * 4
    assert first.activation_bytes_in == 8 * 256 * 4
    assert first.activation_bytes_out == 8 * 512 * 4
    assert first.inputs[0].shape == (8, 256) and first.outputs[0].shape == (8, 512)
    # matmul: 2*M*K*N multiply-adds; plus one add (bias) and one max (relu) per output
    assert first.flops == 2 * 8 * 256 * 512 + 2 * 8 * 512
    assert last.flops == 2 * 8 * 256 * 10 + 8 * 10
    assert second.predecessors == [first.name] and first.model_inputs == ["input"]


def _form_kernels(model):
    """``[(layer served, output shape)]`` of the form kernels (layout transforms of the CPU
    forms) of a model's layered module for the host CPU, in program order."""
    from tvm_hetero.layers.classify import classify_bindings
    from tvm_hetero.layers.layered import layered_module

    return [(info.name, tuple(int(d) for d in binding.var.ty.shape))
            for binding, info in classify_bindings(layered_module(model))
            if info is not None and info.form_kernel]


def test_residual_and_concat_form_a_dag():
    layers = {l.name: l for l in th.extract_layers(zoo("resnet").mod)}
    # the first residual block: conv2d_2 adds the block input (conv2d_0's output, which the
    # stem writes in the blocked layout) to its own
    assert layers["conv2d_2"].op_kinds == ["conv2d", "add", "add", "relu"]
    assert set(layers["conv2d_2"].predecessors) == {"conv2d_1", "conv2d_0"}
    # the stem reads the image's 3 channels as one block: the transform into that block is a
    # form kernel of the stem (no layer of its own: tvm_hetero.prepare.device_forms)
    assert layers["conv2d_0"].predecessors == [] and layers["conv2d_0"].model_inputs == ["input"]
    assert layers["conv2d_0"].inputs[0].shape == (1, 1, 32, 32, 3)
    assert not any(name.startswith("te_layout_transform") for name in layers)
    # the two 1x1 branches joined by Concat are one convolution (see the test below)
    assert layers["conv2d_8"].predecessors == ["conv2d_7"]
    assert layers["mean_0"].predecessors == ["conv2d_8"]
    names = list(layers)
    for index, layer in enumerate(layers.values()):  # program order is a topological order
        assert all(names.index(p) < index for p in layer.predecessors)


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


def test_transformer_block_layers():
    layers = th.extract_layers(zoo("transformer").mod)
    kinds = {l.kind for l in layers}
    assert {"matmul", "normalization", "elementwise"} <= kinds
    assert sum(l.op_kinds[0] == "softmax" for l in layers) == 1
    assert sum(l.op_kinds[0] == "layer_norm" for l in layers) == 2


def test_prepare_does_not_modify_its_input_and_is_detected():
    model = th.load_model("zoo:cnn")
    before = model.mod.script()
    layered = prepare(model.mod)
    assert model.mod.script() == before
    assert is_layered(layered) and not is_layered(model.mod)
    assert [l.name for l in th.extract_layers(layered)] == \
        [l.name for l in th.extract_layers(model.mod)]


_NAMES_SCRIPT = """
import tvm_hetero as th
print(",".join(l.name for l in th.extract_layers(th.load_model("zoo:resnet").mod)))
"""


def test_layer_names_are_stable_across_processes():
    runs = [subprocess.run([sys.executable, "-c", _NAMES_SCRIPT], capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(2)]
    here = ",".join(l.name for l in th.extract_layers(zoo("resnet").mod))
    assert runs[0] == runs[1] == here


def test_resnet50_from_the_onnx_package_has_50_to_70_layers():
    layers = th.extract_layers(light("resnet50"))
    assert 50 <= len(layers) <= 70, len(layers)
    convs = [l for l in layers if l.kind == "conv2d"]
    assert len(convs) == 53  # every Conv of ResNet-50 with its batch norm (and residual add)
    # the residual add and relu are fused into the conv of the branch: 16 blocks
    assert sum(l.op_kinds[-2:] == ["add", "relu"] and l.op_kinds.count("add") == 2
               for l in convs) == 16
    assert sum(l.param_bytes for l in layers) > 90e6  # ~25.5M float32 parameters


def test_layers_table_and_json():
    layers = th.extract_layers(zoo("mlp").mod)
    from tvm_hetero.layers.table import layers_table

    table = layers_table(layers)
    assert "matmul_0" in table and "3 layers" in table
    data = layers[0].to_json()
    assert data["activation_bytes_out"] == 8 * 512 * 4 and data["outputs"][0]["shape"] == [8, 512]
    assert np.isfinite(data["flops"])


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


def test_wide_convolutions_run_in_the_blocked_layout_and_match_onnxruntime(cpu_devices):
    import onnxruntime as ort

    from tvm_hetero.testing import max_relative_error

    onnx_model = conv_chain(64, 56)  # 244 MFLOP of convolutions
    model = th.load_model(onnx_model, name="conv_chain_64")
    layers = th.extract_layers(model)
    # into the blocked layout once, out once (form kernels of the first and the last
    # convolution, no layers); the two convolutions pass it on
    assert [l.kind for l in layers] == ["conv2d", "conv2d"]
    assert _form_kernels(model) == [("conv2d_0", (1, 4, 56, 56, 16)),
                                    ("conv2d_1", (1, 128, 28, 28))]
    assert [l.outputs[0].shape for l in layers] == [(1, 4, 56, 56, 16), (1, 8, 28, 28, 16)]
    # the folded blocked weight, the residual blocked like the activations
    assert layers[1].param_bytes == 4 * (128 * 64 + 128 * 28 * 28)
    compiled = th.build(model, "all:cpu", cpu_devices)
    # the 3x3 one as Winograd (see the test below), the strided 1x1 one direct
    assert [compiled.stats.rules[l.func_name] for l in layers] == ["winograd",
                                                                  "blocked-nchwc"]
    inputs = model.random_inputs(seed=2)
    expected = ort.InferenceSession(onnx_model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, inputs)
    assert max_relative_error(compiled.run(inputs), expected) < 1e-5
    reference = th.build(model, "all:cpu", cpu_devices, optimize=False).run(inputs)
    assert max_relative_error(reference, expected) < 1e-5


def test_a_model_with_little_convolution_work_stays_nchw(caplog):
    with caplog.at_level("INFO", logger="tvm_hetero.prepare"):
        small = th.extract_layers(th.load_model(conv_chain(64, 12), name="conv_chain_12"))
    # 11 MFLOP, and a 12x12 output has too few 4x4 tiles for Winograd
    assert [l.kind for l in small] == ["conv2d", "conv2d"]
    assert all(len(l.outputs[0].shape) == 4 for l in small)
    assert any("convolutions stay NCHW: 11 MFLOP of them" in r.message for r in caplog.records)
    # nor, in a model with the work, do channels that are not whole vectors (273 MFLOP)
    ragged = th.extract_layers(th.load_model(conv_chain(24, 160), name="conv_chain_24"))
    assert all(len(l.outputs[0].shape) == 4 for l in ragged if l.kind == "conv2d")


def _conv_then_dropout():
    from tvm import relax

    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64, 64, 64), "float32"))  # 302 MFLOP
    weight = relax.const(np.ones((64, 64, 3, 3), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            conv = builder.emit(relax.op.nn.conv2d(x, weight, padding=1))
            dropped = builder.emit(relax.op.nn.dropout(conv, 0.5))
            out = builder.emit_output(relax.TupleGetItem(dropped, 0))
        builder.emit_func_output(out)
    return builder.get()


def test_a_failed_layout_conversion_keeps_nchw_and_says_why(caplog):
    from tvm_hetero.prepare.blocked_conv_layout import BlockedConvLayout

    mod = _conv_then_dropout()
    # TVM's layout inference fails on dropout's tuple (prepare drops dropout first)
    with caplog.at_level("INFO", logger="tvm_hetero.prepare"):
        converted = BlockedConvLayout(th.PrepareConfig())(mod)
    assert any("convolutions stay NCHW: layout conversion failed" in r.message
               for r in caplog.records)
    assert converted.same_as(mod)


def test_inference_dropout_is_dropped_and_the_convolution_blocked():
    mod = _conv_then_dropout()
    layers = th.extract_layers(mod)
    assert [l.op_kinds for l in layers] == [["conv2d"]]  # blocked: two form kernels beside
    assert len(layers[0].outputs[0].shape) == 5
    squeezenet = th.extract_layers(light("squeezenet"))
    assert not any("dropout" in op for l in squeezenet for op in l.op_kinds)
    # all its convolutions run blocked (the RGB one reads its 3 channels as one block, the
    # 1000-class one is padded to 1008)
    assert all(len(l.outputs[0].shape) == 5 for l in squeezenet if l.kind == "conv2d")
    assert sum(l.kind == "conv2d" for l in squeezenet) == 26


def _conv_module(layout: str, weight: np.ndarray, out_layout: str | None = None):
    from tvm import relax

    from tvm_hetero.prepare.fold_constant_layouts import blocked_by_numpy

    channels, size = weight.shape[1], 8
    builder = relax.BlockBuilder()
    if layout == "NCHW":
        x = relax.Var("x", relax.TensorType((1, channels, size, size), "float32"))
        kernel_layout = "OIHW"
    else:  # NCHW8c
        x = relax.Var("x", relax.TensorType((1, channels // 8, size, size, 8), "float32"))
        blocked = (weight.shape[0] // 8, channels // 8) + weight.shape[2:] + (8, 8)
        weight = np.ascontiguousarray(blocked_by_numpy(weight, blocked))
        kernel_layout = "OIHW8i8o"
    with builder.function("main", [x]):
        with builder.dataflow():
            conv = relax.op.nn.conv2d(x, relax.const(weight), padding=1, data_layout=layout,
                                      kernel_layout=kernel_layout, out_layout=out_layout)
            out = builder.emit_output(builder.emit(relax.op.nn.relu(conv)))
        builder.emit_func_output(out)
    return builder.get()


def test_a_users_blocked_convolution_is_legalized_and_matches_nchw(cpu_devices):
    from tvm_hetero.prepare.fold_constant_layouts import blocked_by_numpy

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((32, 16, 3, 3)).astype("float32")
    x = rng.standard_normal((1, 16, 8, 8)).astype("float32")
    reference = th.build(_conv_module("NCHW", weight), "all:cpu", cpu_devices).run({"x": x})
    blocked = th.build(_conv_module("NCHW8c", weight), "all:cpu", cpu_devices)
    # 8-channel blocks: not the 16 lanes of the blocked rule
    assert list(blocked.stats.rules.values()) == ["tiled"]
    got = blocked.run({"x": np.ascontiguousarray(blocked_by_numpy(x, (1, 2, 8, 8, 8)))})
    np.testing.assert_allclose(got[0], blocked_by_numpy(reference[0], (1, 4, 8, 8, 8)),
                               rtol=1e-4, atol=1e-4)


def test_a_convolution_layout_without_a_lowering_is_a_model_error():
    weight = np.ones((32, 16, 3, 3), "float32")
    with pytest.raises(th.ModelError, match="layouts NCHW8c/OIHW8i8o/NCHW .* not supported"):
        th.extract_layers(_conv_module("NCHW8c", weight, out_layout="NCHW"))
    # an NCHW convolution writing NHWC: TVM legalizes nothing for it; said at preparation, not
    # later as a module that is not layered
    with pytest.raises(th.ModelError, match="cannot lower relax.nn.conv2d to TIR"):
        th.extract_layers(_conv_module("NCHW", weight, out_layout="NHWC"))


def test_3x3_convolutions_run_as_winograd_and_match_onnxruntime(cpu_devices):
    import onnxruntime as ort

    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize.cpu import is_winograd
    from tvm_hetero.testing import max_relative_error

    model = zoo("vgg")
    mod = layered_module(model)
    convs = [l for l in th.extract_layers(model) if l.kind == "conv2d"]
    # the RGB convolution stays direct (3 channels are no vector: read as one block of 3) and
    # writes the blocked layout; the 16- and 32-channel ones are Winograd, blocked, with no
    # layout change between them
    assert [is_winograd(mod[l.func_name]) for l in convs] == [False, True, True, True]
    assert [l.outputs[0].shape for l in convs] == [
        (1, 1, 32, 32, 16), (1, 1, 32, 32, 16), (1, 2, 16, 16, 16), (1, 2, 16, 16, 16)]
    # their parameters: the transformed weights, 6 x 6 x C x K floats, and the bias
    assert [l.param_bytes for l in convs[1:]] == [
        4 * (36 * 16 * 16 + 16), 4 * (36 * 16 * 32 + 32), 4 * (36 * 32 * 32 + 32)]
    inputs = model.random_inputs(seed=4)
    expected = ort.InferenceSession(th.zoo_model("vgg").SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, inputs)
    for optimize in (True, False):
        compiled = th.build(model, "all:cpu", cpu_devices, optimize=optimize)
        assert max_relative_error(compiled.run(inputs), expected) < 1e-5
    compiled = th.build(model, "all:cpu", cpu_devices)
    assert [compiled.stats.rules[l.func_name] for l in convs] == \
        ["blocked-nchwc"] + ["winograd"] * 3


def test_winograd_takes_3x3_stride_1_convolutions_with_enough_tiles_and_small_weights():
    from tvm_hetero.ops.winograd import fits as _winograd_fits

    fits = dict(batch=1, in_channels=32, out_channels=32, out_h=16, out_w=16, window=(3, 3),
                strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    assert _winograd_fits(**fits)
    for change in [{"window": (1, 1)}, {"window": (5, 5)}, {"strides": (2, 2)},
                   {"dilation": (2, 2)}, {"groups": 2}, {"padding": (0, 0, 0, 0)},
                   {"batch": 2}, {"in_channels": 24},  # not whole vectors
                   {"out_h": 12, "out_w": 12},  # 9 tiles of 4x4
                   {"in_channels": 256, "out_channels": 128}]:  # 36 x 256 x 128 floats: 4.7 MB
        assert not _winograd_fits(**{**fits, **change}), change
    # a 16x16 64-channel one fits: in a model with little convolution work, it goes blocked
    layers = th.extract_layers(th.load_model(conv_chain(64, 16), name="conv_chain_16"))
    assert [l.kind for l in layers] == ["conv2d", "conv2d"]
    assert len(layers[0].outputs[0].shape) == 5
    assert layers[0].param_bytes == 4 * (36 * 64 * 64 + 64)
