"""CPU rules: turn TVM's naive loops into parallel, vectorized, register-tiled code.

``packed_conv2d`` (the ``packed-weights`` rule, for direct NCHW convolutions): vector lanes
along the output channels, the weight repacked once at build time so that those lanes are
contiguous; see its docstring.

``pixel_lanes_1x1`` (the ``pixel-lanes-1x1`` rule, for 1x1 stride-1 convolutions): a matrix
product with vector lanes along the pixels, so the output (and a residual) are read and
written in whole vectors; see its docstring.

``concat_copies`` (the ``concat-copies`` rule, for concatenations): one contiguous copy loop
per input, the loop over the concatenation axis partitioned where each input starts.

``split_k_gemv`` (the ``split-k-gemv`` rule, for matrix-vector products with a
``[reduction, output]`` weight): parallel slices of the reduction, each streaming whole weight
rows into a partial output.

``reduction_chains`` (the ``reduction-chains`` rule, for global pools and means): several
outputs per task, their accumulators independent add chains.

``pooling_rows`` (the ``pooling-rows`` rule, for windowed pools): one output row per parallel
task, updated with vectors of output columns for each window offset; see its docstring.

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


def _is_reduction_iter(iter_var) -> bool:
    from tvm import tirx

    return iter_var.iter_type == tirx.IterVar.CommReduce


def _iterations(sch, loops) -> int:
    """Iterations of a nest of `loops` (a loop of unknown extent counts once)."""
    count = 1
    for loop in loops:
        count *= _extent(sch, loop) or 1
    return count


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
        if len(spatial) > 1 and (_extent(sch, spatial[-1]) or 0) >= 4:
            # the innermost spatial loop stays innermost and apart: fused into the parallel
            # loop, every element would divide its index back into coordinates
            inner = spatial[-1]
            spatial = spatial[:-1]
            if reduction:
                sch.reorder(*spatial, *reduction, inner)
        elif reduction:
            sch.reorder(*spatial, *reduction)
        work = _iterations(sch, sch.get_loops(info.block_rv))
        outer = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        extent = _extent(sch, outer)
        if extent is not None and extent >= MIN_PARALLEL_EXTENT and work >= MIN_PARALLEL_WORK:
            sch.parallel(outer)
            changed = True
    return sch.mod["main"] if changed else None


# a strided copy costs several times a plain loop's iteration: from this many elements the
# thread pool pays (the zoo models' 16K-element transform: 10.5 us serial, 3.1 us parallel)
MIN_PARALLEL_COPY = 1 << 12


def layout_copies(func, target):
    """Schedule a layout transform (a copy whose write and read orders differ, such as NCHW ->
    NCHW16c): the loop along the read's contiguous axis innermost and vectorized (contiguous
    loads, strided stores), the others fused and parallel. Returns None for other kernels."""
    from tvm import ir, s_tir, tirx
    from tvm.tirx.analysis import undefined_vars

    from ..layers import _op_kinds_of

    del target
    if _op_kinds_of(func, "") != ["te_layout_transform"]:
        return None
    sch = s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    if len(blocks) != 1:
        return None
    block = sch.get(blocks[0])
    store = block.body
    if not isinstance(store, tirx.stmt.BufferStore) or not isinstance(store.value,
                                                                       ir.expr.TensorLoad) \
            or any(_is_reduction_iter(iv) for iv in block.iter_vars):
        return None
    loops = sch.get_loops(blocks[0])
    if len(loops) != len(block.iter_vars) or any(_extent(sch, lp) is None for lp in loops):
        return None
    last_index = store.value.indices[-1]
    inner = [i for i, iv in enumerate(block.iter_vars) if last_index.same_as(iv.var)]
    if not inner:
        return None

    def write_position(index: int) -> int:  # the first written axis the loop's variable indexes
        var = block.iter_vars[index].var
        return next((axis for axis, value in enumerate(store.indices)
                     if any(v.same_as(var) for v in undefined_vars(value))), len(store.indices))

    elements = _iterations(sch, loops)
    inner_loop = loops[inner[0]]
    # the outer loops in the written order: each task writes whole rows of the output (split
    # along the read's order, the two tasks would write alternate parts of the same cache
    # lines: the zoo ResNet 1.8x slower)
    outer = [loops[i] for i in sorted((i for i in range(len(loops)) if i != inner[0]),
                                      key=write_position)]
    sch.reorder(*outer, inner_loop)
    fused = sch.fuse(*outer) if len(outer) > 1 else (outer[0] if outer else None)
    if fused is not None and _extent(sch, fused) >= MIN_PARALLEL_EXTENT \
            and elements >= MIN_PARALLEL_COPY:
        sch.parallel(fused)
    sch.vectorize(inner_loop)
    return sch.mod["main"]


def concat_copies(func, target):
    """Schedule a concatenation as one copy loop per input.

    TVM's concatenation is one loop nest whose every element picks its input with an
    ``if_then_else`` on the concatenation axis. Here that axis is partitioned where each input
    starts (``loop_partition``), so each part copies one input, its condition constant; the
    loops inside the axis are fused into one contiguous copy and the loops outside it (or,
    when there are none, each part) run in parallel. SqueezeNet's concatenations of two
    64 x 55 x 55 inputs: 0.16 -> 0.07 ms (2 threads), the smaller ones 2-3x too. Returns None
    for other kernels.
    """
    from tvm import s_tir, tirx
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base.common_schedules import try_inline
    from tvm.sym.analyzer import Analyzer

    from ..layers import _op_kinds_of

    del target
    if "concatenate" not in _op_kinds_of(func, ""):
        return None
    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if infos is None:
        return None
    infos = try_inline(sch, infos)
    if len(infos) != 1 or any(it.kind != "S" for it in infos[0].iters):
        return None
    block = sch.get(infos[0].block_rv)
    loops = sch.get_loops(infos[0].block_rv)
    if len(loops) != len(block.iter_vars) or any(_extent(sch, lp) is None for lp in loops):
        return None
    analyzer = Analyzer()

    def input_starts(iter_var) -> set[int]:
        # each input after the first is read at (axis - where it starts)
        return {-int(shift.value) for region in block.reads for index in region.region
                if isinstance(shift := analyzer.simplify(index.min - iter_var.var),
                              tirx.IntImm)} - {0}

    found = [(axis, starts) for axis, iter_var in enumerate(block.iter_vars)
             if (starts := input_starts(iter_var))]
    if not found:
        return None
    axis, starts = found[0]
    extent = _extent(sch, loops[axis])
    bounds = sorted(start for start in starts if 0 < start < extent)
    if not bounds:
        return None
    work = _iterations(sch, loops)
    outer, inner = loops[:axis], loops[axis + 1:]
    if len(inner) > 1:
        sch.fuse(*inner)
    sizes = [end - start for start, end in zip([0] + bounds, bounds)]
    parts = sch.loop_partition(loops[axis], sizes + [None])
    if work >= MIN_PARALLEL_WORK:
        if _iterations(sch, outer) >= MIN_PARALLEL_EXTENT:
            sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
        else:
            for part in parts:
                if (_extent(sch, part) or 0) >= MIN_PARALLEL_EXTENT:
                    sch.parallel(part)
    return sch.mod["main"]


# Outputs a reduction_chains task accumulates at once: independent add chains that hide the
# floating-point add latency (one chain: one add per 4 cycles).
REDUCTION_CHAINS = 8


def reduction_chains(func, target):
    """Schedule a kernel whose one reduction sums (or maxes) a window of its own per output
    (a global average pool, a mean over the last axes) with several outputs at once.

    Each parallel task takes `REDUCTION_CHAINS` consecutive outputs and walks their windows
    side by side (the outputs' loop innermost and unrolled), so their accumulators are
    independent chains in registers rather than one chain of dependent adds per output; the
    epilogue (the division of a mean) follows per task. Against ``parallel-loops`` (2 threads,
    a tune running beside): SqueezeNet's mean over 1000 x 13 x 13 0.10 -> 0.048 ms, ResNet-50's
    7x7 average pool over 2048 channels 0.039 -> 0.028 ms; the zoo ResNet's mean (too small
    for the thread pool) 7.3 -> 4.8 us against the unscheduled loops. Returns None for other
    kernels (sliding windows, output counts not a multiple of the chains).
    """
    from tvm import s_tir
    from tvm.tirx.analysis import undefined_vars

    del target
    sch = s_tir.Schedule(func)
    found = _one_reduction(sch)
    if found is None or found[1] != 0:
        return None
    blocks = found[0]
    block_rv = blocks[0]
    block = sch.get(block_rv)
    loops = sch.get_loops(block_rv)
    if len(loops) != len(block.iter_vars) or any(_extent(sch, lp) is None for lp in loops):
        return None
    kinds = ["R" if _is_reduction_iter(iv) else "S" for iv in block.iter_vars]
    spatial = [lp for lp, kind in zip(loops, kinds) if kind == "S"]
    reduction = [lp for lp, kind in zip(loops, kinds) if kind == "R"]
    if "".join(kinds) != "S" * len(spatial) + "R" * len(reduction) or not reduction:
        return None  # the reduction loops must be the innermost ones, as written
    wide = [iv.var for iv, kind in zip(block.iter_vars, kinds)
            if kind == "S" and int(iv.dom.extent) > 1]
    reduced = [iv.var for iv, kind in zip(block.iter_vars, kinds) if kind == "R"]
    for region in block.reads:
        for index in region.region:
            used = undefined_vars(index.min)
            if any(v.same_as(r) for v in used for r in reduced) \
                    and any(v.same_as(w) for v in used for w in wide):
                return None  # a sliding window (neighbouring outputs share inputs)
    outputs = _iterations(sch, spatial)
    if outputs % REDUCTION_CHAINS or outputs < 2 * REDUCTION_CHAINS:
        return None
    accumulate = sch.cache_write(block_rv, 0, "local")
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    tasks, chains = sch.split(fused, [None, REDUCTION_CHAINS])
    sch.reorder(tasks, *reduction, chains)
    sch.reverse_compute_at(accumulate, tasks)
    for epilogue in blocks[1:]:
        try:
            sch.reverse_compute_at(epilogue, tasks)
        except s_tir.ScheduleError:
            return None
    sch.unroll(chains)
    if outputs // REDUCTION_CHAINS >= MIN_PARALLEL_EXTENT:
        sch.parallel(tasks)
    init = sch.decompose_reduction(block_rv, reduction[0])
    sch.unroll(sch.get_loops(init)[-1])
    return sch.mod["main"]


# Slices of the reduction a matrix-vector product is cut into (split_k_gemv): each a parallel
# task streaming its rows of the weight. 2 to 16 ran the same on 2 threads.
GEMV_SLICES = 8
# Weights (elements) below which split_k_gemv leaves a product to the tiled rule: small ones
# stay in cache and the partials cost more than they give (2048 x 10: 2.2 us tiled, 7.0 us
# split; 2048 x 128 the same either way; 2048 x 1000 twice as fast split).
GEMV_MIN_WEIGHTS = 1 << 20


def split_k_gemv(func, target):
    """Schedule a matrix-vector product whose weight is laid out ``[reduction, output]``
    (``y[n] = sum_k x[k] * W[k, n]``) as slices of the reduction.

    Tiles along the output (what ``tiled`` does) walk the weight in narrow strips, one short
    piece per row, which the memory system streams badly once the weight is out of cache.
    Here the reduction is cut into `GEMV_SLICES` slices (``rfactor``); each parallel task
    streams whole rows of its slice, accumulating a partial output vector (the innermost loop
    over the outputs, which LLVM vectorizes), and a last short loop adds the partials up
    before the epilogue. Against ``tiled`` (2 threads, a tune running beside): AlexNet's dense
    layers 9216 -> 4096 15.4 -> 5.4 ms, 4096 -> 4096 6.9 -> 2.4 ms, 4096 -> 1000 0.97 -> 0.22
    ms; ResNet-50's 2048 -> 1000 0.21 -> 0.10 ms. Returns None for other kernels and for
    weights under `GEMV_MIN_WEIGHTS` elements.
    """
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    del target
    if kernel_kind(func) != "matmul":
        return None
    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if infos is None:
        return None
    reductions = [info for info in infos if any(it.kind == "R" for it in info.iters)]
    if len(reductions) != 1 or [it.kind for it in reductions[0].iters] != ["S", "R"]:
        return None
    main = reductions[0]
    block = sch.get(main.block_rv)
    output, reduced = sch.get_loops(main.block_rv)
    if _extent(sch, output) is None or _extent(sch, reduced) is None \
            or not _walks_contiguously(block, block.iter_vars[0].var):
        return None  # an [output, reduction] weight: dlight's GEMV rule fits that one
    slices = _largest_divisor(_extent(sch, reduced), GEMV_SLICES)
    if slices < 2 or _extent(sch, output) * _extent(sch, reduced) < GEMV_MIN_WEIGHTS:
        return None
    slice_loop, _ = sch.split(reduced, [slices, None])
    partial = sch.rfactor(slice_loop, 0)
    outputs, slice_loop, rows = sch.get_loops(partial)
    sch.reorder(slice_loop, rows, outputs)
    sch.parallel(slice_loop)
    sch.decompose_reduction(partial, rows)
    return sch.mod["main"]


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
    right after it, while the tile is still in cache; a convolution's padding is computed
    per parallel task (`_prologue_per_task`), other prologue blocks first, in parallel. Tile
    sizes are the largest divisors of the extents up to `rows` and `lanes`, so no tile has a
    ragged edge. A matrix-vector product with the
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
    convolution = kernel_kind(func) == "conv2d"
    row_inner = col_inner = None
    if len(spatial) == 1:
        lane_outer, lane_inner = sch.split(lane_loop, [None, _largest_divisor(
            _extent(sch, lane_loop), 4 * lanes)])
        outer = []
    else:
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

    read = [region.source for region in block.reads]  # the main block's inputs
    for block_rv in apart:  # padding: per task; other blocks: parallel outer loops
        if convolution and any(region.source.same_as(source)
                               for region in sch.get(block_rv).writes for source in read) \
                and _prologue_per_task(sch, block_rv, fused):
            continue
        apart_loops = sch.get_loops(block_rv)
        if len(apart_loops) > 1:
            sch.parallel(sch.fuse(*apart_loops[:-1]))
        elif apart_loops:
            sch.parallel(apart_loops[0])
    return sch.mod["main"]


# Attribute of a PrimFunc whose weight parameter the rule repacked: ``[param index, lanes]``.
# The OptimizeLayers pass repacks the argument the Relax program passes there (a constant is
# repacked at build time).
PACKED_WEIGHTS_ATTR = "tvm_hetero.packed_weights"
# Register tile of packed_conv2d: at most this many vector accumulators (of 32 AVX-512
# registers, or of 16 AVX2 ones), leaving room for weight vectors and broadcast inputs. On
# ResNet-50's convolutions 14-16 accumulators ran at the same speed, 28 at half of it.
PACKED_ACCUMULATORS = {32: 16, 16: 6}
# A short reduction over a window (3x3 over an RGB image: 27) ran faster with the tiled rule
# when the output width is a multiple of its lanes (32 wide: 4.4 against 7.5 us); 111 wide
# (SqueezeNet 1.1), where the tiled rule gets 3 lanes, 0.59 against 0.15-0.23 ms packed.
# 1x1 over 16 channels and 7x7 over RGB ran 2x and 1.6x faster packed. A residual add in the
# epilogue, which packed lanes gather, also goes to the tiled rule when it gets whole vectors
# (16 -> 16 channels 3x3 at 32x32 with the residual: 13.4 us tiled, 19.2 us packed). So does a
# windowed convolution to as many channels as lanes: its packed tile is one channel vector
# (17 loads per 16 multiply-adds; the tiled rule reuses each weight over 16 columns): 16 -> 16
# 3x3 at 32x32 without the residual 27.5 us tiled, 34.3 us packed.
MIN_PACKED_WINDOW_REDUCTION = 32


def vector_lanes(target) -> tuple[int, int]:
    """``(fp32 lanes, vector registers)`` of `target`'s widest vector unit (LLVM CPU targets)."""
    from tvm.target.codegen import llvm_cpu_has_features

    try:
        if llvm_cpu_has_features(["avx512f"], target):
            return 16, 32
        if llvm_cpu_has_features(["avx2"], target):
            return 8, 16
    except Exception:  # noqa: BLE001 (a non-x86 LLVM target has no such features)
        pass
    return 4, 16


