"""The ``row-reductions`` CPU rule: kernels that reduce rows along their innermost axis (softmax,
layer norm, a 1x1 convolution of a 1x1 map such as squeeze-and-excite's, matrix-vector products with
``[output, reduction]`` weights): one row per task, every block of the row computed there,
reductions in vector partial sums.

What: the reductions' leading spatial loops are parallel from 2^15 iterations. Elementwise blocks
read once are inlined (a softmax's exponentials, read twice, are computed once per row). Each
reduction is split into a vector of partial sums (``rfactor``: whole, half or quarter vectors that
divide the row; a prime row such as ViT's 197 tokens stays serial) summed across at the end, so a
row's sum is added in another order (rounding differences near 1e-7 relative); the elementwise steps
are vectorized along the row.

Why: these kernels had no rule or ``parallel-loops``' serial row loops. Layer norm 0.09-0.19x and
softmax 0.36-0.48x of ``parallel-loops``' time (BERT, GPT-2, ViT; alternating, shared machine).

Rejected: dlight's CPU ``Reduction`` rule, which keeps the reductions serial (rfactor did not
combine with compute_at there; here the partial block is factored out first, then computed per row)
and recomputes a softmax's max and sum per element (2.2 ms for 1000 classes against 0.01). dlight's
CPU ``GEMV`` for ``[N, K]`` products: LLVM never finished compiling its 128-lane gather for a
generated ``[1, 16, 48, 68] x [68, 1]`` MatMul, and took 23 s for 1024 x 1024, against 0.03 s as
rows.
"""

from __future__ import annotations

from ...layers.classify import LAYER_KINDS
from ...target import vector_lanes
from ..rule import Rule
from .analysis import iterations, loop_extent, loops_under
from .injective_lanes import inner_lanes
from .schedule_helpers import MIN_PARALLEL_EXTENT, MIN_PARALLEL_WORK


def _leading_spatial(info) -> int:
    kinds = "".join(it.kind for it in info.iters)
    return len(kinds) - len(kinds.lstrip("S"))


def _loop_bare_blocks(sch) -> None:
    """A unit loop over every block of the kernel that has no loop (a layer norm over all of
    its input's axes: its mean, a scalar, ``x_mean[()] = x_sum[()] / n``), so that rfactor can
    run. TVM's rfactor rebuilds the kernel's body expecting each block realize it meets
    outside the loops it walks into to be the reduction's own (``Check failed: block_realize
    == old_block_realize_.get()``, an internal error, not a ScheduleError): a bare block
    beside the reduction breaks that; under a loop of its own it is passed over. The unit
    loop is gone once lowered."""
    for block_rv in sch.get_child_blocks(sch.get_sblock("root")):
        if not sch.get_loops(block_rv):
            sch.add_unit_loop(block_rv)


