"""The preparation passes, each on a small module against the module it should give
(``tvm.ir.assert_structural_equal``), and the configuration's derivation from targets."""

from dataclasses import replace

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

import tvm_hetero as th
from tvm_hetero.ops import conv2d_nchwc, winograd
from tvm_hetero.prepare import PrepareConfig
from tvm_hetero.prepare.blocked_conv_layout import BlockedConvLayout
from tvm_hetero.prepare.constants_at_full_rank import ConstantsAtFullRank
from tvm_hetero.prepare.conv1d_as_conv2d import Conv1dAsConv2d
from tvm_hetero.prepare.drop_dropout import DropDropout
from tvm_hetero.prepare.fold_constant_layouts import FoldConstantLayouts
from tvm_hetero.prepare.legalize import conv2d_legalizer
from tvm_hetero.prepare.merge_concatenated_convs import MergeConcatenatedConvs
from tvm_hetero.prepare.op_kinds import FuseTIRKeepingOpKinds
from tvm_hetero.prepare.pad_conv_channels import PadConvChannels
from tvm_hetero.prepare.pipeline import graph_phase
from tvm_hetero.prepare.simplify_stack_sum import SimplifyStackSum
from tvm_hetero.relax_ir import OP_KINDS_ATTR, main_bindings


def _weights(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def _module(params, body):
    """A one-function module: ``body(builder, *params)`` emits the dataflow block's bindings
    and returns the output expression."""
    builder = relax.BlockBuilder()
    variables = [relax.Var(name, relax.TensorType(shape, "float32")) for name, shape in params]
    with builder.function("main", variables):
        with builder.dataflow():
            out = builder.emit_output(body(builder, *variables))
        builder.emit_func_output(out)
    return builder.get()


def _conv(data, weight, **attrs):
    return relax.op.nn.conv2d(data, relax.const(weight) if isinstance(weight, np.ndarray)
                              else weight, **attrs)


# ----------------------------------------------------------------------------------------------
# one pass at a time


def test_drop_dropout_reads_the_input_where_dropout_s_first_output_was_read():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 4), "float32")):
            with R.dataflow():
                d = R.nn.dropout(x, 0.5)
                y = d[0]
                z = R.nn.relu(y)
                R.output(z)
            return z

    @I.ir_module
    class Expected:  # the dead dropout is DeadCodeElimination's
        @R.function
        def main(x: R.Tensor((1, 4), "float32")):
            with R.dataflow():
                _d = R.nn.dropout(x, 0.5)
                y = x
                z = R.nn.relu(y)
                R.output(z)
            return z

    tvm.ir.assert_structural_equal(DropDropout()(Before), Expected)


def test_simplify_stack_sum_adds_and_drops_broadcasts_to_the_same_shape():
    @I.ir_module
    class Before:
        @R.function
        def main(a: R.Tensor((1, 4), "float32"), b: R.Tensor((1, 4), "float32")):
            with R.dataflow():
                ba = R.broadcast_to(a, R.shape([1, 4]))
                bb = R.broadcast_to(b, R.shape([1, 4]))
                s = R.stack((ba, bb), axis=0)
                out = R.sum(s, axis=[0])
                R.output(out)
            return out

    @I.ir_module
    class Expected:
        @R.function
        def main(a: R.Tensor((1, 4), "float32"), b: R.Tensor((1, 4), "float32")):
            with R.dataflow():
                ba = a
                bb = b
                _s = R.stack((ba, bb), axis=0)
                lv = R.add(ba, bb)
                out = lv
                R.output(out)
            return out

    tvm.ir.assert_structural_equal(SimplifyStackSum()(Before), Expected)


def test_merge_concatenated_convs_makes_one_convolution_with_the_chain_after_it():
    w1, w2 = _weights(2, 4, 1, 1, seed=1), _weights(3, 4, 1, 1, seed=2)
    b1, b2 = _weights(1, 2, 1, 1, seed=3), _weights(1, 3, 1, 1, seed=4)

    def before(bb, x):
        heads = []
        for w, b in ((w1, b1), (w2, b2)):
            conv = bb.emit(_conv(x, w))
            biased = bb.emit(relax.op.add(conv, relax.const(b)))
            heads.append(bb.emit(relax.op.nn.relu(biased)))
        return relax.op.concat(heads, axis=1)

    def expected(bb, x):
        conv = bb.emit(_conv(x, np.concatenate([w1, w2])))
        biased = bb.emit(relax.op.add(conv, relax.const(np.concatenate([b1, b2], axis=1))))
        return relax.op.nn.relu(biased)

    params = [("x", (1, 4, 8, 8))]
    after = relax.transform.DeadCodeElimination()(MergeConcatenatedConvs()(
        _module(params, before)))
    tvm.ir.assert_structural_equal(after, _module(params, expected))