def _packed_tile(channel_blocks: int, width: int, accumulators: int) -> tuple[int, int]:
    """``(channel vectors, output columns)`` per register tile: the fewest loads per
    multiply-add (a tile of c vectors x w columns loads c weight vectors and broadcasts w
    inputs for c * w multiply-adds), then the largest tile; both divide their extents."""
    options = [(c, w) for c in range(1, min(channel_blocks, 4) + 1) if channel_blocks % c == 0
               for w in range(1, min(width, accumulators) + 1) if width % w == 0
               and c * w <= accumulators]
    return min(options, key=lambda cw: ((cw[0] + cw[1]) / (cw[0] * cw[1]), -cw[0] * cw[1]))


def _direct_conv_weight(func, block) -> int | None:
    """Index of the weight parameter of a direct NCHW convolution block
    (``out[n, f, y, x] += data[n, c, ., .] * weight[f, c, ry, rx]``), else None."""
    from tvm.tirx.analysis import undefined_vars

    iters = [iv.var for iv in block.iter_vars]
    if len(iters) != 7 or len(block.writes) != 1 or len(block.reads) != 2:
        return None
    n, f, y, x, rc, ry, rx = iters

    def exactly(ranges, variables) -> bool:
        return len(ranges) == len(variables) and all(
            r.min.same_as(v) and int(r.extent) == 1 for r, v in zip(ranges, variables))

    if not exactly(list(block.writes[0].region), [n, f, y, x]):
        return None
    weights = [r for r in block.reads if exactly(list(r.region), [f, rc, ry, rx])]
    if len(weights) != 1:
        return None
    data = [r for r in block.reads if r is not weights[0]][0]
    if len(data.region) != 4 or not data.region[1].min.same_as(rc) or any(
            any(v.same_as(f) for v in undefined_vars(r.min)) for r in data.region):
        return None  # grouped and depthwise convolutions read input channels through f
    index = [i for i, p in enumerate(func.params) if p.same_as(weights[0].source)]
    return index[0] if index else None


