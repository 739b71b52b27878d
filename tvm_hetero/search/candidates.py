"""Candidate generators: the placements a search measures first and mutates.

- :func:`all_feasible`: every placement within the caps (small models: the ground truth);
- :func:`single_device`: everything on one device, for each device that fits;
- :func:`greedy`: the first seed's rule: layers by parameter count, each to the best-scoring
  device that still has room, the device's state updated after every layer, on at most
  :func:`devices_needed` devices (the fewest, by score, whose capacity holds the model);
- :func:`random_placement`: uniformly random feasible placements;
- :func:`min_cut`: Stone (1977): for two devices with additive per-layer and transfer costs,
  the optimal assignment is a minimum s-t cut (networkx);
- :func:`dp_chain` + :func:`local_search`: for more devices, a dynamic program along the
  program order, refined by single-layer moves on the full cost model;
- :func:`mutate`: moves of a few layers or of a contiguous run of layers.

Every generator returns only placements that fit the devices' memory caps (or None).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

import numpy as np

from ..build.memory import fits, memory_use
from ..devices import DeviceSet
from ..errors import HeteroError, PlacementError
from ..layers.extract import distinct_param_bytes, distinct_params
from ..measure.profiles import Profile
from ..measure.status import DeviceStatus, TaskWeights
from ..placement import Placement

logger = logging.getLogger(__name__)

EXHAUSTIVE_LIMIT = 4096


def all_feasible(layers, devices: DeviceSet) -> list[Placement]:
    """Every placement within the caps, when there are at most ``EXHAUSTIVE_LIMIT``."""
    count = len(devices) ** len(layers)
    if count > EXHAUSTIVE_LIMIT:
        raise HeteroError(f"exhaustive search over {count} placements is too large (limit "
                          f"{EXHAUSTIVE_LIMIT}): use a smaller model or another strategy")
    out = []
    for combo in itertools.product(devices.names, repeat=len(layers)):
        placement = Placement(dict(zip([layer.name for layer in layers], combo)))
        if fits(layers, placement, devices):
            out.append(placement)
    return out


def single_device(layers, devices: DeviceSet) -> list[Placement]:
    """All layers on one device, for each device whose cap allows it."""
    out = []
    for device in devices:
        placement = Placement.all_on(layers, device.name)
        if fits(layers, placement, devices):
            out.append(placement)
    return out


@dataclass
class _GreedyState:
    status: DeviceStatus | None
    cap: int
    params: int = 0
    peak: int = 0
    flops: float = 0.0
    held: set = field(default_factory=set)  # the keys of the constants it holds

    def new_param_bytes(self, layer) -> int:
        """The bytes of `layer`'s constants this device does not hold yet."""
        return sum(size for key, size in distinct_params([layer]).items()
                   if key not in self.held)

    def room_for(self, layer) -> bool:
        activation = layer.activation_bytes_in + layer.activation_bytes_out
        return self.params + self.new_param_bytes(layer) + max(self.peak, activation) \
            <= self.cap

    def take(self, layer) -> None:
        self.params += self.new_param_bytes(layer)
        self.held.update(distinct_params([layer]))
        self.peak = max(self.peak, layer.activation_bytes_in + layer.activation_bytes_out)
        self.flops += layer.flops

    @property
    def free(self) -> int:
        return self.cap - self.params - self.peak


def greedy(layers, devices: DeviceSet, statuses: list[DeviceStatus], weights: TaskWeights,
           max_devices: int | None = None) -> Placement:
    """The first seed's greedy placement.

    Layers are taken by parameter bytes, largest first (program order breaks ties). Each goes to
    the device with the highest current score among those with room for it, where a device's
    current score is ::

        w_compute * gflops / best_gflops / (1 + flops_assigned / total_flops)
        + w_memory * free_bytes / best_capacity + w_bandwidth * bandwidth / best_bandwidth

    so that a device's compute term falls as it takes work and its memory term as it fills.
    Once `max_devices` devices hold layers, the rest go among those devices only.

    Raises
    ------
    PlacementError
        When some layer fits on no allowed device.
    """
    by_name = {s.name: s for s in statuses}
    states = {d.name: _GreedyState(by_name[d.name],
                                   d.memory_cap if d.memory_cap is not None
                                   else by_name[d.name].memory_bytes)
              for d in devices}
    best_gflops = max(s.gflops for s in statuses) or 1.0
    best_capacity = max(st.cap for st in states.values()) or 1
    best_bandwidth = max(s.bandwidth_gbs for s in statuses) or 1.0
    total_flops = sum(layer.flops for layer in layers) or 1.0

    def current_score(state: _GreedyState) -> float:
        return (weights.compute * state.status.gflops / best_gflops
                / (1 + state.flops / total_flops)
                + weights.memory * state.free / best_capacity
                + weights.bandwidth * state.status.bandwidth_gbs / best_bandwidth)

    assignment: dict[str, str] = {}
    order = sorted(layers, key=lambda layer: (-layer.param_bytes, layer.index))
    for layer in order:
        used = {assignment[name] for name in assignment}
        allowed = [name for name, state in states.items()
                   if state.room_for(layer)
                   and (max_devices is None or len(used) < max_devices or name in used)]
        if not allowed:
            raise PlacementError(f"greedy placement: no device has room for layer {layer.name} "
                                 f"({layer.param_bytes} parameter bytes)")
        chosen = max(allowed, key=lambda name: current_score(states[name]))
        states[chosen].take(layer)
        assignment[layer.name] = chosen
    return Placement({layer.name: assignment[layer.name] for layer in layers})


