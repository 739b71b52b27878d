import json
import os

import numpy as np
import pytest

import tvm_hetero as th
from tvm_hetero.search import candidates
from tvm_hetero.cost_model import Featurizer, XGBCostModel, XGBParams, feature_names
from tvm_hetero.search.records import PlacementRecords
from tvm_hetero.measure import ErrorKind, MeasureResult, MeasureTask, Measurer
from tvm_hetero.measure.profiles import Profile, TransferFit
from tvm_hetero.search import STRATEGIES, tune
from tvm_hetero.measure.status import DeviceStatus
from tvm_hetero.testing import FakeBuilder, FakeRunner

from tests.helpers.models import zoo


@pytest.fixture(autouse=True)
def no_reference_build(monkeypatch):
    """Tasks without the reference build: the fake runners here never compare outputs."""
    real = MeasureTask.create.__func__

    def create(cls, model, devices, workdir, seed=0, reference=None):
        return real(cls, model, devices, workdir, seed, [np.zeros(1, "float32")])

    monkeypatch.setattr(MeasureTask, "create", classmethod(create))


def layer_costs(layers):
    """Per-layer costs (ms): convolutions 3x faster on cpu, the other layers 3x faster on
    cpu-generic (contrived, so that splitting pays)."""
    return {layer.name: {"cpu": 1.0, "cpu-generic": 3.0} if layer.kind == "conv2d"
            else {"cpu": 0.6, "cpu-generic": 0.2} for layer in layers}


def write_profile(workdir, model, layers, devices, costs, fixed_ms=0.05, ms_per_byte=1e-7):
    """A profile of given costs where `tune` looks for one (nothing is profiled)."""
    os.makedirs(workdir, exist_ok=True)
    transfer = {(a, b): TransferFit(fixed_ms, ms_per_byte)
                for a in devices.names for b in devices.names if a != b}
    profile = Profile(model.fingerprint(), devices.fingerprint(), costs, transfer)
    profile.save(os.path.join(workdir, "profile.json"))
    return profile


def write_status(workdir, devices, gflops=None):
    """Device statuses where `tune` looks for them (nothing is probed); equal by default."""
    os.makedirs(workdir, exist_ok=True)
    statuses = [{"name": name, "gflops": (gflops or {}).get(name, 50.0),
                 "memory_bytes": 1 << 34, "bandwidth_gbs": 10.0}
                for name in devices.names]
    with open(os.path.join(workdir, "status.json"), "w", encoding="utf-8") as handle:
        json.dump({"devices": devices.fingerprint(), "statuses": statuses}, handle)


def true_cost(layers, pair=None, interaction_ms=1.5):
    """The measured latency of the fake machine: the layer costs, 0.3 ms per copy, and, when
    `pair` names two layers, `interaction_ms` more whenever they share a device: a term that no
    feature and no profile sees."""
    costs = layer_costs(layers)

    def cost(placement):
        total = sum(costs[l.name][placement[l.name]] for l in layers)
        copies = {(p, placement[l.name]) for l in layers for p in l.predecessors
                  if placement[p] != placement[l.name]}
        total += 0.3 * len(copies)
        if pair and placement[pair[0]] == placement[pair[1]]:
            total += interaction_ms
        return total
    return cost


@pytest.fixture(scope="module")
def resnet_setup():
    """zoo:resnet with cpu-generic capped so that the fastest device alone does not fit."""
    model = zoo("resnet")
    layers = th.extract_layers(model)
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"], memory={"cpu-generic": "300KiB"})
    return model, layers, devices


def prepared(tmp_path, model, layers, devices, name="w"):
    workdir = str(tmp_path / name)
    profile = write_profile(workdir, model, layers, devices, layer_costs(layers))
    write_status(workdir, devices)
    return workdir, profile


@pytest.mark.parametrize("strategy", STRATEGIES[:-1])
def test_every_strategy_finds_a_verified_feasible_placement(strategy, resnet_setup, tmp_path):
    model, layers, devices = resnet_setup
    workdir, _ = prepared(tmp_path, model, layers, devices)
    cost = true_cost(layers)
    builder = FakeBuilder()
    result = tune(model, devices, trials=24, strategy=strategy, workdir=workdir,
                  builder=builder, runner=FakeRunner(cost), seed=1)
    assert result.placement is not None and th.over_cap(layers, result.placement, devices) == []
    assert result.latency.median_ms == pytest.approx(cost(result.placement))
    assert result.best_single[0] == "cpu"  # cpu-generic alone exceeds its cap
    assert len(result.trials) <= 24
    assert len(builder.built) == result.measured + len(result.retimed)


