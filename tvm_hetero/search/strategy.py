"""Search strategies: how a search spends its budget of candidates, one class each, created by
name (:func:`create`), in the manner of MetaSchedule's ``SearchStrategy.create``.

=====================  ===========================================================================
name                   what it measures
=====================  ===========================================================================
``xgb``                the seeds, diverse samples up to ``threshold``, then rounds ranked by an
                       XGBoost cost model trained on every measurement (the default)
``best-of-samples``    the seeds, then diverse samples: the best measured wins
``random``             each device alone, then uniformly random feasible placements
``greedy``             each device alone and the greedy placement
``mincut``             each device alone, the min-cut (two devices) and the DP on the profile
``exhaustive``         every feasible placement (small models: the ground truth)
=====================  ===========================================================================
"""

from __future__ import annotations

import logging
import math
import os
from typing import TYPE_CHECKING

import numpy as np

from ..cost_model import Featurizer, XGBCostModel, XGBParams
from ..errors import HeteroError
from . import candidates as gen

if TYPE_CHECKING:
    from .state import SearchState

logger = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 16


class SearchStrategy:
    """How a search spends its budget.

    Attributes
    ----------
    name : str
        The name :func:`create` knows it by.
    uses_profile : bool
        Whether it needs the layers' cost profile (the min-cut, the DP, the model's features).
    """

    name = ""
    uses_profile = False

    def run(self, state: SearchState) -> None:
        """Measure candidates through ``state.evaluate`` until done or out of budget."""
        raise NotImplementedError


class Exhaustive(SearchStrategy):
    name = "exhaustive"

    def run(self, state: SearchState) -> None:
        candidates = gen.all_feasible(state.layers, state.devices)
        state.budget = max(state.budget, len(candidates))
        state.evaluate(candidates, "exhaustive")


class Greedy(SearchStrategy):
    name = "greedy"

    def run(self, state: SearchState) -> None:
        state.seeds(("single", "greedy"))


class MinCut(SearchStrategy):
    name = "mincut"
    uses_profile = True

    def run(self, state: SearchState) -> None:
        state.seeds(("single", "mincut"))


class BestOfSamples(SearchStrategy):
    """The seeds, then rounds of diverse feasible candidates (random placements and
    mutations of the best so far) until the budget, the space or the patience runs out."""

    name = "best-of-samples"
    uses_profile = True
    seeds: tuple[str, ...] = ("single", "greedy", "mincut")
    source = "samples"

    def run(self, state: SearchState) -> None:
        state.seeds(self.seeds)
        last_improvement, best_seen = len(state.trials), state.best_ms
        while not state.out_of_budget():
            if not self.round(state, min(state.batch_size, state.left)):
                break
            if state.best_ms < best_seen * 0.995:
                last_improvement, best_seen = len(state.trials), state.best_ms
            if state.early_stopping and \
                    len(state.trials) - last_improvement >= state.early_stopping:
                logger.info("early stop: no improvement in %d trials", state.early_stopping)
                break
        self.finish(state)

    def round(self, state: SearchState, batch: int) -> bool:
        """Measure one batch; False when there is nothing left to measure."""
        candidates = self.propose(state, batch)
        if not [c for c in candidates if c is not None and c not in state.seen]:
            state.extra["exhausted"] = True  # no unseen feasible candidate was found
            return False
        state.evaluate(candidates, self.source)
        return True

    def propose(self, state: SearchState, batch: int) -> list:
        return state.diverse(batch)

    def finish(self, state: SearchState) -> None:
        """Called once the rounds are over."""


class Random(BestOfSamples):
    name = "random"
    seeds = ("single",)
    source = "random"

    def propose(self, state: SearchState, batch: int) -> list:
        return [gen.random_placement(state.layers, state.devices, state.rng)
                for _ in range(batch)]


class XGB(BestOfSamples):
    """Below `threshold` verified measurements, the samples of :class:`BestOfSamples`; from
    there on the cost model, retrained every round on every verified measurement, ranks a pool
    of candidates; the top of the ranking is measured, with a share `explore` of each batch
    drawn at random from the rest.

    Parameters
    ----------
    threshold : int
        At least the cost model's minimum training rows (``num_warmup_samples``, 8): below it
        the model ranks at random.
    explore : float
        Share of each batch drawn at random from the ranked pool, in [0, 1].
    cost_model_params : XGBParams, optional
    seed : int
        Seeds the cost model.
    """

    name = "xgb"

    def __init__(self, threshold: int = DEFAULT_THRESHOLD, explore: float = 0.125,
                 cost_model_params: XGBParams | None = None, seed: int = 0):
        params = cost_model_params or XGBParams(seed=seed)
        if threshold < params.num_warmup_samples:
            raise HeteroError(f"threshold {threshold} is below the cost model's minimum of "
                              f"{params.num_warmup_samples} training samples (below it the "
                              f"model ranks at random): give {params.num_warmup_samples} or "
                              "more")
        self.threshold = threshold
        self.explore = explore
        self.model = XGBCostModel(params)
        self._featurize = None

    def round(self, state: SearchState, batch: int) -> bool:
        measured = [t for t in state.trials if t.result.ok]
        if len(measured) < self.threshold:
            return super().round(state, batch)
        if self._featurize is None:
            self._featurize = Featurizer(state.layers, state.devices.names, state.profile)
        self.model.fit(self._featurize([t.placement for t in measured]),
                       np.array([t.result.median_ms for t in measured]))
        pool = state.pool(max(256, 16 * batch))
        if not pool:
            return False
        scores = self.model.predict(self._featurize(pool))
        order = list(np.argsort(-scores))
        n_explore = min(len(order), math.ceil(self.explore * batch)) if self.explore else 0
        chosen = order[:batch - n_explore]
        rest = order[batch - n_explore:]
        if n_explore and rest:
            chosen += list(state.rng.choice(rest, size=min(n_explore, len(rest)),
                                            replace=False))
        state.evaluate([pool[i] for i in chosen], "xgb")
        state.extra["model_trained"] = self.model.trained
        return True

    def finish(self, state: SearchState) -> None:
        path = os.path.join(state.task.workdir, "cost_model.json")
        self.model.save(path)
        state.extra["cost_model"] = path


_STRATEGIES = {cls.name: cls for cls in (XGB, Random, Greedy, MinCut, BestOfSamples, Exhaustive)}
STRATEGIES = tuple(_STRATEGIES)


def create(name: str, **options) -> SearchStrategy:
    """The strategy called `name` (one of ``STRATEGIES``); `options` go to the ``xgb`` one
    (``threshold``, ``explore``, ``cost_model_params``, ``seed``) and are ignored by the rest."""
    if name not in _STRATEGIES:
        raise HeteroError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
    return _STRATEGIES[name](**options) if name == "xgb" else _STRATEGIES[name]()