def _is_reduction(sch, block_rv) -> bool:
    return any(_is_reduction_iter(iv) for iv in sch.get(block_rv).iter_vars)


def _one_reduction(sch) -> tuple[list, int] | None:
    """``(root blocks, index of the reduction block)`` of a kernel with exactly one reduction
    block, else None."""
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    reductions = [i for i, block_rv in enumerate(blocks) if _is_reduction(sch, block_rv)]
    return (blocks, reductions[0]) if len(reductions) == 1 else None


def _direct_conv(func, sch):
    """``(root blocks, index of the convolution block, weight parameter index)`` of a kernel
    whose one reduction is a direct NCHW convolution, else None. The blocks as written
    (normalize_prim_func would drop the unit loops of a 1x1 kernel)."""
    found = _one_reduction(sch)
    if found is None:
        return None
    blocks, main_index = found
    weight_index = _direct_conv_weight(func, sch.get(blocks[main_index]))
    return None if weight_index is None else (blocks, main_index, weight_index)


def _accumulate_in_registers(sch, block, unrolled, lanes, parallel, first_reduction) -> None:
    """The register tile's last steps: its loops unrolled, its lanes vectorized, the tiles
    parallel, and the accumulators' initialization split out (vectorized) ahead of
    `first_reduction`."""
    for loop in unrolled:
        sch.unroll(loop)
    sch.vectorize(lanes)
    sch.parallel(parallel)
    init = sch.decompose_reduction(block, first_reduction)
    sch.vectorize(sch.get_loops(init)[-1])


