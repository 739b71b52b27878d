"""Reliability of the search under real failures: each candidate fault (a build that raises,
segfaults or hangs; a run worker that segfaults, aborts, hangs or raises; wrong outputs) is
injected by tvm_hetero.testing.faults into the real builder's and runner's worker processes
(through their f_build and f_run) during one tune. Each must be recorded with its error kind,
the tune must go on, and the winner must be a verified-correct placement. A placement over a
memory cap must be recorded without a build."""

import json
import os
import shutil

import numpy as np
import pytest

import tvm_hetero as th
from tvm_hetero.search.records import PlacementRecords
from tvm_hetero.measure import (BuildResult, ErrorKind, MeasureTask, Measurer, outputs_match,
                                placement_key)
from tvm_hetero.search import tune
from tvm_hetero.testing import FakeBuilder, FakeRunner
from tvm_hetero.testing.faults import (BUILD_FAULTS, EXPECTED, RUN_FAULTS, Fault, FaultPlan,
                                       FaultyBuilder, FaultyRunner)

# Builds of zoo:cnn take ~2 s in a fresh worker and runs ~0.3 s: the timeouts leave a wide
# margin for real candidates and bound what each hang costs. The tests of the faulty tune are
# `serial`: which candidates its timeouts end, and the hangs' messages, are wall-clock
# behaviour (a real build past 10 s on loaded cores would read as a fault).
BUILD_TIMEOUT_S = 10.0
RUN_TIMEOUT_S = 5.0
# Interleaved so that a build hang overlaps the other build worker's work
FAULT_ORDER = [Fault.BUILD_HANG, Fault.RUN_CRASH, Fault.BUILD_CRASH, Fault.RUN_HANG,
               Fault.BUILD_RAISE, Fault.RUN_ABORT, Fault.WRONG_ANSWER, Fault.RUN_RAISE]
GOOD_AFTER = 4  # verified candidates measured after the last fault
CAP = "160KiB"  # on cpu-generic: "all on cpu-generic" does not fit; 40 of 64 placements fit


def two_devices(placement):
    return len(placement.devices_used) == 2


@pytest.fixture(scope="module")
def faulty_tune(tmp_path_factory):
    """One tune of zoo:cnn where the first 8 two-device candidates each get one fault."""
    workdir = str(tmp_path_factory.mktemp("faults"))
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"], memory={"cpu-generic": CAP})
    plan = FaultPlan().in_order(FAULT_ORDER, eligible=two_devices)
    builder = FaultyBuilder(plan, n_parallel=2, timeout_s=BUILD_TIMEOUT_S)
    runner = FaultyRunner(plan, timeout_s=RUN_TIMEOUT_S, warmup=1, repeat=2, min_repeat_ms=5)
    trials = 1 + len(FAULT_ORDER) + GOOD_AFTER  # "all on cpu" is the only feasible seed
    acked = []
    result = tune("zoo:cnn", devices, trials=trials, strategy="random", batch_size=4,
                  workdir=workdir, seed=0, builder=builder, runner=runner, use_profile=False,
                  retime=0,  # the faults are the subject here, not the finalists' rounds
                  callback=lambda trial, best: acked.append(placement_key(trial.placement)))
    return dict(result=result, plan=plan, builder=builder, runner=runner, workdir=workdir,
                devices=devices, trials=trials, acked=acked)


def read_records(path):
    """Placement key -> (record dict), from the raw file; every line must parse once."""
    out = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            key = placement_key(th.Placement(record["placement"]))
            assert key not in out, "a placement was recorded twice"
            out[key] = record
    return out


