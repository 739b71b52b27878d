"""The ``winograd`` CPU rule: 3x3 stride-1 convolutions as Winograd F(4x4, 3x3) in NCHW16c (chosen
at preparation, :mod:`tvm_hetero.ops.winograd`): one parallel task per row of output tiles computes
everything that row needs, its padded input rows, their transform, the 36 channel products in
register tiles, the inverse transform and the output rows with the fused epilogue.

What: each 4x4 output tile comes from a 6x6 input tile with 36 products per (input, output) channel
pair instead of 144. The weights are transformed once, at preparation. Per call the kernel
transforms the input tiles (``B^T d B``), multiplies per (e, n) of the 6x6 transform domain (36
small matrix products) and transforms back (``A^T M A``). The transforms are vectorized along the 16
channel lanes and unrolled over their constant matrices, so the ``Select`` on each matrix row folds
away. The products are register tiles of tile columns x channel vectors (``packed_tile``, its weight
vectors innermost) accumulated over the input channels per (e, n), so a task reads each transformed
weight once.

Why: one thread-pool launch per kernel and no data crossing cores. It runs blocked because in NCHW
the transforms read and write across channel planes, and TVM scalarizes strided vector accesses: the
same kernel in NCHW took 0.78 of the direct one's time at 16 channels and 32x32, against 0.39
blocked. It pays on the zoo models, SqueezeNet and ResNet-50's 56x56 and 28x28 layers
(docs/measurements.md, "Winograd convolutions"). Numerics: largest relative error against float64
direct convolution 1.2e-6 (16-32 channels) to 8e-6 (512).

Rejected: Winograd where the transformed weights are large against the tiles, since each task reads
them once and a layer with few tiles streams them for little work. Preparation keeps those direct:
ResNet-50's 512-channel 7x7 layer (4 tiles) ran 4x slower as Winograd, and adding its 14x14 layers
(9.4 MB of weights, 16 tiles) made the model about 2 % slower. MetaSchedule is not asked to tune
these kernels: it does not unroll the transforms over their constant matrices, and its best after
128 trials on the 32-channel layer was 389 us. A kernel of one tile row is declined (its schedule
raised in ``reorder``).
"""

from __future__ import annotations

from ...layers.classify import kernel_kind
from ...ops.winograd import OUT_BLOCK, STAGES, is_winograd
from ...target import vector_lanes
from ..rule import Rule
from .analysis import largest_divisor
from .schedule_helpers import PACKED_ACCUMULATORS, packed_tile

__all__ = ["Winograd", "is_winograd"]


