"""The rules' tunable choices: where a rule ranks options (a register tile, a reduction block),
tuning may measure the next ones.

A rule helper that picks one of several options calls :func:`choose` with a choice name and
the options ranked by its heuristic, best first. Outside tuning it gets the first. Inside
``with Choices(fixed): ...`` it gets ``options[fixed[name]]`` and the context records how many
options each choice offered, so a tuner can enumerate a kernel's variants: schedule it once
under an empty :class:`Choices`, then again with each alternative it saw
(:func:`variants`). The tuning database stores the fastest variant per kernel
(``tvm_hetero.optimize.metaschedule``) and the build schedules the kernel with it.

Why not MetaSchedule's sampling instructions: the rules compute their splits from Python
(divisors, register counts, cache sizes) after a choice, which a MetaSchedule trace cannot
replay with another decision; a handful of ranked options per kernel is measured whole.
"""

from __future__ import annotations

import contextvars
from typing import Sequence, TypeVar

T = TypeVar("T")

# Alternatives tried per choice besides the heuristic's first option.
MAX_ALTERNATIVES = 3

_ACTIVE: contextvars.ContextVar["Choices | None"] = contextvars.ContextVar(
    "tvm_hetero_choices", default=None)


class Choices:
    """Fixed option indices by choice name, and the choices seen while scheduling.

    Parameters
    ----------
    fixed : dict, optional
        ``{choice name: option index}``; a choice not named takes its first option, an index
        past a choice's options its last.

    The choices a rule makes before it declines a kernel are not kept: the scheduling pass
    (:func:`~tvm_hetero.optimize.optimize_function`) calls :meth:`restart` before each rule
    it tries and :meth:`commit` when one schedules the kernel.
    """

    def __init__(self, fixed: dict[str, int] | None = None):
        self.fixed = dict(fixed or {})
        self._kept: dict[str, int] = {}
        self._pending: dict[str, int] = {}
        self._token = None

    @property
    def seen(self) -> dict[str, int]:
        """``{choice name: number of options}`` of the choices made inside the context
        by the rules that scheduled kernels."""
        merged = dict(self._kept)
        for name, count in self._pending.items():
            merged[name] = max(merged.get(name, 0), count)
        return merged

    def restart(self) -> None:
        """Drop the choices made since the last commit (a rule that declined made them)."""
        self._pending.clear()

    def commit(self) -> None:
        """Keep the choices made since the last restart (a rule scheduled the kernel)."""
        self._kept = self.seen
        self._pending.clear()

    def pick(self, name: str, count: int) -> int:
        self._pending[name] = max(self._pending.get(name, 0), count)
        return min(self.fixed.get(name, 0), count - 1)

    def __enter__(self) -> "Choices":
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.reset(self._token)


def active() -> Choices | None:
    """The :class:`Choices` context the rules run in, if any."""
    return _ACTIVE.get()


def choose(name: str, ranked: Sequence[T]) -> T:
    """The option of choice `name` to schedule with: ``ranked[0]`` (the heuristic's best)
    unless a :class:`Choices` context fixes another index."""
    if not ranked:
        raise ValueError(f"choice {name} has no options")
    active = _ACTIVE.get()
    return ranked[0] if active is None else ranked[active.pick(name, len(ranked))]


def variants(seen: dict[str, int], limit: int = MAX_ALTERNATIVES) -> list[dict[str, int]]:
    """Alternatives to the default (every choice at 0): each choice moved alone to its next
    `limit` options, in the order of `seen`."""
    return [{name: index} for name, count in seen.items()
            for index in range(1, min(count, limit + 1))]


__all__ = ["Choices", "MAX_ALTERNATIVES", "active", "choose", "variants"]
