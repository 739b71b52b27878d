"""Features of a placement, the cost model's input.

Version 1, for a device set of D devices (in device-set order) and the 7 layer kinds:

=====================================  =========  =============================================
name                                   count      meaning
=====================================  =========  =============================================
``flops[d][kind]``                     D x 7      FLOPs of the layers of that kind on d (log1p)
``param_bytes[d]``                     D          parameter bytes on d (log1p)
``act_bytes[d]``                       D          activation bytes read and written on d (log1p)
``layers[d]``                          D          share of the layers on d
``profile_ms[d]``                      D          profiled latency of d's layers (log1p)
``copy_bytes[s][t]``                   D x D      bytes copied from s to t per inference (log1p)
``copies[s][t]``                       D x D      number of copies from s to t
``estimate_ms``                        1          the profile estimate of the placement (log)
``devices_used``                       1          number of devices holding layers
=====================================  =========  =============================================

Without a profile the ``profile_ms`` and ``estimate_ms`` features are 0.
"""

from __future__ import annotations

import numpy as np

from ..build.memory import memory_use
from ..layers.classify import LAYER_KINDS
from ..placement import Placement

FEATURE_VERSION = 1


def feature_names(device_names: list[str]) -> list[str]:
    names = [f"flops[{d}][{k}]" for d in device_names for k in LAYER_KINDS]
    names += [f"param_bytes[{d}]" for d in device_names]
    names += [f"act_bytes[{d}]" for d in device_names]
    names += [f"layers[{d}]" for d in device_names]
    names += [f"profile_ms[{d}]" for d in device_names]
    names += [f"copy_bytes[{s}][{t}]" for s in device_names for t in device_names]
    names += [f"copies[{s}][{t}]" for s in device_names for t in device_names]
    return names + ["estimate_ms", "devices_used"]


class Featurizer:
    """Turns placements of one model on one device set into feature vectors."""

    def __init__(self, layers, device_names: list[str], profile=None):
        self.layers = layers
        self.device_names = list(device_names)
        self.profile = profile
        self.names = feature_names(self.device_names)
        self._index = {d: i for i, d in enumerate(self.device_names)}
        self._kind = {k: i for i, k in enumerate(LAYER_KINDS)}
        self._by_name = {layer.name: layer for layer in layers}

    def __call__(self, placements: list[Placement]) -> np.ndarray:
        return np.stack([self.one(p) for p in placements]) if placements else \
            np.zeros((0, len(self.names)))

    def one(self, placement: Placement) -> np.ndarray:
        n = len(self.device_names)
        flops = np.zeros((n, len(LAYER_KINDS)))
        acts, count, profile_ms = (np.zeros(n) for _ in range(3))
        copy_bytes, copies = np.zeros((n, n)), np.zeros((n, n))
        seen = set()
        for layer in self.layers:
            d = self._index[placement[layer.name]]
            flops[d, self._kind[layer.kind]] += layer.flops
            acts[d] += layer.activation_bytes_in + layer.activation_bytes_out
            count[d] += 1
            if self.profile is not None:
                profile_ms[d] += self.profile.layer_ms[layer.name][placement[layer.name]]
            for pred in layer.predecessors:
                s = self._index[placement[pred]]
                if s != d and (pred, d) not in seen:
                    seen.add((pred, d))
                    copy_bytes[s, d] += self._by_name[pred].activation_bytes_out
                    copies[s, d] += 1
        use = memory_use(self.layers, placement)  # a shared constant once per device
        params = np.array([use[d].param_bytes if d in use else 0 for d in self.device_names],
                          dtype=float)
        estimate = self.profile.estimate_ms(self.layers, placement) if self.profile else 0.0
        return np.concatenate([
            np.log1p(flops).ravel(), np.log1p(params), np.log1p(acts), count / len(self.layers),
            np.log1p(profile_ms), np.log1p(copy_bytes).ravel(), copies.ravel(),
            [np.log(estimate) if estimate > 0 else 0.0, float(np.count_nonzero(count))],
        ])