@pytest.mark.serial
def test_every_fault_is_recorded_with_its_error_kind(faulty_tune):
    plan, result = faulty_tune["plan"], faulty_tune["result"]
    assert sorted(plan.injected.values()) == sorted(FAULT_ORDER)  # all 8 were injected
    records = read_records(result.records)
    for key, fault in plan.injected.items():
        recorded = records[key]["result"]
        assert recorded["error"] == EXPECTED[fault].value, (fault, recorded)
        assert recorded["latencies_ms"] == [] and recorded.get("message"), (fault, recorded)
    by_fault = {fault: records[key]["result"] for key, fault in plan.injected.items()}
    assert "injected build failure" in by_fault[Fault.BUILD_RAISE]["message"]
    assert "injected run failure" in by_fault[Fault.RUN_RAISE]["message"]
    for fault in (Fault.RUN_CRASH, Fault.RUN_ABORT):  # the worker died, not an exception
        assert "crashed" in by_fault[fault]["message"], by_fault[fault]
    assert f"{BUILD_TIMEOUT_S:g} s" in by_fault[Fault.BUILD_HANG]["message"]
    assert f"{RUN_TIMEOUT_S:g} s" in by_fault[Fault.RUN_HANG]["message"]
    assert by_fault[Fault.WRONG_ANSWER]["max_error"] > 0.5  # ran, and failed the check
    # a build fault never reached a run worker; a run fault was built, then run
    ran = set(faulty_tune["runner"].ran)
    for key, fault in plan.injected.items():
        assert (key in ran) == (fault in RUN_FAULTS), fault


@pytest.mark.serial
def test_the_tune_goes_on_and_the_rest_is_verified(faulty_tune):
    result, plan = faulty_tune["result"], faulty_tune["plan"]
    assert len(result.trials) == faulty_tune["trials"]
    assert faulty_tune["acked"] == [placement_key(t.placement) for t in result.trials]
    faulted = set(plan.injected)
    keys = [placement_key(t.placement) for t in result.trials]
    last_fault = max(i for i, k in enumerate(keys) if k in faulted)
    after = result.trials[last_fault + 1:]
    assert len(after) >= GOOD_AFTER - 1
    # after crashes, aborts and killed hangs the workers came back: the rest ran fine
    assert all(t.result.ok for t in after), [t.result.error for t in after]
    for trial in result.trials:
        key = placement_key(trial.placement)
        if key not in faulted and trial.result.error != ErrorKind.MEMORY_EXCEEDED:
            assert trial.result.ok and trial.result.max_error <= 1e-4, trial.result
    assert result.measured == faulty_tune["trials"]
    # every candidate was built once (the search never proposes one over the cap)
    built = faulty_tune["builder"].built
    assert sorted(built) == sorted(keys) and len(set(built)) == len(built)


@pytest.mark.serial
def test_the_winner_is_a_verified_correct_placement(faulty_tune):
    result, devices, workdir = (faulty_tune[k] for k in ("result", "devices", "workdir"))
    assert result.placement is not None and result.latency.ok
    assert placement_key(result.placement) not in faulty_tune["plan"].injected
    assert result.latency.median_ms == min(t.result.median_ms for t in result.trials)
    # rebuilt from scratch and checked against the task's reference outputs
    with np.load(os.path.join(workdir, "inputs.npz")) as data:
        inputs = {k: data[k] for k in data.files}
    with np.load(os.path.join(workdir, "reference.npz")) as data:
        reference = [data[f"arr_{i}"] for i in range(len(data.files))]
    outputs = th.build("zoo:cnn", result.placement, devices).run(inputs)
    ok, error = outputs_match(outputs, reference)
    assert ok and error <= 1e-4, error
    # and the records agree on the winner
    db = PlacementRecords(result.records, th.load_model("zoo:cnn").fingerprint(),
                          devices.fingerprint())
    best_placement, best_result = db.best()
    assert best_placement == result.placement and best_result.median_ms == result.latency.median_ms


