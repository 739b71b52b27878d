"""BlockedConvLayout (``tvm_hetero/prepare/blocked_conv_layout.py``): convolutions blocked by the
configuration's lanes where the work pays, their weights folded, per-channel constants, U-Net's
upsampling and skip concatenation, NCHW inputs and depthwise convolutions in the blocked layout
(each on a small module against the module it should give, ``tvm.ir.assert_structural_equal``),
and blocked models built right."""

from dataclasses import replace

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_hetero as th
from tvm_hetero.ops import conv2d_nchwc
from tvm_hetero.prepare import PrepareConfig
from tvm_hetero.prepare.blocked_conv_layout import BlockedConvLayout
from tvm_hetero.relax_ir import main_bindings

from tests.helpers.models import conv_chain
from tests.helpers.relax_modules import (AVX2, ZNVER4, conv2d, conv_attrs, conv_then_dropout,
                                         device_set, op_counts, random_weights, relax_module,
                                         run_legalized)


# ----------------------------------------------------------------------------------------------
# one pass at a time


def _index_map(func):
    """An index map as TVM's layout conversion writes it (int32 indices)."""
    return tvm.tirx.IndexMap.from_func(func, index_dtype="int32")


def _blocked_expected(weight, lanes):
    """The blocked form of ``relu(conv2d(x, weight, padding=1))`` with x of 16 channels."""
    channels = weight.shape[1]
    blocked = weight.reshape(weight.shape[0] // lanes, lanes, channels // lanes, lanes, 3, 3) \
        .transpose(0, 2, 4, 5, 3, 1)

    def body(bb, x):
        data = bb.emit(relax.op.layout_transform(
            x, index_map=_index_map(lambda n, c, h, w: (n, c // lanes, h, w, c % lanes))))
        kernel = bb.emit(relax.const(np.ascontiguousarray(blocked)))
        layout, kernel_layout = conv2d_nchwc.layouts(lanes)
        conv = bb.emit(conv2d(data, kernel, padding=1, data_layout=layout,
                             kernel_layout=kernel_layout, out_layout=layout))
        out = bb.emit(relax.op.nn.relu(conv))
        return relax.op.layout_transform(
            out, index_map=_index_map(lambda n, c, h, w, lane: (n, c * lanes + lane, h, w)))

    return body


@pytest.mark.parametrize("lanes", [16, 8])
def test_blocked_conv_layout_blocks_by_its_lanes_and_folds_the_weight(lanes):
    weight = random_weights(16, 16, 3, 3)
    params = [("x", (1, 16, 8, 8))]
    before = relax_module(params, lambda bb, x: relax.op.nn.relu(conv2d(x, weight, padding=1)))
    config = PrepareConfig(block_lanes=lanes, blocked_min_model_flops=0, winograd=False)
    tvm.ir.assert_structural_equal(BlockedConvLayout(config)(before),
                                   relax_module(params, _blocked_expected(weight, lanes)))


def test_blocked_conv_layout_needs_the_work_or_a_winograd_convolution_and_can_be_off():
    weight = random_weights(16, 16, 3, 3)  # 2.4 MFLOP, a 16x16 output: 16 Winograd tiles
    params = [("x", (1, 16, 16, 16))]
    before = relax_module(params, lambda bb, x: relax.op.nn.relu(conv2d(x, weight, padding=1)))
    assert BlockedConvLayout(PrepareConfig(winograd=False))(before).same_as(before)
    assert not BlockedConvLayout(PrepareConfig())(before).same_as(before)  # Winograd fits
    assert BlockedConvLayout(PrepareConfig(blocked_layout=False, blocked_min_model_flops=0))(
        before).same_as(before)


def test_per_channel_constants_of_rank_3_stay_in_the_blocked_layout_between_convolutions():
    # a scale and shift of shape (C, 1, 1) between two convolutions (DenseNet-121's light
    # graph): blocked with them, one transform in and one out, not two more around them
    params = [("x", (1, 16, 8, 8))]

    def body(bb, x):
        y = bb.emit(conv2d(x, random_weights(16, 16, 3, 3), padding=1))
        y = bb.emit(relax.op.multiply(y, relax.const(random_weights(16, 1, 1, seed=1))))
        y = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, relax.const(
            random_weights(16, 1, 1, seed=2))))))
        return conv2d(y, random_weights(16, 16, 3, 3, seed=3), padding=1)

    before = relax_module(params, body)
    config = PrepareConfig(blocked_min_model_flops=0, winograd=False)
    after = BlockedConvLayout(config)(before)
    counts = op_counts(after)
    assert counts["relax.layout_transform"] == 2 and counts["relax.nn.conv2d"] == 2
    inputs = [np.random.default_rng(0).standard_normal((1, 16, 8, 8)).astype("float32")]
    (got,), (want,) = run_legalized(after, inputs, config), run_legalized(before, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _blocked_and_right(before, params, transforms: int):
    """`before` through BlockedConvLayout (16 lanes, from 0 FLOPs): `transforms` layout
    transforms left, and the same outputs."""
    config = PrepareConfig(blocked_min_model_flops=0, winograd=False)
    after = BlockedConvLayout(config)(before)
    assert op_counts(after)["relax.layout_transform"] == transforms
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype("float32") for _, shape in params]
    from tvm_hetero.testing import max_relative_error

    got, want = run_legalized(after, inputs, config), run_legalized(before, inputs)
    assert max_relative_error(got, want) < 1e-5
    return after


def test_the_blocked_layout_goes_through_a_u_net_s_upsampling_and_skip_concatenation():
    # TVM's layout conversion leaves resize2d and the concatenation after it NCHW: a
    # transform out and back per tensor, unless SinkLayoutTransforms carries the layout on
    params = [("x", (1, 16, 8, 8))]

    def body(bb, x):
        skip = bb.emit(relax.op.nn.relu(conv2d(x, random_weights(16, 16, 3, 3), padding=1)))
        down = bb.emit(conv2d(skip, random_weights(32, 16, 3, 3, seed=1), strides=2, padding=1))
        up = bb.emit(relax.op.image.resize2d(down, (8, 8), method="nearest_neighbor"))
        joined = bb.emit(relax.op.concat([up, skip], axis=1))
        return conv2d(joined, random_weights(16, 48, 3, 3, seed=2), padding=1)

    after = _blocked_and_right(relax_module(params, body), params, transforms=2)
    (resize,) = [b.value for b in main_bindings(after)
                 if getattr(b.value, "op", None) is not None
                 and getattr(b.value.op, "name", "") == "relax.image.resize2d"]
    assert str(resize.attrs.layout) == "NCHW16c"


def test_a_concatenation_with_an_nchw_input_and_the_scale_after_it_stay_blocked():
    # DenseNet's and Inception's pattern: a concatenation of a blocked convolution's output
    # and an NCHW tensor (a 24-channel convolution's, no 16-lane blocks), then a per-channel
    # scale and ReLU before the next convolution
    params = [("x", (1, 16, 8, 8)), ("y", (1, 24, 8, 8))]

    def body(bb, x, y):
        blocked = bb.emit(conv2d(x, random_weights(16, 16, 3, 3), padding=1))
        nchw = bb.emit(conv2d(y, random_weights(16, 24, 1, 1, seed=1)))
        joined = bb.emit(relax.op.concat([blocked, nchw], axis=1))
        scale = relax.const(random_weights(1, 32, 1, 1, seed=2))
        scaled = bb.emit(relax.op.multiply(joined, scale))
        return conv2d(bb.emit(relax.op.nn.relu(scaled)), random_weights(16, 32, 3, 3, seed=3),
                     padding=1)

    # x in, the NCHW convolution's output blocked, the result out
    _blocked_and_right(relax_module(params, body), params, transforms=3)


# ----------------------------------------------------------------------------------------------
# the configuration follows the devices' targets


# ----------------------------------------------------------------------------------------------
# depthwise convolutions in the blocked layout


def _inverted_residual(bb, x, outer: int = 32):
    """MobileNet's block, `outer` channels in and out, 32 inside: 1x1 conv, ReLU6 (``clip``),
    depthwise 3x3 of stride 2, ReLU6, 1x1 conv."""
    y = bb.emit(relax.op.clip(conv2d(x, random_weights(32, outer, 1, 1)), 0, 6))
    y = bb.emit(relax.op.clip(conv2d(y, random_weights(32, 1, 3, 3, seed=1), strides=2,
                                    padding=1, groups=32), 0, 6))
    return conv2d(y, random_weights(outer, 32, 1, 1, seed=2))


def test_a_small_model_with_depthwise_convolutions_to_block_goes_blocked():
    # 2.6 MFLOP of convolutions, far under blocked_min_model_flops: blocked for its depthwise
    # one (MobileNetV3 and EfficientNet blocks 0.72-0.91x the time NCHW, docs/design.md)
    before = relax_module([("x", (1, 32, 28, 28))], _inverted_residual)
    convs = _bindings_of(BlockedConvLayout(PrepareConfig(winograd=False))(before),
                         "relax.nn.conv2d")
    assert [str(c.attrs.data_layout) for c in convs] == ["NCHW16c"] * 3
    # without depthwise convolutions to block, the same work stays NCHW
    assert BlockedConvLayout(PrepareConfig(winograd=False, blocked_depthwise=False))(
        before).same_as(before)


def _bindings_of(mod, op_name):

    return [b.value for b in main_bindings(mod) if isinstance(b.value, relax.Call)
            and getattr(b.value.op, "name", "") == op_name]


@pytest.mark.parametrize("lanes", [16, 8])
def test_blocked_conv_layout_blocks_depthwise_convolutions_and_the_clips_between(lanes):
    before = relax_module([("x", (1, 32, 28, 28))], _inverted_residual)
    config = PrepareConfig(block_lanes=lanes, blocked_min_model_flops=0, winograd=False)
    after = BlockedConvLayout(config)(before)
    convs = _bindings_of(after, "relax.nn.conv2d")
    assert [(str(c.attrs.data_layout), str(c.attrs.kernel_layout)) for c in convs] == [
        conv2d_nchwc.layouts(lanes), conv2d_nchwc.depthwise_layouts(lanes),
        conv2d_nchwc.layouts(lanes)]
    assert [int(v) for v in convs[1].args[1].ty.shape] == [32 // lanes, 1, 3, 3, 1, lanes]
    # one transform in, one out: the clips (as maximum/minimum) stay blocked
    assert len(_bindings_of(after, "relax.layout_transform")) == 2
    assert not _bindings_of(after, "relax.clip")
    # off: the depthwise convolution stays NCHW, between transforms
    kept = BlockedConvLayout(replace(config, blocked_depthwise=False))(before)
    assert str(_bindings_of(kept, "relax.nn.conv2d")[1].attrs.data_layout) == "NCHW"
    # between convolutions of 24 channels (no blocks of 16) it would cost two transforms
    between = relax_module([("x", (1, 24, 28, 28))], lambda bb, x: _inverted_residual(bb, x, 24))
    convs = _bindings_of(BlockedConvLayout(config)(between), "relax.nn.conv2d")
    assert str(convs[1].attrs.data_layout) == ("NCHW8c" if lanes == 8 else "NCHW")


@pytest.mark.parametrize("target, lanes", [(ZNVER4, 16), (AVX2, 8)])
def test_a_blocked_depthwise_model_builds_with_depthwise_nchwc_and_is_right(target, lanes,
                                                                           prepare_for_devices):
    from tvm_hetero.testing import max_relative_error

    prepare_for_devices(blocked_min_model_flops=0)  # the blocked layout from 0 FLOPs
    before = relax_module([("x", (1, 32, 28, 28))], _inverted_residual)
    model = th.load_model(before, name="ir")
    devices = device_set(target)
    layers = th.extract_layers(model, PrepareConfig.for_devices(devices))
    compiled = th.build(model, "all:d0", devices)
    (depthwise,) = [layer for layer in layers if layer.kind == "conv2d"  # stride 2
                    and layer.inputs[0].shape == (1, 32 // lanes, 28, 28, lanes)
                    and layer.outputs[0].shape == (1, 32 // lanes, 14, 14, lanes)]
    assert compiled.stats.rules[depthwise.func_name] == "depthwise-nchwc"
    inputs = model.random_inputs(seed=0)  # against the module unprepared, NCHW
    want = run_legalized(before, [inputs[spec.name] for spec in model.inputs])
    assert max_relative_error(compiled.run(inputs), want) < 1e-5


# ----------------------------------------------------------------------------------------------
# 1-D convolutions as 2-D ones


@pytest.mark.parametrize("target, lanes", [(AVX2, 8), (ZNVER4, 16)])
def test_a_stem_convolution_reads_its_few_channels_as_one_block_and_writes_blocked(
        target, lanes, prepare_for_devices):
    # an image's 3 channels: the input as NCHW3c (a transform of the small input), the
    # output blocked (no transform of the larger output before the next convolution)
    from tvm_hetero.testing import max_relative_error

    params = [("x", (1, 3, 32, 32))]

    def body(bb, x):
        y = bb.emit(relax.op.nn.relu(conv2d(x, random_weights(16, 3, 3, 3), strides=2, padding=1)))
        return conv2d(y, random_weights(16, 16, 3, 3, seed=1), padding=1)

    before = relax_module(params, body)
    after = _blocked_and_right(before, params, transforms=2)
    assert conv_attrs(after)[0] == ("NCHW3c", [1, 1, 16, 16, 16])
    prepare_for_devices(blocked_min_model_flops=0)  # the blocked layout from 0 FLOPs
    model = th.load_model(before, name="stem")
    devices = device_set(target)
    layers = th.extract_layers(model, PrepareConfig.for_devices(devices))
    stem = [layer for layer in layers if layer.kind == "conv2d"][0]
    assert stem.inputs[0].shape == (1, 1, 32, 32, 3)
    assert stem.outputs[0].shape == (1, 16 // lanes, 16, 16, lanes)
    compiled = th.build(model, "all:d0", devices)
    assert compiled.stats.rules[stem.func_name] == "blocked-nchwc"
    inputs = model.random_inputs(seed=0)
    want = run_legalized(before, [inputs[spec.name] for spec in model.inputs])
    assert max_relative_error(compiled.run(inputs), want) < 1e-5


def _form_kernels(model):
    """``[(layer served, output shape)]`` of the form kernels (layout transforms of the CPU
    forms) of a model's layered module for the host CPU, in program order."""
    from tvm_hetero.layers.classify import classify_bindings
    from tvm_hetero.layers.layered import layered_module

    return [(info.name, tuple(int(d) for d in binding.var.ty.shape))
            for binding, info in classify_bindings(layered_module(model))
            if info is not None and info.form_kernel]


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


def test_a_failed_layout_conversion_keeps_nchw_and_says_why(caplog):
    from tvm_hetero.prepare.blocked_conv_layout import BlockedConvLayout

    mod = conv_then_dropout()
    # TVM's layout inference fails on dropout's tuple (prepare drops dropout first)
    with caplog.at_level("INFO", logger="tvm_hetero.prepare"):
        converted = BlockedConvLayout(th.PrepareConfig())(mod)
    assert any("convolutions stay NCHW: layout conversion failed" in r.message
               for r in caplog.records)
    assert converted.same_as(mod)
