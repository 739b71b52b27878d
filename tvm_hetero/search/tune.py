"""The search loop: :func:`tune` measures the candidates a strategy proposes (see
``strategy.py``) through a :class:`~tvm_hetero.measure.Measurer`, re-times the finalists
alternately and declares the winner."""

from __future__ import annotations

import logging
import os
import tempfile
import time
import uuid
from typing import Any, Callable

import numpy as np

from ..cost_model import XGBParams
from .records import RETIME_SOURCE, PlacementRecords, write_header
from ..devices import DeviceSet
from ..errors import HeteroError
from ..frontend.load import load_model
from ..measure import (ErrorKind, LocalBuilder, LocalRunner, MeasureTask,
                       Measurer)
from ..measure.profiles import profile_model
from .state import SearchState, Trial, TuneResult
from .strategy import DEFAULT_THRESHOLD, create

logger = logging.getLogger(__name__)

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
    database = PlacementRecords(records, model.fingerprint(), devices.fingerprint())
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


def _retime_finalists(search: SearchState, measurer: Measurer, database: PlacementRecords,
                      count: int, rounds: int, extra: dict[str, Any]) -> list:
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
