"""The ``tiled`` CPU rule: the matmuls and convolutions the rules before it decline: register tiles
of output rows x vector lanes accumulated over the whole reduction; epilogue computed per tile;
parallel tiles.

What: the kernel's one reduction block is cut into tiles of output channels x output columns (a
convolution) or rows x columns (a matmul), with loops ``outer spatial (parallel), tile columns,
reduction..., rows (unrolled), lanes (vectorized)``: the innermost statement is one vector load of
the input, one broadcast weight and one FMA per row. Tiles are the target's lanes x half its vector
registers. Convolutions whose output rows are at most 16 wide take 8 channels x 2 output rows per
tile, so each weight load serves two vectors. Tile sizes are the largest divisors of the extents, so
there is no ragged edge. The epilogue is inlined into one block computed per tile while it is in
cache; prologue blocks only the epilogue reads (BERT's attention mask) are inlined, since left apart
the epilogue could not be computed per tile.

Why and measured: 16 x 16 tiles on AVX2 were 32 accumulators in 16 registers and ran 2-7x slower
than 8 x 8 (ViT's attention AV product 1.67 -> 0.81 CPU ms, a 64 -> 64 3x3 convolution at 56x56 18.6
-> 2.7). A matmul whose rows or columns have no divisor of at least half the tile (ViT's 197 tokens)
is padded to whole tiles first: ViT's attention scores 26.0 -> 1.4 ms, its AV product 2.5 -> 1.1 ms.
A matrix-vector product with a ``[K, N]`` weight too small for ``split-k-gemv`` gets 8 vectors of
lanes and no rows: 4 vectors cannot cover the latency of two FMA pipes (GRU's step 0.040 -> 0.022 ms
haswell, 0.022 -> 0.013 znver4; 12 the same as 8).

Declined: a matrix-vector product whose lane axis would stride through an operand (``[N, K]``
weights: ``row-reductions``), bfloat16 kernels (TVM's LLVM codegen cannot store a bfloat16 vector
accumulator), and an epilogue that cannot move under the tile. Rejected: vectorizing the loop above
a one-row, one-lane tile's epilogue, which vectorized the reduction too (ViT's 197 x 197 scores came
out wrong, relative error 1.4): that epilogue stays scalar.
"""

from __future__ import annotations

from ...layers.classify import kernel_kind
from ...target import cpu_traits
from ..choices import choose
from ..rule import Rule
from .analysis import (is_reduction_iter, largest_divisor, loop_extent, one_reduction,
                       walks_contiguously)
from .schedule_helpers import epilogue_at, prologue_per_task


def tiled_tile(target) -> tuple[int, int]:
    """``(rows, lanes)`` of the tiled rule's register tile on `target`: rows of the output held
    in vector registers at once (channels of a convolution, rows of a matmul), one vector of
    the target's lanes each, half the vector registers (the rest: the input vector and the
    broadcast weights). AVX-512: 16 x 16, the fastest of seven shapes on ResNet-50's
    convolutions (table in docs/design.md); AVX2: 8 x 8 (16 x 16 there was 32 accumulators
    in 16 registers)."""
    traits = cpu_traits(target)
    return traits.registers // 2, traits.lanes


# Vectors a matrix-vector product's tile accumulates at once (its weight laid out [reduction,
# output]: the tile streams `MATVEC_VECTORS` vectors of each weight row). 8 against 4, GRU's
# step products (1 x 512 x 1024, 2 MB weight; 1 x 512 x 512), alternating rounds, 2-core AMD
# EPYC: haswell target 0.040 -> 0.022 ms and 0.0083 -> 0.0061, znver4 0.022 -> 0.013 and the
# same; 4 accumulators cannot cover the latency of two FMA pipes. 12: the same as 8.
MATVEC_VECTORS = 8


