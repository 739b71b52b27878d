"""Winograd F(4x4, 3x3) (``tvm_hetero/ops/winograd.py``): which convolutions it fits (3 x 3, stride
1, enough tiles, small weights) and a fitting one prepared blocked."""

import tvm_hetero as th

from tests.helpers.models import conv_chain


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
