"""Placement features and the XGBoost cost model."""

from .features import FEATURE_VERSION, Featurizer, feature_names
from .xgb import XGBCostModel, XGBParams

__all__ = ["FEATURE_VERSION", "Featurizer", "XGBCostModel", "XGBParams", "feature_names"]
