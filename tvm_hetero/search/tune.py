"""The search loop: :func:`tune` measures the candidates a strategy proposes (see
``strategy.py``) through a :class:`~tvm_hetero.measure.Measurer`, re-times the finalists
alternately and declares the winner."""

from __future__ import annotations

import logging
import os
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..cost_model import XGBParams
from ..database import RETIME_SOURCE, Database, write_header
from ..devices import DeviceSet
from ..errors import HeteroError, PlacementError
from ..frontend import load_model
from ..measure import (ErrorKind, LocalBuilder, LocalRunner, MeasureResult, MeasureTask,
                       Measurer)
from ..placement import Placement
from ..profiles import profile_model
from ..status import TaskWeights, probe_cached
from . import candidates as gen
from .strategy import DEFAULT_THRESHOLD, create

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
        loops on cpu``; see :mod:`tvm_hetero.verify`).
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


def tune(model: Any, devices: DeviceSet | list[str], *, trials: int = 64,
         strategy: str = "xgb", records: str | None = None, workdir: str | None = None,
         threshold: int = DEFAULT_THRESHOLD, batch_size: int = 8, explore: float = 0.125,
         time_budget_s: float | None = None, early_stopping: int | None = None,
         seed: int = 0, builder=None, runner=None, use_profile: bool = True,
         cost_model_params: XGBParams | None = None,
         callback: Callable[[Trial, float], None] | None = None,
         max_devices: int | None = None, retime: int = 3,
         retime_rounds: int = 5) -> TuneResult:
    """Search for the fastest correct placement of a model on devices.

    Parameters
    ----------
    model : Model or anything :func:`load_model` accepts
    devices : DeviceSet or list of str
        The devices, with their memory caps.
    trials : int
        Candidates to evaluate at most (records of earlier runs count, unmeasured).
    strategy : str
        One of ``STRATEGIES``.
    records : str, optional
        The records file (default ``workdir/records.jsonl``); resumed when it exists. A
        header beside it (``NAME.header.json``) names the model's source and the devices.
    workdir : str, optional
        Where the task, profile and cost model are kept (default: a temporary directory).
    threshold : int
        Measured samples below which no model is trained (default 16); for ``xgb`` at least
        the cost model's minimum training rows (``XGBParams.num_warmup_samples``, 8), below
        which it would rank at random.
    batch_size : int
        Candidates measured per round after the seeds (default 8).
    explore : float
        Share of each model-ranked batch drawn at random (default 1/8).
    time_budget_s : float, optional
        Stop starting new rounds after this many seconds.
    early_stopping : int, optional
        Stop when the best has not improved by 0.5 % in this many trials.
    seed : int
        Seeds the generators, the inputs and the model.
    builder, runner : optional
        Default :class:`LocalBuilder` and :class:`LocalRunner`.
    use_profile : bool
        Profile layers and copies (needed by the min-cut, the DP and two features).
    callback : callable, optional
        ``callback(trial, best_ms)`` after each trial (progress bars).
    max_devices : int, optional
        Devices the greedy seed may use at most (default: the fewest, by score, whose
        capacity holds the model; more when its greedy placement does not fit them).
    retime : int
        Best candidates re-timed alternately before the winner is declared, besides each
        device alone (default 3; 0 declares the search's figures as they are).
    retime_rounds : int
        Rounds of that re-timing (default 5); each candidate's figure is its best round.

    Returns
    -------
    TuneResult
    """
    if trials < 1 or batch_size < 1 or threshold < 0 or not 0 <= explore <= 1:
        raise HeteroError("trials and batch size must be >= 1, threshold >= 0, explore in [0, 1]")
    if retime < 0 or retime_rounds < 1:
        raise HeteroError("retime must be >= 0 and retime rounds >= 1")
    chosen = create(strategy, threshold=threshold, explore=explore,
                    cost_model_params=cost_model_params, seed=seed)
    start = time.monotonic()
    model = load_model(model)
    devices = devices if isinstance(devices, DeviceSet) else DeviceSet.parse(devices)
    if max_devices is not None and not 1 <= max_devices <= len(devices):
        raise HeteroError(f"max devices must be between 1 and the {len(devices)} devices given, "
                          f"got {max_devices}")
    workdir = workdir or tempfile.mkdtemp(prefix="tvm_hetero_tune_")
    os.makedirs(workdir, exist_ok=True)
    records = records or os.path.join(workdir, "records.jsonl")
    task = MeasureTask.create(model, devices, workdir, seed=seed)
    database = Database(records, model.fingerprint(), devices.fingerprint())
    # `report RECORDS` needs nothing more
    write_header(records, model, devices, task.reference_source, task.reference_detail)
    measurer = Measurer(task, builder or LocalBuilder(), runner or LocalRunner(), database)
    profile = None
    if use_profile and chosen.uses_profile:
        profile = profile_model(model, task.layers, devices, os.path.join(workdir,
                                                                            "profile.json"))
    search = SearchState(task, measurer, profile, trials, time_budget_s,
                         np.random.default_rng(seed), callback, strategy, max_devices,
                         batch_size, early_stopping)
    chosen.run(search)
    extra = search.extra

    wrong = wrong_output_devices(search.trials, devices.names)
    for device, count in wrong.items():
        logger.warning("every candidate using %s (%d that ran) computed outputs that differ from "
                       "%s: code built for %s computes wrong answers (`tvm-hetero compile "
                       "--verify -p all:%s` names the kernel and rule at fault)", device, count,
                       task.reference_source, device, device)
    retimed = _retime_finalists(search, measurer, database, retime, retime_rounds, extra)
    ranked = [(p, again) for p, _, again in retimed if again.ok] or \
        [(t.placement, t.result) for t in search.best(len(search.trials))]
    best = min(ranked, key=lambda pr: pr[1].median_ms, default=None)
    singles = [(p, r) for p, r in ranked if len(p.devices_used) == 1]
    best_single = min(singles, key=lambda pr: pr[1].median_ms, default=None)
    return TuneResult(
        placement=best[0] if best else None, latency=best[1] if best else None,
        best_single=(best_single[0].devices_used[0], best_single[1]) if best_single else None,
        history=search.history, trials=search.trials, measured=measurer.measured,
        records=records, strategy=strategy, seconds=time.monotonic() - start, extra=extra,
        retimed=retimed, reference=task.reference_source, wrong_output_devices=wrong)