def test_xgb_beats_random_when_the_cost_has_a_term_no_feature_sees(tmp_path):
    """The latency has an interaction between two layers' devices that no feature sees, and
    no profile gives the model the layer costs: what xgb finds it learnt from the measurements.
    Over several seeds, at the same budget, it finds faster placements than random sampling."""
    model = zoo("resnet")
    layers = th.extract_layers(model)
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
    convs = [l.name for l in layers if l.kind == "conv2d"]
    cost = true_cost(layers, pair=(convs[1], convs[5]))
    found = {"xgb": [], "random": []}
    for seed in range(5):
        for strategy in found:
            workdir = str(tmp_path / f"{strategy}{seed}")
            write_status(workdir, devices)
            result = tune(model, devices, trials=32, strategy=strategy, workdir=workdir,
                          threshold=8, batch_size=8, builder=FakeBuilder(),
                          runner=FakeRunner(cost), use_profile=False, seed=seed, retime=0)
            assert len(result.trials) == 32
            found[strategy].append(result.latency.median_ms)
            if strategy == "xgb":  # found by the model's ranking, not by a seed
                best = min(result.trials, key=lambda t: t.result.median_ms)
                assert best.source == "xgb", (seed, best.source)
    wins = sum(x < r for x, r in zip(found["xgb"], found["random"]))
    assert wins >= 4 and np.mean(found["xgb"]) < np.mean(found["random"]), found


def test_the_best_single_device_is_found_by_placement_whatever_proposed_it(tmp_path):
    """The min-cut puts every layer on cpu: the single-device seed for cpu is then a
    duplicate, and the best single device is still cpu, the speedup 1.00x."""
    model = zoo("resnet")
    layers = th.extract_layers(model)
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
    workdir = str(tmp_path / "w")
    costs = {l.name: {"cpu": 1.0, "cpu-generic": 3.0} for l in layers}
    profile = write_profile(workdir, model, layers, devices, costs)
    result = tune(model, devices, trials=4, strategy="mincut", workdir=workdir,
                  builder=FakeBuilder(), runner=FakeRunner(lambda p: profile.estimate_ms(
                      layers, p)))
    assert result.trials[0].source == "min-cut"
    assert result.trials[0].placement == th.Placement.all_on(layers, "cpu")
    assert result.best_single[0] == "cpu" and result.speedup == pytest.approx(1.0)
    assert result.to_json()["best_single_device"]["device"] == "cpu"


def test_the_winner_is_declared_from_alternating_rounds(tmp_path):
    """A candidate timed once at a lucky moment does not win: the finalists are timed again,
    alternately, and the winner, the best single device and the speedup come from those
    rounds, recorded beside the first figures."""
    model = zoo("mlp")
    layers = th.extract_layers(model)
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
    lucky = th.Placement({l.name: ("cpu", "cpu-generic", "cpu")[i] for i, l in
                          enumerate(layers)})
    calls = {}

    def cost(placement):
        calls[placement] = calls.get(placement, 0) + 1
        if placement == lucky:
            return 0.5 if calls[placement] == 1 else 2.0  # only its first run is fast
        return {"cpu": 1.0, "cpu-generic": 1.5}[placement[layers[0].name]] + \
            0.1 * len(placement.devices_used)

    records = str(tmp_path / "r.jsonl")
    builder = FakeBuilder()
    result = tune(model, devices, trials=8, strategy="exhaustive", records=records,
                  builder=builder, runner=FakeRunner(cost), use_profile=False,
                  retime=3, retime_rounds=4)
    assert result.placement == th.Placement.all_on(layers, "cpu")
    assert result.latency.median_ms == 1.1 and result.latency.rounds_ms == [1.1] * 4
    assert result.best_single[0] == "cpu" and result.speedup == pytest.approx(1.0)
    retimed = {p: again for p, _, again in result.retimed}
    assert lucky in retimed and retimed[lucky].rounds_ms == [2.0] * 4
    # the best three and each device alone (all on cpu is among the three)
    assert len(retimed) == 4 and th.Placement.all_on(layers, "cpu-generic") in retimed
    lines = [json.loads(line) for line in open(records)]
    assert len(lines) == 8 + 4  # the first figures stay in the file
    again = [line for line in lines if line["tags"]["source"] == "retime"]
    assert len(again) == 4 and len({line["tags"]["retime"] for line in again}) == 1
    assert result.to_json()["retimed"][0]["rounds_ms"]
    # compile --records and report take the re-timed figures
    database = PlacementRecords(records, model.fingerprint(), devices.fingerprint())
    best_placement, best_result = database.best()
    assert best_placement == result.placement and best_result.rounds_ms == [1.1] * 4
    assert database.get(lucky).median_ms == 0.5  # the search's own figure, kept
    # resumed: the same search, the same finalists, their re-timing reused: nothing is built
    builder = FakeBuilder()
    resumed = tune(model, devices, trials=8, strategy="exhaustive", records=records,
                   builder=builder, runner=FakeRunner(cost), use_profile=False,
                   retime=3, retime_rounds=4)
    assert resumed.measured == 0 and builder.built == []
    assert resumed.placement == result.placement and resumed.latency.median_ms == 1.1
    assert [t.result.median_ms for t in resumed.trials] == \
        [t.result.median_ms for t in result.trials]


