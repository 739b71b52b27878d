"""The ``depthwise-rows`` CPU rule: stride-1 depthwise convolutions (NCHW, one input channel per
output channel) with output rows of at least 28: each parallel task a block of one channel's output
rows, lanes along the row, the window unrolled so each loaded input row serves every output row it
reaches; epilogue per tile.

What: a register tile is 4 output rows of one channel (the largest divisor of the height up to 4)
times the row in vectors (the whole row up to two vectors of the target's lanes, else its largest
divisor up to that). The window's rows and columns and the tile's rows are unrolled, so LLVM merges
the tile's loads of one input row at one column offset. Tasks are (channel, row block); the padding
is computed per task (a few rows of one channel); the epilogue (bias, Clip, SiLU, HardSwish, batch
norm) per tile.

Why: ``(R + K - 1) * K`` loads per ``R * K * K`` multiply-adds, where ``tiled`` (16 channels x 16
lanes, one channel per row of the tile) loads once per multiply-add. MobileNetV2's 144 x 56 x 56
stride 1: 0.47 ms, ``tiled`` 2.1 (znver4, shared machine).

Declined, because ``tiled`` ran faster with this schedule: stride 2 (MobileNetV2's 144 x 56 x 56 ->
28 x 28: ``tiled`` 0.33 ms, this schedule 0.37; ``strided-depthwise-rows`` takes those now) and rows
of 14 or 7 (576 x 14 x 14: ``tiled`` 1.8 ms, this schedule 3.3): a task per 7- or 14-wide row block
is too little work, and ``tiled``'s 16 channels per tile fill the vector. Those need channels in the
vector lanes: in models that go blocked, ``depthwise-nchwc`` takes them.
"""

from __future__ import annotations

from ...target import vector_lanes
from ..choices import choose
from ..rule import Rule
from .analysis import largest_divisor, loop_extent
from .schedule_helpers import epilogue_at, inline_identity_copies, prologue_per_task, static_conv

# Output rows per register tile: with a K-row window, R rows load R + K - 1 input rows (times K
# column offsets) for R * K * K multiply-adds, against K * K loads per row one row at a time.
DEPTHWISE_ROWS = 4
# Only rows at least this wide, walked with stride 1: on 14- and 7-wide rows (a task per row
# block of 14 or 7 columns) and with stride 2 `tiled` (16 channels x the row) ran faster
# (MobileNetV2's 576 x 14 x 14: 1.8 against 3.3 ms; 144 x 56 x 56 -> 28 x 28: 0.33 against 0.37;
# its 144 x 56 x 56 stride 1: 2.1 against 0.47 ms, znver4, shared machine).
MIN_ROW = 28


def depthwise_block(func, sch, block_rv) -> bool:
    """Whether `block_rv` is a depthwise NCHW convolution: ``out[n, f, y, x] += data[n, f + rc,
    y', x + rx] * weight[f, rc, ry, rx]`` with one input channel per group (``rc`` of extent 1),
    stride 1 along rows of at least `MIN_ROW` outputs."""
    from tvm.tirx.analysis import undefined_vars

    block = sch.get(block_rv)
    iters = block.iter_vars
    if len(iters) != 7 or len(block.writes) != 1 or len(block.reads) != 2:
        return False
    n, f, y, x, rc, ry, rx = (iv.var for iv in iters)
    if int(iters[4].dom.extent) != 1:
        return False  # grouped with several input channels per group: not depthwise
    out = block.writes[0]
    if len(out.region) != 4 or not all(r.min.same_as(v) for r, v in zip(out.region,
                                                                         (n, f, y, x))):
        return False
    params = list(func.params)
    weight = [r for r in block.reads if any(p.same_as(r.source) for p in params)
              and len(r.region) == 4 and r.region[0].min.same_as(f)]
    data = [r for r in block.reads if not r.source.same_as(weight[0].source)] if weight else []
    if len(weight) != 1 or len(data) != 1 or len(data[0].region) != 4:
        return False
    # the data's channel index uses f (grouped), its last index x and the window's rx
    def uses(index, var) -> bool:
        return any(v.same_as(var) for v in undefined_vars(data[0].region[index].min))

    if not (uses(1, f) and uses(3, x) and not uses(3, y) and not uses(3, n)):
        return False
    # stride 1 along the row: the input row is the output row plus the window, less one
    width, window = int(iters[3].dom.extent), int(iters[6].dom.extent)
    return int(data[0].source.shape[3]) == width + window - 1 and width >= MIN_ROW


