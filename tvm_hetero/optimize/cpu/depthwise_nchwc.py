"""The ``depthwise-nchwc`` CPU rule: depthwise convolutions in the blocked layout NCHW[x]c:
register tiles of output rows x columns of one channel block, each a contiguous vector of the
block's channels; the window unrolled; epilogue per tile.

Padding: each task pads the input rows its row tile reads, in the same parallel region
(:func:`~.schedule_helpers.prologue_per_task`), where they fit L1. Where they do not (rows of
400 pixels x 16 lanes: 25.7 KB each, Faster R-CNN's MobileNetV3 backbone at 800 x 800), a task
takes a band of row tiles whose padded rows fill at most half of L2 (:func:`padding_band`) and
pads that band: the input is read from memory once and the padded copy is read back from L2.
Rejected: one padded copy of the whole input before the tasks (what such kernels got before):
the 64-channel 400 x 400 input is 41 MB, written and read back from memory, 2-2.5x the kernel's
time alone (64ch 400 -> 200 at stride 2, 16ch 400 x 400 at stride 1); and a task per row tile
padding its own rows out of L1 (the window's rows padded again by every tile reading them:
1.5x slower than the one copy)."""

from __future__ import annotations

from ...ops.conv2d_nchwc import DEPTHWISE_BLOCK
from ...target import cpu_traits, vector_lanes
from ..choices import choose
from ..rule import Rule
from .analysis import loop_extent
from .schedule_helpers import blocked_conv_start, epilogue_at, finish_register_tile


