"""The rule base class: one code optimization for some layer kinds on some device families.

A rule is a class in the manner of TVM dlight's ``ScheduleRule``: a `name`, a `description`,
the layer `kinds` it serves and the device `families` it accepts, and
``apply(func, target) -> PrimFunc | None`` (None: not mine, the table tries its next rule).
The table (:mod:`tvm_hetero.optimize.table`) says which rules are tried, in which order.
"""

from __future__ import annotations

from typing import Callable

from ..layers.classify import LAYER_KINDS

# Device families: each has its own column of the table.
FAMILIES = ("cpu", "cuda", "other")


def family_of(target) -> str:
    """The family of a TVM target: ``cpu`` (llvm, c), ``cuda`` or ``other``."""
    kind = target.kind.name
    if kind in ("llvm", "c"):
        return "cpu"
    return "cuda" if kind == "cuda" else "other"


class Rule:
    """One code optimization (subclass it and set the four attributes, or use
    :meth:`from_callable`).

    Attributes
    ----------
    name : str
        Shown in ``tvm-hetero optimizations`` and in ``CompiledModel.stats.rules``.
    description : str
    kinds : tuple of str
        The layer kinds (of ``LAYER_KINDS``) it serves.
    families : tuple of str
        The device families (of ``FAMILIES``) whose targets it accepts.
    """

    name: str = ""
    description: str = ""
    kinds: tuple[str, ...] = ()
    families: tuple[str, ...] = ()

    def apply(self, func, target):
        """Return `func` scheduled for `target`, or None when this rule does not fit it."""
        raise NotImplementedError

    def serves(self, family: str, kind: str) -> bool:
        return family in self.families and kind in self.kinds

    def unless(self, prefer_other: Callable, reason: str) -> "Rule":
        """This rule, declining the kernels where ``prefer_other(func, target)`` is true (a
        later rule of the table fits them better, for `reason`)."""
        return _Unless(self, prefer_other, reason)

    @staticmethod
    def from_callable(name: str, description: str, apply: Callable,
                      kinds=LAYER_KINDS, families=FAMILIES) -> "Rule":
        """A rule made of a function ``apply(func, target) -> PrimFunc | None``."""
        rule = _CallableRule(apply)
        rule.name, rule.description = name, description
        rule.kinds, rule.families = tuple(kinds), tuple(families)
        return rule

    def fingerprint(self) -> str:
        """What tells this rule's code apart from another rule's: its class, its name and its
        plain settings (numbers, strings, flags: a ``Tiled(rows=4)`` is not a ``Tiled()``).
        :attr:`RuleTable.key <tvm_hetero.optimize.table.RuleTable.key>` is made of these."""
        settings = sorted((key, value) for key, value in vars(self).items()
                          if _plain(value) and key not in ("name", "description"))
        return f"{_qualified(type(self))}[{self.name}]{settings if settings else ''}"

    def __repr__(self) -> str:
        return f"<Rule {self.name}>"


def _qualified(obj) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _plain(value) -> bool:
    if isinstance(value, tuple):
        return all(_plain(item) for item in value)
    return value is None or isinstance(value, (bool, int, float, str))


class _CallableRule(Rule):
    def __init__(self, apply: Callable):
        self._apply = apply

    def apply(self, func, target):
        return self._apply(func, target)

    def fingerprint(self) -> str:
        return f"{super().fingerprint()}<{_qualified(self._apply)}>"


class _Unless(Rule):
    def __init__(self, rule: Rule, prefer_other: Callable, reason: str):
        self.rule, self.prefer_other, self.reason = rule, prefer_other, reason
        self.name, self.description = rule.name, rule.description
        self.kinds, self.families = rule.kinds, rule.families

    def apply(self, func, target):
        return None if self.prefer_other(func, target) else self.rule.apply(func, target)

    def fingerprint(self) -> str:
        return f"{self.rule.fingerprint()} unless {_qualified(self.prefer_other)}"


__all__ = ["FAMILIES", "Rule", "family_of"]
