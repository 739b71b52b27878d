"""The XGBoost cost model: predicts a placement's latency from its features.

Like MetaSchedule's XGBModel it imports xgboost lazily, keeps its hyper-parameters in a
NamedTuple, returns random scores until it is trained, and saves the booster together with its
training data so that training can resume. Two objectives are offered:

- ``"reg"``: regression on log-latency (``reg:squarederror``); the default. On the search
  benchmark it ranked as well as the pairwise objective and, unlike it, predicts milliseconds,
  which the search reports (see docs/design.md);
- ``"rank"``: ``rank:pairwise`` on the same labels, as AutoTVM offered.

Scores are "higher is better" in both: ``-log(latency)`` for regression.
"""

from __future__ import annotations

import json
import logging
import os
from typing import NamedTuple

import numpy as np

from .features import FEATURE_VERSION

logger = logging.getLogger(__name__)


class XGBParams(NamedTuple):
    """Hyper-parameters (small data: a few dozen to a few thousand rows)."""

    max_depth: int = 6
    eta: float = 0.2
    min_child_weight: float = 1.0
    subsample: float = 1.0
    num_rounds: int = 120
    objective: str = "reg"  # "reg" (log-latency) or "rank" (pairwise)
    num_warmup_samples: int = 8
    seed: int = 0


class XGBCostModel:
    """Predicts latency scores for placements' feature vectors.

    Parameters
    ----------
    params : XGBParams
    """

    def __init__(self, params: XGBParams | None = None):
        params = params or XGBParams()
        if params.objective not in ("reg", "rank"):
            raise ValueError(f"unknown objective {params.objective!r}: use 'reg' or 'rank'")
        self.params = params
        self.booster = None
        self.features = np.zeros((0, 0))
        self.latencies = np.zeros(0)
        self._rng = np.random.default_rng(params.seed)

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def fit(self, features: np.ndarray, latencies_ms: np.ndarray) -> None:
        """(Re)train on all samples given (valid latencies only)."""
        features = np.asarray(features, dtype=np.float64)
        latencies_ms = np.asarray(latencies_ms, dtype=np.float64)
        keep = np.isfinite(latencies_ms) & (latencies_ms > 0)
        self.features, self.latencies = features[keep], latencies_ms[keep]
        if len(self.latencies) < self.params.num_warmup_samples:
            self.booster = None
            return
        import xgboost as xgb

        labels = -np.log(self.latencies)
        if self.params.objective == "rank":
            # rank:pairwise wants relevance labels: order within one query group
            labels = np.argsort(np.argsort(labels)).astype(np.float64)
        dtrain = xgb.DMatrix(self.features, label=labels)
        if self.params.objective == "rank":
            dtrain.set_group([len(labels)])
        config = {
            "max_depth": self.params.max_depth, "eta": self.params.eta,
            "min_child_weight": self.params.min_child_weight,
            "subsample": self.params.subsample, "seed": self.params.seed, "nthread": 1,
            "objective": "reg:squarederror" if self.params.objective == "reg"
            else "rank:pairwise",
            "verbosity": 0,
        }
        self.booster = xgb.train(config, dtrain, num_boost_round=self.params.num_rounds)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Scores, higher is better; random until trained."""
        features = np.asarray(features, dtype=np.float64)
        if self.booster is None:
            return self._rng.random(len(features))
        import xgboost as xgb

        return self.booster.predict(xgb.DMatrix(features))

    def predict_ms(self, features: np.ndarray) -> np.ndarray | None:
        """Predicted milliseconds (regression only, once trained), else None."""
        if self.booster is None or self.params.objective != "reg":
            return None
        return np.exp(-self.predict(features))

    def save(self, path: str) -> None:
        """Write ``path`` (JSON: parameters, training data) and, once trained, the booster
        beside it (``path + ".booster.json"``)."""
        data = {"format": "tvm_hetero.cost_model", "feature_version": FEATURE_VERSION,
                "params": self.params._asdict(), "features": self.features.tolist(),
                "latencies_ms": self.latencies.tolist(), "trained": self.trained}
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(tmp, path)
        if self.booster is not None:
            self.booster.save_model(path + ".booster.json")

    @classmethod
    def load(cls, path: str) -> "XGBCostModel":
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        if data.get("format") != "tvm_hetero.cost_model" or \
                data.get("feature_version") != FEATURE_VERSION:
            raise ValueError(f"{path}: not a cost model of feature version {FEATURE_VERSION}")
        model = cls(XGBParams(**data["params"]))
        model.features = np.array(data["features"], dtype=np.float64)
        model.latencies = np.array(data["latencies_ms"], dtype=np.float64)
        if data["trained"]:
            import xgboost as xgb

            model.booster = xgb.Booster()
            model.booster.load_model(path + ".booster.json")
        return model