def test_a_re_timing_that_crashed_is_not_recorded_over_the_measurements(tmp_path, caplog):
    model = zoo("mlp")
    layers = th.extract_layers(model)

    class CrashingRetime(FakeRunner):
        def retime(self, task, builds, rounds):
            return [MeasureResult(ErrorKind.RUN_ERROR, message="worker crashed") for _ in builds]

    records = str(tmp_path / "r.jsonl")
    cost = true_cost(layers)
    result = tune(model, ["cpu", "cpu-generic"], trials=8, strategy="exhaustive",
                  records=records, builder=FakeBuilder(), runner=CrashingRetime(cost),
                  use_profile=False)
    assert "failed when re-timed (worker crashed)" in caplog.text
    assert result.latency.median_ms == min(cost(t.placement) for t in result.trials)
    assert len(open(records).read().splitlines()) == 8  # nothing recorded over them


def test_memory_caps_are_checked_afresh_when_records_are_reused(tmp_path):
    """Records do not depend on caps: a memory_exceeded verdict recorded under a cap is
    measured when the cap is lifted, and a figure recorded without a cap is not reused when
    a cap now forbids the placement."""
    model = zoo("mlp")
    layers = th.extract_layers(model)
    capped = th.DeviceSet.parse(["cpu", "cpu-generic"], memory={"cpu-generic": "64KiB"})
    free = th.DeviceSet.parse(["cpu", "cpu-generic"])
    assert capped.fingerprint() == free.fingerprint()
    on_generic = th.Placement.all_on(layers, "cpu-generic")
    records = str(tmp_path / "r.jsonl")

    def measurer(devices):
        task = MeasureTask.create(model, devices, str(tmp_path / "w"))
        database = PlacementRecords(records, model.fingerprint(), devices.fingerprint())
        builder = FakeBuilder()
        return Measurer(task, builder, FakeRunner(lambda p: 1.0), database), builder

    first, _ = measurer(capped)
    assert first.measure([on_generic])[0].error == ErrorKind.MEMORY_EXCEEDED
    second, builder = measurer(free)
    assert second.measure([on_generic])[0].ok and builder.built == [on_generic]
    third, builder = measurer(capped)
    assert third.measure([on_generic])[0].error == ErrorKind.MEMORY_EXCEEDED
    assert builder.built == []
    assert PlacementRecords(records, model.fingerprint(), free.fingerprint()).best(layers, capped) \
        is None


def test_the_greedy_seed_uses_the_fewest_devices_that_hold_the_model(tmp_path, monkeypatch):
    model = zoo("mlp")  # about 1 MiB of weights
    limits = []
    real = candidates.greedy

    def spy(*args, max_devices=None, **kwargs):
        limits.append(max_devices)
        return real(*args, max_devices=max_devices, **kwargs)

    monkeypatch.setattr(candidates, "greedy", spy)
    both_capped = {"cpu": "700KiB", "cpu-generic": "700KiB"}
    for index, (caps, given, expected) in enumerate([({}, None, 1), (both_capped, None, 2),
                                                     ({}, 2, 2)]):
        devices = th.DeviceSet.parse(["cpu", "cpu-generic"], memory=caps)
        workdir = str(tmp_path / f"w{index}")
        write_status(workdir, devices, gflops={"cpu": 100.0})
        limits.clear()
        result = tune(model, devices, trials=3, strategy="greedy", workdir=workdir,
                      builder=FakeBuilder(), runner=FakeRunner(lambda p: 1.0),
                      max_devices=given)
        assert limits == [expected], (caps, given, limits)
        greedy = [t for t in result.trials if t.source == "greedy"]
        assert not greedy or len(greedy[0].placement.devices_used) <= expected
    with pytest.raises(th.HeteroError, match="max devices must be between 1 and the 2"):
        tune(model, ["cpu", "cpu-generic"], strategy="greedy", max_devices=3)


