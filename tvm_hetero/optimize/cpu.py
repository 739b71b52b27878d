"""CPU rules: turn TVM's naive loops into parallel, vectorized, register-tiled code.

``tiled_reduction`` (the ``tiled`` rule, for convolutions and matmuls): register tiles of output
rows x vector lanes accumulated over the whole reduction, the epilogue computed per tile; see
its docstring.

``parallel_loops`` (every layer kind; dlight's CPU rules cover GEMV and plain reductions only):

1. inline every injective block that can be inlined (padding into its convolution, bias and
   activation epilogues into their producer's consumer);
2. for each remaining block with spatial loops ``S0..Sn`` and reduction loops ``R0..Rm``:
   reorder to ``S0..Sn-1, R0..Rm, Sn`` so the innermost loop walks contiguous output (LLVM
   vectorizes it), fuse the outer spatial loops and parallelize the fused loop over the cores
   when the block does enough work (``MIN_PARALLEL_WORK`` iterations) to pay for the pool.

Both keep each output element's reduction sequential and in order, so results equal those of
the unscheduled loops up to the vector code LLVM emits.
"""

from __future__ import annotations

import logging

from ..layers import kernel_kind

logger = logging.getLogger(__name__)

MIN_PARALLEL_EXTENT = 2
# below this many loop iterations a block runs faster on one core than through the thread pool
MIN_PARALLEL_WORK = 1 << 15


def _extent(sch, loop) -> int | None:
    from tvm import tirx

    extent = sch.get(loop).extent
    return int(extent) if isinstance(extent, tirx.IntImm) else None


def parallel_loops(func, target):
    """Schedule `func` for a CPU target, or return None when it cannot."""
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base.common_schedules import try_inline

    del target
    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if infos is None:
        return None
    infos = try_inline(sch, infos)
    changed = False
    for info in infos:
        loops = sch.get_loops(info.block_rv)
        kinds = [it.kind for it in info.iters]
        if len(loops) != len(kinds) or not loops:
            continue
        spatial = [loop for loop, kind in zip(loops, kinds) if kind == "S"]
        reduction = [loop for loop, kind in zip(loops, kinds) if kind == "R"]
        if len(spatial) + len(reduction) != len(loops) or not spatial:
            continue
        inner = None
        if reduction and len(spatial) > 1 and (_extent(sch, spatial[-1]) or 0) >= 4:
            inner = spatial[-1]
            spatial = spatial[:-1]
            sch.reorder(*spatial, *reduction, inner)
        elif reduction:
            sch.reorder(*spatial, *reduction)
        work = 1
        for loop in sch.get_loops(info.block_rv):
            work *= _extent(sch, loop) or 1
        outer = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        extent = _extent(sch, outer)
        if extent is not None and extent >= MIN_PARALLEL_EXTENT and work >= MIN_PARALLEL_WORK:
            sch.parallel(outer)
            changed = True
    return sch.mod["main"] if changed else None


# Register tile of the tiled rule: rows of the output held in vector registers at once
# (channels of a convolution, rows of a matmul) times vector lanes along the contiguous axis.
# 16 x 16 fp32 is 16 AVX-512 accumulators (or 32 AVX2 ones): the fastest of seven shapes on
# ResNet-50's convolutions (table in docs/design.md).
TILE_ROWS = 16
TILE_LANES = 16


def _largest_divisor(extent: int, at_most: int) -> int:
    return max(d for d in range(1, min(extent, at_most) + 1) if extent % d == 0)


def _walks_contiguously(block, lane_var) -> bool:
    """True when every buffer `block` reads or writes is indexed by `lane_var` only in its
    last (contiguous) dimension, or not at all: vector loads, never gathers."""
    from tvm.tirx.analysis import undefined_vars

    for region in list(block.reads) + list(block.writes):
        for index_range in region.region[:-1]:
            if any(v.same_as(lane_var) for v in undefined_vars(index_range.min)):
                return False
    return True