def _inline_identity_copies(sch, prologue) -> list:
    """Inline the prologue blocks that only copy (an identity "padding" reads like the input
    itself); the others (real padding) are returned."""
    from tvm import ir, s_tir

    left = []
    for block_rv in prologue:
        if not isinstance(sch.get(block_rv).body.value, ir.expr.Call):
            try:
                sch.compute_inline(block_rv)
                continue
            except s_tir.ScheduleError:
                pass
        left.append(block_rv)
    return left


def _loops_under(sch, block_rv, loop) -> list:
    """The loops of `block_rv` nested inside `loop` (one of its loops)."""
    loops = sch.get_loops(block_rv)
    return loops[[sch.get(lp).same_as(sch.get(loop)) for lp in loops].index(True) + 1:]


def _epilogue_at(sch, last, tile_loop) -> list:
    """Compute the kernel's last block per register tile (under `tile_loop`); its loops inside
    the tile."""
    sch.reverse_compute_at(last, tile_loop)
    return _loops_under(sch, last, tile_loop)


# A task's padded input rows (all channels) at most this many bytes, for padding per task: the
# L1 data cache. ResNet-50's padded layers (45-55 KB per task) ran 3 % slower padded per task.
PROLOGUE_PER_TASK_BYTES = 32 << 10


