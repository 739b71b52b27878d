"""The ``column-gemv`` GPU rule: reductions along a column (a batch-1 dense layer with [K, N]
weights, a sum over a tensor's outer dimension), dlight's ``Reduction`` schedule for them
with its thread block shaped from the kernel's extents and the GPU's SM count.

A column reduction reads its large operand row by row: the threads of a warp take neighbouring
outputs (one 32-byte sector of a row at least, so that every byte fetched is used) and the
rest of a block's threads split the reduction, reduced across the block at the end. Such a
kernel is memory-bound: it needs every SM busy and enough warps in flight to cover the
memory's latency. dlight's ``Reduction`` gives every such kernel 16 outputs x 16 reduction
lanes a block: a 4096 -> 2048 dense layer (``mlp_b1``, 32 MiB of weights) launches 128 blocks
of 8 warps on a 132-SM GPU, 4 SMs idle and the rest at an eighth of their warps. Here a block
takes the most outputs that still launch a block per SM, and as many reduction lanes as bring
the kernel to :data:`WARPS_PER_SM` warps an SM.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from ...layers.classify import LAYER_KINDS
from ...target import arch_multiprocessors
from ..rule import Rule

logger = logging.getLogger(__name__)

# Outputs a block takes along the contiguous axis, tried from the largest.
OUTPUT_WIDTHS = (32, 16, 8, 4, 2, 1)
# Bytes of a global memory transaction (an L2 sector): a warp's outputs cover one at least.
SECTOR_BYTES = 32
# Warps in flight an SM is given (of the 64 an sm_80/sm_90 SM holds): half occupancy covers the
# latency of a streaming read.
WARPS_PER_SM = 32
# Threads a block has at most (the target's max_num_threads caps it); how much padding of the
# reduction its lanes may add; elements a lane reduces at least (the lanes' partial sums are
# reduced again across the block: 1/8 more additions at most).
MAX_THREADS = 512
MAX_REDUCTION_WASTE = 1.05
MIN_PER_LANE = 8


class ColumnConfig(NamedTuple):
    """A block of a column reduction: `outputs` neighbouring outputs (``threadIdx.x``) times
    `lanes` parts of the reduction (``threadIdx.y``); `blocks` blocks."""

    outputs: int
    lanes: int
    blocks: int


def choose_config(spatial: int, inner: int, reduction: int, dtype_bytes: int,
                  multiprocessors: int, max_threads: int, warp: int = 32) -> ColumnConfig:
    """The block of a column reduction of `spatial` outputs (the innermost, contiguous
    dimension `inner` of them; a block's outputs divide it) over `reduction` elements.

    Outputs a block: the largest of :data:`OUTPUT_WIDTHS` dividing `inner` whose blocks are at
    least `multiprocessors`, of a sector's bytes at least where `inner` allows; when none
    launches that many, the smallest of a sector (the most blocks). Lanes: a power of two
    whose rounding of `reduction` adds at most :data:`MAX_REDUCTION_WASTE`, each reducing
    :data:`MIN_PER_LANE` elements at least, the fewest that bring the kernel to
    :data:`WARPS_PER_SM` warps an SM, within :data:`MAX_THREADS` (and `max_threads`) a block.

    Raises
    ------
    ValueError
        A non-positive extent or SM count, or a thread limit under a warp.
    """
    if min(spatial, inner, reduction, dtype_bytes, multiprocessors) < 1 or max_threads < warp:
        raise ValueError(f"no column-reduction block for {spatial} outputs over {reduction} on "
                         f"{multiprocessors} SMs, {max_threads} threads a block")
    widths = [w for w in OUTPUT_WIDTHS if inner % w == 0]
    sector = max(1, SECTOR_BYTES // dtype_bytes)
    whole = [w for w in widths if w >= min(sector, max(widths))]
    full = [w for w in whole if spatial // w >= multiprocessors]
    outputs = max(full) if full else min(whole)
    blocks = spatial // outputs
    wanted = -(-multiprocessors * WARPS_PER_SM * warp // (blocks * outputs))
    lanes_ok = [1 << p for p in range(0, 11)
                if (1 << p) * outputs <= min(max_threads, MAX_THREADS)
                and (1 << p) * MIN_PER_LANE <= max(reduction, MIN_PER_LANE)
                and -(-reduction // (1 << p)) * (1 << p) <= MAX_REDUCTION_WASTE * reduction]
    enough = [lanes for lanes in lanes_ok if lanes >= wanted]
    lanes = min(enough) if enough else max(lanes_ok, default=1)
    return ColumnConfig(outputs, lanes, blocks)


def _column_reduction_class():
    from tvm.s_tir.dlight.analysis import is_broadcast_epilogue
    from tvm.s_tir.dlight.gpu import Reduction

    class ColumnReduction(Reduction):
        """dlight's ``Reduction``, its column (inner-spatial) schedule with the block of
        :func:`choose_config`; its row (inner-reduction) kernels declined."""

        def __init__(self, multiprocessors: int):
            super().__init__()
            self.multiprocessors = multiprocessors
            self.config: ColumnConfig | None = None

        def _sch_inner_reduction(self, *args, **kwargs):
            raise _RowReduction()

        def _sch_inner_spatial(self, sch, target, block, s_factor, unroll_spatial_factor,
                               epilogue_info, loop_order, s_split_index):
            # dlight's _sch_inner_spatial (tvm 0.27), len_tx and len_ty from choose_config
            s, r, _ = sch.get_loops(block)
            extents = [getattr(sch.get(loop).extent, "value", None) for loop in (s, r)]
            if not isinstance(s_factor, int) or None in extents:
                raise _RowReduction()  # symbolic extents: dlight's own rule takes them
            dtype = sch.get(block).writes[0].source.dtype
            config = choose_config(
                extents[0], s_factor, extents[1], (dtype.bits * dtype.lanes + 7) // 8,
                self.multiprocessors, int(target.attrs.get("max_num_threads", 1024)),
                int(target.attrs.get("thread_warp_size", 32)))
            self.config = config
            len_tx, len_ty = config.outputs, config.lanes
            sch.split(s, factors=[None, len_tx])
            _, ty = sch.split(r, factors=[None, len_ty])
            rf = sch.rfactor(ty, 0)
            bx, tx, r, ty, _ = sch.get_loops(rf)
            sch.reorder(bx, tx, ty, r)
            sch.bind(tx, "threadIdx.x")
            sch.bind(ty, "threadIdx.y")
            sch.bind(bx, "blockIdx.x")
            sch.set_scope(rf, 0, "local")
            sch.decompose_reduction(rf, r)
            sch.reverse_compute_at(block, bx, preserve_unit_loops=True)
            _, r, *s = sch.get_loops(block)
            if unroll_spatial_factor:
                assert len(s) == len(loop_order)
                new_order_s = [s[loop_order[i]] for i in range(len(s))]
                sch.reorder(*new_order_s)
                new_order_s[s_split_index], c = sch.split(
                    new_order_s[s_split_index], factors=[None, unroll_spatial_factor])
                sch.reorder(*new_order_s, c)
                s = sch.fuse(*new_order_s)
                sch.reorder(s, c, r)
            else:
                s = sch.fuse(*s)
                sch.reorder(s, r)
            sch.bind(s, "threadIdx.x")
            sch.bind(r, "threadIdx.y")
            if epilogue_info is not None:
                epilogue = epilogue_info.block_rv
                sch.reverse_compute_at(epilogue, bx, preserve_unit_loops=True)
                if is_broadcast_epilogue(sch, block, epilogue):
                    sch.set_scope(block, 0, "shared")
                    _, *s = sch.get_loops(epilogue)
                    _, tx, ty = sch.split(sch.fuse(*s), factors=[None, len_tx, len_ty])
                    sch.bind(tx, "threadIdx.x")
                    sch.bind(ty, "threadIdx.y")
                else:
                    sch.set_scope(block, 0, "local")
                    _, *s = sch.get_loops(epilogue)
                    tx, _ = sch.split(sch.fuse(*s), factors=[len_tx, None])
                    sch.bind(tx, "threadIdx.x")

    return ColumnReduction


class _RowReduction(Exception):
    """The kernel is not a column reduction (dlight's row schedule would take it)."""


class ColumnGemv(Rule):
    """The ``column-gemv`` rule: dlight's ``Reduction`` column schedule with the block
    :func:`choose_config` picks from the kernel's extents and the GPU's SM count."""

    name = "column-gemv"
    description = ("column reductions (batch-1 dense on [K, N] weights): dlight's Reduction, "
                   "a sector of outputs a warp, blocks for every SM, lanes to fill them")
    kinds = LAYER_KINDS
    families = ("cuda",)

    def apply(self, func, target):
        """Schedule a column reduction; None for any other kernel, or a CUDA target whose
        SM count is unknown (an ``arch`` not in :data:`~tvm_hetero.target.CUDA_LIMITS`)."""
        from tvm import s_tir, tirx

        if target.kind.name != "cuda" or not isinstance(func, tirx.PrimFunc):
            return None
        sms = arch_multiprocessors(str(target.attrs.get("arch", "")))
        if sms is None:
            return None
        rule = _column_reduction_class()(sms)
        try:
            with target:
                sch = rule.apply(func, target, False)
        except (_RowReduction, s_tir.ScheduleError, AssertionError) as err:
            logger.debug("column-gemv declines the kernel: %s", type(err).__name__)
            return None
        if sch is None or rule.config is None:
            return None
        logger.debug("column-gemv: %s", rule.config)
        return sch.mod["main"]


__all__ = ["ColumnConfig", "ColumnGemv", "choose_config"]
