"""The legalization of ``relax.nn.conv2d`` (``tvm_hetero/prepare/legalize.py``): Winograd where it
fits, the direct blocked convolution otherwise, the blocked depthwise convolution."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_hetero as th
from tvm_hetero.ops import conv2d_nchwc, winograd
from tvm_hetero.prepare import PrepareConfig
from tvm_hetero.prepare.legalize import conv2d_legalizer

from tests.helpers.models import zoo
from tests.helpers.relax_modules import conv2d, random_weights, relax_module


def _legalized(lanes, config):
    """A 32 -> 32-channel 3x3 convolution of 16x16 pixels in blocks of `lanes`, legalized
    under `config`: ``(legalized module, the blocked weight)``."""
    weight = random_weights(32, 32, 3, 3)
    layout, kernel_layout = conv2d_nchwc.layouts(lanes)
    blocks = 32 // lanes
    blocked = np.ascontiguousarray(weight.reshape(blocks, lanes, blocks, lanes, 3, 3)
                                   .transpose(0, 2, 4, 5, 3, 1))
    before = relax_module([("x", (1, blocks, 16, 16, lanes))], lambda bb, x: conv2d(
        x, blocked, padding=1, data_layout=layout, kernel_layout=kernel_layout,
        out_layout=layout))
    legalize = relax.transform.LegalizeOps({"relax.nn.conv2d": conv2d_legalizer(config)})
    return legalize(before), blocked


def _call_te_module(lanes, compute, *args):
    return relax_module([("x", (1, 32 // lanes, 16, 16, lanes))], lambda bb, x: bb.call_te(
        compute, x, *args, primfunc_name_hint="conv2d"))


@pytest.mark.parametrize("lanes", [16, 8])
def test_the_conv2d_legalizer_writes_winograd_where_it_fits(lanes):
    after, blocked = _legalized(lanes, PrepareConfig(channel_lanes=lanes, block_lanes=lanes))
    expected = _call_te_module(lanes, winograd.conv2d_nchwc,
                               relax.const(winograd.transform_weight(blocked)))
    tvm.ir.assert_structural_equal(after, expected)
    assert winograd.is_winograd(after["conv2d"])


@pytest.mark.parametrize("lanes, config", [
    (16, PrepareConfig(winograd=False)),
    (8, PrepareConfig()),  # a user's 8-lane blocks, not the configured 16: direct
])
def test_the_conv2d_legalizer_writes_the_direct_blocked_convolution_otherwise(lanes, config):
    after, blocked = _legalized(lanes, config)
    expected = _call_te_module(lanes, conv2d_nchwc.conv2d_nchwc, relax.const(blocked),
                               [1, 1], [1, 1, 1, 1], [1, 1])
    tvm.ir.assert_structural_equal(after, expected)
    assert not winograd.is_winograd(after["conv2d"])


def test_the_conv2d_legalizer_writes_the_blocked_depthwise_convolution():
    weight = random_weights(2, 1, 3, 3, 1, 16)
    layout, kernel_layout = conv2d_nchwc.depthwise_layouts(16)
    before = relax_module([("x", (1, 2, 16, 16, 16))], lambda bb, x: conv2d(
        x, weight, strides=2, padding=1, groups=32, data_layout=layout,
        kernel_layout=kernel_layout, out_layout=layout))
    after = relax.transform.LegalizeOps(
        {"relax.nn.conv2d": conv2d_legalizer(PrepareConfig())})(before)
    expected = relax_module([("x", (1, 2, 16, 16, 16))], lambda bb, x: bb.call_te(
        conv2d_nchwc.depthwise_conv2d_nchwc, x, relax.const(weight), [2, 2], [1, 1, 1, 1],
        [1, 1], primfunc_name_hint="conv2d"))
    tvm.ir.assert_structural_equal(after, expected)


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
