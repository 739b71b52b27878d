"""The ``matmul-tiles`` GPU rule: dlight's ``Matmul`` (implicit GEMM through shared memory) with
its tile chosen per kernel from the kernel's extents and the GPU's SM count and thread limit,
instead of dlight's one CUDA tile (8 x 16 threads, 4 x 4 outputs each, 16 along the reduction).

dlight pads a kernel's [batch, I, J, K] extents up to its tile (``pad_einsum``) and computes the
padding: a dense layer of 8 rows on dlight's 32-row tile does 4x its work (``mlp_b8``), and a
14 x 14 x 256 3x3 convolution (196 x 256 outputs) gets 28 thread blocks on a 132-SM H200. Here
the tile is the largest one that keeps the padded work within :data:`MAX_WASTE` of the kernel's
and launches at least one block per SM. Where no tile does both (few outputs: a dense layer of
8 rows into 512 outputs has 128 blocks of a warp at the least) and the reduction is long, the
reduction is split across blocks (:mod:`.split_reduction`): the largest tile that launches a
block per SM with the fewest parts of at least :data:`MIN_SPLIT_K` reduction elements each.
Otherwise the tile with the most blocks.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from ...errors import error_message
from ...layers.classify import LAYER_KINDS
from ...target import arch_multiprocessors
from ..rule import Rule
from .split_reduction import CannotSplit, outer_reduction_extent, split_reduction

logger = logging.getLogger(__name__)

# Padded work (tile-rounded I x J x K over the kernel's) a tile may add: the census goal is 1.3x
# per kernel; the epilogue and the rounding of the reduction take some of that margin.
MAX_WASTE = 1.2
# Tile edges tried along I (rows, pixels) and J (columns, output channels), outputs per thread
# along each (dlight's CUDA tile is 32 x 64 with 4 x 4 per thread, the largest tried: its 64
# registers a thread never spilled in the suite), and steps along the reduction.
TILE_EDGES = (64, 32, 16, 8, 4, 2, 1)
MAX_TILE_OUTPUTS = 32 * 64
MICRO_SIZES = (4, 2, 1)
K_STEPS = (16, 8, 4)
# Threads of a block: at least a warp's worth; two warps preferred where the tile allows.
MIN_WARPS, GOOD_WARPS = 1, 2
# Reduction elements a part of a split reduction has at least: 8 of the tile's 16-element
# steps, and the parts' partial sums (read and written once) at most 1/128 of the
# multiply-adds. Threads a block of the split's second stage (the parts' sum and epilogue,
# one thread an output).
MIN_SPLIT_K = 128
SUM_THREADS = 256


@dataclass(frozen=True)
class MatmulTile:
    """A tile of a [batch, I, J, K] product: its thread block's outputs and threads.

    Attributes
    ----------
    threads_i, threads_j : int
        Threads of a block along I (dlight's ``block_size_x``) and J (``block_size_y``).
    micro_i, micro_j : int
        Outputs of a thread along I and J.
    step_k : int
        Reduction elements a block loads to shared memory at a time.
    blocks : int
        Thread blocks the kernel launches (those of the partial sums where it is split).
    waste : float
        Padded work over the kernel's (1.0: the tile divides every extent).
    splits : int
        Parts the reduction is split in across blocks (1: not split).
    """

    threads_i: int
    threads_j: int
    micro_i: int
    micro_j: int
    step_k: int
    blocks: int
    waste: float
    splits: int = 1

    @property
    def rows(self) -> int:
        return self.threads_i * self.micro_i

    @property
    def cols(self) -> int:
        return self.threads_j * self.micro_j

    @property
    def threads(self) -> int:
        return self.threads_i * self.threads_j


def _padded(extent: int, tile: int) -> int:
    return -(-extent // tile) * tile


def _step_k(k: int) -> int:
    """The largest of `K_STEPS` whose rounding of `k` adds at most 5%, else the least wasteful."""
    for step in K_STEPS:
        if _padded(k, step) <= 1.05 * k:
            return step
    return min(K_STEPS, key=lambda step: (_padded(k, step), -step))


def _threads_of(rows: int, cols: int, warp: int, max_threads: int):
    """``(threads_i, threads_j, micro_i, micro_j)`` for a `rows` x `cols` tile: the most outputs
    per thread that leave the block two warps (one where the tile is too small), or None."""
    best = None
    for micro_i in MICRO_SIZES:
        for micro_j in MICRO_SIZES:
            if rows % micro_i or cols % micro_j:
                continue
            threads = (rows // micro_i) * (cols // micro_j)
            if threads > max_threads or threads < MIN_WARPS * warp:
                continue
            key = (threads >= GOOD_WARPS * warp, micro_i * micro_j, min(micro_i, micro_j))
            if best is None or key > best[0]:
                best = (key, (rows // micro_i, cols // micro_j, micro_i, micro_j))
    return None if best is None else best[1]


def choose_tile(batch: int, i: int, j: int, k: int, multiprocessors: int,
                max_threads: int, warp: int = 32, split_extent: int = 1) -> MatmulTile:
    """The tile of a [`batch`, `i`, `j`, `k`] product (C[b, i, j] += A[b, i, k] B[b, j, k]) on
    a GPU of `multiprocessors` SMs and `max_threads` threads a block.

    Of the tiles whose padded work is within :data:`MAX_WASTE` of the product's (the least
    padded when none is): those launching at least `multiprocessors` blocks, the one of most
    outputs, then the squarest (most reuse of each loaded element), then the least padded.
    When none launches that many: the reduction split in parts (a divisor of `split_extent`,
    the extent of its outermost loop, of at least :data:`MIN_SPLIT_K` elements each), the
    tile of most outputs (then the squarest) that launches a block per SM with its fewest
    parts, within :data:`MAX_WASTE`; when no split does either, the unsplit tile launching
    the most blocks.

    Raises
    ------
    ValueError
        A non-positive extent, or a GPU whose thread limit is under a warp.
    """
    if min(batch, i, j, k, split_extent) < 1 or max_threads < warp:
        raise ValueError(f"no matmul tile for extents {(batch, i, j, k)} with {max_threads} "
                         f"threads a block (warp {warp})")
    shapes = []
    for rows in TILE_EDGES:
        for cols in TILE_EDGES:
            if rows * cols > MAX_TILE_OUTPUTS:
                continue
            threads = _threads_of(rows, cols, warp, max_threads)
            if threads is not None:
                shapes.append((rows, cols, threads))
    if not shapes:
        raise ValueError(f"no matmul tile of at least a warp ({warp} threads) fits "
                         f"{max_threads} threads a block")
    tiles = _tiles(shapes, batch, i, j, k, 1)
    fitting = [t for t in tiles if t.waste <= MAX_WASTE]
    if not fitting:
        least = min(t.waste for t in tiles)
        fitting = [t for t in tiles if t.waste <= least * 1.001]
    full = [t for t in fitting if t.blocks >= multiprocessors]
    if full:
        return max(full, key=lambda t: (t.rows * t.cols, _reuse(t), -t.waste, t.threads))
    split: dict[tuple[int, int], MatmulTile] = {}  # (rows, cols) -> its fewest parts
    for parts in range(2, split_extent + 1):
        if split_extent % parts or k // parts < MIN_SPLIT_K:
            continue
        for tile in _tiles(shapes, batch, i, j, k, parts):
            if tile.waste <= MAX_WASTE and tile.blocks >= multiprocessors:
                split.setdefault((tile.rows, tile.cols), tile)
    if split:
        return max(split.values(),
                   key=lambda t: (t.rows * t.cols, _reuse(t), -t.splits, -t.waste, t.threads))
    return max(fitting, key=lambda t: (t.blocks, t.rows * t.cols, _reuse(t), -t.waste))


def _tiles(shapes, batch: int, i: int, j: int, k: int, splits: int) -> list[MatmulTile]:
    """The tiles of `shapes` (``(rows, cols, threads)``) with the reduction in `splits`
    parts (which divide `k`)."""
    part = k // splits
    step = _step_k(part)
    tiles = []
    for rows, cols, threads in shapes:
        blocks = batch * splits * math.ceil(i / rows) * math.ceil(j / cols)
        waste = _padded(i, rows) * _padded(j, cols) * _padded(part, step) * splits / (i * j * k)
        tiles.append(MatmulTile(*threads, step, blocks, waste, splits))
    return tiles


def _reuse(tile: MatmulTile) -> float:
    """Multiply-adds a block does per element it loads: of two tiles of as many outputs, the
    squarer loads less (8 x 32 before 4 x 64)."""
    return tile.rows * tile.cols / (tile.rows + tile.cols)


def matmul_extents(func) -> tuple[int, int, int, int] | None:
    """The [batch, I, J, K] extents of a kernel dlight's ``Matmul`` takes, as it normalizes
    them (reindexed operands, C[b, i, j] += A[b, i, k] B[b, j, k]); None when it does not take
    the kernel or an extent is not a constant."""
    from tvm import s_tir, tirx
    from tvm.s_tir.dlight.analysis import get_root_block
    from tvm.s_tir.dlight.gpu.matmul import get_index_map, get_reduction_blocks

    sch = s_tir.Schedule(func)
    blocks = get_reduction_blocks(sch, sch.get_child_blocks(get_root_block(sch)))
    if blocks is None or not get_index_map(sch.get(blocks[0])):
        return None
    main = blocks[0]
    for operand in (("read", 0), ("read", 1), ("write", 0)):
        sch.reindex(main, operand)
    index_maps = get_index_map(sch.get(main))
    if index_maps is None:
        return None
    sch.transform_block_layout(main, index_maps[0])
    extents = [iv.dom.extent for iv in sch.get(main).iter_vars]
    if len(extents) != 4 or not all(isinstance(e, tirx.IntImm) for e in extents):
        return None
    return tuple(int(e) for e in extents)


class MatmulTiles(Rule):
    """The ``matmul-tiles`` rule: dlight's ``Matmul`` with the tile :func:`choose_tile` picks
    from the kernel's extents and the target GPU (SM count, threads a block, warp size)."""

    name = "matmul-tiles"
    description = ("matmuls and convolutions as dlight's implicit GEMM, the tile chosen from "
                   "the shape and the GPU: within 1.2x padded work, a block per SM (the "
                   "reduction split across blocks where the outputs are too few)")
    kinds = LAYER_KINDS
    families = ("cuda",)

    def apply(self, func, target):
        """Schedule `func` as dlight's ``Matmul`` does, with :func:`choose_tile`'s tile; None
        for a kernel ``Matmul`` does not take or a CUDA target whose SM count is unknown (an
        ``arch`` not in :data:`~tvm_hetero.target.CUDA_LIMITS`)."""
        from tvm import s_tir

        if target.kind.name != "cuda":
            return None
        sms = arch_multiprocessors(str(target.attrs.get("arch", "")))
        if sms is None:
            logger.debug("matmul-tiles: no SM count for %s; dlight's Matmul takes it", target)
            return None
        extents = matmul_extents(func)
        if extents is None:
            return None
        max_threads = int(target.attrs.get("max_num_threads", 0)) or None
        warp = int(target.attrs.get("thread_warp_size", 32))
        if max_threads is None:
            return None
        split_extent = outer_reduction_extent(func) or 1
        tile = choose_tile(*extents, multiprocessors=sms, max_threads=max_threads, warp=warp,
                           split_extent=split_extent)
        logger.debug("matmul-tiles: extents %s -> %dx%d tile (%dx%d threads), %d parts, "
                     "%d blocks, waste %.2f", extents, tile.rows, tile.cols, tile.threads_i,
                     tile.threads_j, tile.splits, tile.blocks, tile.waste)
        if tile.splits > 1:
            try:
                return split_reduction(
                    func, tile.splits, lambda partials: _tiled(partials, tile, target),
                    min(SUM_THREADS, max_threads))
            except (CannotSplit, s_tir.ScheduleError) as err:
                logger.debug("matmul-tiles: no split reduction (%s); the kernel unsplit",
                             error_message(err))
                tile = choose_tile(*extents, multiprocessors=sms, max_threads=max_threads,
                                   warp=warp)
        return _tiled(func, tile, target)


