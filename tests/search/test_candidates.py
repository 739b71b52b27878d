"""Generator logic on small hand-made layers and profiles: no builds, milliseconds."""

import itertools

import numpy as np
import pytest

from tvm_hetero import DeviceSet, Placement, PlacementError
from tvm_hetero.search import candidates as S
from tests.helpers.layers import layer
from tvm_hetero.layers.extract import Layer, TensorInfo
from tvm_hetero.build.memory import fits, memory_use
from tvm_hetero.measure.profiles import Profile, TransferFit
from tvm_hetero.measure.status import DeviceStatus, TaskWeights


def devices(caps):
    texts = [f"{name}=cpu:{i}" for i, name in enumerate(caps)]
    return DeviceSet.parse(texts, memory={n: c for n, c in caps.items() if c is not None})


# ---------------------------------------------------------------------------------------------
# greedy: the first seed's rule, arithmetic written out


GREEDY_LAYERS = [
    layer("L0", params=400, act_in=50, act_out=50, flops=100, index=0),
    layer("L1", params=300, act_in=25, act_out=25, flops=300, index=1),
    layer("L2", params=100, act_in=100, act_out=100, flops=600, index=2),
]
STATUSES = [DeviceStatus("big", gflops=10, memory_bytes=1000, bandwidth_gbs=10),
            DeviceStatus("small", gflops=5, memory_bytes=600, bandwidth_gbs=10)]
WEIGHTS = TaskWeights(compute=0.5, memory=0.3, bandwidth=0.2)


def test_greedy_arithmetic():
    # best gflops 10, best capacity 1000, best bandwidth 10, total flops 1000.
    # Order by parameter bytes: L0 (400), L1 (300), L2 (100).
    # L0: big   0.5*10/10/(1+0)       + 0.3*1000/1000 + 0.2 = 1.000
    #     small 0.5*5/10/(1+0)        + 0.3*600/1000  + 0.2 = 0.630   -> big
    #     big now: params 400, peak activation 100, flops 100, free 1000-400-100 = 500
    # L1: big   0.5/(1+100/1000)=0.4545 + 0.3*500/1000 + 0.2 = 0.8045
    #     small 0.25                  + 0.18          + 0.2 = 0.630   -> big
    #     big now: params 700, peak 100, flops 400, free 200
    # L2: big has room: 700 + 100 + max(100, 200) = 1000 <= 1000
    #     big   0.5/(1+400/1000)=0.3571 + 0.3*200/1000 + 0.2 = 0.6171
    #     small 0.25                  + 0.18          + 0.2 = 0.630   -> small
    dset = devices({"big": "1000", "small": "600"})
    placement = S.greedy(GREEDY_LAYERS, dset, STATUSES, WEIGHTS)
    assert placement.assignment == {"L0": "big", "L1": "big", "L2": "small"}
    assert fits(GREEDY_LAYERS, placement, dset)


def test_greedy_device_cap_and_memory():
    dset = devices({"big": "1000", "small": "600"})
    # at most one device: once big holds L0, L2 must join it (it fits exactly: 1000 bytes)
    one = S.greedy(GREEDY_LAYERS, dset, STATUSES, WEIGHTS, max_devices=1)
    assert set(one.assignment.values()) == {"big"}
    # big capped at 900: L2 needs 700 + 100 + 200 = 1000 there, so it goes to small anyway
    tight = devices({"big": "900", "small": "600"})
    assert S.greedy(GREEDY_LAYERS, tight, STATUSES, WEIGHTS)["L2"] == "small"
    with pytest.raises(PlacementError, match="no device has room for layer L0"):
        S.greedy(GREEDY_LAYERS, devices({"big": "100", "small": "100"}), STATUSES, WEIGHTS)


# ---------------------------------------------------------------------------------------------
# min-cut and DP against exhaustive search on a profile


def chain_profile(names, costs, fixed=0.1, per_byte=0.001):
    layers = [layer(f"L{i}", 0, 100, 100, preds=[f"L{i - 1}"] if i else [], index=i)
              for i in range(len(costs))]
    layer_ms = {f"L{i}": dict(zip(names, c)) for i, c in enumerate(costs)}
    transfer = {(a, b): TransferFit(fixed, per_byte) for a in names for b in names if a != b}
    return layers, Profile("m", "d", layer_ms, transfer)


def exhaustive_best(layers, dset, profile):
    best = None
    for combo in itertools.product(dset.names, repeat=len(layers)):
        placement = Placement(dict(zip([l.name for l in layers], combo)))
        if fits(layers, placement, dset):
            cost = profile.estimate_ms(layers, placement)
            best = min(best, (cost, combo)) if best else (cost, combo)
    return best


def test_min_cut_is_the_exhaustive_optimum_on_two_devices():
    rng = np.random.default_rng(0)
    dset = devices({"a": None, "b": None})
    for _ in range(20):
        costs = rng.uniform(0.1, 2.0, size=(7, 2))
        layers, profile = chain_profile(dset.names, costs)
        placement = S.min_cut(layers, dset, profile)
        cost, _ = exhaustive_best(layers, dset, profile)
        # a chain has one consumer per tensor, so the cut's edge costs are exact
        assert profile.estimate_ms(layers, placement) == pytest.approx(cost)