def _prologue_per_task(sch, block_rv, parallel_loop) -> bool:
    """Compute a prologue block (real padding) inside the kernel's parallel loop: each task
    pads the input rows its own tile reads, in its own cache, in the same parallel region as
    the convolution. Computed first, in a parallel loop of its own, the padded input was
    written by one core and read by the other after a second thread-pool launch: the zoo
    models' padded convolutions ran 2-20 % slower (the zoo ResNet's stride-2 16 -> 32 3x3:
    16.9 against 13.6 us) and up to 1.9x slower in this machine's slow spells. Redundant
    work: the window's rows are padded once per task reading them (3 per row for a 3x3
    window), a copy. False (and nothing moved) when the block cannot move there or a task's
    padded input would outgrow `PROLOGUE_PER_TASK_BYTES`."""
    from tvm import s_tir

    trial = sch.copy()
    try:
        trial.compute_at(block_rv, parallel_loop)
    except s_tir.ScheduleError:
        return False
    dtype_bytes = sch.get(block_rv).writes[0].source.dtype.bits // 8
    if _iterations(trial, _loops_under(trial, block_rv, parallel_loop)) * dtype_bytes \
            > PROLOGUE_PER_TASK_BYTES:
        return False
    sch.compute_at(block_rv, parallel_loop)
    return True