@pytest.mark.parametrize("lanes, padded", [(16, 1008), (8, None)])
def test_pad_conv_channels_pads_to_whole_vectors_of_its_lanes(lanes, padded):
    weight = _weights(1000, 4, 1, 1)
    params = [("x", (1, 4, 4, 4))]
    before = _module(params, lambda bb, x: _conv(x, weight))
    after = PadConvChannels(lanes, max_waste=0.05)(before)
    if padded is None:  # 1000 is a multiple of 8
        tvm.ir.assert_structural_equal(after, before)
        return
    zeros = np.zeros((padded - 1000, 4, 1, 1), "float32")

    def expected(bb, x):
        conv = bb.emit(_conv(x, np.concatenate([weight, zeros])))
        return relax.op.strided_slice(conv, axes=[1], begin=[0], end=[1000])

    tvm.ir.assert_structural_equal(after, _module(params, expected))
    # 1000 -> 1024 would be 2.4 % more work: over a 1 % limit, nothing changes
    tvm.ir.assert_structural_equal(PadConvChannels(32, max_waste=0.01)(before), before)


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
        conv = bb.emit(_conv(data, kernel, padding=1, data_layout=layout,
                             kernel_layout=kernel_layout, out_layout=layout))
        out = bb.emit(relax.op.nn.relu(conv))
        return relax.op.layout_transform(
            out, index_map=_index_map(lambda n, c, h, w, lane: (n, c * lanes + lane, h, w)))

    return body


@pytest.mark.parametrize("lanes", [16, 8])
def test_blocked_conv_layout_blocks_by_its_lanes_and_folds_the_weight(lanes):
    weight = _weights(16, 16, 3, 3)
    params = [("x", (1, 16, 8, 8))]
    before = _module(params, lambda bb, x: relax.op.nn.relu(_conv(x, weight, padding=1)))
    config = PrepareConfig(block_lanes=lanes, blocked_min_model_flops=0, winograd=False)
    tvm.ir.assert_structural_equal(BlockedConvLayout(config)(before),
                                   _module(params, _blocked_expected(weight, lanes)))


def test_blocked_conv_layout_needs_the_work_or_a_winograd_convolution_and_can_be_off():
    weight = _weights(16, 16, 3, 3)  # 2.4 MFLOP, a 16x16 output: 16 Winograd tiles
    params = [("x", (1, 16, 16, 16))]
    before = _module(params, lambda bb, x: relax.op.nn.relu(_conv(x, weight, padding=1)))
    assert BlockedConvLayout(PrepareConfig(winograd=False))(before).same_as(before)
    assert not BlockedConvLayout(PrepareConfig())(before).same_as(before)  # Winograd fits
    assert BlockedConvLayout(PrepareConfig(blocked_layout=False, blocked_min_model_flops=0))(
        before).same_as(before)


def test_constants_at_full_rank_reshapes_lower_rank_constants_of_binary_ops():
    scale, shift = _weights(4, 1, 1), _weights(8, seed=1)
    params = [("x", (1, 4, 8, 8))]
    before = _module(params, lambda bb, x: relax.op.add(
        bb.emit(relax.op.multiply(x, relax.const(scale))), relax.const(shift)))
    expected = _module(params, lambda bb, x: relax.op.add(
        bb.emit(relax.op.multiply(x, relax.const(scale.reshape(1, 4, 1, 1)))),
        relax.const(shift.reshape(1, 1, 1, 8))))
    tvm.ir.assert_structural_equal(ConstantsAtFullRank()(before), expected)


