"""The ``pixel-lanes-1x1`` CPU rule: 1x1 stride-1 NCHW convolutions: a matrix product over the
pixels ``y * W + x`` with vector lanes along them (contiguous input, residual and output); register
tiles of channels x pixel vectors.

What: a register tile is r output channels x v pixel vectors (v vector loads, r weight broadcasts,
r * v fused multiply-adds per input channel), chosen for the fewest loads per multiply-add with at
most 16 accumulators and the input panel (channels x tile pixels) within the L1 cache. The pixel
tiles are the outer parallel loop, the output-channel tiles inside, so each panel is reused from
cache.

Why: with lanes along the output channels (``packed-weights``) the epilogue scatters the output one
lane per channel plane (planes 12.5 KB apart at 56x56) and gathers a residual the same way; along
the pixels the input, a residual and the output are whole vectors.

Declined, and rejected alternatives: pixels that are not a multiple of the lanes (14x14, 7x7,
SqueezeNet's 55x55, 27x27, 13x13). Ragged vectors need predicates, and TVM then scalarizes the tile
(3x slower on SqueezeNet's classifier; ``tirx.enable_buffer_level_predication`` did not change it);
14- or 13-lane vectors (the largest divisor of the pixels) ran 3-6x slower than ``packed-weights``;
``loop_partition`` can split off the ragged tail, but its partition blocks carry whole-buffer
regions, so the epilogue can no longer be computed at the tile. Declined too where the epilogue
broadcasts the convolution's output over more images, rows or columns: the pixels renumbered per
image are not the epilogue's, and the rule raised.
"""

from __future__ import annotations

from ...layers.classify import kernel_kind
from ...target import cpu_traits
from ..choices import choose
from ..rule import Rule
from .analysis import direct_conv
from .schedule_helpers import PACKED_ACCUMULATORS, accumulate_in_registers, tile_registers


def pixel_tile(out_channels: int, pixel_vectors: int, in_channels: int, lanes: int,
                accumulators: int, registers: int,
                panel_bytes: int) -> tuple[int, int] | None:
    """``(output channels, pixel vectors)`` per register tile of the pixel-lane rule: the
    fewest loads per multiply-add (r channels x v vectors: v vector loads and r broadcasts
    for r * v multiply-adds), then the largest tile, with the input panel (channels x tile
    pixels) in `panel_bytes` (the L1 data cache: it stays there while every output-channel
    tile of it is computed); both divide their extents. At most `accumulators`, within the
    target's `registers` (`tile_registers`: the pixel vectors innermost). None when no tile
    fits."""
    options = [(r, v) for r in range(1, min(out_channels, accumulators) + 1)
               if out_channels % r == 0
               for v in range(1, pixel_vectors + 1) if pixel_vectors % v == 0
               and r * v <= accumulators and tile_registers(r, v) <= registers
               and in_channels * v * lanes * 4 <= panel_bytes]
    if not options:
        return None
    return choose("pixel-tile", sorted(
        options, key=lambda rv: ((rv[0] + rv[1]) / (rv[0] * rv[1]), -rv[0] * rv[1])))


