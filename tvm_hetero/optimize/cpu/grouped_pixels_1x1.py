"""The ``grouped-pixels-1x1`` CPU rule: grouped 1x1 stride-1 convolutions (ShuffleNet's and
ResNeXt-style pointwise layers) in preparation's padded-pixel form
(:mod:`tvm_hetero.ops.grouped_conv1x1`): per group a matrix product with vector lanes along the
pixels; register tiles of channels x pixel vectors.

What: the group is an axis of its own and the pixels ``y * W + x`` one axis padded with zeros to
whole vectors (196 -> 208, 49 -> 64 with 16 lanes), cropped back into NCHW after. The register tile
is r channels of one group x v pixel vectors, chosen as ``pixel-lanes-1x1`` chooses (r dividing the
group's output channels). Tasks are (image, group), split by output channels when fewer than the
target's cores; each task pads its group's pixels once (in place when they are whole vectors); the
epilogue (crop, bias, ReLU, residual) per row of tiles.

Why: TVM's grouped convolution reads a group's input channels through ``f // (F/G)`` and keeps rows
and columns apart, so ``tiled`` got lanes along an output row: ShuffleNet's 28-, 14- and 7-wide rows
with 34-136 channels per group (no whole channel vectors either), about 90 % of its kernel time.
With this form and rule ShuffleNet ran 4.19 -> 2.48 ms (znver4) and 5.22 -> 2.93 ms (haswell).
"""

from __future__ import annotations

from ...devices import host_num_cores
from ...ops import grouped_conv1x1
from ...target import cpu_traits
from ..rule import Rule
from .analysis import loop_extent, loops_under, one_reduction
from .pixel_lanes_1x1 import pixel_tile
from .schedule_helpers import PACKED_ACCUMULATORS


def _cores(target) -> int:
    """The target's ``num-cores``, else the host's."""
    cores = target.attrs.get("num-cores") if hasattr(target, "attrs") else None
    return int(cores) if cores else host_num_cores()


def _vectorize_lanes(sch, loop, lanes: int) -> None:
    """Vectorize `loop` in vectors of `lanes` where they divide it, else whole up to 16
    vectors (LLVM splits it); a longer ragged loop is left to LLVM."""
    extent = loop_extent(sch, loop)
    if extent is None:
        return
    if extent % lanes == 0 and extent > lanes:
        sch.vectorize(sch.split(loop, [None, lanes])[1])
    elif extent <= 16 * lanes:
        sch.vectorize(loop)


class GroupedPixels1x1(Rule):
    """The ``grouped-pixels-1x1`` rule: grouped 1x1 convolutions (preparation's padded-pixel
    form): per group a matrix product with vector lanes along the pixels; register tiles of
    channels x pixel vectors."""

    name = "grouped-pixels-1x1"
    description = ("grouped 1x1 convolutions (preparation's padded-pixel form): per group a "
                   "matrix product with vector lanes along the pixels; register tiles of "
                   "channels x pixel vectors")
    kinds = ("conv2d",)
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule :func:`tvm_hetero.ops.grouped_conv1x1.grouped_conv2d_1x1`.

        A register tile of r output channels of one group x v vectors of its pixels
        accumulates over the group's input channels (v vector loads of the input, r weight
        broadcasts, r * v fused multiply-adds per step; the tile chosen as ``pixel-lanes-1x1``
        chooses it); the parallel tasks are the (image, group) pairs, split further by output
        channels when fewer than the target's cores. Each task copies its group's pixels once
        (zero-padded to whole vectors; inlined when no padding is needed), and the epilogue
        (crop, bias, activation, residual) is computed per row of tiles while they are in
        cache. Returns None for other kernels, or when the padded pixels are not whole vectors
        of the target (a compute prepared for other lanes).
        """
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        try:
            conv = sch.get_sblock(grouped_conv1x1.BLOCK)
            pixels = sch.get_sblock(grouped_conv1x1.PIXELS_BLOCK)
        except (s_tir.ScheduleError, ValueError):
            return None
        found = one_reduction(sch)
        if found is None or not sch.get(found[0][found[1]]).same_as(sch.get(conv)):
            return None
        blocks, main_index = found
        traits = cpu_traits(target)
        lanes, registers = traits.lanes, traits.registers
        batch, groups, out_per_group, padded, per_group = (
            loop_extent(sch, loop) for loop in sch.get_loops(conv))
        if padded % lanes:
            return None
        tile = pixel_tile(out_per_group, padded // lanes, per_group, lanes,
                           PACKED_ACCUMULATORS[registers], registers, traits.l1_bytes)
        if tile is None:
            return None
        rows, vectors = tile
        prologue = [b for b in blocks[:main_index] if not sch.get(b).same_as(sch.get(pixels))]
        tail = blocks[main_index + 1:]
        try:
            for block_rv in prologue:  # what feeds the pixels (a shuffle of the input)
                sch.compute_inline(block_rv)
            for block_rv in tail[:-1]:  # the crop into the epilogue
                sch.compute_inline(block_rv)
        except s_tir.ScheduleError:
            return None
        last = tail[-1]
        out = sch.get(last).writes[0].source
        if len(out.shape) != 4:
            return None
        width = int(out.shape[3])
        try:  # the output's pixels as one axis, as the products have them
            sch.transform_block_layout(last, lambda n, f, y, x: (n, f, y * width + x))
        except s_tir.ScheduleError:
            return None

        n, g, o, p, rc = sch.get_loops(conv)
        o_outer, o_inner = sch.split(o, [None, rows])
        tasks = batch * groups
        row_tiles = out_per_group // rows
        chunks = min([d for d in range(1, row_tiles + 1) if row_tiles % d == 0
                      and tasks * d >= _cores(target)] or [row_tiles])
        o_chunk, o_outer = sch.split(o_outer, [chunks, None])
        p_outer, p_vectors, p_lanes = sch.split(p, [None, vectors, lanes])
        sch.reorder(n, g, o_chunk, o_outer, p_outer, rc, o_inner, p_vectors, p_lanes)
        task = sch.fuse(n, g, o_chunk)
        accumulate = sch.cache_write(conv, 0, "local")
        sch.reverse_compute_at(accumulate, p_outer)
        *_, acc_pixels = sch.get_loops(accumulate)
        _vectorize_lanes(sch, acc_pixels, lanes)
        sch.reverse_compute_at(last, o_outer)  # the tile row's channels, every pixel
        *_, out_pixels = sch.get_loops(last)
        _vectorize_lanes(sch, out_pixels, lanes)
        if padded == int(out.shape[2]) * width:
            sch.compute_inline(pixels)  # whole vectors already: read the input in place
        else:
            sch.compute_at(pixels, task)  # the group's pixels, padded, once per task
            *_, pixel_loop = loops_under(sch, pixels, task)
            _vectorize_lanes(sch, pixel_loop, lanes)
        sch.unroll(o_inner)
        sch.unroll(p_vectors)
        sch.vectorize(p_lanes)
        sch.parallel(task)
        init = sch.decompose_reduction(conv, rc)
        sch.vectorize(sch.get_loops(init)[-1])
        return sch.mod["main"]
