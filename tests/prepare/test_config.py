"""PrepareConfig (``tvm_hetero/prepare/config.py``) follows the device set's targets: the lanes of
its widest CPU, the defaults without one, channel padding and the blocked layout by the set, an
AVX2 set's build right."""

import pytest
from tvm import relax

import tvm_hetero as th
from tvm_hetero.prepare import PrepareConfig
from tvm_hetero.prepare.pipeline import graph_phase

from tests.helpers.relax_modules import (AVX2, AVX512, GENERIC, ZNVER4, conv2d, conv_attrs,
                                         device_set, random_weights, relax_module, run_legalized)


@pytest.mark.parametrize("targets, lanes", [
    ([AVX2], 8), ([AVX512], 16), ([ZNVER4], 16), ([GENERIC], 4),
    ([GENERIC, AVX2], 8),  # the widest CPU of the set
    ([AVX2, ZNVER4], 16),
])
def test_the_lanes_follow_the_widest_cpu_of_the_device_set(targets, lanes):
    config = PrepareConfig.for_devices(device_set(*targets))
    assert (config.channel_lanes, config.block_lanes) == (lanes, lanes)
    assert config.winograd and config.blocked_layout
    assert PrepareConfig.for_devices(device_set(*targets), winograd=False).winograd is False


def test_a_device_set_without_a_cpu_keeps_the_defaults():
    cuda = th.DeviceSet.parse(["cuda@sm_80"])
    assert PrepareConfig.for_devices(cuda) == PrepareConfig()
    assert PrepareConfig.for_target({"kind": "cuda", "arch": "sm_80"}) == PrepareConfig()


def test_bad_lanes_are_an_input_error():
    with pytest.raises(th.InputError, match="block_lanes must be at least 1"):
        PrepareConfig(block_lanes=0)


def _conv_convs(out_channels: int, in_channels: int = 24):
    """A model of one 3x3 convolution with 24 input channels (blocks of 8, not of 16)."""
    return relax_module([("x", (1, in_channels, 56, 56))], lambda bb, x: relax.op.nn.relu(
        conv2d(x, random_weights(out_channels, in_channels, 3, 3), padding=1)))


def test_channel_padding_and_the_blocked_layout_follow_the_device_set():
    # 1000 output channels: padded to 1008 for 16 lanes; already whole 8-lane vectors
    avx512 = graph_phase(PrepareConfig.for_devices(device_set(ZNVER4)))(_conv_convs(1000, 3))
    avx2 = graph_phase(PrepareConfig.for_devices(device_set(AVX2)))(_conv_convs(1000, 3))
    assert conv_attrs(avx512) == [("NCHW", [1, 1008, 56, 56])]
    assert conv_attrs(avx2) == [("NCHW", [1, 1000, 56, 56])]
    # 24 -> 48 channels (65 MFLOP): with 8-lane blocks a Winograd convolution, which takes
    # the blocked layout; 24 channels are no 16-lane blocks
    avx2 = graph_phase(PrepareConfig.for_devices(device_set(AVX2)))(_conv_convs(48))
    avx512 = graph_phase(PrepareConfig.for_devices(device_set(AVX512)))(_conv_convs(48))
    assert conv_attrs(avx2) == [("NCHW8c", [1, 6, 56, 56, 8])]
    assert conv_attrs(avx512) == [("NCHW", [1, 48, 56, 56])]


def test_a_build_for_an_avx2_device_set_prepares_with_8_lanes_and_is_right():
    from tvm_hetero.testing import max_relative_error

    before = _conv_convs(48)
    model = th.load_model(before, name="conv_24_48")
    devices = device_set(AVX2)
    layers = th.extract_layers(model, PrepareConfig.for_devices(devices))
    (conv,) = [layer for layer in layers if layer.kind == "conv2d"]
    assert conv.outputs[0].shape == (1, 6, 56, 56, 8)  # Winograd in 8-lane blocks
    compiled = th.build(model, "all:d0", devices)
    assert compiled.stats.rules[conv.func_name] == "winograd"
    # against the module unprepared (TVM's direct NCHW convolution): Winograd rounds
    # differently, within 1e-5 of the largest output here
    inputs = model.random_inputs(seed=0)
    want = run_legalized(before, [inputs[spec.name] for spec in model.inputs])
    assert max_relative_error(compiled.run(inputs), want) < 1e-5


