"""A GPU rule kept to the kernels it schedules without much extra work: dlight's rules where
they are right, the table's next rule where they are not.

dlight's ``GEMV`` and ``Reduction`` pad a short reduction to their lanes (32 for ``GEMV``, up to
1024 for ``Reduction``) and reduce the lanes again, and inline a squeeze-and-excite product's
bias and activation into the multiply over the whole map: ``estimate_tir_flops`` counts 2-5x
the layer's work for a mean over 14 x 14 pixels or a 10-channel squeeze. On a large
matrix-vector product the same rules are within a few percent. :class:`WorkBudget` applies
the rule, counts the scheduled kernel's operations against the kernel's, and declines the
schedule over :data:`MAX_WORK`.
"""

from __future__ import annotations

import logging

from ..rule import Rule

logger = logging.getLogger(__name__)

# Scheduled operations over the kernel's a rule may take (issue 31's goal per kernel).
MAX_WORK = 1.3


def work_ratio(func, scheduled) -> float:
    """``estimate_tir_flops`` of `scheduled` over that of `func` (1.0 for a kernel of no
    arithmetic)."""
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    before = float(estimate_tir_flops(tvm.IRModule({"main": func})))
    after = float(estimate_tir_flops(tvm.IRModule({"main": scheduled})))
    return after / before if before > 0 else 1.0


class WorkBudget(Rule):
    """`rule`, declining the kernels whose schedule by it does more than `max_work` times the
    kernel's operations (``estimate_tir_flops``: padding, recomputation)."""

    def __init__(self, rule: Rule, max_work: float = MAX_WORK):
        self.rule, self.max_work = rule, float(max_work)
        self.name, self.description = rule.name, rule.description
        self.kinds, self.families = rule.kinds, rule.families

    def apply(self, func, target):
        scheduled = self.rule.apply(func, target)
        if scheduled is None:
            return None
        ratio = work_ratio(func, scheduled)
        if ratio > self.max_work:
            logger.debug("%s declines the kernel: %.2fx its work > %.2fx", self.name, ratio,
                         self.max_work)
            return None
        return scheduled

    def fingerprint(self) -> str:
        return f"{self.rule.fingerprint()} within {self.max_work:g}x work"


__all__ = ["MAX_WORK", "WorkBudget", "work_ratio"]
