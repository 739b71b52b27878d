"""The ``injective-stages`` GPU rule: a kernel of several elementwise stages (no reduction) where
dlight's ``Fallback`` would compute a stage again for each output that reads it.

``Fallback`` inlines every stage into the last and launches one thread per output. That is right
where each output reads one element of each stage (an add, a ReLU, a concatenation's inputs),
but not where many outputs read one element: the separable bilinear resize (its columns pass,
read by every output row between two input rows: DeepLabV3's 16x16 -> 256x256 upsampling did
2.8x its work inline) or a resize from a 1x1 map (ASPP's pooling branch: the same value for all
16 x 16 outputs). Here a stage is inlined only where every load of it reads a different element
for each output (each index one of the consumer's iterators plus a constant, every iterator of
the consumer used); the others are computed once, each in a launch of its own (one thread per
element, as ``Fallback``), before the stages that read them. Taken only where ``Fallback``'s
schedule is over the work budget (:data:`~.work_budget.MAX_WORK`), so the kernels ``Fallback``
schedules within it keep its schedule.
"""

from __future__ import annotations

import logging

from ...errors import error_message
from ...layers.classify import LAYER_KINDS
from ..rule import Rule
from .work_budget import MAX_WORK, work_ratio

logger = logging.getLogger(__name__)


def _loads_of(stmt, buffer) -> list:
    """The index lists of every load of `buffer` in `stmt`."""
    import tvm_ffi

    found = []

    def visit(node):
        if hasattr(node, "indices") and hasattr(node, "source") \
                and node.source.same_as(buffer):  # a load (a store has a buffer)
            found.append(list(node.indices))
        return node

    tvm_ffi.structural_map(stmt, visit)
    return found


def _iterator_plus_constant(index, iterators, extent):
    """The iterator of `iterators` that `index` (of a buffer dimension of `extent`) is, plus or
    minus a constant; ``True`` for the index 0 of a dimension of one; None otherwise (a table
    lookup, a constant into a wider dimension, a product)."""
    from tvm import tirx

    if extent == 1 and isinstance(index, tirx.IntImm) and int(index.value) == 0:
        return True
    offset = None
    if isinstance(index, (tirx.Add, tirx.Sub)) and isinstance(index.b, tirx.IntImm):
        index, offset = index.a, index.b
    if isinstance(index, tirx.Cast):
        index = index.value
    found = next((v for v in iterators if v.same_as(index)), None)
    return found if offset is None or found is not None else None


def reads_one_to_one(sch, block_rv) -> bool:
    """Whether every consumer of `block_rv`'s output reads a different element of it for each
    of its instances: each load's indices are distinct iterators of the consumer (plus
    constants) and every iterator of the consumer of extent over one is among them (so inlining
    the stage computes each element once per output that needs it)."""
    block = sch.get(block_rv)
    if len(block.writes) != 1:
        return False
    buffer = block.writes[0].source
    shape = [getattr(d, "value", None) for d in buffer.ty.shape]
    consumers = sch.get_consumers(block_rv)
    if not consumers:
        return False
    for consumer_rv in consumers:
        consumer = sch.get(consumer_rv)
        iterators = [iv.var for iv in consumer.iter_vars]
        wide = [iv.var for iv in consumer.iter_vars
                if not (getattr(iv.dom.extent, "value", 2) == 1)]
        loads = _loads_of(consumer.body, buffer)
        if not loads:
            return False
        for indices in loads:
            used = [_iterator_plus_constant(index, iterators, extent)
                    for index, extent in zip(indices, shape)]
            if any(v is None for v in used):
                return False
            used = [v for v in used if v is not True]
            if any(
                    a.same_as(b) for i, a in enumerate(used) for b in used[i + 1:]):
                return False
            if any(not any(u.same_as(v) for u in used) for v in wide):
                return False
    return True


class InjectiveStages(Rule):
    """The ``injective-stages`` rule: the stages of an elementwise kernel that dlight's
    ``Fallback`` would compute again for each output computed once, each in a launch of its
    own; the stages read one element per output inlined, as ``Fallback`` does."""

    name = "injective-stages"
    description = ("kernels of several elementwise stages: a stage that many outputs read "
                   "(a resize's columns) computed once in a launch of its own, not inline")
    kinds = LAYER_KINDS
    families = ("cuda", "other")

    def apply(self, func, target):
        """Schedule `func` or return None: None for a kernel with a reduction, and for one
        dlight's ``Fallback`` schedules within :data:`~.work_budget.MAX_WORK` of its work
        (``Fallback`` then takes it, unchanged) or whose stages are all read one to one."""
        from tvm import s_tir
        from tvm.s_tir.dlight import base
        from tvm.s_tir.dlight.analysis import get_root_block, normalize_prim_func

        from .dlight import DlightRule

        fallback = DlightRule("gpu", "Fallback").apply(func, target)
        if fallback is None or work_ratio(func, fallback) <= MAX_WORK:
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None or any("R" in info.dom_kind() for info in infos):
            return None
        kept = 0
        for info in infos:
            block_rv = info.block_rv
            if not sch.get_consumers(block_rv):
                continue  # an output
            if reads_one_to_one(sch, block_rv):
                try:
                    sch.compute_inline(block_rv)
                    continue
                except s_tir.ScheduleError as err:
                    logger.debug("injective-stages keeps a stage: %s", error_message(err))
            kept += 1
        if kept == 0:
            return None
        threads = base.max_threads_per_block(target)
        for block_rv in sch.get_child_blocks(get_root_block(sch)):
            loops = sch.get_loops(block_rv)
            if not loops:
                loops = [sch.add_unit_loop(block_rv)]
            bx, tx = sch.split(sch.fuse(*loops), factors=[None, threads])
            sch.bind(bx, "blockIdx.x")
            sch.bind(tx, "threadIdx.x")
        scheduled = sch.mod["main"]
        if work_ratio(func, scheduled) >= work_ratio(func, fallback):
            return None
        return scheduled


__all__ = ["InjectiveStages", "reads_one_to_one"]
