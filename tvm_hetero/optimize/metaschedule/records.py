"""The kernel tuning database: MetaSchedule's records of a placement's kernels plus the
tuned-vs-rules comparisons, one directory on disk (``--tuning-db DIR``).

A comparison is made under one optimization table (:class:`~..table.RuleTable`) and is kept
under the kernel's workload and that table: the default table's under the workload's key
alone (what every database written so far holds), another table's under the workload's key and
the table's (``KEY@TABLE``). A build under a table only uses comparisons made under that table,
so two tables compared in one process (or one database) never mix their results.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ...errors import HeteroError, error_message
from ..table import RULES_VERSION, RuleTable, resolve_table

TUNED_FOR_ATTR = "tvm_hetero.tuned_for"
CHOICES_FILE = "choices.json"
CHOICES_FORMAT = "tvm_hetero.tuning_choices"
# A variant of the rule's choices is taken when it runs in at most this share of the rule's
# time: identical code reads up to 2-3 % apart in those rounds, and a variant is no gain unless
# it is faster than that.
CHOICES_MARGIN = 0.97


def workload(func, target):
    """The module MetaSchedule tunes and looks up for `func` on `target`: the kernel without
    its build-time attributes, marked with its target so two devices never share records."""
    import tvm

    for key in ("target", "global_symbol"):
        if func.attrs is not None and key in func.attrs:
            func = func.without_attr(key)
    func = func.with_attr(TUNED_FOR_ATTR, str(target)).with_attr("global_symbol", "main")
    return tvm.IRModule({"main": func})


def workload_key(module) -> str:
    """The structural hash of a :func:`workload` module, in hex."""
    import tvm_ffi

    return f"{tvm_ffi.structural_hash(module):x}"


def comparison_key(module, rules: RuleTable | None = None) -> str:
    """Where the comparison of a :func:`workload` made under `rules` (None: the default table)
    is kept: the workload's key for the default table, ``KEY@TABLE`` for any other."""
    table = resolve_table(rules)
    key = workload_key(module)
    return key if table.is_default else f"{key}@{table.key[:16]}"


@dataclass
class KernelChoice:
    """One tuned kernel: its MetaSchedule-tuned, rule-scheduled and best rule-variant
    latency on its device.

    Attributes
    ----------
    choices : dict
        The rule's choices of its fastest variant (``{}``: the heuristic's own picks).
    choices_ms : float or None
        That variant's time (None: the rule has no alternatives for this kernel).
    """

    name: str
    device: str
    calls: int
    trials: int
    tuned_ms: float | None
    rule_ms: float
    rule: str | None
    choices: dict = field(default_factory=dict)
    choices_ms: float | None = None

    @classmethod
    def from_stored(cls, stored: dict, calls: int) -> "KernelChoice":
        """The choice of a stored comparison (a :class:`KernelTuningDatabase` entry)."""
        return cls(stored["name"], stored.get("device", ""), calls, stored["trials"],
                   stored["tuned_ms"], stored["rule_ms"], stored["rule"],
                   dict(stored.get("choices") or {}), stored.get("choices_ms"))

    @property
    def use_tuned(self) -> bool:
        """Whether builds take MetaSchedule's schedule (faster than the rule and its
        variants)."""
        return self.tuned_ms is not None and self.tuned_ms < self.rule_ms \
            and (self.choices_ms is None or self.tuned_ms < self.choices_ms)

    @property
    def use_choices(self) -> bool:
        """Whether builds take the rule with its measured choices (a variant faster than
        the rule's picks, by more than the timing noise `CHOICES_MARGIN`, and than
        MetaSchedule's schedule)."""
        return bool(self.choices) and self.choices_ms is not None \
            and self.choices_ms < CHOICES_MARGIN * self.rule_ms and not self.use_tuned

    @property
    def best_ms(self) -> float:
        """The time of what builds use."""
        if self.use_tuned:
            return self.tuned_ms
        return self.choices_ms if self.use_choices else self.rule_ms


def is_current(stored: dict | None) -> dict | None:
    """`stored` (a comparison) when it was made against the current default rules
    (``RULES_VERSION``), else None."""
    return stored if stored and stored.get("rules_version") == RULES_VERSION else None