def wrong_output_devices(trials: list[Trial], devices: list[str]) -> dict[str, int]:
    """``{device: candidates}`` for each device that some candidates that ran used and every
    one of them computed wrong outputs (``wrong_answer``): code built for it is at fault."""
    ran = [t for t in trials if t.result.ok or t.result.error == ErrorKind.WRONG_ANSWER]
    out = {}
    for device in devices:
        using = [t for t in ran if device in t.placement.devices_used]
        if using and all(t.result.error == ErrorKind.WRONG_ANSWER for t in using):
            out[device] = len(using)
    return out


def _finalists(trials: list[Trial], count: int) -> list[Trial]:
    """The `count` fastest verified trials and every verified single-device one (by
    placement): which device alone is the fastest is decided in the same rounds too."""
    valid = sorted((t for t in trials if t.result.ok), key=lambda t: t.result.median_ms)
    chosen = valid[:count]
    chosen += [t for t in valid[count:] if len(t.placement.devices_used) == 1]
    return chosen


def _retime_finalists(search: SearchState, measurer: Measurer, database: Database, count: int,
                      rounds: int, extra: dict[str, Any]) -> list:
    """Re-time the finalists alternately in one process, unless their records already hold
    one such re-timing of them all (a resumed search measures nothing twice)."""
    finalists = _finalists(search.trials, count) if count else []
    if not finalists:
        return []
    recorded = [database.retimed(t.placement) for t in finalists]
    groups = {found[1].get("retime") if found else None for found in recorded}
    if len(groups) == 1 and None not in groups:
        extra["retime"] = {"rounds": rounds, "reused": True}
        return [(t.placement, t.result, found[0]) for t, found in zip(finalists, recorded)]
    tags = {"strategy": search.strategy, "source": RETIME_SOURCE,
            "retime": uuid.uuid4().hex[:12]}
    logger.info("re-timing %d finalists alternately, %d rounds", len(finalists), rounds)
    results = measurer.retime([t.placement for t in finalists], rounds, tags)
    extra["retime"] = {"rounds": rounds, "reused": False}
    failed = [r for r in results if not r.ok]
    if failed:
        logger.warning("%d of %d finalists failed when re-timed (%s)", len(failed),
                       len(results), failed[0].message or failed[0].error.value)
    return [(t.placement, t.result, again) for t, again in zip(finalists, results)]