def depthwise_tile(height: int, width: int, accumulators: int) -> tuple[int, int]:
    """``(output rows, output columns)`` of a register tile of at most `accumulators` vectors,
    each dividing its extent: the whole row's columns when they fit (7, 14, 28 of them: no
    ragged tile), else the most columns; then as many rows as fit."""
    columns = max(w for w in range(1, min(width, accumulators) + 1) if width % w == 0)
    rows = max(r for r in range(1, accumulators // columns + 1) if height % r == 0)
    return rows, columns


# Accumulators of a depthwise register tile. Against half the vector registers (1 x 14 or
# 1 x 16 tiles), the suite's 3x3 and 5x5 depthwise kernels (MobileNetV2, MobileNetV3's and
# EfficientNet's blocks), each alone, 5 alternating rounds: 4 accumulators 0.83x the time on
# znver4 (13 kernels, 0.61-0.99 each) and 0.93x on haswell (15 kernels), 8 accumulators
# 0.90x on znver4; 2 on haswell 1.15x.
DEPTHWISE_ACCUMULATORS = 4


def small_depthwise_tile(height: int, width: int) -> tuple[int, int]:
    """`depthwise_tile` of `DEPTHWISE_ACCUMULATORS`, or of twice as many, and so on, until
    the tile holds that many (a 7-wide row: 1 x 7, not 1 x 1)."""
    accumulators = DEPTHWISE_ACCUMULATORS
    while True:
        rows, columns = depthwise_tile(height, width, accumulators)
        if rows * columns >= DEPTHWISE_ACCUMULATORS or accumulators >= height * width:
            return rows, columns
        accumulators *= 2


def padding_band(padded_width: int, lanes: int, rows: int, stride: int, window: int,
                  tile_rows: int, target) -> int:
    """Row tiles per parallel task: 1 where a task's padded input rows (one channel block's
    ``(rows - 1) * stride + window`` rows of `padded_width` vectors of `lanes`) fit the L1
    data cache; else the most tiles of the `tile_rows` tiles whose padded rows (a band) fill
    at most half the L2 cache, so that each task pads its band in L2 instead of one padded copy
    of the whole input (Faster R-CNN's 800 x 800 backbone: 64 channels at 400 x 400, a 41 MB
    copy written and read back from memory)."""
    traits = cpu_traits(target)
    row_bytes = padded_width * lanes * 4
    if ((rows - 1) * stride + window) * row_bytes <= traits.l1_bytes:
        return 1
    fits = [band for band in range(1, tile_rows + 1) if tile_rows % band == 0
            and ((band * rows - 1) * stride + window) * row_bytes <= traits.l2_bytes // 2]
    return max(fits, default=1)


class DepthwiseNCHWc(Rule):
    """The ``depthwise-nchwc`` rule: depthwise convolutions in the blocked layout NCHW[x]c: a
    register tile of output rows x columns of one channel block, each a vector of the block's
    channels, the window unrolled; epilogue per tile."""

    name = "depthwise-nchwc"
    description = ("depthwise convolutions in the blocked layout NCHW[x]c: register tiles of "
                   "output rows x columns of one channel block, the window unrolled; "
                   "epilogue per tile")
    kinds = ("conv2d",)
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a depthwise convolution in NCHW[lanes]c (see ``tvm_hetero.prepare``).

        ``out[n, f, y, x, lane] += data[n, f, y', x', lane] * weight[f, 0, ry, rx, 0, lane]``:
        every multiply-add is one whole vector of `lanes` channels (any stride, any row width:
        NCHW's rows of 7 or 14 pixels at stride 2 gave half-empty or gathered vectors). A
        register tile of output rows x columns (`small_depthwise_tile`: about
        `DEPTHWISE_ACCUMULATORS` vectors) accumulates over the unrolled window; with stride 1
        the tile's loads of one input vector are one load (LLVM's value numbering), and each
        window position's weight vector is loaded once per tile. Tasks: batch x channel
        blocks x row tiles.
        The epilogue (bias, Clip, HardSwish, SiLU) runs per tile on whole vectors; real padding
        per task. Returns None for other kernels (other layouts, blocks that are not one
        vector of the target).
        """
        started = blocked_conv_start(func, target, 7, DEPTHWISE_BLOCK)
        if started is None:
            return None
        sch, conv, prologue, tail = started
        lanes, registers = vector_lanes(target)
        n, f, y, x, lane, ry, rx = sch.get_loops(conv)
        height, width = loop_extent(sch, y), loop_extent(sch, x)
        # tuning's alternatives: half, a quarter, an eighth of the registers
        rows, columns = choose("depthwise-tile", list(dict.fromkeys(
            [small_depthwise_tile(height, width)]
            + [depthwise_tile(height, width, registers * share // 8) for share in (4, 2, 1)])))
        y_outer, y_inner = sch.split(y, [None, rows])
        x_outer, x_inner = sch.split(x, [None, columns])
        band = 1
        if len(prologue) == 1:
            padded = [int(d) for d in sch.get(prologue[0]).writes[0].source.shape]
            window = loop_extent(sch, ry)
            stride = (padded[2] - window) // max(height - 1, 1)  # of the input rows
            band = choose("padding-band", [padding_band(
                padded[3], lanes, rows, stride, window, height // rows, target), 1])
        if band > 1:  # tasks of `band` row tiles, each padding its band
            y_band, y_outer = sch.split(y_outer, [None, band])
            task_loops = [n, f, y_band]
        else:
            task_loops = [n, f, y_outer]
        sch.reorder(*task_loops, *([y_outer] if band > 1 else []), x_outer, ry, rx, y_inner,
                    x_inner, lane)
        *tile, tile_lane = epilogue_at(sch, tail[-1], x_outer)  # rows, columns; lanes
        for loop in (ry, rx):
            sch.unroll(loop)
        finish_register_tile(sch, conv, epilogue_loops=tile, epilogue_lane=tile_lane,
                             task_loops=task_loops, tile=[y_inner, x_inner], lane=lane,
                             first_reduction=ry, prologue=[] if band > 1 else prologue,
                             prologue_depth=3, target=target)
        if band > 1:
            sch.compute_at(prologue[0], sch.get_loops(conv)[0])
        for block_rv in prologue:  # padding copies whole vectors of the block's channels
            sch.vectorize(sch.get_loops(block_rv)[-1])
        return sch.mod["main"]
