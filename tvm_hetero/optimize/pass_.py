"""The OptimizeLayers pass: every kernel scheduled by the table's rules for its own device.

The table is passed in (``rules``, a :class:`~tvm_hetero.optimize.table.RuleTable`; None is
:func:`~tvm_hetero.optimize.table.default_table`). What the pass chose for each kernel is on
the pass object once it has run (``chosen``, ``tuned_choices``).

Each layer's kernel is scheduled by the rules of ITS device: in a CPU + CUDA module a CPU
layer and a CUDA layer get different rules. Rules are tried in order; the first that returns a
scheduled function wins. A layer no rule schedules keeps TVM's default loops, with a logged
reason (GPU layers must be scheduled: an unscheduled GPU kernel is a build error, never silent
host code).

A rule that raises is a bug in that rule: in use it is logged as one warning naming the rule
and the kernel, and the next rule is tried; with ``TVM_HETERO_STRICT_RULES=1`` (the test
suite sets it) it is a :class:`~tvm_hetero.errors.BuildError` naming both.
"""

from __future__ import annotations

import logging
import os
from typing import Collection

import tvm
from tvm import tirx

from ..errors import BuildError, error_message
from ..layers.classify import kernel_kind
from ..relax_ir import OP_KINDS_ATTR
from .choices import Choices
from .choices import active as active_choices
from .cpu.fast_math import fast_math
from .gpu import GPU_RULE_NAMES
from .gpu.limits import within_gpu_limits
from .repack import repack_weight_arguments
from .row_loop import schedule_rows
from .rule import family_of
from .table import RuleTable, resolve_table
from .unit_reductions import FoldUnitReductions, fold_unit_reductions

logger = logging.getLogger(__name__)

# The rule name of a kernel scheduled by its MetaSchedule-tuned schedule.
TUNED = "meta-schedule"
# The rule name of a kernel written already scheduled (``tir.is_scheduled``, e.g. the
# frontend's index checks): no rule touches it.
AS_WRITTEN = "as-written"
# The rule name's prefix of a kernel run as a loop over chunks of its symbolic rows.
ROW_CHUNKS = "rows:"
# Set to 1: a rule that raises fails the build instead of passing the kernel on.
STRICT_RULES_ENV = "TVM_HETERO_STRICT_RULES"


def strict_rules() -> bool:
    """Whether a raising rule is an error (``TVM_HETERO_STRICT_RULES=1``)."""
    return os.environ.get(STRICT_RULES_ENV, "") not in ("", "0")


def is_static(func) -> bool:
    """Whether every buffer parameter of a PrimFunc has a static shape and none is a scalar."""
    for param in func.params:
        shape = getattr(param.ty, "shape", None)
        if shape is None or not all(isinstance(d, tirx.IntImm) for d in shape):
            return False
    return True


def optimize_function(func, target, name: str = "main", rules: RuleTable | None = None):
    """Schedule one kernel (called `name` in messages) by the rules of its (family, kind) in
    `rules` (None: the default table); returns ``(func, rule name or None)``.

    A CPU kernel with a symbolic row count (a model imported with a shape range) becomes a
    loop over chunks of rows run by static kernels the rules schedule
    (:mod:`~tvm_hetero.optimize.row_loop`), named ``rows:<rule>`` by the rule of its largest
    chunk; where its rows are not independent, the rules see it as it is."""
    if func.attrs is not None and bool(func.attrs.get("tir.is_scheduled", False)):
        return func, AS_WRITTEN
    table = resolve_table(rules)
    family = family_of(target)
    if family == "cpu" and not is_static(func) and active_choices() is None:
        rows = schedule_rows(
            func, lambda static, first: _apply_rules(static, target, name, table, first))
        if rows is not None:
            kernel, rule = rows
            return _finished(func, kernel, table, family), ROW_CHUNKS + rule
    found = _apply_rules(func, target, name, table)
    if found is None:
        return func, None
    return _finished(func, found[0], table, family), found[1]


def _apply_rules(func, target, name: str, table: RuleTable, first: str | None = None):
    """``(scheduled, rule name)`` by the first of the table's rules for `func` that applies
    (`first`, when named, tried before the others), or None."""
    kind = kernel_kind(func)
    family = family_of(target)
    choices = active_choices()
    # what every rule (dlight's too) is given: reductions over a single point written as the
    # elementwise blocks they are (normalize_prim_func + inlining got them wrong)
    canonical = fold_unit_reductions(func)
    ordered = table.rules_for(family, kind)
    ordered.sort(key=lambda rule: rule.name != first)
    for rule in ordered:
        if choices is not None:  # only the choices of the rule that schedules the kernel
            choices.restart()
        try:
            scheduled = rule.apply(canonical, target)
        except Exception as err:  # noqa: BLE001 (a rule's bug: any exception)
            if strict_rules():
                raise BuildError(f"rule {rule.name} raised on kernel {name}: "
                                 f"{error_message(err)}") from err
            logger.warning("rule %s raised on kernel %s, trying the next rule: %s",
                           rule.name, name, error_message(err))
            continue
        if scheduled is not None and family != "cpu" \
                and not within_gpu_limits(scheduled, target):
            logger.info("rule %s's kernel %s exceeds the GPU's limits (shared memory, threads "
                        "or registers per block); trying the next rule", rule.name, name)
            scheduled = None
        if scheduled is not None:
            if choices is not None:
                choices.commit()
            return scheduled, rule.name
    if choices is not None:
        choices.restart()
    return None


