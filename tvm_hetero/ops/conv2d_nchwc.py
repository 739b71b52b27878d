"""Convolutions in the blocked layout NCHW[x]c: the layout names and the TE compute that
preparation legalizes them to (the ``blocked-nchwc`` rule schedules it)."""

from __future__ import annotations

# the block of the compute
BLOCK = "conv2d_NCHWc"


def layouts(lanes: int) -> tuple[str, str]:
    """``(data/output layout, weight layout)`` of the blocked layout of `lanes` channels:
    ``NCHW{lanes}c`` (``[N, C/lanes, H, W, lanes]``) and ``OIHW{lanes}i{lanes}o``."""
    return f"NCHW{lanes}c", f"OIHW{lanes}i{lanes}o"


def stem_layouts(in_channels: int, lanes: int) -> tuple[str, str, str]:
    """``(data, weight, output layout)`` of a convolution whose `in_channels` (fewer than
    `lanes`) are one block: ``NCHW{in}c``, ``OIHW{in}i{lanes}o``, ``NCHW{lanes}c``."""
    return f"NCHW{in_channels}c", f"OIHW{in_channels}i{lanes}o", f"NCHW{lanes}c"


def _padded_window(data, height, width, window_h, window_w, strides, padding, dilation):
    """The blocked input padded (rows and columns), the output rows and columns, the strides
    and the dilations of a windowed convolution in NCHW[x]c."""
    from tvm import topi

    stride_h, stride_w = (int(v) for v in strides)
    dilation_h, dilation_w = (int(v) for v in dilation)
    top, left, bottom, right = (int(v) for v in padding)
    out_h = (height + top + bottom - (window_h - 1) * dilation_h - 1) // stride_h + 1
    out_w = (width + left + right - (window_w - 1) * dilation_w - 1) // stride_w + 1
    if top or left or bottom or right:
        data = topi.nn.pad(data, (0, 0, top, left, 0), (0, 0, bottom, right, 0), name="pad")
    return data, (out_h, out_w), (stride_h, stride_w), (dilation_h, dilation_w)


def _batch(data):
    """The batch of `data`: an int, or its variable in a model of a batch range."""
    from tvm import tirx

    dim = data.shape[0]
    return int(dim) if isinstance(dim, tirx.IntImm) else dim


def conv2d_nchwc(data, weight, strides, padding, dilation):
    """TE compute of a convolution in NCHW[x]c with an OIHW[x]i[y]o weight, its reduction over
    input channel blocks, window rows, columns, then lanes (TOPI's ``conv2d_NCHWc`` fuses the
    input channels into one axis read through a division, which schedules worse)."""
    from tvm import te

    batch = _batch(data)
    in_blocks, height, width = (int(v) for v in list(data.shape)[1:4])
    out_blocks, _, window_h, window_w, in_lanes, out_lanes = (int(v) for v in weight.shape)
    data, (out_h, out_w), (stride_h, stride_w), (dilation_h, dilation_w) = _padded_window(
        data, height, width, window_h, window_w, strides, padding, dilation)
    rc = te.reduce_axis((0, in_blocks), "rc")
    ry = te.reduce_axis((0, window_h), "ry")
    rx = te.reduce_axis((0, window_w), "rx")
    rl = te.reduce_axis((0, in_lanes), "rl")
    return te.compute(
        (batch, out_blocks, out_h, out_w, out_lanes),
        lambda n, f, y, x, lane: te.sum(
            data[n, rc, y * stride_h + ry * dilation_h, x * stride_w + rx * dilation_w, rl]
            * weight[f, rc, ry, rx, rl, lane], axis=[rc, ry, rx, rl]),
        name=BLOCK)


# the block of the depthwise compute
DEPTHWISE_BLOCK = "depthwise_conv2d_NCHWc"


def depthwise_layouts(lanes: int) -> tuple[str, str]:
    """``(data/output layout, weight layout)`` of depthwise convolutions (one input channel
    per output channel) in the blocked layout of `lanes` channels: ``NCHW{lanes}c`` and
    ``OIHW1i{lanes}o`` (``[C/lanes, 1, KH, KW, 1, lanes]``: a vector of `lanes` channels' weights
    per window position)."""
    return f"NCHW{lanes}c", f"OIHW1i{lanes}o"


def depthwise_conv2d_nchwc(data, weight, strides, padding, dilation):
    """TE compute of a depthwise convolution in NCHW[x]c with an OIHW1i[x]o weight:
    ``out[n, f, y, x, lane] = sum over ry, rx of data[n, f, y', x', lane] * weight[f, 0, ry, rx,
    0, lane]``, every multiply-add a whole vector of the block's channels."""
    from tvm import te

    batch = _batch(data)
    blocks, height, width, lanes = (int(v) for v in list(data.shape)[1:])
    _, _, window_h, window_w, _, _ = (int(v) for v in weight.shape)
    data, (out_h, out_w), (stride_h, stride_w), (dilation_h, dilation_w) = _padded_window(
        data, height, width, window_h, window_w, strides, padding, dilation)
    ry = te.reduce_axis((0, window_h), "ry")
    rx = te.reduce_axis((0, window_w), "rx")
    return te.compute(
        (batch, blocks, out_h, out_w, lanes),
        lambda n, f, y, x, lane: te.sum(
            data[n, f, y * stride_h + ry * dilation_h, x * stride_w + rx * dilation_w, lane]
            * weight[f, 0, ry, rx, 0, lane], axis=[ry, rx]),
        name=DEPTHWISE_BLOCK)
