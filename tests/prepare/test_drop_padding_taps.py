"""DropPaddingTaps: window taps that read only padding are sliced off; before/expected modules
for several windows, then an atrous pyramid built whole against onnxruntime."""

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_hetero as th
from tvm_hetero.prepare.drop_padding_taps import DropPaddingTaps, live_taps, tap_bands
from tvm_hetero.testing import max_relative_error, onnx_reference


@pytest.mark.parametrize("size, kernel, stride, pad, dilation, expected", [
    (16, 3, 1, 36, 36, (1, 1)),  # DeepLabV3's rate 36 on its 16x16 map: the centre only
    (16, 3, 1, 12, 12, (0, 2)),  # rate 12: every tap reads the map for some output
    (1, 3, 1, 1, 1, (1, 1)),  # a 3x3 window over a 1x1 map
    (2, 3, 1, 1, 1, (0, 2)),
    (5, 3, 2, 1, 1, (0, 2)),
    (4, 5, 1, 2, 4, (2, 2)),  # a 5-tap window of dilation 4 on 4: taps at -8, -4, 4, 8 miss
])
def test_live_taps_are_those_reading_the_input_for_some_output(size, kernel, stride, pad,
                                                               dilation, expected):
    out = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    assert live_taps(size, out, kernel, stride, pad, dilation) == expected


def _conv_module(data_shape, weight, **attrs):
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(data_shape, "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            y = builder.emit_output(relax.op.nn.conv2d(x, relax.const(weight), **attrs))
        builder.emit_func_output(y)
    return builder.get()


@pytest.mark.parametrize("size, dilation, taps, padding, new_dilation", [
    # rate 6 on 4x4 (pad 6): the centre tap only, a 1x1 convolution without padding
    (4, 6, (slice(1, 2), slice(1, 2)), [0, 0, 0, 0], [1, 1]),
    # a 3x3 window with a one-pixel border on 8x8: 16 % of the work reads padding: unchanged
    (8, 1, None, None, None),
    # rate 2 on 1x7 (pad 2): rows of the centre only, every column
    ((1, 7), 2, (slice(1, 2), slice(0, 3)), [0, 2, 0, 2], [1, 2]),
])
def test_the_window_loses_its_padding_only_taps(size, dilation, taps, padding, new_dilation):
    height, width = (size, size) if isinstance(size, int) else size
    weight = np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype("float32")
    before = _conv_module([1, 4, height, width], weight, padding=[dilation] * 4,
                          dilation=[dilation] * 2)
    if taps is None:
        expected = before
    else:
        expected = _conv_module([1, 4, height, width], weight[:, :, taps[0], taps[1]].copy(),
                                padding=padding, dilation=new_dilation)
    tvm.ir.assert_structural_equal(DropPaddingTaps()(before), expected)


@pytest.mark.parametrize("size, out_size, kernel, stride, pad, dilation, expected", [
    # rate 3 on 4 (pad 3): the border outputs read two taps, the inner ones the centre only
    (4, 4, 3, 1, 3, 3, [(0, 1, 1, 2), (1, 3, 1, 1), (3, 4, 0, 1)]),
    (16, 16, 3, 1, 12, 12, [(0, 4, 1, 2), (4, 12, 1, 1), (12, 16, 0, 1)]),
    (8, 8, 3, 1, 1, 1, [(0, 1, 1, 2), (1, 7, 0, 2), (7, 8, 0, 1)]),
    (5, 3, 3, 2, 1, 1, [(0, 1, 1, 2), (1, 2, 0, 2), (2, 3, 0, 1)]),
    (1, 3, 3, 1, 2, 1, [(0, 1, 2, 2), (1, 2, 1, 1), (2, 3, 0, 0)]),
    (2, 6, 1, 1, 2, 1, [(0, 2, 0, -1), (2, 4, 0, 0), (4, 6, 0, -1)]),  # all padding
])
def test_tap_bands_group_the_outputs_reading_the_same_taps(size, out_size, kernel, stride,
                                                           pad, dilation, expected):
    assert tap_bands(size, out_size, kernel, stride, pad, dilation) == expected


def test_a_convolution_reading_mostly_padding_is_computed_by_bands():
    # a 1x3 window of rate 3 over width 4 (pad 3): outputs 0 and 3 read two taps, 1 and 2
    # only the centre; half the tap-pixels read padding
    weight = np.random.default_rng(0).standard_normal((8, 4, 1, 3)).astype("float32")
    before = _conv_module([1, 4, 1, 4], weight, padding=[0, 3, 0, 3], dilation=[1, 3])
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 4, 1, 4], "float32"))

    def conv(data, taps, dilation):
        return relax.op.nn.conv2d(data, relax.const(weight[:, :, :, taps].copy()),
                                  padding=[0, 0, 0, 0], dilation=dilation)

    with builder.function("main", [x]):
        with builder.dataflow():
            first = builder.emit(conv(x, slice(1, 3), [1, 3]))
            inner = builder.emit(relax.op.strided_slice(x, [3], [1], [3]))
            middle = builder.emit(conv(inner, slice(1, 2), [1, 1]))
            last = builder.emit(conv(x, slice(0, 2), [1, 3]))
            out = builder.emit_output(relax.op.concat([first, middle, last], axis=3))
        builder.emit_func_output(out)
    tvm.ir.assert_structural_equal(DropPaddingTaps()(before), builder.get())


