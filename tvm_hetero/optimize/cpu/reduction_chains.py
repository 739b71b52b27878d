"""The ``reduction-chains`` CPU rule: a window of its own per output (global pools, means): several
outputs per task, their accumulators independent chains in registers."""

from __future__ import annotations

from ..rule import Rule
from .base import MIN_PARALLEL_EXTENT, is_reduction_iter, iterations, loop_extent, one_reduction

# Outputs a reduction_chains task accumulates at once: independent add chains that hide the
# floating-point add latency (one chain: one add per 4 cycles).
REDUCTION_CHAINS = 8


class ReductionChains(Rule):
    """The ``reduction-chains`` rule: a window of its own per output (global pools, means):
    several outputs per task, their accumulators independent chains in registers."""

    name = "reduction-chains"
    description = ("a window of its own per output (global pools, means): several outputs per "
                   "task, their accumulators independent chains in registers")
    kinds = ("pooling", "reduction")
    families = ("cpu",)

    def apply(self, func, target):
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
        found = one_reduction(sch)
        if found is None or found[1] != 0:
            return None
        blocks = found[0]
        block_rv = blocks[0]
        block = sch.get(block_rv)
        loops = sch.get_loops(block_rv)
        if len(loops) != len(block.iter_vars) or any(loop_extent(sch, lp) is None for lp in loops):
            return None
        kinds = ["R" if is_reduction_iter(iv) else "S" for iv in block.iter_vars]
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
        outputs = iterations(sch, spatial)
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
