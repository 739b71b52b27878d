"""Target-specific code optimizations: a table from (device family, layer kind) to rules.

Each layer's kernel is scheduled by the rules of ITS device: in a CPU + CUDA module a CPU
layer and a CUDA layer get different rules. Rules are tried in order; the first that returns a
scheduled function wins. A layer no rule schedules keeps TVM's default loops, with a logged
reason (GPU layers must be scheduled: an unscheduled GPU kernel is a build error, never silent
host code).

The table is data: list it with ``tvm-hetero optimizations`` or :func:`table_rows`, extend it
with :func:`register_rule`::

    def my_conv_rule(func, target):
        ...  # return a scheduled PrimFunc, or None to pass
    tvm_hetero.optimize.register_rule("cpu", "conv2d", Rule("mine", "my conv schedule",
                                                             my_conv_rule))
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from ..layers import LAYER_KINDS, OP_KINDS_ATTR, kernel_kind
from .cpu import parallel_loops, tiled_reduction

logger = logging.getLogger(__name__)

FAMILIES = ("cpu", "cuda", "other")
# Bumped whenever a default rule changes the code it generates: tuned-vs-rules comparisons
# stored in a tuning database under another version are measured again.
RULES_VERSION = 2


@dataclass(frozen=True)
class Rule:
    """One optimization: ``apply(func, target)`` returns a scheduled PrimFunc or None."""

    name: str
    description: str
    apply: Callable


def _dlight(rule_cls_name: str, package: str):
    """A rule applying one dlight rule class (``tvm.s_tir.dlight.<package>.<name>``)."""

    def apply(func, target):
        from tvm.s_tir import dlight as dl

        rule = getattr(getattr(dl, package), rule_cls_name)()
        with target:
            result = rule.apply(func, target, False)
        if result is None:
            return None
        sch = result[0] if isinstance(result, list) else result
        return sch.mod["main"]

    return apply


def _gpu_rules() -> list[Rule]:
    return [Rule(f"dlight.gpu.{name}", f"TVM dlight GPU rule {name}", _dlight(name, "gpu"))
            for name in ("Matmul", "GEMV", "Reduction", "GeneralReduction", "Fallback")]


PARALLEL = Rule("parallel-loops", "inline injective blocks; outer spatial loops fused and "
                "parallel, innermost spatial loop innermost (vectorized by LLVM)",
                parallel_loops)
TILED = Rule("tiled", "register tiles of output rows x vector lanes accumulated over the "
              "whole reduction; epilogue computed per tile; parallel tiles", tiled_reduction)
CPU_GEMV = Rule("dlight.cpu.GEMV", "TVM dlight CPU rule for matrix-vector products",
                _dlight("GEMV", "cpu"))
CPU_REDUCTION = Rule("dlight.cpu.Reduction", "TVM dlight CPU rule for reductions",
                     _dlight("Reduction", "cpu"))

_TABLE: dict[tuple[str, str], list[Rule]] = {}


def _defaults() -> None:
    for kind in LAYER_KINDS:
        _TABLE[("cpu", kind)] = [PARALLEL]
        _TABLE[("cuda", kind)] = _gpu_rules()
        _TABLE[("other", kind)] = _gpu_rules()
    _TABLE[("cpu", "conv2d")] = [TILED, PARALLEL]
    _TABLE[("cpu", "matmul")] = [TILED, CPU_GEMV, PARALLEL]
    _TABLE[("cpu", "reduction")] = [PARALLEL, CPU_REDUCTION]


_defaults()


def register_rule(family: str, kind: str, rule: Rule, first: bool = True) -> None:
    """Add `rule` for layers of `kind` on devices of `family` (tried first by default)."""
    if family not in FAMILIES or kind not in LAYER_KINDS:
        raise ValueError(f"unknown (family, kind) ({family!r}, {kind!r}): families "
                         f"{FAMILIES}, kinds {LAYER_KINDS}")
    rules = _TABLE.setdefault((family, kind), [])
    rules.insert(0, rule) if first else rules.append(rule)


def reset_table() -> None:
    """Back to the default rules."""
    _TABLE.clear()
    _defaults()


def rules_for(family: str, kind: str) -> list[Rule]:
    return list(_TABLE.get((family, kind), []))


def table_rows() -> list[tuple[str, str, list[str]]]:
    """``(family, layer kind, rule names)`` for every entry of the table."""
    return [(family, kind, [r.name for r in _TABLE[(family, kind)]])
            for family in FAMILIES for kind in LAYER_KINDS]


def _family(target) -> str:
    kind = target.kind.name
    if kind in ("llvm", "c"):
        return "cpu"
    return "cuda" if kind == "cuda" else "other"


def optimize_function(func, target):
    """Schedule one kernel by the table; returns (func, rule name or None)."""
    kind = kernel_kind(func)
    for rule in rules_for(_family(target), kind):
        try:
            scheduled = rule.apply(func, target)
        except Exception as err:  # a rule that does not fit this kernel passes it on
            logger.debug("rule %s failed: %s", rule.name, err)
            continue
        if scheduled is not None:
            keep = {k: v for k, v in func.attrs.items()} if func.attrs is not None else {}
            return scheduled.with_attrs(keep) if keep else scheduled, rule.name
    return func, None


def OptimizeLayers(tuning=None, chosen: dict | None = None):  # noqa: N802 (TVM pass style)
    """A module pass scheduling every PrimFunc that has a target by its (family, kind) rules.

    Parameters
    ----------
    tuning : TuningDatabase, optional
        Kernels tuned there (and measured faster than the rules) take their tuned schedule.
    chosen : dict, optional
        Filled with ``{kernel name: rule name}`` (``"meta-schedule"`` for tuned kernels,
        None where TVM's default loops stay).
    """
    import tvm
    from tvm import tirx

    @tvm.transform.module_pass(opt_level=0, name="tvm_hetero.OptimizeLayers")
    def optimize_layers(mod, _ctx):
        from ..errors import BuildError

        out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs,
                           global_infos=mod.global_infos)
        for gv, func in mod.functions_items():
            if not isinstance(func, tirx.PrimFunc) or func.attrs is None \
                    or "target" not in func.attrs or OP_KINDS_ATTR not in func.attrs:
                continue
            target = func.attrs["target"]
            tuned = tuning.schedule(func, target) if tuning is not None else None
            if tuned is not None:
                scheduled, rule = tuned, TUNED
            else:
                scheduled, rule = optimize_function(func, target)
            if rule is None:
                if _family(target) != "cpu":
                    raise BuildError(f"no rule schedules kernel {gv.name_hint} for "
                                     f"{target.kind.name}: it would silently run as host code")
                logger.info("kernel %s keeps TVM's default loops: no CPU rule applies",
                            gv.name_hint)
            if chosen is not None:
                chosen[gv.name_hint] = rule
            out[gv] = scheduled
        return out

    return optimize_layers


TUNED = "meta-schedule"


__all__ = ["FAMILIES", "OptimizeLayers", "Rule", "TUNED", "optimize_function", "register_rule",
           "reset_table", "rules_for", "table_rows"]