def test_per_channel_constants_of_rank_3_stay_in_the_blocked_layout_between_convolutions():
    # a scale and shift of shape (C, 1, 1) between two convolutions (DenseNet-121's light
    # graph): blocked with them, one transform in and one out, not two more around them
    params = [("x", (1, 16, 8, 8))]

    def body(bb, x):
        y = bb.emit(_conv(x, _weights(16, 16, 3, 3), padding=1))
        y = bb.emit(relax.op.multiply(y, relax.const(_weights(16, 1, 1, seed=1))))
        y = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, relax.const(
            _weights(16, 1, 1, seed=2))))))
        return _conv(y, _weights(16, 16, 3, 3, seed=3), padding=1)

    before = _module(params, body)
    config = PrepareConfig(blocked_min_model_flops=0, winograd=False)
    after = BlockedConvLayout(config)(before)
    counts = _op_counts(after)
    assert counts["relax.layout_transform"] == 2 and counts["relax.nn.conv2d"] == 2
    inputs = [np.random.default_rng(0).standard_normal((1, 16, 8, 8)).astype("float32")]
    (got,), (want,) = _run_legalized(after, inputs, config), _run_legalized(before, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _blocked_and_right(before, params, transforms: int):
    """`before` through BlockedConvLayout (16 lanes, from 0 FLOPs): `transforms` layout
    transforms left, and the same outputs."""
    config = PrepareConfig(blocked_min_model_flops=0, winograd=False)
    after = BlockedConvLayout(config)(before)
    assert _op_counts(after)["relax.layout_transform"] == transforms
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype("float32") for _, shape in params]
    from tvm_hetero.testing import max_relative_error

    got, want = _run_legalized(after, inputs, config), _run_legalized(before, inputs)
    assert max_relative_error(got, want) < 1e-5
    return after


def test_the_blocked_layout_goes_through_a_u_net_s_upsampling_and_skip_concatenation():
    # TVM's layout conversion leaves resize2d and the concatenation after it NCHW: a
    # transform out and back per tensor, unless SinkLayoutTransforms carries the layout on
    params = [("x", (1, 16, 8, 8))]

    def body(bb, x):
        skip = bb.emit(relax.op.nn.relu(_conv(x, _weights(16, 16, 3, 3), padding=1)))
        down = bb.emit(_conv(skip, _weights(32, 16, 3, 3, seed=1), strides=2, padding=1))
        up = bb.emit(relax.op.image.resize2d(down, (8, 8), method="nearest_neighbor"))
        joined = bb.emit(relax.op.concat([up, skip], axis=1))
        return _conv(joined, _weights(16, 48, 3, 3, seed=2), padding=1)

    after = _blocked_and_right(_module(params, body), params, transforms=2)
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
        blocked = bb.emit(_conv(x, _weights(16, 16, 3, 3), padding=1))
        nchw = bb.emit(_conv(y, _weights(16, 24, 1, 1, seed=1)))
        joined = bb.emit(relax.op.concat([blocked, nchw], axis=1))
        scaled = bb.emit(relax.op.multiply(joined, relax.const(_weights(1, 32, 1, 1, seed=2))))
        return _conv(bb.emit(relax.op.nn.relu(scaled)), _weights(16, 32, 3, 3, seed=3),
                     padding=1)

    # x in, the NCHW convolution's output blocked, the result out
    _blocked_and_right(_module(params, body), params, transforms=3)


