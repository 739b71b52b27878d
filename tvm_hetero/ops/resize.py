"""Bilinear resizing as two passes: the columns of every input row, then the rows.

TVM's ``resize2d`` computes each output from four input elements, with the source coordinates,
their floors, clamps and weights computed again for every output element: DeepLabV3's final
upsampling of 21 maps from 32x32 to 256x256 spent 1.9 ms (15 % of the model) on it. Bilinear
interpolation is separable, ``out[y, x] = sum_i wy_i(y) * sum_j wx_j(x) * in[i, j]``, and for a
static shape the source indices and weights of each output row and column are constants:
:func:`linear_tables` computes them once, at build time, as TVM's ``resize2d`` does per element
(the same float32 arithmetic and clamps). The kernel interpolates the input rows along the
columns (``in_h x out_w`` values from gathers), then the output rows from two of those rows
each (contiguous, in vector lanes): the ``separable-resize`` rule schedules it.
"""

from __future__ import annotations

import numpy as np

# the block names the rule recognizes the kernel by
COLUMNS_BLOCK = "resize_columns"
ROWS_BLOCK = "resize_rows"
# the coordinate transformations computed here (the others: TVM's resize2d)
MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def linear_tables(in_size: int, out_size: int, mode: str):
    """``(first, second, weight)`` of each output coordinate along one axis: the two source
    indices (clamped to the input) and the second's weight, ``out = in[first] * (1 - weight)
    + in[second] * weight``, with the source coordinate of ``coordinate_transformation_mode``
    `mode` computed in float32 as TVM's ``resize2d`` does."""
    if mode not in MODES:
        raise ValueError(f"linear_tables: no coordinate transformation {mode!r}")
    out = np.arange(out_size, dtype=np.float32)
    if mode == "align_corners":
        ratio = np.float32((in_size - 1) / (out_size - 1)) if out_size > 1 else np.float32(0)
        source = out * ratio
    else:
        ratio = np.float32(in_size / out_size)
        if mode == "asymmetric":
            source = out * ratio
        elif mode == "pytorch_half_pixel" and out_size == 1:
            source = np.zeros_like(out)
        else:
            source = (out + np.float32(0.5)) * ratio - np.float32(0.5)
    floor = np.floor(source)
    first = np.clip(floor, 0, in_size - 1).astype("int64")
    second = np.clip(floor + 1, 0, in_size - 1).astype("int64")
    return first, second, (source - floor).astype("float32")


def separable_linear(data, row_first, row_second, row_weight, col_first, col_second,
                     col_weight):
    """The TE compute: ``data`` (NCHW) resized by the tables of the rows and the columns
    (:func:`linear_tables`, as tensors): the columns pass, then the rows pass."""
    from tvm import te, tirx

    batch, channels, height, width = data.shape
    out_h, out_w = row_first.shape[0], col_first.shape[0]
    one = te.const(1, data.dtype)

    def within(index, extent):
        # the tables hold clamped indices already; the clamp bounds the region a pass reads
        # for TIR's analysis (the columns computed per map)
        return tirx.max(tirx.min(index, extent - 1), 0)

    columns = te.compute(
        (batch, channels, height, out_w),
        lambda n, c, y, x: data[n, c, y, within(col_first[x], width)] * (one - col_weight[x])
        + data[n, c, y, within(col_second[x], width)] * col_weight[x], name=COLUMNS_BLOCK)
    return te.compute(
        (batch, channels, out_h, out_w),
        lambda n, c, y, x: columns[n, c, within(row_first[y], height), x]
        * (one - row_weight[y])
        + columns[n, c, within(row_second[y], height), x] * row_weight[y], name=ROWS_BLOCK)