def _padded_to_tiles(func, rows: int, lanes: int):
    """`func` with its one reduction block's rows and columns padded (``pad_einsum``) to
    multiples of `rows` and `lanes` where their largest divisors would give tiles under half
    that size (ViT's 197 x 197 attention scores: 1 x 1 tiles 26.0 ms, padded to 208 x 208 and
    16 x 16 tiles 1.4 ms; its 197-row AV product 2.5 -> 1.1 ms); `func` itself otherwise or
    when the block cannot be padded."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    found = one_reduction(sch)
    if found is None:
        return func
    blocks, main_index = found
    main = blocks[main_index]
    iters = sch.get(main).iter_vars
    spatial = [iv for iv in iters if not is_reduction_iter(iv)]
    if len(spatial) < 2 or any(is_reduction_iter(iv) for iv in iters[:len(spatial)]):
        return func
    extents = [getattr(iv.dom.extent, "value", None) for iv in spatial[-2:]]
    if None in extents:
        return func
    pads = [tile if largest_divisor(extent, tile) < tile // 2 and extent > tile else 1
            for extent, tile in zip(extents, (rows, lanes))]
    if pads == [1, 1]:
        return func
    try:
        sch.pad_einsum(main, [1] * (len(spatial) - 2) + pads
                       + [1] * (len(iters) - len(spatial)))
    except s_tir.ScheduleError:
        return func
    return sch.mod["main"]


def _movable(sch, block_rv, loop) -> bool:
    """Whether `block_rv` can be computed under `loop` (tried on a copy of the schedule)."""
    from tvm import s_tir

    trial = sch.copy()
    try:
        trial.reverse_compute_at(block_rv, loop)
    except (s_tir.ScheduleError, ValueError):
        return False
    return True


class Tiled(Rule):
    """The ``tiled`` rule: register tiles of output rows x vector lanes accumulated over the whole
    reduction; epilogue computed per tile; parallel tiles."""

    name = "tiled"
    description = ("register tiles of output rows x vector lanes accumulated over the whole "
                   "reduction; epilogue computed per tile; parallel tiles")
    kinds = ("conv2d", "matmul")
    families = ("cpu",)

    def __init__(self, rows: int | None = None, lanes: int | None = None,
                 cols: int | None = None):
        self.rows, self.lanes, self.cols = rows, lanes, cols  # None: from the target

    def apply(self, func, target):
        """Register-tile the one reduction block of a convolution or matmul kernel.

        The output is cut into ``rows x lanes`` tiles (output channels x output columns for a
        convolution, rows x columns for a matmul). Each tile accumulates in registers over the
        whole reduction: loops ``outer spatial (parallel), tile columns, reduction..., rows
        (unrolled), lanes (vectorized)``, so the innermost statement is one vector load of the
        input, one broadcast of a weight and one fused multiply-add per row. The epilogue
        (bias, batch norm, activation, residual add) is inlined into one block computed per tile
        right after it, while the tile is still in cache; a convolution's padding is computed
        per parallel task (`prologue_per_task`), other prologue blocks first, in parallel. Tile
        sizes are the largest divisors of the extents up to `rows` and `lanes` (`tiled_tile` of
        the target where not given), so no tile has a ragged edge. A matrix-vector product with the
        weight laid out ``[reduction, output]`` (one spatial axis) gets ``MATVEC_VECTORS * lanes``
        lanes and no rows: it streams the weight row by row.

        Returns None when the kernel is not one reduction block, or when its innermost output
        axis does not walk every operand contiguously (a ``[output, reduction]`` weight: dlight's
        GEMV rule fits that one).
        """
        from tvm import s_tir
        from tvm.s_tir.dlight.analysis import normalize_prim_func

        if any(str(getattr(param.ty, "dtype", "")) == "bfloat16" for param in func.params):
            return None  # TVM 0.27's LLVM codegen cannot store a bfloat16 vector accumulator
        target_rows, target_lanes = tiled_tile(target)
        if self.rows is None:  # tuning's alternatives: a half, a quarter of the rows
            target_rows = choose("tiled-rows", list(dict.fromkeys(
                max(1, target_rows // share) for share in (1, 2, 4))))
        rows, lanes, cols = self.rows or target_rows, self.lanes or target_lanes, self.cols
        if kernel_kind(func) == "matmul":
            func = _padded_to_tiles(func, rows, lanes)
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        reductions = [i for i, info in enumerate(infos) if any(it.kind == "R" for it in info.iters)]
        if len(reductions) != 1:
            return None
        main_index = reductions[0]
        main = infos[main_index]
        kinds = [it.kind for it in main.iters]
        loops = sch.get_loops(main.block_rv)
        if len(loops) != len(kinds) or kinds != sorted(kinds, key=lambda k: k != "S"):
            return None  # spatial loops first, then reductions: normalize_prim_func's order
        spatial = [loop for loop, kind in zip(loops, kinds) if kind == "S"]
        reduction = [loop for loop, kind in zip(loops, kinds) if kind == "R"]
        if not spatial or any(loop_extent(sch, loop) is None for loop in loops):
            return None
        block = sch.get(main.block_rv)
        lane_var = block.iter_vars[len(spatial) - 1].var
        if not walks_contiguously(block, lane_var):
            return None
        lane_loop = spatial[-1]
        convolution = kernel_kind(func) == "conv2d"
        row_inner = col_inner = None
        if len(spatial) == 1:
            vectors = choose("matvec-vectors", [MATVEC_VECTORS, MATVEC_VECTORS // 2,
                                                2 * MATVEC_VECTORS])
            lane_outer, lane_inner = sch.split(lane_loop, [None, largest_divisor(
                loop_extent(sch, lane_loop), vectors * lanes)])
            outer = []
        else:
            row_axis = len(spatial) - (3 if convolution and len(spatial) >= 3 else 2)
            if cols is None:  # narrow outputs: two output rows per tile share each weight load
                narrow = convolution and (loop_extent(sch, lane_loop) or 0) <= lanes
                rows, cols = (rows // 2, 2) if narrow else (rows, 1)
            row_loop = spatial[row_axis]
            row_outer, row_inner = sch.split(row_loop, [None, largest_divisor(
                loop_extent(sch, row_loop), rows)])
            lane_outer, lane_inner = sch.split(lane_loop, [None, largest_divisor(
                loop_extent(sch, lane_loop), lanes)])
            outer = spatial[:row_axis] + [row_outer] + spatial[row_axis + 1:-1]
            if cols > 1 and row_axis < len(spatial) - 2:
                col_loop = spatial[-2]
                col_outer, col_inner = sch.split(col_loop, [None, largest_divisor(
                    loop_extent(sch, col_loop), cols)])
                outer = outer[:-1] + [col_outer]
        inner = [loop for loop in (row_inner, col_inner, lane_inner) if loop is not None]
        sch.reorder(*outer, lane_outer, *reduction, *inner)

        # Epilogue: inline what can be inlined; what is left and reads the reduction's output
        # (the kernel's outputs) is computed per tile; unrelated blocks (a dropout mask) stay apart.
        output = block.writes[0].source
        epilogue, apart = [], []
        main_reads = [region.source for region in block.reads]
        for block_rv in [info.block_rv for info in infos[:main_index]]:
            # what only the epilogue reads (an attention mask) is inlined there: left apart,
            # the epilogue could not be computed per tile
            if not any(region.source.same_as(source) for region in sch.get(block_rv).writes
                       for source in main_reads):
                try:
                    sch.compute_inline(block_rv)
                    continue
                except s_tir.ScheduleError:
                    pass
            apart.append(block_rv)
        for block_rv in [info.block_rv for info in infos[main_index + 1:]]:
            try:
                sch.compute_inline(block_rv)
            except s_tir.ScheduleError:
                epilogue.append(block_rv)
        for block_rv in epilogue:
            reads = [region.source for region in sch.get(block_rv).reads]
            if any(buffer.same_as(output) for buffer in reads):
                if not _movable(sch, block_rv, lane_outer):
                    return None  # columns regrouped (a GRU step's gates): not per tile
                # only the epilogue's own lane loop: a tile of one lane has none, and
                # vectorizing lane_outer (around the reduction) is miscompiled by TVM 0.27 (the
                # accumulator compacted to one element for all lanes: docs/design.md)
                tile_loops = epilogue_at(sch, block_rv, lane_outer)
                if tile_loops:
                    sch.vectorize(tile_loops[-1])
            else:
                apart.append(block_rv)
        if not outer:  # a matrix-vector product: the lane tiles are the parallel work
            outer = [lane_outer]
        fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        for loop in inner[:-1]:
            sch.unroll(loop)
        sch.vectorize(lane_inner)
        sch.parallel(fused)
        init = sch.decompose_reduction(main.block_rv, reduction[0])
        sch.vectorize(sch.get_loops(init)[-1])

        read = [region.source for region in block.reads]  # the main block's inputs
        for block_rv in apart:  # padding: per task; other blocks: parallel outer loops
            if convolution and any(region.source.same_as(source)
                                   for region in sch.get(block_rv).writes for source in read) \
                    and prologue_per_task(sch, block_rv, fused, target):
                continue
            apart_loops = sch.get_loops(block_rv)
            if len(apart_loops) > 1:
                sch.parallel(sch.fuse(*apart_loops[:-1]))
            elif apart_loops:
                sch.parallel(apart_loops[0])
        return sch.mod["main"]
