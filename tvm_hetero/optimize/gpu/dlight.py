"""TVM dlight's rules as table rules: its GPU rules, and the CPU reduction rule."""

from __future__ import annotations

import logging

from ...classify import LAYER_KINDS
from ...errors import error_message
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


def gpu_rules(family: str = "cuda") -> list[Rule]:
    """The GPU rules of every layer kind on devices of `family` (``cuda`` or ``other``), in
    the order they are tried: on CUDA ``matmul-tiles`` (dlight's Matmul with a tile chosen per
    kernel) before dlight's own rules, and the reduction rules of :func:`_with_reduction_rules`
    among them; ``injective-stages`` (the elementwise kernels ``Fallback`` would make
    recompute a stage) before dlight's ``Fallback``, last (a GPU kernel must be scheduled)."""
    from .injective_stages import InjectiveStages
    from .matmul_tiles import MatmulTiles

    own = [MatmulTiles()] if family == "cuda" else []
    rules = own + [DlightRule("gpu", name) for name in GPU_RULE_NAMES]
    if family == "cuda":
        rules = _with_reduction_rules(rules)
    # before Fallback: the kernels whose inlining Fallback would make recompute a stage
    return rules[:-1] + [InjectiveStages(), rules[-1]]


def _with_reduction_rules(rules: list[Rule]) -> list[Rule]:
    """On CUDA: dlight's GEMV and Reduction only within 1.3x their kernel's work, column
    reductions (``column-gemv``) before dlight's Reduction, chains over rows (``row-chains``:
    softmax, means, squeeze-and-excite products) before dlight's GeneralReduction."""
    from .column_gemv import ColumnGemv
    from .row_chains import RowChains
    from .work_budget import WorkBudget

    out = []
    for rule in rules:
        name = getattr(rule, "rule_name", None)
        if name == "Reduction":
            out.append(ColumnGemv())
        if name == "GeneralReduction":
            out.append(RowChains())
        out.append(WorkBudget(rule) if name in ("GEMV", "Reduction") else rule)
    return out


__all__ = ["DlightRule", "gpu_rules"]
