"""TVM dlight's rules as table rules: its GPU rules (``Matmul``, ``GEMV``, ``Reduction``,
``GeneralReduction``, ``Fallback``, in dlight's order), and the CPU ``Reduction`` rule.

A dlight rule that fails a schedule step or an assert declines the kernel (``gpu.Matmul`` on a
convolution with a residual add), and the next rule takes it. On ``cuda`` our rules come first where
dlight's schedule does measurably more work than the layer or leaves SMs idle
(:mod:`tvm_hetero.optimize.gpu.rules`); ``GEMV`` and ``Reduction`` run within a work budget of 1.3x
the layer's work, and ``Fallback`` is last, since a GPU kernel must be scheduled.

On a CPU only ``Reduction`` is used, and only for the reductions ``parallel-loops`` declines (too
small for the thread pool): on a softmax or a norm it recomputes the row's max, sum or mean per
element (2.2 ms for a 1000-class softmax against 0.01). Its CPU ``GEMV`` is not used: LLVM could
take minutes on its gathers.
"""

from __future__ import annotations

import logging

from ...errors import error_message
from ...layers.classify import LAYER_KINDS
from ..rule import Rule

logger = logging.getLogger(__name__)

# dlight's GPU rules, in dlight's own order: the specific ones first, Fallback last.
GPU_RULE_NAMES = ("Matmul", "GEMV", "Reduction", "GeneralReduction", "Fallback")


class DlightRule(Rule):
    """One dlight rule class (``tvm.s_tir.dlight.<package>.<rule_name>``) applied to a
    kernel."""

    def __init__(self, package: str, rule_name: str, description: str | None = None,
                 kinds=LAYER_KINDS, families=None):
        self.package, self.rule_name = package, rule_name
        self.name = f"dlight.{package}.{rule_name}"
        self.description = description or f"TVM dlight {package.upper()} rule {rule_name}"
        self.kinds = tuple(kinds)
        self.families = tuple(families or (("cpu",) if package == "cpu" else ("cuda", "other")))

    def apply(self, func, target):
        from tvm import s_tir
        from tvm.s_tir import dlight as dl

        rule = getattr(getattr(dl, self.package), self.rule_name)()
        try:
            with target:
                result = rule.apply(func, target, False)
        except (s_tir.ScheduleError, AssertionError) as err:
            # dlight declines some kernels by failing a schedule step or one of its asserts
            # (gpu.Matmul on a convolution with a residual add: "There are some consumers of
            # the cache-write stage that are not properly inlined"): the next rule's kernel
            logger.debug("%s declines the kernel: %s", self.name, error_message(err))
            return None
        if result is None:
            return None
        sch = result[0] if isinstance(result, list) else result
        return sch.mod["main"]


__all__ = ["GPU_RULE_NAMES", "DlightRule"]
