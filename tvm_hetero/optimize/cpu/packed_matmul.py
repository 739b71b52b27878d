"""The ``packed-matmul`` CPU rule: a matmul ``out[..., m, n] = sum_k A[..., m, k] W[k, n]`` with
batch dimensions 1 whose weight ``W`` is a kernel parameter (every dense, Gemm, projection and FFN
layer after constant folding): ``W`` read as panels ``[N/lanes, K, lanes]`` repacked at build time;
register tiles of rows x lane vectors sized from the target's vector registers; rows padded to the
tile; epilogue per tile with fast GELU math.

What: a tile of r rows x c lane vectors accumulates over the whole K: per step c weight loads from
one contiguous panel, r broadcasts and r * c FMAs. Tasks are (panel, row tile), panels outermost.
Rows that are not a multiple of r are padded (``pad_einsum``: ViT's 197 rows were 1-row tiles under
``tiled``, 197 being prime); ragged columns are padded to whole vectors (the packed weight with
zeros) when there are at least 8 vectors and more than one row. The epilogue's ``erf``, ``tanh`` and
``pow(x, 3)`` (GELU) become TVM's rational approximations and products: LLVM lowered them to one
scalar libm call per element.

The tile: ``r * c + c + 1`` registers within the target's 32 (AVX-512) or 16 (AVX2). The old budget
of 12 accumulators in AVX2's 16 chose 3 x 4 tiles (17 registers), which spilled: 59-62 GFLOP per CPU
second against 90-99 for 4 x 3 or 6 x 2. Among the tiles that fit: the least work counting padded
rows and each load per FMA at a quarter (in cache the FMA units bound every tile with both rows and
vectors: znver4 16 x 512 -> 512 8 x 2, 4 x 4 and 8 x 1 alike, 6 x 4 padded to 18 rows 15 % slower),
then the least padding, then the most vectors (AVX2, 8-16 rows: 2 x 4 tiles 15-30 % less CPU time
than 4 x 2).

Memory-bound products (at most 16 rows) with several row tiles are cut into blocks of the reduction
whose weight vectors fill at most a quarter of the L2 cache, and a task per panel runs every row
tile over a block before the next: the weight is read from memory once. Before, 16 rows took 3 tiles
of 6 rows each streaming its panel, three reads of the weight (45-49 % of the copy bandwidth); in
CPU time the blocks cost nothing against whole-reduction tiles. Rejected: blocks with all rows'
accumulators in a task buffer (slower: the accumulators left the registers), and narrower L2-sized
panels for 8-16 rows (1.5-2.3x slower). Batched products of two activations (attention) are
``tiled``'s.
"""

from __future__ import annotations

from ...layers.classify import kernel_kind
from ...target import cpu_traits
from ..choices import choose
from ..rule import Rule
from .analysis import largest_divisor, loop_extent, one_reduction
from .schedule_helpers import (accumulate_in_registers, epilogue_at, inline_identity_copies,
                               schedule_one_reduction, unroll_register_loops)
from .fast_math import fast_math
from .packed_weights import PACKED_WEIGHTS_ATTR

# At most this many weight vectors per tile row: a tile reads c contiguous vectors of its
# panel per step of the reduction.
MAX_TILE_VECTORS = 4
MAX_TILE_ROWS = 8
# Columns that are not whole vectors are padded to whole vectors (the weight argument with
# zeros) when there are at least this many vectors (a classifier's 1000 outputs: 63 vectors
# of 16 for 62.5); narrower ragged products (10 outputs) go on down the table.
MIN_RAGGED_VECTORS = 8
# What a load per multiply-add weighs in the tile choice against padded work (1): the FMA
# units bound a tile with both rows and vectors, so loads count little. Measured in cache
# (16 x 512 -> 512, per CPU second): znver4 8x2, 4x4, 8x1 tiles alike, 6x4 padded to 18 rows
# 15 % slower; haswell 4x3 > 4x2 > 2x4 > 8x1 by 5-15 %.
LOAD_WEIGHT = 0.25
# Products of at most this many rows are memory-bound (2 * rows FLOPs per 4-byte weight read,
# below a CPU's FLOP-per-byte balance): their reduction is cut in blocks whose weight vectors
# fit a quarter of the L2 cache, and every row tile of a panel runs over a block before the
# next, so the weight is read from memory once whatever the number of row tiles.
MEMORY_BOUND_ROWS = 16