@pytest.mark.serial
def test_over_the_memory_cap_is_recorded_without_a_build(faulty_tune, tmp_path):
    result, devices, workdir = (faulty_tune[k] for k in ("result", "devices", "workdir"))
    layers = th.extract_layers(th.load_model("zoo:cnn"))
    over = th.Placement.all_on(layers, "cpu-generic")
    assert placement_key(over) not in faulty_tune["builder"].built  # the search skips it
    # measured explicitly, next to a recorded candidate, with the tune's records
    records = str(tmp_path / "records.jsonl")
    shutil.copy(result.records, records)
    with np.load(os.path.join(workdir, "reference.npz")) as data:
        reference = [data[f"arr_{i}"] for i in range(len(data.files))]
    task = MeasureTask.create("zoo:cnn", devices, str(tmp_path / "task"), reference=reference)
    plan = FaultPlan()
    builder = FaultyBuilder(plan, n_parallel=1, timeout_s=BUILD_TIMEOUT_S)
    runner = FaultyRunner(plan, timeout_s=RUN_TIMEOUT_S)
    fingerprints = (task.model.fingerprint(), devices.fingerprint())
    measurer = Measurer(task, builder, runner, PlacementRecords(records, *fingerprints))
    got_over, got_best = measurer.measure([over, result.placement])
    assert got_over.error == ErrorKind.MEMORY_EXCEEDED and not got_over.ok
    assert "cpu-generic needs" in got_over.message and "cap 160" in got_over.message
    assert got_best.median_ms == result.latency.median_ms  # from the records
    assert builder.built == [] and runner.ran == [] and measurer.measured == 0
    recorded = read_records(records)[placement_key(over)]["result"]
    assert recorded["error"] == ErrorKind.MEMORY_EXCEEDED.value
    assert PlacementRecords(records, *fingerprints).get(over).error == ErrorKind.MEMORY_EXCEEDED


@pytest.mark.serial
def test_resuming_retries_no_failed_candidate(faulty_tune, tmp_path):
    """A failure is a result: the same records resume without building anything again."""
    result, devices = faulty_tune["result"], faulty_tune["devices"]
    builder = FakeBuilder()
    again = tune("zoo:cnn", devices, trials=faulty_tune["trials"], strategy="random",
                 batch_size=4, workdir=str(tmp_path), records=result.records, seed=0,
                 builder=builder, runner=FakeRunner(lambda p: 0.0), use_profile=False,
                 retime=0)
    assert builder.built == [] and again.measured == 0
    assert again.placement == result.placement
    assert [t.result.error for t in again.trials] == [t.result.error for t in result.trials]


def test_fault_plan_selection():
    layers = th.extract_layers(th.load_model("zoo:mlp"))
    a, b = th.Placement.all_on(layers, "cpu"), th.Placement.all_on(layers, "cpu-generic")
    mixed = th.Placement({l.name: ("cpu", "cpu-generic")[i % 2] for i, l in enumerate(layers)})
    plan = (FaultPlan().add(Fault.RUN_HANG, {placement_key(a)})
            .add("build_raise", lambda p: p.devices_used == ["cpu-generic"])
            .in_order([Fault.WRONG_ANSWER], eligible=two_devices))
    assert plan.fault_for(a) == Fault.RUN_HANG and plan.fault_for(b) == Fault.BUILD_RAISE
    assert plan.fault_for(mixed) == Fault.WRONG_ANSWER
    assert plan.fault_for(mixed) == Fault.WRONG_ANSWER  # remembered, not drawn again
    other = th.Placement({l.name: ("cpu-generic", "cpu")[i % 2] for i, l in enumerate(layers)})
    assert plan.fault_for(other) is None  # the in-order queue is used up
    assert set(EXPECTED) == set(Fault) == set(BUILD_FAULTS) | set(RUN_FAULTS)


def test_a_failed_build_is_not_run_with_a_fault(tmp_path):
    """A run fault on a placement whose build failed passes the build error through."""
    plan = FaultPlan().add(Fault.RUN_CRASH, lambda p: True)
    runner = FaultyRunner(plan, timeout_s=RUN_TIMEOUT_S)
    task = MeasureTask.__new__(MeasureTask)  # the runner must not touch the task
    layers = th.extract_layers(th.load_model("zoo:mlp"))
    build = BuildResult(None, ErrorKind.BUILD_ERROR, "no compiler",
                        placement=th.Placement.all_on(layers, "cpu"))
    (result,) = runner.run(task, [build])
    assert result.error == ErrorKind.BUILD_ERROR and result.message == "no compiler"
    assert plan.injected == {} and runner.ran == []
