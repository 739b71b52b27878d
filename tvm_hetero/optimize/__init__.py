"""Target-specific code optimizations: a table from (device family, layer kind) to rules.

- :mod:`.rule`: the :class:`Rule` base class (a name, a description, the layer kinds and
  device families it serves, ``apply(func, target) -> PrimFunc | None``);
- :mod:`.table`: the table as a value (:class:`RuleTable`), the default one declared in one
  place (:func:`default_table`), in the order rules are tried;
- :mod:`.cpu`: the CPU rules, one per file; :mod:`.gpu`: TVM dlight's rules;
- :mod:`.pass_`: the ``OptimizeLayers`` pass; :mod:`.repack`: the packed weights' repacking;
- :mod:`.kernel`: one kernel compiled alone and timed; :mod:`.metaschedule`: MetaSchedule
  tuning of kernels into a :class:`~.metaschedule.KernelTuningDatabase` (not the placement
  search of :mod:`tvm_hetero.search`);
- :mod:`.bisect`: which kernels' rules make a build wrong (``compile --verify``).

Pass a table to what schedules (``build(..., rules=default_table().without("tiled"))``, as
TVM's dlight takes a list of rules); without one the default table is used. List it with
``tvm-hetero optimizations`` or :meth:`RuleTable.rows`, extend it with
:meth:`RuleTable.with_rule` (``tutorials/add_optimization_rule.py``).
"""

from .pass_ import (STRICT_RULES_ENV, TUNED, OptimizeLayers, optimize_function,
                    schedule_passes, strict_rules)
from .repack import pack_weight, repack_weight_arguments
from .rule import FAMILIES, Rule, family_of
from .table import RULES_VERSION, RuleTable, default_table

__all__ = ["FAMILIES", "RULES_VERSION", "STRICT_RULES_ENV", "TUNED", "OptimizeLayers", "Rule",
           "RuleTable", "default_table", "family_of", "optimize_function", "pack_weight",
           "repack_weight_arguments", "schedule_passes", "strict_rules"]