def test_devices_needed_counts_capacity_by_score():
    model = zoo("mlp")
    layers = th.extract_layers(model)
    need = sum(l.param_bytes for l in layers) + max(
        l.activation_bytes_in + l.activation_bytes_out for l in layers)
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"],
                                 memory={"cpu": need - 1, "cpu-generic": need})

    def statuses(cpu_score, generic_score):
        return [DeviceStatus("cpu", 1, need - 1, 1, True, cpu_score),
                DeviceStatus("cpu-generic", 1, need, 1, True, generic_score)]

    assert candidates.devices_needed(layers, devices, statuses(0.9, 0.5)) == 2  # cpu first
    assert candidates.devices_needed(layers, devices, statuses(0.5, 0.9)) == 1
    tiny = devices.with_memory_caps({"cpu": 1, "cpu-generic": 1})
    assert candidates.devices_needed(layers, tiny, statuses(0.5, 0.9)) == 2  # all, not enough


def test_exhaustive_is_the_ground_truth():
    model = zoo("mlp")  # 3 layers: 8 placements on two devices
    layers = th.extract_layers(model)
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
    costs = {"cpu": [3.0, 1.0, 1.0], "cpu-generic": [1.0, 2.0, 0.5]}

    def cost(placement):
        return sum(costs[placement[l.name]][i] for i, l in enumerate(layers))

    result = tune(model, devices, trials=1, strategy="exhaustive", builder=FakeBuilder(),
                  runner=FakeRunner(cost), use_profile=False)
    assert len(result.trials) == 8
    assert result.latency.median_ms == pytest.approx(1.0 + 1.0 + 0.5)
    assert [result.placement[l.name] for l in layers] == ["cpu-generic", "cpu", "cpu-generic"]


def test_the_profiles_best_guesses_are_measured_first(resnet_setup, tmp_path):
    model, layers, devices = resnet_setup
    workdir, profile = prepared(tmp_path, model, layers, devices)
    result = tune(model, devices, trials=8, workdir=workdir, builder=FakeBuilder(),
                  runner=FakeRunner(true_cost(layers)))
    sources = [t.source for t in result.trials]
    assert sources[0] == "min-cut"
    assert result.trials[0].placement == candidates.min_cut(layers, devices, profile)
    assert result.history[0] == result.trials[0].result.median_ms


def test_below_the_threshold_no_model_is_trained(resnet_setup, monkeypatch, tmp_path):
    model, layers, devices = resnet_setup
    fits = []
    real_fit = XGBCostModel.fit

    def counting_fit(self, features, latencies):
        fits.append(len(latencies))
        return real_fit(self, features, latencies)

    monkeypatch.setattr(XGBCostModel, "fit", counting_fit)
    cost = true_cost(layers)
    workdir, _ = prepared(tmp_path, model, layers, devices, "a")
    below = tune(model, devices, trials=12, threshold=100, workdir=workdir,
                 builder=FakeBuilder(), runner=FakeRunner(cost))
    assert fits == [] and not below.extra.get("model_trained")
    workdir, _ = prepared(tmp_path, model, layers, devices, "b")
    above = tune(model, devices, trials=40, threshold=10, batch_size=6, workdir=workdir,
                 builder=FakeBuilder(), runner=FakeRunner(cost))
    assert fits and min(fits) >= 10 and above.extra["model_trained"]
    saved = XGBCostModel.load(above.extra["cost_model"])
    assert saved.trained and len(saved.latencies) == max(fits)


def test_a_threshold_below_the_cost_models_minimum_is_refused():
    with pytest.raises(th.HeteroError, match="threshold 4 is below the cost model's minimum "
                                             "of 8 training samples"):
        tune("zoo:mlp", ["cpu"], threshold=4)
    with pytest.raises(th.HeteroError, match="minimum of 5"):
        tune("zoo:mlp", ["cpu"], threshold=4,
             cost_model_params=XGBParams(num_warmup_samples=5))