def _vector_reduction(sch, block_rv, lanes: int):
    """The reduction's innermost loop split into vectors of the target's lanes (whole, half or
    quarter vectors, the first that divides it) and factored out: a vector of partial sums
    (maxima), then one sum across it. Returns the partial block, or None (nothing done) where
    no such split divides the loop."""
    from tvm import s_tir

    inner = sch.get_loops(block_rv)[-1]
    extent = loop_extent(sch, inner)
    widths = [w for w in (lanes, lanes // 2, lanes // 4) if w >= 2 and extent % w == 0]
    if not widths or extent <= widths[0]:
        return None
    trial = sch.copy()
    try:
        _loop_bare_blocks(trial)
        _, lane = trial.split(trial.get_loops(block_rv)[-1], [None, widths[0]])
        trial.rfactor(lane, factor_axis=0)
    except s_tir.ScheduleError:  # a reducer rfactor does not know
        return None
    _loop_bare_blocks(sch)
    _, lane = sch.split(inner, [None, widths[0]])
    return sch.rfactor(lane, factor_axis=0)


def _vectorize_partials(sch, partial, row) -> None:
    """The partial block's lane loop innermost and vectorized, its initialization apart."""
    from tvm.tirx.analysis import undefined_vars

    loops = loops_under(sch, partial, row) if row is not None else sch.get_loops(partial)
    realize = sch.get(loops[-1]).body  # the partial block's lane: its first iterator's loop
    lane_vars = undefined_vars(realize.iter_values[0])
    lane = next(loop for loop in loops
                if any(v.same_as(sch.get(loop).loop_var) for v in lane_vars))
    others = [loop for loop in loops if not sch.get(loop).same_as(sch.get(lane))]
    sch.reorder(*others, lane)
    first = next((lp for lp in others if loop_extent(sch, lp) > 1), others[0])
    sch.vectorize(lane)
    init = sch.decompose_reduction(partial, first)  # before the reduction's first real loop
    sch.vectorize(sch.get_loops(init)[-1])


def not_a_matrix_vector_product(func, target) -> bool:
    """True unless `func` is a matrix-vector product whose reduction runs along the matrix's
    contiguous rows (``y[n] = sum_k W[n, k] * x[k]``, as dlight's GEMV analysis sees it): the
    matmul table sends those to row-reductions, one dot product per row.

    dlight's own CPU GEMV rule, which the table used there before, vectorizes 128 outputs over
    a gather of the matrix's columns with the reduction unrolled inside: LLVM took 23 s to
    compile a 1024 x 1024 product and did not finish a 768 x 68 one (a generated graph's
    MatMul [1, 16, 48, 68] x [68, 1]); as rows they compile in 0.03 s and run faster."""
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.analysis.gemv import is_gemv, normalize

    del target
    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    reductions = [info for info in infos or [] if not info.is_injective()]
    if len(reductions) != 1 or len(reductions[0].iters) not in (2, 3) \
            or is_gemv(sch, reductions[0]) is None:
        return True
    return not normalize(sch, reductions[0])


def reduces_only(func, target) -> bool:
    """True when the output of `func` (its last parameter) is no wider than its reductions'
    results: a plain reduction
    (a mean, a global pool, a reduction then an elementwise step on its result), not a norm
    whose epilogue reads the reduced value back over the whole row (an RMS norm: x * rsqrt(mean
    of squares), x - mean). The reduction table sends the norms to row-reductions first and
    leaves plain reductions to reduction-chains."""
    del target
    from tvm import s_tir, tirx

    sch = s_tir.Schedule(func)
    reduced = [write.source for block_rv in sch.get_child_blocks(sch.get_sblock("root"))
               for block in [sch.get(block_rv)]
               if any(iv.iter_type == 2 for iv in block.iter_vars) for write in block.writes]
    if not reduced:
        return True

    def elements(shape):
        count = 1
        for dim in shape:
            if not isinstance(dim, tirx.IntImm):
                return None
            count *= int(dim)
        return count

    # the last parameter is the kernel's output (TVM 0.27: a parameter's type is its buffer's)
    results = [elements(buffer.shape) for buffer in reduced]
    outputs = [elements(param.ty.shape) for param in func.params[-1:]]
    if any(n is None for n in results + outputs) or not outputs:
        return True
    return max(outputs) <= max(results)


class RowReductions(Rule):
    """The ``row-reductions`` rule: one row per task (softmax, layer norm, 1x1 convolutions
    of a 1x1 map), all blocks of the row computed there; vector partial sums, vector
    elementwise steps."""

    name = "row-reductions"
    description = ("row-wise reductions (softmax, layer norm, 1x1 maps): one row per task, "
                   "vector partial sums, vector elementwise steps")
    kinds = LAYER_KINDS
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a kernel whose reductions run along the innermost axes of rows that all its
        blocks share (``softmax``: max, sum of exponentials, normalization; ``layer_norm``;
        a squeeze-and-excite 1x1 convolution of a 1x1 map: a row per output channel).

        The elementwise blocks read by one block only are inlined (the exponentials, read by
        the sum and the normalization, are computed once per row); the last block's row
        loops fused (parallel when the kernel does ``MIN_PARALLEL_WORK`` iterations) and
        every other block computed per row. Each reduction is split into vectors of the
        target's lanes (`vector_lanes`) of partial results (``rfactor``), summed across at
        the end: the row's sum is added in another order than the unscheduled loops' (a
        float rounding difference, 1e-6 relative); each elementwise step is vectorized along
        the row. Returns None when the kernel has no reduction, or when its blocks do not
        share leading row loops."""
        from tvm import s_tir
        from tvm.s_tir.dlight.analysis import normalize_prim_func

        lanes, _ = vector_lanes(target)
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if not infos or not any(not info.is_injective() for info in infos):
            return None
        if any(loop_extent(sch, loop) is None for info in infos
               for loop in sch.get_loops(info.block_rv)):
            return None
        # inline the spatial blocks with one consumer (padding, bias, activation)
        kept = []
        for info in infos[:-1]:
            if info.is_injective() and len(sch.get_consumers(info.block_rv)) == 1:
                try:
                    sch.compute_inline(info.block_rv)
                    continue
                except s_tir.ScheduleError:
                    pass
            kept.append(info)
        kept.append(infos[-1])
        # the rows: the leading spatial loops of the reductions; the last block's leading loops
        # of the same extent (normalize_prim_func fuses a unit batch axis into the next one)
        reductions = [info for info in kept if not info.is_injective()]
        row_extent = min(iterations(sch, sch.get_loops(info.block_rv)[:_leading_spatial(info)])
                         for info in reductions)
        last = kept[-1]
        last_loops = sch.get_loops(last.block_rv)
        rows = next((n for n in range(len(last_loops) + 1)
                     if iterations(sch, last_loops[:n]) >= row_extent), None)
        if rows is None or iterations(sch, last_loops[:rows]) != row_extent:
            return None
        if row_extent == 1:
            rows = 0
        work = sum(iterations(sch, sch.get_loops(info.block_rv)) for info in kept)
        partials = [_vector_reduction(sch, info.block_rv, lanes) for info in kept
                    if not info.is_injective()]
        row = None  # no row loop: the kernel is one row (a classifier's softmax)
        if rows:
            loops = sch.get_loops(last.block_rv)
            row = sch.fuse(*loops[:rows]) if rows > 1 else loops[0]
            for block_rv in reversed(sch.get_child_blocks(sch.get_sblock("root"))[:-1]):
                try:  # every other block (partial sums too) per row
                    sch.compute_at(block_rv, row, preserve_unit_loops=True)
                except s_tir.ScheduleError:
                    return None
            if loop_extent(sch, row) >= MIN_PARALLEL_EXTENT and work >= MIN_PARALLEL_WORK:
                sch.parallel(row)
        for partial in partials:
            if partial is not None:
                _vectorize_partials(sch, partial, row)
        for info in kept:
            if info.is_injective():
                inner = sch.get_loops(info.block_rv)[1 if rows else 0:]
                if inner:
                    loop = sch.fuse(*inner) if len(inner) > 1 else inner[0]
                    width = inner_lanes(loop_extent(sch, loop), lanes)
                    if width is not None and width < loop_extent(sch, loop):
                        loop = sch.split(loop, [None, width])[1]
                    if width is not None and width > 1:
                        sch.vectorize(loop)
        return sch.mod["main"]
