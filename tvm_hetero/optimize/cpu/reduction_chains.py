"""The ``reduction-chains`` CPU rule: a single reduction whose every output has a window of its own
(global pools, means over the last axes; sliding windows are declined): several outputs per task,
their accumulators independent chains in registers.

What: each parallel task takes 8 consecutive outputs and walks their windows side by side (the
outputs' loop innermost, unrolled), so their 8 accumulators are independent add chains; the mean's
division follows per task.

Why: with one chain per output (``parallel-loops``) every add waits for the previous one (one add
per 4 cycles). SqueezeNet's mean over 1000 x 13 x 13 0.10 -> 0.048 ms, ResNet-50's 7x7 average pool
over 2048 channels 0.039 -> 0.028 ms (both measured beside a tune).

Where 8 consecutive outputs straddle rows of the output (a max over the channels of 1 x 10 x 12 x
12), the accumulators cached in the output's own shape covered the bounding box of a task's rows
and, copied out per task, overwrote the neighbours' outputs (59 % off, varying between runs). There
the outputs are renumbered ``[task, chain]``, the accumulators a local buffer of that shape, exactly
8 per task, and only an epilogue elementwise on the output is folded into the copy out. An epilogue
over a larger domain (a pad), or one reading no output of the tasks (a layer norm's ``E[x]^2``
written out) and all after it, runs whole after the tasks: computed per task, its extra rows were
never written, or it read every task's outputs (NaN).
"""

from __future__ import annotations

from ..rule import Rule
from .analysis import is_reduction_iter, iterations, loop_extent, one_reduction
from .schedule_helpers import MIN_PARALLEL_EXTENT

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
        for the thread pool) 7.3 -> 4.8 us against the unscheduled loops. Where a task's chains
        straddle rows of the output (8 outputs over rows of 12), the outputs are renumbered
        ``[task, chain]`` first (`_per_task_reindexed`), and only an epilogue elementwise on the
        output is taken. Returns None for other kernels (sliding windows, output counts not a
        multiple of the chains).
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
        extents = [loop_extent(sch, lp) for lp in spatial]
        if chunks_are_boxes(extents, REDUCTION_CHAINS):
            found = _per_task_in_place(sch, block_rv, spatial, extents, reduction, blocks[1:])
        else:
            found = _per_task_reindexed(sch, block_rv, extents, blocks[1:])
        if found is None:
            return None
        tasks, chains, reduction = found
        sch.unroll(chains)
        if outputs // REDUCTION_CHAINS >= MIN_PARALLEL_EXTENT:
            sch.parallel(tasks)
        init = sch.decompose_reduction(block_rv, reduction[0])
        sch.unroll(sch.get_loops(init)[-1])
        return sch.mod["main"]


def chunks_are_boxes(extents, chunk: int) -> bool:
    """Whether every run of `chunk` consecutive outputs (row-major over `extents`, starting at
    a multiple of `chunk`) is a box of the output: `chunk` outputs whole inner rows (the inner
    extents' product divides `chunk`) and an aligned part of the next axis (`chunk` divides the
    product with it). 8 outputs over rows of 12 are not: a chunk straddles two rows."""
    inner = 1
    for extent in reversed(extents):
        if chunk % (inner * extent) == 0:
            inner *= extent
            continue
        return (inner * extent) % chunk == 0
    return True


