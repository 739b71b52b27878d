"""Grouped 1x1 stride-1 convolutions (ShuffleNet's, ResNeXt's pointwise layers) as one matrix
product per group with the pixels as one axis padded to whole vectors: the compute that
preparation legalizes them to (the ``grouped-pixels-1x1`` rule schedules it).

TVM's own grouped convolution reads each group's input channels through a division of the
output channel and keeps the image's rows and columns apart, so its only contiguous axis is an
output row (ShuffleNet's 28, 14 and 7 columns: ragged vectors). Here the pixels of a group are
one axis of ``H * W`` padded up to a multiple of the vector lanes (zeros, cropped from the
output), and the group is an axis of its own.
"""

from __future__ import annotations

# the blocks of the compute: the input's pixels of each group (padded), the products, the crop
PIXELS_BLOCK = "grouped_pixels"
BLOCK = "grouped_conv2d_pixels"
CROP_BLOCK = "grouped_conv2d_crop"


def fits(data_shape, weight_shape, groups: int, strides, padding, dilation, dtypes) -> bool:
    """Whether a Relax ``conv2d`` (NCHW data, OIHW weight) is a grouped 1x1 convolution with
    stride 1 and no padding, neither ungrouped nor depthwise (one channel per group), with
    static shapes, its `dtypes` (the data's, the weight's and the output's) all float32."""
    from tvm import tirx

    if any(str(dtype) != "float32" for dtype in dtypes) or groups <= 1 \
            or len(data_shape) != 4 or len(weight_shape) != 4:
        return False
    if not all(isinstance(v, (int, tirx.IntImm)) for v in list(data_shape) + list(weight_shape)):
        return False  # a shape known only at run time
    channels = int(data_shape[1])
    out_channels, per_group, window_h, window_w = (int(v) for v in weight_shape)
    return (window_h, window_w) == (1, 1) and per_group > 1 and channels == per_group * groups \
        and out_channels % groups == 0 and out_channels // groups > 1 \
        and all(int(v) == 1 for v in strides) and all(int(v) == 0 for v in padding) \
        and all(int(v) == 1 for v in dilation)


def padded_pixels(pixels: int, lanes: int) -> int:
    """`pixels` rounded up to a multiple of `lanes`."""
    return -(-pixels // lanes) * lanes


def grouped_conv2d_1x1(data, weight, groups: int, lanes: int):
    """TE compute of a grouped 1x1 stride-1 convolution in NCHW with an OIHW weight.

    ``pixels[n, g, c, p]`` is group ``g``'s input channel ``c`` at pixel ``p = y * W + x``,
    zero for ``p >= H * W`` (the pixels padded to a multiple of `lanes`); ``products[n, g, o,
    p] = sum_c pixels[n, g, c, p] * weight[g * O + o, c]``; the output crops the padding.
    """
    from tvm import te, tirx

    batch, channels, height, width = (int(v) for v in data.shape)
    out_channels, per_group = int(weight.shape[0]), int(weight.shape[1])
    out_per_group = out_channels // groups
    pixels = height * width
    padded = padded_pixels(pixels, lanes)

    def pixel(n, g, c, p):
        value = data[n, g * per_group + c, p // width, p % width]
        return value if padded == pixels else tirx.if_then_else(
            p < pixels, value, tirx.const(0, data.dtype))

    flat = te.compute((batch, groups, per_group, padded), pixel, name=PIXELS_BLOCK)
    rc = te.reduce_axis((0, per_group), "rc")
    products = te.compute(
        (batch, groups, out_per_group, padded),
        lambda n, g, o, p: te.sum(flat[n, g, rc, p] * weight[g * out_per_group + o, rc, 0, 0],
                                  axis=rc),
        name=BLOCK)
    return te.compute(
        (batch, out_channels, height, width),
        lambda n, f, y, x: products[n, f // out_per_group, f % out_per_group, y * width + x],
        name=CROP_BLOCK)