class PixelLanes1x1(Rule):
    """The ``pixel-lanes-1x1`` rule: 1x1 stride-1 convolutions: a matrix product with vector lanes
    along the pixels (contiguous output and residual); register tiles of channels x pixel
    vectors."""

    name = "pixel-lanes-1x1"
    description = ("1x1 stride-1 convolutions: a matrix product with vector lanes along the "
                   "pixels (contiguous output and residual); register tiles of channels x "
                   "pixel vectors")
    kinds = ("conv2d",)
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a 1x1, stride-1 NCHW convolution as a matrix product with vector lanes along
        the pixels.

        With lanes along the output channels (``packed-weights``) the epilogue scatters the output
        (and gathers a residual) across channel planes, one lane per plane; here output pixels
        ``y * W + x`` are one contiguous axis for the input, a residual and the output, so every
        load and store is a whole vector. A register tile of r output channels x v pixel vectors
        accumulates over the input channels (v vector loads, r weight broadcasts, r * v fused
        multiply-adds per step); the pixel tiles are the outer parallel loop, so each input panel
        stays in cache across the output-channel tiles; the epilogue writes each tile out.
        Measured on ResNet-50 (2 threads), against ``packed-weights``: 64 -> 256 channels at 56x56
        with the residual add 0.50 -> 0.26 ms, 128 -> 512 at 28x28 0.31 -> 0.27 ms; without a
        residual (the short 64-channel reduction makes the scatter count) 64 -> 256 at 56x56
        1.03 -> 0.75 ms in the machine's slow state, the other 1x1 convolutions the same or
        slightly faster. Returns None for other kernels (and when the pixels are not a multiple
        of the vector lanes: ragged vectors ran 3x slower, 14- or 13-lane ones 3-6x).
        """
        from tvm import s_tir
        from tvm.sym.analyzer import Analyzer

        if kernel_kind(func) != "conv2d":
            return None
        traits = cpu_traits(target)
        lanes, registers = traits.lanes, traits.registers
        sch = s_tir.Schedule(func)
        found = direct_conv(func, sch)
        if found is None:
            return None
        blocks, main_index, weight_index = found
        conv = blocks[main_index]
        weight = func.params[weight_index].ty
        out = sch.get(blocks[-1]).writes[0].source
        if str(weight.dtype) != "float32" or any(int(d) != 1 for d in weight.shape[2:]) \
                or len(out.shape) != 4 or len(sch.get_loops(conv)) != 7:
            return None
        out_shape = [int(d) for d in out.shape]
        conv_shape = [int(d) for d in sch.get(conv).writes[0].source.shape]
        if len(conv_shape) != 4 or out_shape[0] != conv_shape[0] \
                or out_shape[2:] != conv_shape[2:] or out_shape[1] > conv_shape[1]:
            # an epilogue broadcasting the convolution's output over more images, rows or
            # columns (an add of [1, C, 8, 1] and [1, C, 8, 16]): the pixels renumbered per
            # image are not the epilogue's ("Could not parse mapping as sum of iterators");
            # fewer channels are the slice of padded output channels
            return None
        pixels = out_shape[2] * out_shape[3]
        if pixels % lanes:
            return None
        in_channels = int(weight.shape[1])
        tile = pixel_tile(out_shape[1], pixels // lanes, in_channels, lanes,
                           PACKED_ACCUMULATORS[registers], registers, traits.l1_bytes)
        if tile is None:
            return None
        rows, vectors = tile
        try:
            for block_rv in blocks[:main_index]:  # stride 1, no padding: only identity copies
                sch.compute_inline(block_rv)
        except s_tir.ScheduleError:
            return None
        block = sch.get(conv)
        _, _, y, x, _, ry, rx = (iv.var for iv in block.iter_vars)
        data = [r for r in block.reads if not r.source.same_as(func.params[weight_index])]
        analyzer = Analyzer()
        analyzer.bind(ry, 0)  # the 1x1 window's unit loops
        analyzer.bind(rx, 0)
        if len(data) != 1 or not all(analyzer.can_prove_equal(r.min, v)
                                     for r, v in zip(data[0].region[2:], (y, x))):
            return None  # strided or shifted input: not a matrix product over the pixels
        width = out_shape[3]
        accumulate = sch.cache_write(conv, 0, "local")
        tail = [accumulate] + list(blocks[main_index + 1:])
        for block_rv in tail[:-1]:
            sch.compute_inline(block_rv)
        last = tail[-1]
        try:
            sch.transform_layout(conv, ("write", 0), lambda n, f, y, x: (n, f, y * width + x))
            sch.transform_block_layout(
                conv, lambda n, f, y, x, rc, ry, rx: (n, f, y * width + x, rc, ry, rx))
            sch.transform_block_layout(last, lambda n, f, y, x: (n, f, y * width + x))
        except s_tir.ScheduleError:
            return None
        n, f, p, rc, ry, rx = sch.get_loops(conv)
        f_outer, f_inner = sch.split(f, [None, rows])
        p_outer, p_vectors, p_lanes = sch.split(p, [None, vectors, lanes])
        sch.reorder(n, p_outer, f_outer, rc, ry, rx, f_inner, p_vectors, p_lanes)
        parallel = sch.fuse(n, p_outer, f_outer)
        sch.reverse_compute_at(last, parallel)
        *tile_rows, tile_pixels = sch.get_loops(last)[1:]
        tile_vectors, tile_lanes = sch.split(tile_pixels, [None, lanes])
        sch.vectorize(tile_lanes)
        for loop in tile_rows + [tile_vectors]:  # constant indices: accumulators in registers
            sch.unroll(loop)
        accumulate_in_registers(sch, conv, [f_inner, p_vectors], p_lanes, parallel, rc)
        return sch.mod["main"]