def tiled_reduction(func, target, rows: int = TILE_ROWS, lanes: int = TILE_LANES,
                    cols: int | None = None):
    """Register-tile the one reduction block of a convolution or matmul kernel.

    The output is cut into ``rows x lanes`` tiles (output channels x output columns for a
    convolution, rows x columns for a matmul). Each tile accumulates in registers over the
    whole reduction: loops ``outer spatial (parallel), tile columns, reduction..., rows
    (unrolled), lanes (vectorized)``, so the innermost statement is one vector load of the
    input, one broadcast of a weight and one fused multiply-add per row. The epilogue
    (bias, batch norm, activation, residual add) is inlined into one block computed per tile
    right after it, while the tile is still in cache; padding and other prologue blocks are
    computed first, in parallel. Tile sizes are the largest divisors of the extents up to
    `rows` and `lanes`, so no tile has a ragged edge. A matrix-vector product with the
    weight laid out ``[reduction, output]`` (one spatial axis) gets ``4 * lanes`` lanes and
    no rows: it streams the weight row by row.

    Returns None when the kernel is not one reduction block, or when its innermost output
    axis does not walk every operand contiguously (a ``[output, reduction]`` weight: dlight's
    GEMV rule fits that one).
    """
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    del target
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
    if not spatial or any(_extent(sch, loop) is None for loop in loops):
        return None
    block = sch.get(main.block_rv)
    lane_var = block.iter_vars[len(spatial) - 1].var
    if not _walks_contiguously(block, lane_var):
        return None
    lane_loop = spatial[-1]
    row_inner = col_inner = None
    if len(spatial) == 1:
        lane_outer, lane_inner = sch.split(lane_loop, [None, _largest_divisor(
            _extent(sch, lane_loop), 4 * lanes)])
        outer = []
    else:
        convolution = kernel_kind(func) == "conv2d"
        row_axis = len(spatial) - (3 if convolution and len(spatial) >= 3 else 2)
        if cols is None:  # narrow outputs: two output rows per tile share each weight load
            narrow = convolution and (_extent(sch, lane_loop) or 0) <= lanes
            rows, cols = (rows // 2, 2) if narrow else (rows, 1)
        row_loop = spatial[row_axis]
        row_outer, row_inner = sch.split(row_loop, [None, _largest_divisor(
            _extent(sch, row_loop), rows)])
        lane_outer, lane_inner = sch.split(lane_loop, [None, _largest_divisor(
            _extent(sch, lane_loop), lanes)])
        outer = spatial[:row_axis] + [row_outer] + spatial[row_axis + 1:-1]
        if cols > 1 and row_axis < len(spatial) - 2:
            col_loop = spatial[-2]
            col_outer, col_inner = sch.split(col_loop, [None, _largest_divisor(
                _extent(sch, col_loop), cols)])
            outer = outer[:-1] + [col_outer]
    inner = [loop for loop in (row_inner, col_inner, lane_inner) if loop is not None]
    sch.reorder(*outer, lane_outer, *reduction, *inner)

    # Epilogue: inline what can be inlined; what is left and reads the reduction's output
    # (the kernel's outputs) is computed per tile; unrelated blocks (a dropout mask) stay apart.
    output = block.writes[0].source
    epilogue, apart = [], [info.block_rv for info in infos[:main_index]]
    for block_rv in [info.block_rv for info in infos[main_index + 1:]]:
        try:
            sch.compute_inline(block_rv)
        except s_tir.ScheduleError:
            epilogue.append(block_rv)
    for block_rv in epilogue:
        reads = [region.source for region in sch.get(block_rv).reads]
        if any(buffer.same_as(output) for buffer in reads):
            sch.reverse_compute_at(block_rv, lane_outer)
            sch.vectorize(sch.get_loops(block_rv)[-1])
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

    for block_rv in apart:  # padding and other blocks: parallel outer loops
        apart_loops = sch.get_loops(block_rv)
        if len(apart_loops) > 1:
            sch.parallel(sch.fuse(*apart_loops[:-1]))
        elif apart_loops:
            sch.parallel(apart_loops[0])
    return sch.mod["main"]