def _per_task_in_place(sch, block_rv, spatial, extents, reduction, epilogue):
    """Chunks that are boxes: the accumulators cached in ``local`` in the output's shape, the
    spatial loops fused and split into tasks of `REDUCTION_CHAINS`; the copy out and the
    epilogue blocks elementwise on the output computed per task (each task's region of the
    output is its own box); from the first epilogue block over another domain on (a pad),
    the blocks run whole after the tasks.
    Returns ``(tasks, chains, reduction loops)``, or None where an epilogue block cannot
    follow."""
    from tvm import s_tir

    produced = {sch.get(block_rv).writes[0].source}  # what the tasks compute, per task
    accumulate = sch.cache_write(block_rv, 0, "local")
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    tasks, chains = sch.split(fused, [None, REDUCTION_CHAINS])
    sch.reorder(tasks, *reduction, chains)
    sch.reverse_compute_at(accumulate, tasks)
    for block in epilogue:
        if [int(iv.dom.extent) for iv in sch.get(block).iter_vars] != extents:
            # an epilogue over another domain (a pad's extra rows read no output of any
            # task: computed per task they were never written) and all after it run whole,
            # after the tasks (generated graph 1955: ReduceMean then Pad)
            break
        if not any(region.source in produced for region in sch.get(block).reads):
            # a block that reads no output of the tasks (E[x]^2 of a layer norm written out
            # as E[x^2] - E[x]^2) would be computed whole in every task, and the blocks after
            # it would read all outputs from each task: it and all after it run after them
            break
        produced.add(sch.get(block).writes[0].source)
        try:
            sch.reverse_compute_at(block, tasks)
        except s_tir.ScheduleError:
            return None
    return tasks, chains, reduction


def _per_task_reindexed(sch, block_rv, extents, epilogue):
    """Chunks that straddle rows: in the output's shape a task's region would be the bounding
    box of its rows, and each task copied whole rows of its accumulators out, overwriting its
    neighbours' outputs (ReduceMax over the channels of 1 x 10 x 12 x 12: 59 % off, varying
    between runs). So the reduction's outputs are renumbered ``[task, chain]``
    (``transform_block_layout``), its accumulators are a ``local`` buffer of that shape
    (``reindex``), whose region per task is exactly its chains, and the epilogue, elementwise
    on the output (a mean's division, a fan-out), is folded into the copy out per output.
    Returns ``(tasks, chains, reduction loops)``, or None where an epilogue block has other
    iterators than the output's (a broadcast over more axes)."""
    from tvm import s_tir

    for block in epilogue:
        domain = [int(iv.dom.extent) for iv in sch.get(block).iter_vars]
        if domain != extents or any(is_reduction_iter(iv) for iv in sch.get(block).iter_vars):
            return None
    try:  # (transform_block_layout needs the loops as written: a ScheduleError if not)
        tasks, chains, reduction = _chain_layout(sch, block_rv, len(extents))
        accumulate = sch.reindex(block_rv, ("write", 0))
        sch.set_scope(block_rv, 0, "local")
        for block in epilogue[:-1]:
            sch.compute_inline(block)
        if epilogue:
            sch.reverse_compute_inline(epilogue[-1])
    except s_tir.ScheduleError:
        return None
    sch.reorder(tasks, *reduction, chains)
    sch.reverse_compute_at(accumulate, tasks)
    sch.unroll(sch.get_loops(accumulate)[-1])
    return tasks, chains, reduction


def _chain_layout(sch, block_rv, spatial: int):
    """Rewrite the reduction block's `spatial` leading iterators (its loops as written) as two,
    ``[task, chain]``: the outputs in row-major order, `REDUCTION_CHAINS` consecutive ones per
    task. Returns the loops ``(tasks, chains, reduction loops)``."""
    from tvm.tirx import IndexMap

    iter_vars = sch.get(block_rv).iter_vars
    extents = [int(iv.dom.extent) for iv in iter_vars[:spatial]]

    def chain_layout(*indices):
        flat = 0
        for index, extent in zip(indices[:spatial], extents):
            flat = flat * extent + index
        return [flat // REDUCTION_CHAINS, flat % REDUCTION_CHAINS, *indices[spatial:]]

    sch.transform_block_layout(block_rv, IndexMap.from_func(
        chain_layout, ndim=len(iter_vars), index_dtype=str(iter_vars[0].var.ty)))
    tasks, chains, *reduction = sch.get_loops(block_rv)
    return tasks, chains, reduction
