"""The rule bisection: which kernels' optimization rules make a build's outputs wrong.

:func:`locate_rules` rebuilds a model with the rules of some kernels switched off
(``build(..., unscheduled=...)``) and bisects over the kernels a rule scheduled, to name the
ones whose rules are at fault. What "right" means is the caller's: ``compile --verify``
(:func:`tvm_hetero.measure.reference.verify_build`) passes a comparison with the independent
reference outputs.
"""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from ..errors import error_message

logger = logging.getLogger(__name__)

# Runs of each rebuilt library while locating a rule at fault: a race shows in some runs only
LOCATE_RUNS = 3
# Kernels named at most (each found by its own bisection)
MAX_CULPRITS = 3


def locate_rules(model, placement, devices, inputs: dict[str, np.ndarray],
                 agrees_with: Callable[[list[np.ndarray]], bool],
                 rules: dict[str, str | None], *, tuning=None, rule_table=None) -> str:
    """Find the kernels whose rules make a build's outputs wrong; returns the finding as a
    clause: ``kernel K (rule R) disagrees with TVM's default loops``.

    Every kernel a rule (or tuning) scheduled is a suspect. The build with all suspects on
    TVM's default loops must agree (else the fault is not in a rule); then a binary search
    over the suspects in order finds the shortest prefix whose rules, the rest left
    unscheduled, disagree: its last kernel's rule is at fault (with the ones before it). That
    kernel is set aside and the search repeats while the others still disagree, up to
    `MAX_CULPRITS` kernels. Each rebuild reuses the kernels compiled before (a
    :class:`~tvm_hetero.build.compile.KernelCache`) and is run `LOCATE_RUNS` times.

    Parameters
    ----------
    model : Model
    placement : Placement
    devices : DeviceSet
    inputs : dict of str to numpy.ndarray
        What each rebuild runs on.
    agrees_with : callable
        ``agrees_with(outputs) -> bool``: whether a rebuild's outputs are right (match the
        reference within tolerance).
    rules : dict of str to str or None
        ``{kernel: rule}`` of the build under suspicion (``CompiledModel.stats.rules``).
    tuning : KernelTuningDatabase, optional
        The tuning database the build used; the rebuilds use it too.
    rule_table : RuleTable, optional
        The optimization table the build used; the rebuilds use it too (None: the default table).

    Returns
    -------
    str
    """
    from ..build.compile import KernelCache, build
    from .pass_ import AS_WRITTEN

    suspects = [kernel for kernel, rule in rules.items() if rule not in (None, AS_WRITTEN)]
    cache = KernelCache()
    builds = 0

    def agrees(scheduled: list[str]) -> bool:
        nonlocal builds
        keep = set(scheduled)
        builds += 1
        compiled = build(model, placement, devices, tuning_db=tuning, kernel_cache=cache,
                         unscheduled=[k for k in suspects if k not in keep], rules=rule_table)
        return all(agrees_with(compiled.run(inputs)) for _ in range(LOCATE_RUNS))

    logger.info("locating the rule at fault among %d scheduled kernels", len(suspects))
    try:
        if not agrees([]):
            return ("the build with every kernel on TVM's default loops disagrees too: the "
                    "fault is not in an optimization rule")
        culprits: list[str] = []
        left = list(suspects)
        while left and len(culprits) < MAX_CULPRITS and not agrees(left):
            lo, hi = 0, len(left)  # the first lo kernels' rules agree, the first hi's do not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if agrees(left[:mid]):
                    lo = mid
                else:
                    hi = mid
            culprits.append(left.pop(hi - 1))
    except Exception as err:  # noqa: BLE001 (a rebuild that fails: report, do not mask)
        return f"locating the rule at fault failed: {error_message(err, with_type=True)}"
    finally:
        logger.info("%d rebuilds to locate the rule at fault", builds)
    if not culprits:
        return ("no kernel's rule was found at fault: rebuilt, the outputs agreed (a race "
                "that shows in some runs only?)")
    named = [f"kernel {kernel} (rule {rules[kernel]})" for kernel in culprits]
    if len(named) == 1:
        return f"{named[0]} disagrees with TVM's default loops"
    return f"{', '.join(named[:-1])} and {named[-1]} disagree with TVM's default loops"


__all__ = ["LOCATE_RUNS", "MAX_CULPRITS", "locate_rules"]
