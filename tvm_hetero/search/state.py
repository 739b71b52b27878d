"""What a placement search works with and what it returns: :class:`SearchState` (the task,
the trials so far, the budget, the candidate sources) handed to a strategy, :class:`Trial` per
evaluated candidate, :class:`TuneResult` at the end."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import PlacementError
from ..measure import MeasureResult, MeasureTask, Measurer
from ..placement import Placement
from ..measure.status import TaskWeights, probe_cached
from . import candidates as gen

logger = logging.getLogger(__name__)


@dataclass
class Trial:
    """One evaluated candidate, in evaluation order."""

    placement: Placement
    result: MeasureResult
    source: str  # which generator proposed it


@dataclass
class TuneResult:
    """What a search found.

    Attributes
    ----------
    placement : Placement or None
        The fastest verified placement (None when no candidate ran correctly).
    latency : MeasureResult or None
    best_single : tuple of (device name, MeasureResult) or None
        The fastest single-device placement measured (by placement, whatever proposed it).
    history : list of float
        Best verified latency so far after each trial (ms; inf before the first).
    trials : list of Trial
    measured : int
        Candidates built and run by this call (the rest came from the records).
    records : str
        The records file.
    retimed : list of (Placement, MeasureResult, MeasureResult)
        The finalists re-timed alternately: placement, the search's figure, the re-timed one.
    reference : str
        What every candidate's outputs were checked against (``onnxruntime``, ``TVM's default
        loops on cpu``; see :mod:`tvm_hetero.measure.reference`).
    wrong_output_devices : dict of str to int
        Devices every candidate using which (that ran) computed wrong outputs, with how many
        did: code built for that device (a rule, most likely) computes wrong answers.
    """

    placement: Placement | None
    latency: MeasureResult | None
    best_single: tuple[str, MeasureResult] | None
    history: list[float]
    trials: list[Trial]
    measured: int
    records: str
    strategy: str
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    retimed: list[tuple[Placement, MeasureResult, MeasureResult]] = field(default_factory=list)
    reference: str = ""
    wrong_output_devices: dict[str, int] = field(default_factory=dict)

    @property
    def speedup(self) -> float | None:
        """Best single device's median over the found placement's median."""
        if self.latency is None or self.best_single is None:
            return None
        return self.best_single[1].median_ms / self.latency.median_ms

    def to_json(self) -> dict[str, Any]:
        single = None
        if self.best_single is not None:
            single = {"device": self.best_single[0], "median_ms": self.best_single[1].median_ms}
        return {
            "strategy": self.strategy,
            "placement": self.placement.assignment if self.placement else None,
            "median_ms": self.latency.median_ms if self.latency else None,
            "std_ms": self.latency.std_ms if self.latency else None,
            "best_single_device": single,
            "speedup": self.speedup,
            "candidates": len(self.trials),
            "measured": self.measured,
            "failed": sum(1 for t in self.trials if not t.result.ok),
            "history_ms": self.history,
            "records": self.records,
            "seconds": round(self.seconds, 2),
            "retimed": [{"devices_used": p.devices_used, "search_ms": searched.median_ms,
                         "retimed_ms": again.median_ms if again.ok else None,
                         "rounds_ms": again.rounds_ms, "error": again.error.value}
                        for p, searched, again in self.retimed],
            "reference": self.reference,
            "wrong_output_devices": dict(self.wrong_output_devices),
        }


class SearchState:
    """What a strategy works with: the task, the trials so far, the budget, and the candidate
    sources (seeds, diverse samples, a pool to rank); :meth:`evaluate` measures."""

    def __init__(self, task: MeasureTask, measurer: Measurer, profile, budget: int,
                 time_budget_s: float | None, rng: np.random.Generator,
                 callback: Callable[[Trial, float], None] | None, strategy: str,
                 max_devices: int | None = None, batch_size: int = 8,
                 early_stopping: int | None = None):
        self.task = task
        self.strategy = strategy
        self.layers = task.layers
        self.devices = task.devices
        self.measurer = measurer
        self.profile = profile
        self.budget = budget
        self.deadline = time.monotonic() + time_budget_s if time_budget_s else None
        self.rng = rng
        self.callback = callback
        self.trials: list[Trial] = []
        self.history: list[float] = []
        self.seen: set[Placement] = set()
        self.max_devices = max_devices
        self.batch_size = batch_size
        self.early_stopping = early_stopping
        self.extra: dict[str, Any] = {}

    # -- bookkeeping ------------------------------------------------------------------------
    @property
    def left(self) -> int:
        return self.budget - len(self.trials)

    def out_of_budget(self) -> bool:
        return self.left <= 0 or (self.deadline is not None and time.monotonic() > self.deadline)

    @property
    def best_ms(self) -> float:
        return self.history[-1] if self.history else float("inf")

    def best(self, k: int = 1) -> list[Trial]:
        valid = sorted((t for t in self.trials if t.result.ok), key=lambda t: t.result.median_ms)
        return valid[:k]

    def evaluate(self, placements: list[Placement | None], source: str) -> None:
        """Measure new, feasible, unseen candidates, within the budget."""
        fresh = []
        for placement in placements:
            if placement is None or placement in self.seen:
                continue
            self.seen.add(placement)
            fresh.append(placement)
        fresh = fresh[:max(self.left, 0)]
        if not fresh or self.out_of_budget():
            return
        tags = {"strategy": self.strategy, "source": source}
        for placement, result in zip(fresh, self.measurer.measure(fresh, tags)):
            trial = Trial(placement, result, source)
            self.trials.append(trial)
            best = min(self.best_ms, result.median_ms)
            self.history.append(best)
            if self.callback:
                self.callback(trial, best)

    # -- candidate sources ------------------------------------------------------------------
    def seeds(self, which: tuple[str, ...]) -> None:
        # the profile's best guesses first: the search's first measurement is its best bet
        if "mincut" in which and self.profile is not None:
            if len(self.devices) == 2:
                self.evaluate([gen.min_cut(self.layers, self.devices, self.profile)], "min-cut")
            self.evaluate([gen.dp_chain(self.layers, self.devices, self.profile)], "dp")
        if "single" in which:
            self.evaluate(gen.single_device(self.layers, self.devices), "single-device")
        if "greedy" in which:
            weights = TaskWeights.for_layers(self.layers)
            statuses = probe_cached(self.devices, weights,
                                    os.path.join(self.task.workdir, "status.json"))
            needed = gen.devices_needed(self.layers, self.devices, statuses)
            limits = [self.max_devices] if self.max_devices else range(needed,
                                                                        len(self.devices) + 1)
            for limit in limits:
                try:
                    placement = gen.greedy(self.layers, self.devices, statuses, weights,
                                           max_devices=limit)
                except PlacementError as err:
                    logger.info("greedy placement on at most %d device(s) skipped: %s", limit,
                                err)
                    continue
                logger.info("greedy seed on at most %d device(s) (the model needs %d by "
                            "capacity)", limit, needed)
                self.evaluate([placement], "greedy")
                break

    def diverse(self, count: int) -> list[Placement]:
        """Random feasible placements and mutations of the best so far, half and half."""
        out = []
        parents = [t.placement for t in self.best(4)]
        for i in range(count * 4):
            if len(out) >= count:
                break
            if parents and i % 2:
                candidate = gen.mutate(parents[i % len(parents)], self.layers, self.devices,
                                       self.rng)
            else:
                candidate = gen.random_placement(self.layers, self.devices, self.rng)
            if candidate is not None and candidate not in self.seen and candidate not in out:
                out.append(candidate)
        if len(out) < count:  # a small space: what sampling missed, listed
            out += gen.unseen_placements(self.layers, self.devices, self.seen | set(out),
                                         count - len(out), self.rng)
        return out

    def pool(self, size: int) -> list[Placement]:
        """Candidates for the model to rank: mutations of the top, DP refinements, random."""
        out: dict[Placement, None] = {}
        top = [t.placement for t in self.best(8)]
        for i in range(size * 3):
            if len(out) >= size:
                break
            if top and i % 3 != 2:
                candidate = gen.mutate(top[i % len(top)], self.layers, self.devices, self.rng)
            else:
                candidate = gen.random_placement(self.layers, self.devices, self.rng)
            if candidate is not None and candidate not in self.seen:
                out[candidate] = None
        if self.profile is not None:
            for parent in top[:2]:
                refined = gen.local_search(parent, self.layers, self.devices, self.profile)
                if refined not in self.seen:
                    out[refined] = None
        return list(out)