class KernelTuningDatabase:
    """A kernel tuning directory: MetaSchedule's JSON database (its tuning records of each
    kernel on each target) plus the tuned-vs-rules comparisons (``choices.json``).

    Not the placement search's records (:class:`tvm_hetero.search.records.PlacementRecords`,
    measured placements): this one holds per-kernel schedules, for ``compile --tuning-db``.

    Parameters
    ----------
    path : str
        The directory (created when missing).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise HeteroError(f"tuning database {self.path} is not a directory")
        try:
            os.makedirs(self.path, exist_ok=True)
        except OSError as err:
            raise HeteroError(f"cannot create tuning database {self.path}: "
                              f"{err.strerror}") from err
        self._ms_database = None
        # comparisons by comparison_key
        self.choices: dict[str, dict] = self._read_choices()
        # kernels `schedule` found compared under other rules (kept to the rules), by name
        self.stale: set[str] = set()

    def _read_choices(self) -> dict[str, dict]:
        path = os.path.join(self.path, CHOICES_FILE)
        if not os.path.exists(path):
            return {}
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            if data.get("format") != CHOICES_FORMAT or not isinstance(data.get("kernels"),
                                                                      dict):
                raise ValueError("not a tvm_hetero tuning database")
            return data["kernels"]
        except (OSError, ValueError) as err:
            raise HeteroError(f"unreadable tuning database {path}: {error_message(err)}") from err

    def save_choices(self) -> None:
        path = os.path.join(self.path, CHOICES_FILE)
        tmp = path + ".tmp"  # written whole, then renamed: the same as the profile's save
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump({"format": CHOICES_FORMAT, "kernels": self.choices}, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    @property
    def ms_database(self):
        if self._ms_database is None:
            from tvm.s_tir import meta_schedule as ms

            self._ms_database = ms.database.JSONDatabase(work_dir=self.path,
                                                         module_equality="structural")
        return self._ms_database

    def __len__(self) -> int:
        return len(self.choices)

    def comparison(self, func, target, rules: RuleTable | None = None) -> dict | None:
        """The stored comparison of `func` on `target`, when it was made under `rules` (None:
        the default table) and the current default rules' version."""
        return is_current(self.choices.get(comparison_key(workload(func, target), rules)))

    def record(self, func, target, comparison: dict, rules: RuleTable | None = None) -> None:
        """Keep `comparison` (made under `rules`; None: the default table) for `func` on
        `target` (written by :meth:`save_choices`)."""
        self.choices[comparison_key(workload(func, target), rules)] = comparison

    def has(self, func, target, rules: RuleTable | None = None) -> bool:
        """Whether `func` on `target` was compared under `rules` and the current rules'
        version."""
        return self.comparison(func, target, rules) is not None

    def has_records(self, func, target) -> bool:
        """Whether MetaSchedule measured `func` on `target` (a tune stopped part-way has
        registered its kernels' workloads before measuring any of them)."""
        module = workload(func, target)
        if not self.ms_database.has_workload(module):
            return False
        return bool(self.ms_database.get_top_k(self.ms_database.commit_workload(module), 1))

    def schedule(self, func, target, rules: RuleTable | None = None):
        """The tuned PrimFunc for `func` on `target` when MetaSchedule's schedule beat the
        rules of `rules` (None: the default table) and their measured choices, else None."""
        module = workload(func, target)
        key = comparison_key(module, rules)
        stored = self.choices.get(key)
        choice = is_current(stored)
        if choice is None and stored is not None:
            self.stale.add(stored.get("name", key))
        if not choice or not KernelChoice.from_stored(choice, 0).use_tuned:
            return None
        sch = self.ms_database.query_schedule(module, target=target, workload_name="main")
        if sch is None:
            return None
        tuned = sch.mod["main"].without_attr(TUNED_FOR_ATTR).without_attr("global_symbol")
        return tuned.with_attrs({k: v for k, v in func.attrs.items()}) \
            if func.attrs is not None else tuned

    def rule_choices(self, func, target, rules: RuleTable | None = None) -> dict | None:
        """The choices (``{choice: option index}``) of `rules`' rule (None: the default
        table) measured fastest for `func` on `target`, when they beat the rule's own picks
        and MetaSchedule's schedule; else None."""
        choice = self.comparison(func, target, rules)
        if not choice or not KernelChoice.from_stored(choice, 0).use_choices:
            return None
        return dict(choice["choices"])


__all__ = ["CHOICES_FILE", "CHOICES_FORMAT", "CHOICES_MARGIN", "KernelChoice",
           "KernelTuningDatabase", "TUNED_FOR_ATTR", "comparison_key", "is_current",
           "workload", "workload_key"]