def packed_conv2d(func, target):
    """Schedule a direct NCHW convolution with vector lanes along the output channels.

    The weight ``[F, C, KH, KW]`` is read as ``[F / lanes, C, KH, KW, lanes]`` (the function's
    parameter changes; its PrimFunc carries ``PACKED_WEIGHTS_ATTR`` and the OptimizeLayers
    pass repacks the argument, at build time for a constant). A register tile of
    ``c x lanes`` output channels times ``w`` output columns accumulates over the whole
    reduction: per step ``c`` contiguous weight vectors, ``w`` broadcast inputs and ``c * w``
    fused multiply-adds, whatever the stride or the width (``w`` divides it); the
    accumulators live in a tile-local buffer and the epilogue (bias, batch norm, activation,
    residual add) writes the tile out. Identity padding is inlined; real padding is computed
    per parallel task (`_prologue_per_task`), or first, in parallel. Returns None for other
    kernels (grouped or depthwise convolutions, channel counts that are not a multiple of the
    lanes, non-float32).
    """
    from tvm import s_tir

    if kernel_kind(func) != "conv2d":
        return None
    lanes, registers = vector_lanes(target)
    sch = s_tir.Schedule(func)
    found = _direct_conv(func, sch)
    if found is None:
        return None
    blocks, main_index, weight_index = found
    conv = blocks[main_index]
    block = sch.get(conv)
    loops = sch.get_loops(conv)
    if len(loops) != len(block.iter_vars) or any(_extent(sch, lp) is None for lp in loops):
        return None
    weight = func.params[weight_index].ty
    channels, window = int(weight.shape[0]), int(weight.shape[2]) * int(weight.shape[3])
    whole_vectors = _extent(sch, loops[3]) % TILE_LANES == 0  # for the tiled rule
    if channels % lanes or str(weight.dtype) != "float32" or whole_vectors and (
            window > 1 and (channels == lanes
                            or window * int(weight.shape[1]) < MIN_PACKED_WINDOW_REDUCTION)
            or _reads_a_residual(sch, func, blocks[main_index + 1:],
                                 sch.get(blocks[-1]).writes[0].source)):
        return None

    sch.transform_layout(conv, ("read", [r.source.same_as(func.params[weight_index])
                                          for r in block.reads].index(True)),
                         lambda f, c, h, w: (f // lanes, c, h, w, f % lanes))
    prologue = _inline_identity_copies(sch, blocks[:main_index])
    epilogue = list(blocks[main_index + 1:])
    accumulate = sch.cache_write(conv, 0, "local")
    sch.transform_layout(conv, ("write", 0), lambda n, f, y, x: (n, f // lanes, y, x, f % lanes))
    # the epilogue reads the accumulators through one block writing the kernel's output
    tail = [accumulate] + epilogue
    for block_rv in tail[:-1]:
        sch.compute_inline(block_rv)
    last = tail[-1]
    n, f, y, x, rc, ry, rx = sch.get_loops(conv)
    vectors, columns = _packed_tile(channels // lanes, _extent(sch, x),
                                    PACKED_ACCUMULATORS[registers])
    f_outer, f_vectors, f_lanes = sch.split(f, [None, vectors, lanes])
    x_outer, x_inner = sch.split(x, [None, columns])
    sch.reorder(n, f_outer, y, x_outer, rc, ry, rx, f_vectors, x_inner, f_lanes)
    tile_f, *tile_x = _epilogue_at(sch, last, x_outer)  # the tile's channels, then columns
    f_blocks, f_lane = sch.split(tile_f, [None, lanes])
    sch.reorder(*tile_x, f_blocks, f_lane)
    sch.vectorize(f_lane)
    for loop in tile_x:  # constant indices: the accumulators stay in registers
        sch.unroll(loop)
    tasks = sch.fuse(n, f_outer, y)
    _accumulate_in_registers(sch, conv, [f_vectors, x_inner], f_lanes, tasks, rc)
    for block_rv in prologue:  # padding: per task, else first, parallel over channels
        if not _prologue_per_task(sch, block_rv, tasks):
            prologue_loops = sch.get_loops(block_rv)
            if len(prologue_loops) > 1:
                sch.parallel(sch.fuse(*prologue_loops[:2]))
    return sch.mod["main"].with_attr(PACKED_WEIGHTS_ATTR, [weight_index, lanes])


def blocked_conv2d(func, target):
    """Schedule a convolution in the blocked layout NCHW[lanes]c (see ``layers.prepare``).

    ``out[n, f, y, x, lane] += data[n, c, y', x', l] * weight[f, c, ry, rx, l, lane]``: a
    register tile of ``v`` output-channel blocks times ``w`` output columns, each a vector of
    the block's lanes, accumulates over the whole reduction (per step ``v`` contiguous weight
    vectors, ``w`` broadcast inputs, ``v * w`` fused multiply-adds); the epilogue writes the
    tile out as whole contiguous vectors (onnxruntime's NCHWc kernels do the same). Identity
    padding is inlined; real padding is computed per parallel task (`_prologue_per_task`), or
    first, in parallel. Returns None for other kernels (other layouts, blocks that are not one
    vector of the target).
    """
    from tvm import s_tir

    if kernel_kind(func) != "conv2d":
        return None
    lanes, registers = vector_lanes(target)
    sch = s_tir.Schedule(func)
    found = _one_reduction(sch)
    if found is None:
        return None
    blocks, main_index = found
    conv = blocks[main_index]
    block = sch.get(conv)
    out = block.writes[0].source if len(block.writes) == 1 else None
    loops = sch.get_loops(conv)
    if out is None or len(block.iter_vars) != 9 or len(loops) != 9 or len(out.shape) != 5 \
            or str(out.dtype) != "float32" or any(_extent(sch, lp) is None for lp in loops) \
            or _extent(sch, loops[4]) != lanes:
        return None
    prologue = _inline_identity_copies(sch, blocks[:main_index])
    tail = [sch.cache_write(conv, 0, "local")] + list(blocks[main_index + 1:])
    for block_rv in tail[:-1]:
        sch.compute_inline(block_rv)
    n, f, y, x, lane, rc, ry, rx, rl = sch.get_loops(conv)
    vectors, columns = _packed_tile(_extent(sch, f), _extent(sch, x),
                                    PACKED_ACCUMULATORS[registers])
    f_outer, f_vectors = sch.split(f, [None, vectors])
    x_outer, x_inner = sch.split(x, [None, columns])
    sch.reorder(n, f_outer, y, x_outer, rc, ry, rx, rl, f_vectors, x_inner, lane)
    *tile, tile_lane = _epilogue_at(sch, tail[-1], x_outer)  # blocks, columns; lanes
    sch.vectorize(tile_lane)
    for loop in tile:  # constant indices: the accumulators stay in registers
        sch.unroll(loop)
    tasks = sch.fuse(n, f_outer, y)
    _accumulate_in_registers(sch, conv, [f_vectors, x_inner], lane, tasks, rc)
    for block_rv in prologue:  # padding: per task, else first, parallel over blocks and rows
        if not _prologue_per_task(sch, block_rv, tasks):
            prologue_loops = sch.get_loops(block_rv)
            if len(prologue_loops) > 2:
                sch.parallel(sch.fuse(*prologue_loops[:3]))
    return sch.mod["main"]


WINOGRAD_STAGES = ("winograd_inverse", "winograd_inverse_rows", "winograd_gemm",
                   "winograd_data", "winograd_rows", "winograd_pad")


def is_winograd(func) -> bool:
    """Whether a kernel is a Winograd convolution (written by ``layers.prepare``).

    MetaSchedule is not asked to tune these: its search space does not unroll the transforms
    over their constant matrices (best of 128 trials on the zoo ResNet's 32-channel layer:
    389 us; the winograd rule: 9 us)."""
    from tvm import s_tir

    try:
        s_tir.Schedule(func).get_sblock("winograd_gemm")
    except s_tir.ScheduleError:
        return False
    return True


def winograd_conv2d(func, target):
    """Schedule a Winograd F(4x4, 3x3) convolution in NCHW16c (``layers.prepare`` writes it:
    blocks ``winograd_pad`` ... ``winograd_out``, see ``_conv2d_winograd_blocked``).

    One parallel task per row of output tiles computes everything that row needs: its padded
    input rows, their transform, the 36 channel products, the inverse transform and the output
    rows with the fused epilogue (no data crosses tasks, one thread-pool launch). The
    transforms are unrolled over the constant matrices (only their nonzero terms remain) and
    vectorized along the channel lanes; the products are register tiles of up to 8 tiles x
    2 channel vectors accumulated over the input channels. Returns None for other kernels.
    """
    from tvm import s_tir

    if kernel_kind(func) != "conv2d":
        return None
    sch = s_tir.Schedule(func)
    try:  # (what is_winograd checks)
        stages = [sch.get_sblock(name) for name in WINOGRAD_STAGES]
        out = sch.get_sblock("winograd_out")
    except s_tir.ScheduleError:
        return None
    lanes, registers = vector_lanes(target)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    names = [sch.get(block_rv).name_hint for block_rv in blocks]
    for block_rv in blocks[names.index("winograd_out") + 1:]:  # the fused epilogue
        sch.reverse_compute_inline(block_rv)
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
    vectors_per_block = max(1, channel_lanes // lanes)
    k_blocks = 2 if (channel_blocks % 2 == 0
                     and 2 * vectors_per_block <= PACKED_ACCUMULATORS[registers]) else 1
    columns = _largest_divisor(tile_cols, max(1, PACKED_ACCUMULATORS[registers]
                                              // (k_blocks * vectors_per_block)))
    col_outer, col_inner = sch.split(col_, [None, columns])
    k_outer, k_inner, k_lane = sch.split(k, [None, k_blocks, channel_lanes])
    sch.reorder(e, n_, col_outer, k_outer, rc, col_inner, k_inner, k_lane)
    sch.unroll(col_inner)
    sch.unroll(k_inner)
    sch.vectorize(k_lane)
    sch.decompose_reduction(gemm, rc)
    return sch.mod["main"]


# The pixel-lane tile's input panel (channels x tile pixels) stays in the L1 data cache while
# every output-channel tile of it is computed: at most this many bytes.
PIXEL_PANEL_BYTES = 32 << 10


def _pixel_tile(out_channels: int, pixel_vectors: int, in_channels: int, lanes: int,
                accumulators: int) -> tuple[int, int] | None:
    """``(output channels, pixel vectors)`` per register tile of the pixel-lane rule: the
    fewest loads per multiply-add (r channels x v vectors: v vector loads and r broadcasts
    for r * v multiply-adds), then the largest tile, with the input panel in
    `PIXEL_PANEL_BYTES`; both divide their extents. None when no tile fits."""
    options = [(r, v) for r in range(1, min(out_channels, accumulators) + 1)
               if out_channels % r == 0
               for v in range(1, pixel_vectors + 1) if pixel_vectors % v == 0
               and r * v <= accumulators and in_channels * v * lanes * 4 <= PIXEL_PANEL_BYTES]
    if not options:
        return None
    return min(options, key=lambda rv: ((rv[0] + rv[1]) / (rv[0] * rv[1]), -rv[0] * rv[1]))


def _reads_a_residual(sch, func, epilogue, out) -> bool:
    """True when an epilogue block reads a parameter shaped like the output `out` (a
    residual add), which lanes along the output channels would gather."""
    shape = [int(d) for d in out.shape]
    sources = [region.source for block_rv in epilogue for region in sch.get(block_rv).reads]
    return any([int(d) for d in p.ty.shape] == shape and any(p.same_as(s) for s in sources)
               for p in func.params if not p.same_as(out))


def pixel_lanes_1x1(func, target):
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
    lanes, registers = vector_lanes(target)
    sch = s_tir.Schedule(func)
    found = _direct_conv(func, sch)
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
    pixels = out_shape[2] * out_shape[3]
    if pixels % lanes:
        return None
    in_channels = int(weight.shape[1])
    tile = _pixel_tile(out_shape[1], pixels // lanes, in_channels, lanes,
                       PACKED_ACCUMULATORS[registers])
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
    _accumulate_in_registers(sch, conv, [f_inner, p_vectors], p_lanes, parallel, rc)
    return sch.mod["main"]


# Vector lanes of the pooling rule: the largest divisor of the output width up to this many
# (ResNet-50's 56-wide max pool: 14 lanes 0.12 ms, 28 lanes 0.16, 56 lanes 0.31; scalar 0.22).
POOL_LANES = 16
# Output columns per tile of a pool in the blocked layout (each column one vector of lanes).
POOL_BLOCKED_COLUMNS = 8


def pooling_rows(func, target):
    """Schedule a windowed pooling kernel (max or average pool over ``KH x KW``) row by row.

    Each parallel task computes one output row of one channel: the row is initialized, then
    every window offset ``(ry, rx)`` updates it with vectors of output columns (strided input
    loads for a stride-2 pool) while the row is in the L1 cache, and no element re-tests its
    window's bounds: padding, when there is any, is computed first, in parallel. Lanes: the
    largest divisor of the width up to `POOL_LANES`; in the blocked layout (NCHW[x]c) the
    block's channels, a tile of up to `POOL_BLOCKED_COLUMNS` columns updated together. Returns
    None for other kernels and for NCHW widths with no divisor of at least 4 lanes (those keep
    ``parallel-loops``).
    """
    from tvm import s_tir

    del target
    if kernel_kind(func) != "pooling":
        return None
    sch = s_tir.Schedule(func)
    found = _one_reduction(sch)
    if found is None:
        return None
    blocks, pool_index = found
    pool = blocks[pool_index]
    kinds = [_is_reduction_iter(iv) for iv in sch.get(pool).iter_vars]
    loops = sch.get_loops(pool)
    if len(loops) != len(kinds) or any(_extent(sch, loop) is None for loop in loops):
        return None
    work = _iterations(sch, loops)
    if kinds == [False] * 5 + [True] * 2 and _extent(sch, loops[4]) % 4 == 0:
        # blocked layout (NCHW[x]c): the lanes are the channels of the block; a tile of
        # output columns, each one vector, updated per window offset
        n, c, y, x, x_lanes, ry, rx = loops
        x_outer, x_tile = sch.split(x, [None, _largest_divisor(_extent(sch, x),
                                                               POOL_BLOCKED_COLUMNS)])
        sch.reorder(n, c, y, x_outer, ry, rx, x_tile, x_lanes)
        sch.unroll(x_tile)
    elif kinds == [False] * 4 + [True] * 2:
        n, c, y, x, ry, rx = loops
        lanes = _largest_divisor(_extent(sch, x), POOL_LANES)
        if lanes < 4:
            return None
        x_outer, x_lanes = sch.split(x, [None, lanes])
        sch.reorder(n, c, y, x_outer, ry, rx, x_lanes)
    else:
        return None
    rows = sch.fuse(n, c, y)
    if (_extent(sch, rows) or 0) >= MIN_PARALLEL_EXTENT and work >= MIN_PARALLEL_WORK:
        sch.parallel(rows)
    sch.vectorize(x_lanes)
    init = sch.decompose_reduction(pool, ry)
    sch.vectorize(sch.get_loops(init)[-1])
    for block_rv in blocks:  # padding before, a divisor after (average pool): parallel rows
        if block_rv.same_as(pool):
            continue
        other_loops = sch.get_loops(block_rv)
        if len(other_loops) > 1 and work >= MIN_PARALLEL_WORK:
            sch.parallel(sch.fuse(*other_loops[:-1]))
    return sch.mod["main"]
