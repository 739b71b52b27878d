"""The ``symbolic-loops`` CPU rule: kernels with loops of symbolic extent whose rows are not
independent (attention over a shape range's sequence: scores against every key, a softmax
along the sequence, a weighted sum over it; head transposes ``[1, seq, 12, 64] -> [1, 12,
seq, 64]``), which the row loop (:mod:`~tvm_hetero.optimize.row_loop`) cannot cut into
static chunks and the static rules decline.

For each block left after inlining:

1. the innermost spatial loop stays innermost and the reduction loops go outside it
   (``S0..Sn-1, R0..Rm, Sn``), the reduction's initialization decomposed out of them: the
   inner loop is a stream of contiguous outputs, which LLVM vectorizes with a remainder
   loop when its extent is symbolic (then a static reduction takes :data:`REDUCTION_STEP`
   unrolled steps per pass over the row, which loads and stores each output once per
   pass); a static inner loop of whole vectors is vectorized here;
2. where there is no spatial loop under the reduction (a softmax's row maximum and sum), the
   reduction loop stays innermost as one partial result per vector lane (``rfactor``), the
   row's last partial vector predicated, and the lanes reduced after it;
3. the outer spatial loops are fused and parallel, whatever their symbolic extents (a shape
   range's sizes are unknown at build time; one head and row of attention is enough work for
   a task).

Only kernels with a symbolic extent: static kernels keep their rules. Alternatives rejected:
TVM's loops (one thread, no vectors: attention 20-40x its static build); padding to static
buckets (a padded key changes a softmax over the sequence unless masked, and masks change
the model); the output row of ``q k^T`` in predicated vector tiles (``split`` by the
lanes, the reduction inside each tile): 30-60x slower than LLVM's vectorization of the plain
row loop; a softmax's reductions moved into the parallel loop of the normalized row
(``compute_at``): with the lane partials ``compute_at`` drops the tail's predicate (wrong
sums), without them no faster within the noise; a two-dimensional chunk loop of static
kernels (the row loop's idea over rows and columns) needs each chunk's kernel to take
strided views, which TVM 0.27's ``specialize`` refuses at a symbolic offset.
"""

from __future__ import annotations

from ...layers.classify import LAYER_KINDS
from ...relax_ir import has_symbolic_extent
from ...target import vector_lanes
from ..rule import Rule
from .analysis import loop_extent, walks_contiguously
from .schedule_helpers import schedule_inlined


# a static reduction under a symbolic inner loop: this many of its steps per pass over the row
REDUCTION_STEP = 8


class SymbolicLoops(Rule):
    """The ``symbolic-loops`` rule: kernels over symbolic extents get parallel outer loops and
    a contiguous inner loop (module docstring)."""

    name = "symbolic-loops"
    description = ("kernels over symbolic extents (a shape range): outer spatial loops fused "
                   "and parallel, reductions outside the innermost spatial loop, which "
                   "streams contiguous outputs (vectorized)")
    kinds = LAYER_KINDS
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule `func` for a CPU target, or return None when it cannot."""
        if not has_symbolic_extent(func):
            return None
        found = schedule_inlined(func)
        if found is None:
            return None
        lanes, _ = vector_lanes(target)
        sch, infos = found
        changed = False
        for info in infos:
            changed |= _schedule_block(sch, info, lanes)
        return sch.mod["main"] if changed else None


def _schedule_block(sch, info, lanes: int) -> bool:
    # the block's iterators (unit loops left out) with their loops
    iters = list(info.iters)
    if not iters or any(it.kind not in ("S", "R") for it in iters):
        return False
    spatial = [it for it in iters if it.kind == "S"]
    reduction = [it.loop_rv for it in iters if it.kind == "R"]
    if not spatial:
        return False
    inner = None
    if not reduction or (len(spatial) > 1 and walks_contiguously(sch.get(info.block_rv),
                                                                 spatial[-1].var)):
        inner = spatial[-1].loop_rv
        spatial = spatial[:-1]
    spatial = [it.loop_rv for it in spatial]
    steps_of = loop_extent(sch, reduction[0]) if len(reduction) == 1 else None
    if inner is not None and loop_extent(sch, inner) is None and steps_of \
            and steps_of % REDUCTION_STEP == 0:
        # scores against every key: a few reduction steps per pass over the output row, so
        # each output element is loaded and stored once per step, not once per product
        steps, step = sch.split(reduction[0], [None, REDUCTION_STEP])
        sch.reorder(*spatial, steps, inner, step)
        sch.unroll(step)
        reduction = [steps]
    elif reduction:
        sch.reorder(*spatial, *reduction, *([inner] if inner is not None else []))
    if not spatial:
        return False  # one loop: parallel-loops' case
    outer = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    extent = loop_extent(sch, outer)
    if extent is None or extent >= 2:
        sch.parallel(outer)
    if inner is not None:
        extent = loop_extent(sch, inner)
        if extent is not None and extent % lanes == 0:
            _, vector = sch.split(inner, [None, lanes])
            sch.vectorize(vector)
    # last: the loop steps above need the block whole, its initialization in it
    if reduction and inner is not None:
        sch.decompose_reduction(info.block_rv, reduction[0])
    if inner is None and len(reduction) == 1:
        rf = _vector_partials(sch, info.block_rv, reduction[0], lanes)
        if rf is not None:
            sch.decompose_reduction(rf, sch.get_loops(rf)[-2])
    return True


def _vector_partials(sch, block, loop, lanes: int):
    """A reduction along a row (a softmax's maximum and sum) as `lanes` partial results, one
    vector lane each, then their reduction: the row's tail is a predicated step. Returns the
    partials' block, or None (nothing changed) where TVM knows no reducer for the combiner
    or the row is short."""
    from tvm.s_tir.schedule import ScheduleError

    extent = loop_extent(sch, loop)
    if extent is not None and extent < 2 * lanes:
        return None
    try:  # on a copy first: a failed rfactor would leave the predicated split behind
        trial = sch.copy()
        trial.rfactor(trial.split(loop, [None, lanes])[1], len(trial.get(block).writes[0].region))
    except ScheduleError:
        return None
    _, lane = sch.split(loop, [None, lanes])
    rf = sch.rfactor(lane, len(sch.get(block).writes[0].region))
    sch.vectorize(sch.get_loops(rf)[-1])
    return rf