def _finished(func, scheduled, table: RuleTable, family: str):
    """A scheduled kernel with `func`'s attributes kept (and its own), its CPU math fast."""
    if family == "cpu":
        # vector math for exp, sigmoid, erf, tanh and small powers, once scheduled: a
        # rewritten call inlined into two consumers would define its variable twice
        scheduled = fast_math(scheduled, exp_and_sigmoid=table.fast_exp)
    keep = {k: v for k, v in func.attrs.items()} if func.attrs is not None else {}
    return scheduled.with_attrs(keep) if keep else scheduled


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.OptimizeLayers")
class OptimizeLayers:
    """A module pass scheduling every PrimFunc that has a target by its (family, kind) rules.

    A kernel scheduled with a packed weight (the ``packed-weights`` rule) changes its weight
    parameter's layout; the pass then gives it its weight in that layout
    (:func:`~tvm_hetero.optimize.repack.repack_weight_arguments`).

    Parameters
    ----------
    rules : RuleTable, optional
        The optimization table (:func:`~tvm_hetero.optimize.table.default_table` or a variant
        of it); None: the default table.
    tuning : KernelTuningDatabase, optional
        Kernels tuned there (and measured faster than `rules`' rules, in a comparison made
        under that same table) take their tuned schedule, or their rule with the choices
        measured fastest there.
    unscheduled : collection of str, optional
        Names of CPU kernels that keep TVM's default loops whatever the table and `tuning`
        say (verification switches rules off kernel by kernel to find the one at fault);
        GPU kernels are scheduled regardless.

    Attributes
    ----------
    chosen : dict of str to str or None
        Of the module the pass last ran on: ``{kernel name: rule name}`` (``"meta-schedule"``
        for tuned kernels, None where TVM's default loops stay), filled as the kernels are
        scheduled (so it holds those done when a later kernel fails the build).
    tuned_choices : dict of str to dict
        ``{kernel name: {choice: option}}`` for the kernels scheduled with the choices
        `tuning` measured fastest.
    """

    def __init__(self, rules: RuleTable | None = None, tuning=None,
                 unscheduled: Collection[str] = ()):
        self.rules = resolve_table(rules)
        self.tuning = tuning
        self.unscheduled = frozenset(unscheduled)
        self.chosen: dict[str, str | None] = {}
        self.tuned_choices: dict[str, dict] = {}

    def transform_module(self, mod, _ctx):
        self.chosen, self.tuned_choices = {}, {}
        table, tuning = self.rules, self.tuning
        out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs,
                           global_infos=mod.global_infos)
        for gv, func in mod.functions_items():
            if not isinstance(func, tirx.PrimFunc) or func.attrs is None \
                    or "target" not in func.attrs or OP_KINDS_ATTR not in func.attrs:
                continue
            target = func.attrs["target"]
            if gv.name_hint in self.unscheduled and family_of(target) == "cpu":
                self.chosen[gv.name_hint] = None
                continue  # TVM's default loops, as asked
            tuned = tuning.schedule(func, target, table) if tuning is not None else None
            if tuned is not None:
                scheduled, rule = tuned, TUNED
            else:
                fixed = tuning.rule_choices(func, target, table) if tuning is not None else None
                if fixed:  # the rule with the choices measured fastest
                    with Choices(fixed):
                        scheduled, rule = optimize_function(func, target, gv.name_hint, table)
                    self.tuned_choices[gv.name_hint] = fixed
                else:
                    scheduled, rule = optimize_function(func, target, gv.name_hint, table)
            if rule is None:
                if family_of(target) != "cpu":
                    raise BuildError(f"no rule schedules kernel {gv.name_hint} for "
                                     f"{target.kind.name}: it would silently run as host code")
                logger.info("kernel %s keeps TVM's default loops: no CPU rule applies",
                            gv.name_hint)
            self.chosen[gv.name_hint] = rule
            out[gv] = scheduled
        return repack_weight_arguments(out)


def schedule_passes(devices, optimize: bool = True, tuning=None,
                    unscheduled: Collection[str] = (), rules: RuleTable | None = None) -> list:
    """Per-target scheduling of the placed kernels.

    Parameters
    ----------
    devices : DeviceSet
        The devices the kernels are placed on.
    optimize : bool
        Schedule every kernel by the optimization table's rules for its own device (default
        True): the passes are one :class:`OptimizeLayers`, which says what it chose once run.
        Without it CPU kernels keep TVM's default loops; GPU kernels are always scheduled
        (dlight's GPU rules), since an unscheduled GPU kernel silently becomes host code.
    tuning : KernelTuningDatabase, optional
        Tuned kernels take their tuned schedule (see :class:`OptimizeLayers`).
    unscheduled : collection of str, optional
        CPU kernels that keep TVM's default loops.
    rules : RuleTable, optional
        The optimization table with `optimize` (None, the default: the default table);
        unused without it (dlight's GPU rules then schedule GPU kernels, in dlight's order).

    Returns
    -------
    list of tvm.transform.Pass
    """
    from tvm.s_tir import dlight as dl

    if optimize:
        return [OptimizeLayers(rules, tuning, unscheduled)]
    passes = []
    if any(dev.family != "cpu" for dev in devices):
        passes.append(FoldUnitReductions())  # (dlight's Fallback: see fold_unit_reductions)
        passes.append(dl.ApplyDefaultSchedule(*(getattr(dl.gpu, name)()
                                                for name in GPU_RULE_NAMES)))
    return passes


__all__ = ["OptimizeLayers", "ROW_CHUNKS", "STRICT_RULES_ENV", "TUNED", "is_static",
           "optimize_function", "schedule_passes", "strict_rules"]