def test_fold_constant_layouts_computes_blocked_constants_by_the_index_map():
    weight = _weights(32, 16, 3, 3)

    def before(bb):
        return relax.op.layout_transform(
            relax.const(weight),
            index_map=lambda o, i, h, w: (o // 16, i // 8, h, w, i % 8, o % 16))

    expected = np.empty((2, 2, 3, 3, 8, 16), "float32")
    for o, i, h, w in np.ndindex(*weight.shape):
        expected[o // 16, i // 8, h, w, i % 8, o % 16] = weight[o, i, h, w]
    after = FoldConstantLayouts()(_module([], before))
    tvm.ir.assert_structural_equal(after, _module([], lambda bb: relax.const(expected)))


def _legalized(lanes, config):
    """A 32 -> 32-channel 3x3 convolution of 16x16 pixels in blocks of `lanes`, legalized
    under `config`: ``(legalized module, the blocked weight)``."""
    weight = _weights(32, 32, 3, 3)
    layout, kernel_layout = conv2d_nchwc.layouts(lanes)
    blocks = 32 // lanes
    blocked = np.ascontiguousarray(weight.reshape(blocks, lanes, blocks, lanes, 3, 3)
                                   .transpose(0, 2, 4, 5, 3, 1))
    before = _module([("x", (1, blocks, 16, 16, lanes))], lambda bb, x: _conv(
        x, blocked, padding=1, data_layout=layout, kernel_layout=kernel_layout,
        out_layout=layout))
    legalize = relax.transform.LegalizeOps({"relax.nn.conv2d": conv2d_legalizer(config)})
    return legalize(before), blocked


def _call_te_module(lanes, compute, *args):
    return _module([("x", (1, 32 // lanes, 16, 16, lanes))], lambda bb, x: bb.call_te(
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


def test_fuse_tir_keeping_op_kinds_names_the_ops_of_each_fused_kernel():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 4), "float32"), y: R.Tensor((1, 4), "float32")):
            with R.dataflow():
                s = R.add(x, y)
                z = R.nn.relu(s)
                R.output(z)
            return z

    with tvm.target.Target({"kind": "llvm"}):
        fused = tvm.transform.Sequential([
            relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
            relax.transform.FuseOps()])(Before)
        after = FuseTIRKeepingOpKinds()(fused)
        expected = relax.transform.FuseTIR()(fused)
    (gv,) = [gv for gv, f in expected.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    expected[gv] = expected[gv].with_attr(OP_KINDS_ATTR, ["add", "relu"])
    tvm.ir.assert_structural_equal(after, expected)


# ----------------------------------------------------------------------------------------------
# the configuration follows the devices' targets


def _devices(*targets):
    import json

    return th.DeviceSet.parse([f"d{i}={json.dumps(t)}" for i, t in enumerate(targets)])


AVX2 = {"kind": "llvm", "mcpu": "haswell"}
AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512"}
ZNVER4 = {"kind": "llvm", "mcpu": "znver4"}
GENERIC = {"kind": "llvm", "mcpu": "x86-64"}


@pytest.mark.parametrize("targets, lanes", [
    ([AVX2], 8), ([AVX512], 16), ([ZNVER4], 16), ([GENERIC], 4),
    ([GENERIC, AVX2], 8),  # the widest CPU of the set
    ([AVX2, ZNVER4], 16),
])
def test_the_lanes_follow_the_widest_cpu_of_the_device_set(targets, lanes):
    config = PrepareConfig.for_devices(_devices(*targets))
    assert (config.channel_lanes, config.block_lanes) == (lanes, lanes)
    assert config.winograd and config.blocked_layout
    assert PrepareConfig.for_devices(_devices(*targets), winograd=False).winograd is False


def test_a_device_set_without_a_cpu_keeps_the_defaults():
    cuda = th.DeviceSet.parse(["cuda@sm_80"])
    assert PrepareConfig.for_devices(cuda) == PrepareConfig()
    assert PrepareConfig.for_target({"kind": "cuda", "arch": "sm_80"}) == PrepareConfig()


def test_bad_lanes_are_an_input_error():
    with pytest.raises(th.InputError, match="block_lanes must be at least 1"):
        PrepareConfig(block_lanes=0)


def _conv_convs(out_channels: int, in_channels: int = 24):
    """A model of one 3x3 convolution with 24 input channels (blocks of 8, not of 16)."""
    return _module([("x", (1, in_channels, 56, 56))], lambda bb, x: relax.op.nn.relu(
        _conv(x, _weights(out_channels, in_channels, 3, 3), padding=1)))


def _conv_attrs(mod):

    return [(str(b.value.attrs.data_layout), [int(v) for v in b.value.ty.shape])
            for b in main_bindings(mod) if isinstance(b.value, relax.Call)
            and getattr(b.value.op, "name", "") == "relax.nn.conv2d"]


def test_channel_padding_and_the_blocked_layout_follow_the_device_set():
    # 1000 output channels: padded to 1008 for 16 lanes; already whole 8-lane vectors
    avx512 = graph_phase(PrepareConfig.for_devices(_devices(ZNVER4)))(_conv_convs(1000, 3))
    avx2 = graph_phase(PrepareConfig.for_devices(_devices(AVX2)))(_conv_convs(1000, 3))
    assert _conv_attrs(avx512) == [("NCHW", [1, 1008, 56, 56])]
    assert _conv_attrs(avx2) == [("NCHW", [1, 1000, 56, 56])]
    # 24 -> 48 channels (65 MFLOP): with 8-lane blocks a Winograd convolution, which takes
    # the blocked layout; 24 channels are no 16-lane blocks
    avx2 = graph_phase(PrepareConfig.for_devices(_devices(AVX2)))(_conv_convs(48))
    avx512 = graph_phase(PrepareConfig.for_devices(_devices(AVX512)))(_conv_convs(48))
    assert _conv_attrs(avx2) == [("NCHW8c", [1, 6, 56, 56, 8])]
    assert _conv_attrs(avx512) == [("NCHW", [1, 48, 56, 56])]


def test_a_build_for_an_avx2_device_set_prepares_with_8_lanes_and_is_right():
    from tvm_hetero.testing import max_relative_error

    before = _conv_convs(48)
    model = th.load_model(before, name="conv_24_48")
    devices = _devices(AVX2)
    layers = th.extract_layers(model, PrepareConfig.for_devices(devices))
    (conv,) = [layer for layer in layers if layer.kind == "conv2d"]
    assert conv.outputs[0].shape == (1, 6, 56, 56, 8)  # Winograd in 8-lane blocks
    compiled = th.build(model, "all:d0", devices)
    assert compiled.stats.rules[conv.func_name] == "winograd"
    # against the module unprepared (TVM's direct NCHW convolution): Winograd rounds
    # differently, within 1e-5 of the largest output here
    inputs = model.random_inputs(seed=0)
    want = _run_legalized(before, [inputs[spec.name] for spec in model.inputs])
    assert max_relative_error(compiled.run(inputs), want) < 1e-5


# ----------------------------------------------------------------------------------------------
# depthwise convolutions in the blocked layout


def _inverted_residual(bb, x, outer: int = 32):
    """MobileNet's block, `outer` channels in and out, 32 inside: 1x1 conv, ReLU6 (``clip``),
    depthwise 3x3 of stride 2, ReLU6, 1x1 conv."""
    y = bb.emit(relax.op.clip(_conv(x, _weights(32, outer, 1, 1)), 0, 6))
    y = bb.emit(relax.op.clip(_conv(y, _weights(32, 1, 3, 3, seed=1), strides=2,
                                    padding=1, groups=32), 0, 6))
    return _conv(y, _weights(outer, 32, 1, 1, seed=2))


def test_a_small_model_with_depthwise_convolutions_to_block_goes_blocked():
    # 2.6 MFLOP of convolutions, far under blocked_min_model_flops: blocked for its depthwise
    # one (MobileNetV3 and EfficientNet blocks 0.72-0.91x the time NCHW, docs/design.md)
    before = _module([("x", (1, 32, 28, 28))], _inverted_residual)
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
    before = _module([("x", (1, 32, 28, 28))], _inverted_residual)
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
    between = _module([("x", (1, 24, 28, 28))], lambda bb, x: _inverted_residual(bb, x, 24))
    convs = _bindings_of(BlockedConvLayout(config)(between), "relax.nn.conv2d")
    assert str(convs[1].attrs.data_layout) == ("NCHW8c" if lanes == 8 else "NCHW")


def test_the_conv2d_legalizer_writes_the_blocked_depthwise_convolution():
    weight = _weights(2, 1, 3, 3, 1, 16)
    layout, kernel_layout = conv2d_nchwc.depthwise_layouts(16)
    before = _module([("x", (1, 2, 16, 16, 16))], lambda bb, x: _conv(
        x, weight, strides=2, padding=1, groups=32, data_layout=layout,
        kernel_layout=kernel_layout, out_layout=layout))
    after = relax.transform.LegalizeOps(
        {"relax.nn.conv2d": conv2d_legalizer(PrepareConfig())})(before)
    expected = _module([("x", (1, 2, 16, 16, 16))], lambda bb, x: bb.call_te(
        conv2d_nchwc.depthwise_conv2d_nchwc, x, relax.const(weight), [2, 2], [1, 1, 1, 1],
        [1, 1], primfunc_name_hint="conv2d"))
    tvm.ir.assert_structural_equal(after, expected)


@pytest.mark.parametrize("target, lanes", [(ZNVER4, 16), (AVX2, 8)])
def test_a_blocked_depthwise_model_builds_with_depthwise_nchwc_and_is_right(target, lanes,
                                                                           prepare_for_devices):
    from tvm_hetero.testing import max_relative_error

    prepare_for_devices(blocked_min_model_flops=0)  # the blocked layout from 0 FLOPs
    before = _module([("x", (1, 32, 28, 28))], _inverted_residual)
    model = th.load_model(before, name="ir")
    devices = _devices(target)
    layers = th.extract_layers(model, PrepareConfig.for_devices(devices))
    compiled = th.build(model, "all:d0", devices)
    (depthwise,) = [layer for layer in layers if layer.kind == "conv2d"  # stride 2
                    and layer.inputs[0].shape == (1, 32 // lanes, 28, 28, lanes)
                    and layer.outputs[0].shape == (1, 32 // lanes, 14, 14, lanes)]
    assert compiled.stats.rules[depthwise.func_name] == "depthwise-nchwc"
    inputs = model.random_inputs(seed=0)  # against the module unprepared, NCHW
    want = _run_legalized(before, [inputs[spec.name] for spec in model.inputs])
    assert max_relative_error(compiled.run(inputs), want) < 1e-5


# ----------------------------------------------------------------------------------------------
# 1-D convolutions as 2-D ones


def _temporal_block(bb, x, residual):
    """Conv1d (groups 2, dilation 2) + bias + ReLU, a residual add of another input, a strided
    conv1d; the ReLU's output also read transposed (an op that stays 3-D)."""
    conv = bb.emit(relax.op.nn.conv1d(x, relax.const(_weights(8, 4, 3)), padding=[2, 2],
                                      dilation=2, groups=2))
    biased = bb.emit(relax.op.add(conv, relax.const(_weights(1, 8, 1, seed=1))))
    act = bb.emit(relax.op.nn.relu(biased))
    summed = bb.emit(relax.op.add(act, residual))
    strided = bb.emit(relax.op.nn.conv1d(summed, relax.const(_weights(8, 8, 3, seed=2)),
                                         strides=2, padding=[1, 0]))
    return relax.Tuple([strided, relax.op.permute_dims(act)])


def _run_legalized(mod, inputs, config=None):
    """`mod`'s outputs for `inputs`: legalized (blocked convolutions by our legalizer under
    `config`) and built for the host."""
    legalize = {"relax.nn.conv2d": conv2d_legalizer(config)} if config else None
    executable = tvm.compile(relax.transform.LegalizeOps(legalize)(mod), target="llvm")
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]


def _op_counts(mod) -> dict:
    from collections import Counter

    return Counter(b.value.op.name for b in main_bindings(mod) if isinstance(b.value, relax.Call)
                   and isinstance(b.value.op, tvm.ir.Op))


def test_conv1d_as_conv2d_lifts_the_chain_between_convolutions_and_keeps_the_result():
    params = [("x", (1, 8, 32)), ("r", (1, 8, 32))]
    before = _module(params, _temporal_block)
    after = relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(
        Conv1dAsConv2d()(before)))
    counts = _op_counts(after)
    assert counts["relax.nn.conv2d"] == 2 and "relax.nn.conv1d" not in counts
    # in: x and the residual; out: the strided convolution and the ReLU the transpose reads
    assert counts["relax.expand_dims"] == 2 and counts["relax.squeeze"] == 2
    assert counts["relax.add"] == 2 and counts["relax.nn.relu"] == 1
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype("float32") for _, shape in params]
    for got, want in zip(_run_legalized(after, inputs), _run_legalized(before, inputs)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv1d_as_conv2d_lifts_a_clip_with_its_bounds():
    # ReLU6 after a 1-D convolution: clip's bounds are scalar arguments, not tensors
    params = [("x", (1, 8, 32))]

    def body(bb, x):
        conv = bb.emit(relax.op.nn.conv1d(x, relax.const(_weights(8, 8, 3)), padding=[1, 1]))
        return relax.op.clip(conv, 0, 6)

    before = _module(params, body)
    after = relax.transform.DeadCodeElimination()(Conv1dAsConv2d()(before))
    counts = _op_counts(after)
    assert counts["relax.nn.conv2d"] == 1 and counts["relax.clip"] == 1
    assert counts["relax.squeeze"] == 1  # once, after the clip
    inputs = [np.random.default_rng(0).standard_normal((1, 8, 32)).astype("float32")]
    np.testing.assert_allclose(_run_legalized(after, inputs)[0],
                               _run_legalized(before, inputs)[0], rtol=1e-5, atol=1e-5)


def test_the_graph_phase_runs_conv1d_as_conv2d_unless_configured_off():
    before = _module([("x", (1, 8, 32)), ("r", (1, 8, 32))], _temporal_block)
    assert "relax.nn.conv1d" not in _op_counts(graph_phase(PrepareConfig())(before))
    off = graph_phase(PrepareConfig(conv1d_as_conv2d=False))(before)
    assert _op_counts(off)["relax.nn.conv1d"] == 2


@pytest.mark.parametrize("target, lanes, blocked", [(AVX2, 8, True), (ZNVER4, 16, True),
                                                     (ZNVER4, 16, False)])
def test_a_temporal_conv_net_builds_with_the_2d_rules_and_is_right(target, lanes, blocked,
                                                                   prepare_for_devices):
    from tvm_hetero.testing import max_relative_error

    if blocked:  # the blocked layout from 0 FLOPs
        prepare_for_devices(blocked_min_model_flops=0)

    def tcn(bb, x):
        y = bb.emit(relax.op.nn.conv1d(x, relax.const(_weights(16, 16, 3)), padding=[2, 2],
                                       dilation=2))
        y = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, relax.const(
            _weights(1, 16, 1, seed=1))))))
        return relax.op.add(x, y)

    mod = _module([("x", (1, 16, 64))], tcn)
    model = th.load_model(mod, name="tcn")
    devices = _devices(target)
    layers = th.extract_layers(model, PrepareConfig.for_devices(devices))
    (conv,) = [layer for layer in layers if layer.kind == "conv2d"]
    compiled = th.build(model, "all:d0", devices)
    if blocked:
        assert conv.outputs[0].shape == (1, 16 // lanes, 1, 64, lanes)
        assert compiled.stats.rules[conv.func_name] == "blocked-nchwc"
    else:  # NCHW of height 1 (a small model stays unblocked), scheduled
        assert conv.outputs[0].shape == (1, 16, 1, 64)
        assert compiled.stats.rules[conv.func_name] is not None
    inputs = model.random_inputs(seed=0)
    want = _run_legalized(mod, [inputs[spec.name] for spec in model.inputs])
    assert max_relative_error(compiled.run(inputs), want) < 1e-5


@pytest.mark.parametrize("target, lanes", [(AVX2, 8), (ZNVER4, 16)])
def test_a_stem_convolution_reads_its_few_channels_as_one_block_and_writes_blocked(
        target, lanes, prepare_for_devices):
    # an image's 3 channels: the input as NCHW3c (a transform of the small input), the
    # output blocked (no transform of the larger output before the next convolution)
    from tvm_hetero.testing import max_relative_error

    params = [("x", (1, 3, 32, 32))]

    def body(bb, x):
        y = bb.emit(relax.op.nn.relu(_conv(x, _weights(16, 3, 3, 3), strides=2, padding=1)))
        return _conv(y, _weights(16, 16, 3, 3, seed=1), padding=1)

    before = _module(params, body)
    after = _blocked_and_right(before, params, transforms=2)
    assert _conv_attrs(after)[0] == ("NCHW3c", [1, 1, 16, 16, 16])
    prepare_for_devices(blocked_min_model_flops=0)  # the blocked layout from 0 FLOPs
    model = th.load_model(before, name="stem")
    devices = _devices(target)
    layers = th.extract_layers(model, PrepareConfig.for_devices(devices))
    stem = [layer for layer in layers if layer.kind == "conv2d"][0]
    assert stem.inputs[0].shape == (1, 1, 32, 32, 3)
    assert stem.outputs[0].shape == (1, 16 // lanes, 16, 16, lanes)
    compiled = th.build(model, "all:d0", devices)
    assert compiled.stats.rules[stem.func_name] == "blocked-nchwc"
    inputs = model.random_inputs(seed=0)
    want = _run_legalized(before, [inputs[spec.name] for spec in model.inputs])
    assert max_relative_error(compiled.run(inputs), want) < 1e-5