def devices_needed(layers, devices: DeviceSet, statuses: list[DeviceStatus]) -> int:
    """The fewest devices, taken by score (best first), whose capacities together hold the
    model: its parameter bytes plus its largest layer's activations (a lower bound, the way
    :func:`~tvm_hetero.build.memory.memory_use` counts one device). A device's capacity is its cap,
    else its memory. All the devices when even they do not hold it."""
    by_name = {s.name: s for s in statuses}
    need = distinct_param_bytes(layers) + max(
        (layer.activation_bytes_in + layer.activation_bytes_out for layer in layers), default=0)
    capacities = [d.memory_cap if d.memory_cap is not None else by_name[d.name].memory_bytes
                  for d in sorted(devices, key=lambda d: -by_name[d.name].score)]
    held = 0
    for count, capacity in enumerate(capacities, 1):
        held += capacity
        if held >= need:
            return count
    return len(capacities)


def random_placement(layers, devices: DeviceSet, rng: np.random.Generator) -> Placement | None:
    """A random feasible placement: layers in random order, each to a uniformly chosen device
    that still has room for it (uniform over all placements when no cap binds)."""
    states = {d.name: _GreedyState(None, d.memory_cap if d.memory_cap is not None else 2**62)
              for d in devices}
    assignment = {}
    for index in rng.permutation(len(layers)):
        layer = layers[index]
        allowed = [name for name, state in states.items() if state.room_for(layer)]
        if not allowed:
            return None
        chosen = allowed[rng.integers(len(allowed))]
        states[chosen].take(layer)
        assignment[layer.name] = chosen
    return Placement({layer.name: assignment[layer.name] for layer in layers})


# A placement space of at most this many placements is listed whole when sampling it finds
# too few unseen ones.
ENUMERABLE_PLACEMENTS = 4096


def unseen_placements(layers, devices: DeviceSet, seen, count: int,
                      rng: np.random.Generator) -> list[Placement]:
    """Up to `count` feasible placements not in `seen`, in random order, from a space small
    enough to list (`ENUMERABLE_PLACEMENTS`); [] for a larger one. Random sampling misses the
    last few of a small space (a 5-trial search of a 3-layer model under a cap stopped after 4,
    as if the space were exhausted)."""
    names = devices.names
    if len(names) ** len(layers) > ENUMERABLE_PLACEMENTS:
        return []
    out = []
    for choice in itertools.product(names, repeat=len(layers)):
        placement = Placement({layer.name: name for layer, name in zip(layers, choice)})
        if placement not in seen and fits(layers, placement, devices):
            out.append(placement)
    return [out[i] for i in rng.permutation(len(out))[:count]]


def min_cut(layers, devices: DeviceSet, profile: Profile) -> Placement | None:
    """The optimal two-device placement under additive costs (Stone 1977), made feasible.

    Source side = device 0, sink side = device 1. Edge (s, v) costs v's latency on device 1
    and (v, t) its latency on device 0; each data edge (u, v) costs, both ways, the copy of u's
    output. A producer read by several layers on the other device is counted once per edge
    here (the executable copies it once): an over-estimate the measurement corrects.
    """
    import networkx as nx

    if len(devices) != 2:
        raise PlacementError("min-cut placement needs exactly two devices")
    first, second = devices.names
    graph = nx.DiGraph()
    by_name = {layer.name: layer for layer in layers}
    for layer in layers:
        graph.add_edge("source", layer.name, capacity=profile.layer_ms[layer.name][second])
        graph.add_edge(layer.name, "sink", capacity=profile.layer_ms[layer.name][first])
        for pred in layer.predecessors:
            nbytes = by_name[pred].activation_bytes_out
            graph.add_edge(pred, layer.name,
                           capacity=profile.transfer_ms(first, second, nbytes))
            graph.add_edge(layer.name, pred,
                           capacity=profile.transfer_ms(second, first, nbytes))
    _, (source_side, _) = nx.minimum_cut(graph, "source", "sink")
    placement = Placement({layer.name: first if layer.name in source_side else second
                           for layer in layers})
    if fits(layers, placement, devices):
        return placement
    repaired = repair(placement, layers, devices, profile)  # caps bind: no longer optimal
    return local_search(repaired, layers, devices, profile) if repaired else None