def products_tile(channel_blocks: int, tile_cols: int, vectors_per_block: int,
                  registers: int) -> tuple[int, int]:
    """``(channel blocks, tile columns)`` per register tile of the channel products: blocks of
    one vector each (the layout's blocks as wide as the target's vectors) take `packed_tile`'s
    tile (weight vectors innermost); wider blocks (a layout prepared for wider vectors than
    the target's) two blocks, if the channels allow, and as many columns as the accumulators
    leave. AVX2 with the former fixed 2 blocks: 2 x 2 tiles on ResNet-50's 56x56 layers (14
    tile columns), 2 x 1 on its 28x28 ones (7)."""
    accumulators = PACKED_ACCUMULATORS[registers]
    if vectors_per_block == 1:
        return packed_tile(channel_blocks, tile_cols, accumulators, registers,
                           vectors_inner=True)
    k_blocks = 2 if channel_blocks % 2 == 0 and 2 * vectors_per_block <= accumulators else 1
    return k_blocks, largest_divisor(tile_cols, max(1, accumulators
                                                     // (k_blocks * vectors_per_block)))


class Winograd(Rule):
    """The ``winograd`` rule: 3x3 stride-1 convolutions as Winograd F(4x4, 3x3) in NCHW16c (chosen
    at preparation): one parallel task per row of output tiles computes its input transform,
    the channel products in register tiles, the inverse transform and the epilogue."""

    name = "winograd"
    description = ("3x3 stride-1 convolutions as Winograd F(4x4, 3x3) in NCHW16c (chosen at "
                   "preparation): one parallel task per row of output tiles computes its input"
                   " transform, the channel products in register tiles, the inverse transform "
                   "and the epilogue")
    kinds = ("conv2d",)
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a Winograd F(4x4, 3x3) convolution in NCHW16c (preparation writes it: the
        blocks of :func:`tvm_hetero.ops.winograd.conv2d_nchwc`).

        One parallel task per row of output tiles computes everything that row needs: its padded
        input rows, their transform, the 36 channel products, the inverse transform and the output
        rows with the fused epilogue (no data crosses tasks, one thread-pool launch). The
        transforms are unrolled over the constant matrices (only their nonzero terms remain) and
        vectorized along the channel lanes; the products are register tiles of tile columns x
        channel vectors (`products_tile`) accumulated over the input channels. Returns None for
        other kernels.
        """
        from tvm import s_tir

        if kernel_kind(func) != "conv2d":
            return None
        sch = s_tir.Schedule(func)
        try:  # (what is_winograd checks)
            stages = [sch.get_sblock(name) for name in STAGES]
            out = sch.get_sblock(OUT_BLOCK)
        except s_tir.ScheduleError:
            return None
        lanes, registers = vector_lanes(target)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        names = [sch.get(block_rv).name_hint for block_rv in blocks]
        # the fused epilogue, into the output block: its inner blocks inlined forward into their
        # consumers (a value read twice, SiLU's ``c * sigmoid(c)``, recomputed in both), then
        # its one last block inlined backward. Not each block backward in turn: TVM 0.27's
        # reverse_compute_inline does not check that the producer's buffer has no other
        # consumer, so the second block of ``c * sigmoid(c)`` took the producer and left
        # ``c`` unwritten ("Buffer T_add_intermediate is used before its definition").
        try:
            _schedule_stages(sch, stages, out, blocks, names, lanes, registers)
        except s_tir.ScheduleError:
            return None  # (a single tile row: its loops are no chain to reorder)
        return sch.mod["main"]


def _schedule_stages(sch, stages, out, blocks, names, lanes: int, registers: int) -> None:
    """The schedule of :meth:`Winograd.apply` past its checks (a ScheduleError declines)."""
    epilogue = blocks[names.index(OUT_BLOCK) + 1:]
    for block_rv in epilogue[:-1]:
        sch.compute_inline(block_rv)
    if epilogue:
        sch.reverse_compute_inline(epilogue[-1])
    _, channel_blocks, _, width, channel_lanes = (int(v) for v in
                                                  sch.get(out).writes[0].source.shape)
    tile = int(sch.get(stages[0]).writes[0].source.shape[2])
    tile_cols = -(-width // tile)
    n, f, y, x, lane = sch.get_loops(out)
    row, i = sch.split(y, [None, tile])
    col, j = sch.split(x, [None, tile])
    sch.reorder(row, f, i, col, j, lane)
    sch.vectorize(lane)
    tasks = sch.fuse(n, row)
    sch.parallel(tasks)
    for block_rv in stages:
        sch.compute_at(block_rv, tasks)
    pad_loops = sch.get_loops(stages[-1])
    _, pad_lanes = sch.split(pad_loops[-1], [None, channel_lanes])
    sch.vectorize(pad_lanes)
    for block_rv in (stages[4], stages[3], stages[1], stages[0]):  # the four transforms
        loops = sch.get_loops(block_rv)
        _, vector = sch.split(loops[-1], [None, channel_lanes])
        sch.unroll(loops[-2])
        sch.unroll(loops[-3])
        sch.vectorize(vector)
    gemm = stages[2]
    col_, e, n_, k, rc = sch.get_loops(gemm)[-5:]
    k_blocks, columns = products_tile(channel_blocks, tile_cols,
                                      max(1, channel_lanes // lanes), registers)
    col_outer, col_inner = sch.split(col_, [None, columns])
    k_outer, k_inner, k_lane = sch.split(k, [None, k_blocks, channel_lanes])
    sch.reorder(e, n_, col_outer, k_outer, rc, col_inner, k_inner, k_lane)
    sch.unroll(col_inner)
    sch.unroll(k_inner)
    sch.vectorize(k_lane)
    sch.decompose_reduction(gemm, rc)