def _atrous_pyramid():
    """DeepLabV3's head in miniature: a 1x1 branch and 3x3 branches of rates 2, 4 and 6 over a
    4x4 map, concatenated, then a 1x1 projection."""
    rng = np.random.default_rng(0)

    def weights(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32),
                                       name)

    nodes, inits, branches = [], [weights("w0", 8, 16, 1, 1)], ["b0"]
    nodes.append(helper.make_node("Conv", ["x", "w0"], ["b0"], kernel_shape=[1, 1]))
    for rate in (2, 4, 6):
        inits.append(weights(f"w{rate}", 8, 16, 3, 3))
        nodes += [helper.make_node("Conv", ["x", f"w{rate}"], [f"c{rate}"], kernel_shape=[3, 3],
                                   dilations=[rate, rate], pads=[rate] * 4),
                  helper.make_node("Relu", [f"c{rate}"], [f"b{rate}"])]
        branches.append(f"b{rate}")
    inits.append(weights("wp", 8, 32, 1, 1))
    nodes += [helper.make_node("Concat", branches, ["cat"], axis=1),
              helper.make_node("Conv", ["cat", "wp"], ["out"], kernel_shape=[1, 1])]
    graph = helper.make_graph(
        nodes, "aspp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 4, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 4, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_atrous_pyramid_computes_only_the_taps_on_its_map_and_is_right():
    onnx_model = _atrous_pyramid()
    onnx.checker.check_model(onnx_model)
    model = th.load_model(onnx_model)
    layers = th.extract_layers(model)
    # rates 4 and 6 read the 4x4 map with their centre tap only: 1x1 work (2 * 16 * 8 * 16
    # FLOPs each); rate 2 reads 64 of its 144 tap-pixels from the map, by bands; with the 1x1
    # branch and the projection
    one_by_one = 2 * 16 * 8 * 16
    assert sum(l.flops for l in layers if l.kind == "conv2d") \
        <= 64 / 16 * one_by_one + 3 * one_by_one + 2 * 32 * 8 * 16 + 8 * 16 * 4  # + bias
    for placement in ("all:cpu", {l.name: ("cpu", "cpu-generic")[i % 2]
                                  for i, l in enumerate(layers)}):
        compiled = th.build(model, placement if isinstance(placement, str)
                            else th.Placement(placement), ["cpu", "cpu-generic"])
        inputs = model.random_inputs()
        assert max_relative_error(compiled.run(inputs),
                                  onnx_reference(onnx_model, inputs, model)) < 1e-5