def test_resume_from_records_measures_nothing_twice(resnet_setup, tmp_path):
    model, layers, devices = resnet_setup
    records = str(tmp_path / "r.jsonl")
    workdir, _ = prepared(tmp_path, model, layers, devices)
    cost = true_cost(layers)
    builder = FakeBuilder()
    first = tune(model, devices, trials=20, records=records, workdir=workdir,
                 builder=builder, runner=FakeRunner(cost), seed=3)
    builder2 = FakeBuilder()
    again = tune(model, devices, trials=20, records=records, workdir=workdir,
                 builder=builder2, runner=FakeRunner(cost), seed=3)
    assert first.measured == 20 and again.measured == 0 and builder2.built == []
    assert again.placement == first.placement
    lines = [json.loads(line) for line in open(records).read().splitlines()]
    assert all(line["format"] == "tvm_hetero.record" for line in lines)
    assert len([line for line in lines if line["tags"]["source"] != "retime"]) == 20


def test_cost_model_save_load_round_trip_before_and_after_training(tmp_path):
    rng = np.random.default_rng(0)
    features = rng.random((30, 5))
    latencies = np.exp(features @ np.array([1.0, -2.0, 0.5, 0.0, 3.0]))
    untrained = XGBCostModel(XGBParams(num_warmup_samples=50))
    untrained.fit(features, latencies)
    path = str(tmp_path / "m.json")
    untrained.save(path)
    loaded = XGBCostModel.load(path)
    assert not loaded.trained and len(loaded.latencies) == 30
    assert loaded.predict(features).shape == (30,)  # random scores until trained
    for objective in ("reg", "rank"):
        model = XGBCostModel(XGBParams(objective=objective, num_warmup_samples=8))
        model.fit(features, latencies)
        model.save(path)
        again = XGBCostModel.load(path)
        np.testing.assert_allclose(again.predict(features), model.predict(features))
        # higher score = faster: the ranking follows the latencies
        corr = np.corrcoef(model.predict(features), -np.log(latencies))[0, 1]
        assert corr > 0.8, (objective, corr)


def test_features_are_documented_and_deterministic(resnet_setup, tmp_path):
    model, layers, devices = resnet_setup
    _, profile = prepared(tmp_path, model, layers, devices)
    featurize = Featurizer(layers, devices.names, profile)
    placement = th.Placement({l.name: devices.names[i % 2] for i, l in enumerate(layers)})
    row = featurize([placement])[0]
    assert len(row) == len(feature_names(devices.names)) == len(featurize.names)
    np.testing.assert_array_equal(row, featurize([placement])[0])
    named = dict(zip(featurize.names, row))
    assert named["devices_used"] == 2
    assert named["estimate_ms"] == pytest.approx(np.log(profile.estimate_ms(layers, placement)))
    one = dict(zip(featurize.names, featurize([th.Placement.all_on(layers, "cpu")])[0]))
    assert one["copies[cpu][cpu-generic]"] == 0 and one["layers[cpu]"] == 1.0


def test_bad_arguments():
    with pytest.raises(th.HeteroError, match="unknown strategy"):
        tune("zoo:mlp", ["cpu"], strategy="annealing")
    with pytest.raises(th.HeteroError, match="trials"):
        tune("zoo:mlp", ["cpu"], trials=0)
    with pytest.raises(th.HeteroError, match="retime"):
        tune("zoo:mlp", ["cpu"], retime=-1)


@pytest.mark.slow
def test_real_tune_end_to_end(tmp_path, monkeypatch):
    """The real builder and runner: every candidate built, verified and timed, the finalists
    re-timed alternately in one worker process."""
    monkeypatch.undo()  # the real reference build
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
    result = tune("zoo:cnn", devices, trials=10, threshold=8, batch_size=3,
                  workdir=str(tmp_path), seed=0, retime_rounds=3)
    assert result.measured == 10 and all(t.result.ok for t in result.trials)
    assert result.retimed and all(again.ok and len(again.rounds_ms) == 3
                                  for _, _, again in result.retimed)
    assert result.latency.median_ms == min(again.median_ms for _, _, again in result.retimed)
    assert result.best_single[1].median_ms == min(
        again.median_ms for p, _, again in result.retimed if len(p.devices_used) == 1)
    compiled = th.build("zoo:cnn", result.placement, devices)
    assert compiled.run(zoo("cnn").random_inputs())[0].shape == (1, 10)


def test_strategies_are_created_by_name():
    from tvm_hetero.search import create

    assert [create(name).name for name in STRATEGIES] == list(STRATEGIES)
    assert create("xgb", threshold=12).threshold == 12
    with pytest.raises(th.HeteroError, match="unknown strategy 'annealing'"):
        create("annealing")
