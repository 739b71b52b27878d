"""A small placement space listed whole when sampling it finds too few unseen placements."""

import itertools

import numpy as np

from tvm_hetero import DeviceSet, Placement
from tvm_hetero.build.memory import fits
from tvm_hetero.layers.extract import Layer, TensorInfo
from tvm_hetero.search import candidates as S


def _layer(name, params, index):
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