def matmul_tile(rows: int, vectors: int, registers: int,
                pad_vectors: bool = False) -> tuple[int, int]:
    """``(tile rows, tile vectors)`` for `registers` vector registers: a tile of r rows x c
    vectors holds r * c accumulators, c weight vectors and one broadcast input in registers
    (r * c + c + 1 of them: 3 x 4 tiles in AVX2's 16 spilled and ran 1.5x slower than 4 x 3).
    Least work, counting the rows padded to a multiple of r and each load per multiply-add
    (c weight vectors and r broadcasts for r * c) at `LOAD_WEIGHT`; then the least padding,
    the most vectors (more weight streams at once: 4 rows x 4096 -> 4096 on AVX2, 2 x 4 tiles
    3.1 CPU ms, 4 x 2 4.2), the largest tile. c divides `vectors`, or, with `pad_vectors`, the
    vectors are padded to a multiple of c too."""
    options = [(r, c) for r in range(1, min(rows, MAX_TILE_ROWS) + 1)
               for c in range(1, min(vectors, MAX_TILE_VECTORS) + 1)
               if (pad_vectors or vectors % c == 0) and r * c + c + 1 <= registers]

    def cost(rc):
        r, c = rc
        padded = -(-rows // r) * r * -(-vectors // c) * c
        work = padded / (rows * vectors) * (1 + LOAD_WEIGHT * (r + c) / (r * c))
        return round(work, 9), padded, -c, -r * c

    return choose("matmul-tile", sorted(options, key=cost))


def reduction_block(rows: int, reduced: int, tile_rows: int, tile_vectors: int, lanes: int,
                    l2_bytes: int) -> int | None:
    """Steps of the reduction per block for a memory-bound product (at most
    `MEMORY_BOUND_ROWS` rows, more than one row tile): the largest divisor of `reduced` whose
    weight vectors (``tile_vectors * lanes`` floats per step) fit a quarter of `l2_bytes`;
    None when the product is not cut (one row tile, many rows, or the whole reduction fits)."""
    if rows > MEMORY_BOUND_ROWS or -(-rows // tile_rows) < 2:
        return None
    block = largest_divisor(reduced, max(1, l2_bytes // 4 // (tile_vectors * lanes * 4)))
    if block >= reduced:
        return None
    # tuning's alternatives: blocks for an eighth of the L2, no blocks
    half = largest_divisor(reduced, max(1, l2_bytes // 8 // (tile_vectors * lanes * 4)))
    return choose("reduction-block", list(dict.fromkeys([block, half, None])))


def _weight_operand(func, block, reduction_var, lane_var):
    """Index of the parameter read as ``W[k, n]`` (k the reduction, n the output lanes), else
    None."""
    for region in block.reads:
        ranges = list(region.region)
        if len(ranges) == 2 and ranges[0].min.same_as(reduction_var) \
                and ranges[1].min.same_as(lane_var):
            index = [i for i, p in enumerate(func.params) if p.same_as(region.source)]
            if index:
                return index[0], region.source
    return None


def _widened_weight(func, weight, shape):
    """A schedule of `func` with its weight parameter `weight` declared `shape` (wider: whole
    vectors) and the new buffer; the function's reads stay within the old extent."""
    import tvm_ffi
    from tvm import ir, s_tir, tirx

    index_dtype = str(weight.ty.shape[0].ty)  # int64 in imported models
    wide = tirx.decl_buffer([tirx.IntImm(index_dtype, d) for d in shape], "float32",
                            name=weight.name, layout=None)
    func = tvm_ffi.structural_map(
        func, lambda e: wide if isinstance(e, ir.expr.Var) and e.same_as(weight) else e)
    return s_tir.Schedule(func), wide


class PackedMatmul(Rule):
    """The ``packed-matmul`` rule: weight panels [N/lanes, K, lanes] repacked at build time;
    register tiles of rows x lane vectors from the target's registers; rows padded to the
    tile; epilogue per tile with fast GELU math."""

    name = "packed-matmul"
    description = ("a [K, N] weight parameter read as panels [N/lanes, K, lanes] repacked at "
                   "build time; register tiles of rows x lane vectors sized from the target's "
                   "vector registers; rows padded to the tile; epilogue per tile with fast "
                   "erf/tanh")
    kinds = ("matmul",)
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule ``out[..., m, n] = sum_k A[..., m, k] * W[k, n]`` (+ epilogue) whose
        weight `W` is a parameter of the kernel and whose batch dimensions are all 1.

        The weight is read as ``[N / lanes, K, lanes]`` (``PACKED_WEIGHTS_ATTR`` with axis 1:
        the OptimizeLayers pass repacks the argument, at build time for a constant), so each
        tile streams one contiguous panel. A register tile of ``r`` rows x ``c`` lane vectors
        (`matmul_tile`, from the target's vector registers) accumulates over the whole
        reduction in a tile-local buffer: per step ``c`` contiguous weight vectors, ``r``
        broadcast inputs and ``r * c`` fused multiply-adds. Rows are padded to a multiple of
        ``r`` (``pad_einsum``: a 197-row ViT matmul gets 6-row tiles, not 1-row ones). The
        epilogue (bias, residual, GELU) writes each tile out, its ``erf``/``tanh``/``pow`` as
        vector math (:func:`~.fast_math.fast_math`). Tiles run in parallel, panels outermost,
        so a core reuses its panel for every row tile. A memory-bound product (at most
        `MEMORY_BOUND_ROWS` rows) with several row tiles is cut into blocks of the reduction
        (`reduction_block`, from the target's L2 cache): a task per panel runs every row tile
        over a block, the accumulators of all rows kept in the task's buffer between blocks,
        so the weight streams from memory once. Columns that are not whole vectors are
        computed as whole vectors (the weight parameter widened, its argument zero-padded)
        from `MIN_RAGGED_VECTORS` vectors on, as are whole vectors with no divisor up to
        `MAX_TILE_VECTORS`.
        Returns None for other kernels: no [K, N] weight parameter, fewer ragged columns,
        batch dimensions, non-float32.
        """
        from tvm import s_tir

        if kernel_kind(func) != "matmul":
            return None
        traits = cpu_traits(target)
        lanes = traits.lanes
        func = fast_math(func)
        found = schedule_one_reduction(func, "matmul")
        if found is None:
            return None
        sch, blocks, main_index = found
        main = blocks[main_index]
        block = sch.get(main)
        if any(not sch.get(consumer).same_as(block) for producer in blocks[:main_index]
               for consumer in sch.get_consumers(producer)):
            return None  # an input the epilogue reads (a recurrent step's slice): no tile
        kinds = ["R" if iv.iter_type == 2 else "S" for iv in block.iter_vars]
        loops = sch.get_loops(main)
        if len(kinds) < 3 or kinds != ["S"] * (len(kinds) - 1) + ["R"] \
                or len(loops) != len(kinds) or any(loop_extent(sch, lp) is None for lp in loops):
            return None
        if len(block.writes) != 1 or len(block.reads) != 2 \
                or str(block.writes[0].source.dtype) != "float32":
            return None
        if any(loop_extent(sch, lp) != 1 for lp in loops[:-3]):
            return None  # a batch of products
        *_, m_var, n_var, k_var = [iv.var for iv in block.iter_vars]
        weight = _weight_operand(func, block, k_var, n_var)
        if weight is None:
            return None
        weight_index, weight_buffer = weight
        data = [r for r in block.reads if not r.source.same_as(weight_buffer)][0]
        if any(r.min.same_as(n_var) for r in data.region):
            return None
        rows, columns, reduced = (loop_extent(sch, lp) for lp in loops[-3:])
        vectors = -(-columns // lanes)
        if columns % lanes and (columns < MIN_RAGGED_VECTORS * lanes or rows == 1):
            # a few ragged columns: padding them would waste too much; a ragged
            # matrix-vector product: split-k-gemv (1 x 2048 -> 1000 on AVX2: 0.11 ms split,
            # 0.32 ms here)
            return None
        # columns padded to whole tiles where they are not whole vectors, or where their
        # vectors have no divisor from 2 to MAX_TILE_VECTORS (1000 on AVX2: 125 vectors, else
        # 1-vector tiles)
        pad_vectors = columns % lanes != 0 or vectors >= MIN_RAGGED_VECTORS and all(
            vectors % c for c in range(2, MAX_TILE_VECTORS + 1))
        tile_rows, tile_vectors = matmul_tile(rows, vectors, traits.registers, pad_vectors)
        ragged = columns % (tile_vectors * lanes) != 0
        k_block = reduction_block(rows, reduced, tile_rows, tile_vectors, lanes, traits.l2_bytes)
        if ragged:  # the weight read as whole tiles of vectors: its argument is zero-padded
            width = -(-vectors // tile_vectors) * tile_vectors * lanes
            sch, weight_buffer = _widened_weight(func, weight_buffer, [reduced, width])
            blocks, main_index = one_reduction(sch)
            main = blocks[main_index]
        if rows % tile_rows or ragged:
            sch.pad_einsum(main, [1] * (len(kinds) - 3)
                           + [tile_rows, tile_vectors * lanes if ragged else 1, 1])
            blocks = sch.get_child_blocks(sch.get_sblock("root"))
            main_index = [sch.get(b).same_as(sch.get(main)) for b in blocks].index(True)
            # the widened weight's copy is an identity: read in place
            blocks = inline_identity_copies(sch, blocks[:main_index]) + blocks[main_index:]
            main_index = [sch.get(b).same_as(sch.get(main)) for b in blocks].index(True)
        sch.transform_layout(main, ("read", [r.source.same_as(weight_buffer)
                                             for r in sch.get(main).reads].index(True)),
                             lambda k, n: (n // lanes, k, n % lanes))
        prologue, epilogue = blocks[:main_index], blocks[main_index + 1:]
        accumulate = sch.cache_write(main, 0, "local")
        tail = [accumulate] + list(epilogue)
        for block_rv in tail[:-1]:
            try:
                sch.compute_inline(block_rv)
            except s_tir.ScheduleError:
                sch.reverse_compute_inline(block_rv)
        last = tail[-1]
        *batch, m, n, k = sch.get_loops(main)
        m_outer, m_inner = sch.split(m, [None, tile_rows])
        n_outer, n_vectors, n_lanes = sch.split(n, [None, tile_vectors, lanes])
        if k_block is None:  # a task per tile, over the whole reduction
            sch.reorder(*batch, n_outer, m_outer, k, m_inner, n_vectors, n_lanes)
            tile_loops = epilogue_at(sch, last, m_outer)  # the tile's rows, then its columns
            tasks = sch.fuse(*batch, n_outer, m_outer)
            first_reduction = k
        else:  # a task per panel: blocks of the reduction, each for every row tile
            k_outer, k_inner = sch.split(k, [None, k_block])
            sch.reorder(*batch, n_outer, k_outer, m_outer, k_inner, m_inner, n_vectors, n_lanes)
            tile_loops = epilogue_at(sch, last, n_outer)  # all rows (not unrolled), columns
            tasks = sch.fuse(*batch, n_outer)
            first_reduction = k_outer
        epilogue_vectors, epilogue_lane = sch.split(tile_loops[-1], [None, lanes])
        unroll_register_loops(sch, (tile_loops[:-1] if k_block is None else [])
                              + [epilogue_vectors])
        sch.vectorize(epilogue_lane)
        accumulate_in_registers(sch, main, [m_inner, n_vectors], n_lanes, tasks, first_reduction)
        for block_rv in prologue:  # the rows' padding (a copy) and other inputs: parallel rows
            prologue_loops = sch.get_loops(block_rv)
            if len(prologue_loops) > 1:
                sch.parallel(sch.fuse(*prologue_loops[:-1]))
        packed_vectors = -(-vectors // tile_vectors) * tile_vectors if ragged else vectors
        return sch.mod["main"].with_attr(PACKED_WEIGHTS_ATTR,
                                         [weight_index, lanes, 1, packed_vectors])