def dp_chain(layers, devices: DeviceSet, profile: Profile) -> Placement | None:
    """A dynamic program along program order for any number of devices, then refined.

    The program sees the layers as a chain: a layer's inputs are charged a copy when its
    device differs from the previous layer's. :func:`local_search` then improves the result
    on the full DAG cost model.
    """
    names = devices.names
    by_name = {layer.name: layer for layer in layers}
    cost = np.array([profile.layer_ms[layers[0].name][d] for d in names])
    choice: list[np.ndarray] = []
    for prev, layer in zip(layers, layers[1:]):
        nbytes = sum(by_name[p].activation_bytes_out for p in layer.predecessors) or \
            prev.activation_bytes_out
        step = np.array([[profile.transfer_ms(a, b, nbytes) for b in names] for a in names])
        total = cost[:, None] + step  # [from device, to device]
        choice.append(total.argmin(axis=0))
        cost = total.min(axis=0) + np.array([profile.layer_ms[layer.name][d] for d in names])
    index = int(cost.argmin())
    picks = [index]
    for back in reversed(choice):
        index = int(back[index])
        picks.append(index)
    picks.reverse()
    placement = Placement({layer.name: names[i] for layer, i in zip(layers, picks)})
    placement = repair(placement, layers, devices, profile)
    return local_search(placement, layers, devices, profile) if placement else None


def local_search(placement: Placement, layers, devices: DeviceSet, profile: Profile,
                 max_rounds: int = 10) -> Placement:
    """Move single layers to other devices while the estimate improves and caps hold."""
    current = dict(placement.assignment)
    best = profile.estimate_ms(layers, Placement(current))
    for _ in range(max_rounds):
        improved = False
        for layer in layers:
            for device in devices.names:
                if device == current[layer.name]:
                    continue
                trial = {**current, layer.name: device}
                candidate = Placement(trial)
                estimate = profile.estimate_ms(layers, candidate)
                if estimate < best - 1e-9 and fits(layers, candidate, devices):
                    current, best, improved = trial, estimate, True
        if not improved:
            break
    return Placement(current)


def repair(placement: Placement, layers, devices: DeviceSet,
           profile: Profile | None = None) -> Placement | None:
    """Move layers off devices over their caps (cheapest moves first); None if impossible."""
    current = dict(placement.assignment)
    for _ in range(len(layers) * len(devices)):
        candidate = Placement(current)
        use = memory_use(layers, candidate)
        over = [d for d, u in use.items()
                if devices[d].memory_cap is not None and u.total > devices[d].memory_cap]
        if not over:
            return candidate
        device = over[0]
        moves = []
        for layer in layers:
            if current[layer.name] != device or layer.param_bytes == 0:
                continue
            for target in devices.names:
                if target == device:
                    continue
                trial = Placement({**current, layer.name: target})
                cost = profile.estimate_ms(layers, trial) if profile else -layer.param_bytes
                moves.append((cost, -layer.param_bytes, layer.name, target))
        if not moves:
            return None
        _, _, name, target = min(moves)
        current[name] = target
    return None


def mutate(placement: Placement, layers, devices: DeviceSet, rng: np.random.Generator,
           max_tries: int = 20) -> Placement | None:
    """A feasible neighbour: 1-3 single-layer moves, or a contiguous run moved to one device."""
    names = devices.names
    if len(names) < 2:
        return None
    for _ in range(max_tries):
        trial = dict(placement.assignment)
        if rng.random() < 0.5:
            for _ in range(int(rng.integers(1, 4))):
                layer = layers[rng.integers(len(layers))]
                others = [d for d in names if d != trial[layer.name]]
                trial[layer.name] = others[rng.integers(len(others))]
        else:
            start = int(rng.integers(len(layers)))
            stop = min(len(layers), start + int(rng.integers(2, max(3, len(layers) // 3 + 1))))
            device = names[rng.integers(len(names))]
            for layer in layers[start:stop]:
                trial[layer.name] = device
        candidate = Placement(trial)
        if candidate != placement and fits(layers, candidate, devices):
            return candidate
    return None
