import json

import numpy as np
import pytest

import tvm_hetero as th
from tvm_hetero.cost_model import Featurizer, XGBCostModel, XGBParams, feature_names
from tvm_hetero.profiles import profile_model
from tvm_hetero.search import STRATEGIES, tune
from tvm_hetero.testing import FakeBuilder, FakeRunner

from conftest import zoo


@pytest.fixture(scope="module")
def resnet_setup():
    """zoo:resnet with cpu-generic capped so that the fastest device alone does not fit."""
    model = zoo("resnet")
    layers = th.extract_layers(model)
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"], memory={"cpu-generic": "300KiB"})
    profile = profile_model(model, layers, devices)
    return model, layers, devices, profile


def fake(profile, layers):
    return FakeBuilder(), FakeRunner(lambda p: profile.estimate_ms(layers, p))


@pytest.mark.parametrize("strategy", STRATEGIES[:-1])
def test_every_strategy_finds_a_verified_feasible_placement(strategy, resnet_setup, tmp_path):
    model, layers, devices, profile = resnet_setup
    builder, runner = fake(profile, layers)
    result = tune(model, devices, trials=24, strategy=strategy, workdir=str(tmp_path),
                  builder=builder, runner=runner, seed=1)
    assert result.placement is not None and th.over_cap(layers, result.placement, devices) == []
    assert result.best_single[0] == "cpu"  # cpu-generic alone exceeds its cap
    assert result.latency.median_ms <= result.best_single[1].median_ms
    assert result.history == sorted(result.history, reverse=True)  # best so far never rises
    assert len(result.trials) <= 24 and result.measured == len(builder.built)


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
    model, layers, devices, profile = resnet_setup
    builder, runner = fake(profile, layers)
    result = tune(model, devices, trials=8, workdir=str(tmp_path), builder=builder,
                  runner=runner)
    sources = [t.source for t in result.trials]
    assert sources[0] == "min-cut"  # before each device alone (here the same as all-on-cpu)
    assert result.history[0] == result.trials[0].result.median_ms


def test_below_the_threshold_no_model_is_trained(resnet_setup, monkeypatch, tmp_path):
    model, layers, devices, profile = resnet_setup
    fits = []
    real_fit = XGBCostModel.fit

    def counting_fit(self, features, latencies):
        fits.append(len(latencies))
        return real_fit(self, features, latencies)

    monkeypatch.setattr(XGBCostModel, "fit", counting_fit)
    builder, runner = fake(profile, layers)
    below = tune(model, devices, trials=12, threshold=100, workdir=str(tmp_path / "a"),
                 builder=builder, runner=runner)
    assert fits == [] and not below.extra.get("model_trained")
    builder, runner = fake(profile, layers)
    above = tune(model, devices, trials=40, threshold=10, batch_size=6,
                 workdir=str(tmp_path / "b"), builder=builder, runner=runner)
    assert fits and min(fits) >= 10 and above.extra["model_trained"]
    saved = XGBCostModel.load(above.extra["cost_model"])
    assert saved.trained and len(saved.latencies) == max(fits)


def test_resume_from_records_measures_nothing_twice(resnet_setup, tmp_path):
    model, layers, devices, profile = resnet_setup
    records = str(tmp_path / "r.jsonl")
    builder, runner = fake(profile, layers)
    first = tune(model, devices, trials=20, records=records, workdir=str(tmp_path / "w"),
                 builder=builder, runner=runner, seed=3)
    builder2, runner2 = fake(profile, layers)
    again = tune(model, devices, trials=20, records=records, workdir=str(tmp_path / "w"),
                 builder=builder2, runner=runner2, seed=3)
    assert first.measured == 20 and again.measured == 0 and builder2.built == []
    assert again.placement == first.placement
    lines = open(records).read().splitlines()
    assert len(lines) == 20 and all(json.loads(line)["format"] == "tvm_hetero.record"
                                    for line in lines)


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


def test_features_are_documented_and_deterministic(resnet_setup):
    _, layers, devices, profile = resnet_setup
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


def test_real_tune_end_to_end(tmp_path):
    """The real builder and runner: every candidate built, verified and timed."""
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
    result = tune("zoo:cnn", devices, trials=10, threshold=4, batch_size=3,
                  workdir=str(tmp_path), seed=0)
    assert result.measured == 10 and all(t.result.ok for t in result.trials)
    assert result.latency.median_ms == min(t.result.median_ms for t in result.trials)
    compiled = th.build("zoo:cnn", result.placement, devices)
    assert compiled.run(zoo("cnn").random_inputs())[0].shape == (1, 10)