def _tiled(func, tile: MatmulTile, target):
    """`func` scheduled by dlight's ``Matmul`` with `tile`; None where it declines it."""
    from tvm import s_tir

    try:
        with target:
            sch = _TiledMatmul(tile).apply(func, target, False)
    except (s_tir.ScheduleError, AssertionError):
        # dlight's Matmul declines the same kernels (a residual consumer it cannot inline)
        return None
    return None if sch is None else sch.mod["main"]


def _tiled_matmul_class():
    from tvm.s_tir.dlight.gpu import Matmul

    class TiledMatmul(Matmul):
        """dlight's Matmul with one given tile for every CUDA kernel."""

        def __init__(self, tile: MatmulTile):
            super().__init__()
            self.tile = tile

        def get_configs(self, target):
            tile = self.tile
            vector = 2 if tile.micro_i % 2 == 0 and tile.micro_j % 2 == 0 else 1
            return Matmul.Config(
                block_size_x=tile.threads_i, block_size_y=tile.threads_j,
                vthread_x=1, vthread_y=1, micro_size_x=tile.micro_i, micro_size_y=tile.micro_j,
                micro_size_k=tile.step_k, vector_size=vector, unroll=256, use_shared=True,
                storage_align=True, inner_x=False)

    return TiledMatmul


def _TiledMatmul(tile: MatmulTile):  # noqa: N802 (a class made on first use: TVM imports late)
    return _tiled_matmul_class()(tile)


__all__ = ["MAX_WASTE", "MIN_SPLIT_K", "MatmulTile", "MatmulTiles", "choose_tile",
           "matmul_extents"]