class DepthwiseRows(Rule):
    """The ``depthwise-rows`` rule: depthwise convolutions (NCHW): a task per block of one
    channel's output rows, lanes along the row, the window unrolled; epilogue per tile."""

    name = "depthwise-rows"
    description = ("depthwise convolutions (NCHW): a task per block of one channel's output "
                   "rows, lanes along the row, the window unrolled; epilogue per tile")
    kinds = ("conv2d",)
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a depthwise NCHW convolution (MobileNet's, EfficientNet's).

        A register tile is `DEPTHWISE_ROWS` output rows (the largest divisor of the height up
        to it) times the row's columns in vectors (the largest divisor of the width up to two
        vectors of the target's lanes): loops ``n, channel, row block (parallel tasks), column
        block, window rows, window columns (unrolled), rows (unrolled), columns (vectorized)``.
        Unrolled, the tile's loads of the same input row at the same column offset are one
        load (LLVM's value numbering): ``(R + K - 1) * K`` loads per ``R * K * K`` multiply-adds
        where ``tiled`` (16 channels x 16 lanes) loads once per multiply-add. The epilogue
        (bias, Clip, SiLU, HardSwish, batch norm) is computed per tile; real padding per task
        (a task pads its own channel's few rows). Returns None for anything else (grouped
        convolutions with several input channels per group, the blocked layout).
        """
        found = static_conv(func, 7)
        if found is None:
            return None
        lanes, _ = vector_lanes(target)
        sch, blocks, main_index, loops, _ = found
        conv = blocks[main_index]
        if not depthwise_block(func, sch, conv):
            return None
        width = loop_extent(sch, loops[3])
        columns = width if width <= 2 * lanes else largest_divisor(width, 2 * lanes)
        if 2 * columns < lanes:
            # a width with no divisor of at least half a vector up to two vectors (37 wide: 1
            # column per tile, 58 with 8 lanes: 2): the tile would run (nearly) scalar, and a
            # tile of 1 x 1 left the epilogue no loop ("not enough values to unpack")
            return None
        prologue = inline_identity_copies(sch, blocks[:main_index])
        tail = [sch.cache_write(conv, 0, "local")] + list(blocks[main_index + 1:])
        for block_rv in tail[:-1]:
            sch.compute_inline(block_rv)
        n, f, y, x, rc, ry, rx = sch.get_loops(conv)
        rows = largest_divisor(loop_extent(sch, y), choose(
            "depthwise-rows", [DEPTHWISE_ROWS, DEPTHWISE_ROWS // 2, 2 * DEPTHWISE_ROWS]))
        y_outer, y_inner = sch.split(y, [None, rows])
        x_outer, x_inner = sch.split(x, [None, columns])
        sch.reorder(n, f, y_outer, x_outer, rc, ry, rx, y_inner, x_inner)
        *tile, tile_lane = epilogue_at(sch, tail[-1], x_outer)  # rows; columns
        sch.vectorize(tile_lane)
        for loop in tile:
            sch.unroll(loop)
        tasks = sch.fuse(n, f, y_outer)
        for loop in (ry, rx, y_inner):
            sch.unroll(loop)
        sch.vectorize(x_inner)
        sch.parallel(tasks)
        init = sch.decompose_reduction(conv, rc)
        sch.vectorize(sch.get_loops(init)[-1])
        for block_rv in prologue:  # padding: per task, else first over channels and rows
            if not prologue_per_task(sch, block_rv, tasks, target):
                prologue_loops = sch.get_loops(block_rv)
                sch.parallel(sch.fuse(*prologue_loops[:3]))
        return sch.mod["main"]
