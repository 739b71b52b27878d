"""The GPU column of the optimization table in order: the package's own GPU rules (one per
file) where dlight's are not right, dlight's rules where they are, ``Fallback`` last."""

from __future__ import annotations

from ..rule import Rule
from .dlight import GPU_RULE_NAMES, DlightRule


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