def test_dp_is_the_exhaustive_optimum_on_a_chain_with_three_devices():
    rng = np.random.default_rng(1)
    dset = devices({"a": None, "b": None, "c": None})
    for _ in range(10):
        costs = rng.uniform(0.1, 2.0, size=(6, 3))
        layers, profile = chain_profile(dset.names, costs, fixed=0.3)
        placement = S.dp_chain(layers, dset, profile)
        cost, _ = exhaustive_best(layers, dset, profile)
        assert profile.estimate_ms(layers, placement) == pytest.approx(cost)


def test_min_cut_respects_caps_by_repair():
    dset = devices({"a": None, "b": "150"})  # b holds at most one 100-byte parameter layer
    layers = [layer(f"L{i}", 100, 10, 10, preds=[f"L{i - 1}"] if i else [], index=i)
              for i in range(4)]
    profile = Profile("m", "d", {l.name: {"a": 1.0, "b": 0.1} for l in layers},
                      {("a", "b"): TransferFit(0.01, 0), ("b", "a"): TransferFit(0.01, 0)})
    placement = S.min_cut(layers, dset, profile)  # unconstrained optimum: all on b
    assert fits(layers, placement, dset)
    assert memory_use(layers, placement)["b"].param_bytes == 100


def test_single_device_random_and_mutate_are_feasible():
    dset = devices({"a": "350", "b": None})
    layers = [layer(f"L{i}", 100, 10, 10, index=i) for i in range(5)]
    singles = S.single_device(layers, dset)
    assert [p.devices_used for p in singles] == [["b"]]  # 500 bytes do not fit on a
    rng = np.random.default_rng(2)
    seen = set()
    for _ in range(50):
        placement = S.random_placement(layers, dset, rng)
        assert fits(layers, placement, dset)
        seen.add(placement)
        mutant = S.mutate(placement, layers, dset, rng)
        assert mutant is not None and mutant != placement and fits(layers, mutant, dset)
    assert len(seen) > 10
    assert S.random_placement(layers, devices({"a": "50", "b": "50"}), rng) is None


def test_repair_gives_up_when_nothing_fits():
    dset = devices({"a": "50", "b": "50"})
    layers = [layer("L0", 100, 10, 10)]
    assert S.repair(Placement({"L0": "a"}), layers, dset) is None


def shared(name, keys, index):
    """A layer reading the constants `keys` (100 bytes each), as an unrolled recurrent
    layer's steps read the same weights."""
    out = layer(name, 100 * len(keys), 10, 10, index=index)
    out.params = {key: 100 for key in keys}
    return out


def test_a_constant_several_layers_read_is_held_once_per_device():
    steps = [shared(f"S{i}", ["w", f"b{i}"], i) for i in range(4)]  # one weight, own biases
    dset = devices({"a": None, "b": None})
    assert memory_use(steps, Placement.all_on(steps, "a"))["a"].param_bytes == 100 + 4 * 100
    split = Placement({"S0": "a", "S1": "a", "S2": "b", "S3": "b"})
    use = memory_use(steps, split)
    assert use["a"].param_bytes == use["b"].param_bytes == 100 + 2 * 100  # w on each
    # 500 bytes of constants and a 20-byte peak fit a 520-byte cap, all on one device
    assert fits(steps, Placement.all_on(steps, "a"), devices({"a": "520"}))
    assert not fits(steps, Placement.all_on(steps, "a"), devices({"a": "519"}))
    # the greedy rule counts what a device does not hold yet: all four fit on "small"
    statuses = [DeviceStatus("big", gflops=1, memory_bytes=100, bandwidth_gbs=10),
                DeviceStatus("small", gflops=1, memory_bytes=520, bandwidth_gbs=10)]
    placement = S.greedy(steps, devices({"big": "100", "small": "520"}), statuses, WEIGHTS)
    assert {placement[step.name] for step in steps} == {"small"}
    assert S.devices_needed(steps, dset, [DeviceStatus("a", 1, 520, 10),
                                          DeviceStatus("b", 1, 520, 10)]) == 1


# ---------------------------------------------------------------------------------------------
# a small placement space listed whole when sampling it finds too few unseen placements


def _layer(name, params, index):
    """A layer of `params` bytes with 10-byte activations, at `index`."""
    return Layer(name, "other", ["op"], name, [TensorInfo((10,), "uint8")],
                 [TensorInfo((10,), "uint8")], 0.0, params, [], [], index)


def test_every_unseen_feasible_placement_of_a_small_space():
    layers = [_layer(f"L{i}", 100, i) for i in range(4)]
    dset = DeviceSet.parse(["a=cpu:0", "b=cpu:1"], memory={"a": "250"})
    feasible = [p for p in (Placement({l.name: d for l, d in zip(layers, choice)})
                            for choice in itertools.product("ab", repeat=4))
                if fits(layers, p, dset)]
    assert 0 < len(feasible) < 16  # the cap rules some out
    rng = np.random.default_rng(0)
    seen = set(feasible[:3])
    listed = S.unseen_placements(layers, dset, seen, 100, rng)
    assert sorted(map(str, listed)) == sorted(map(str, feasible[3:]))
    assert len(S.unseen_placements(layers, dset, seen, 2, rng)) == 2
    assert S.unseen_placements(layers, dset, set(feasible), 5, rng) == []
    # too large a space to list: nothing
    many = [_layer(f"M{i}", 1, i) for i in range(13)]
    assert S.unseen_placements(many, DeviceSet.parse(["a=cpu:0", "b=cpu:1"]), set(), 5,
                               rng) == []
