import numpy as np
import pytest

import tvm_hetero as th
from tvm_hetero.search.records import PlacementRecords
from tvm_hetero.measure import (BuildResult, ErrorKind, LocalBuilder, LocalRunner, MeasureTask,
                                Measurer, outputs_match, placement_key, tolerance_for)
from tvm_hetero.testing import FakeBuilder, FakeRunner


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
    return MeasureTask.create("zoo:cnn", devices, str(tmp_path_factory.mktemp("task")))


def alternating(task, offset=0):
    names = task.devices.names
    return th.Placement({l.name: names[(i + offset) % 2] for i, l in enumerate(task.layers)})


class CountingBuilder(LocalBuilder):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0

    def build(self, task, placements):
        self.count += len(placements)
        return super().build(task, placements)


def test_build_run_verify_record_and_resume(task, tmp_path):
    db = PlacementRecords(tmp_path / "r.jsonl", task.model.fingerprint(),
                          task.devices.fingerprint())
    builder = CountingBuilder(n_parallel=2, timeout_s=300)
    measurer = Measurer(task, builder, LocalRunner(repeat=3), db)
    placements = [th.Placement.all_on(task.layers, "cpu"), alternating(task), alternating(task, 1)]
    results = measurer.measure(placements + [placements[1]])  # a duplicate in the batch
    assert builder.count == 3
    assert all(r.ok and r.median_ms > 0 and r.build_s > 0 and r.max_error < 1e-4
               for r in results)
    assert results[3] is results[1]
    # resume: the same records file, nothing measured twice
    resumed = Measurer(task, builder, LocalRunner(),
                       PlacementRecords(tmp_path / "r.jsonl", task.model.fingerprint(),
                                task.devices.fingerprint()))
    again = resumed.measure(placements)
    assert builder.count == 3 and resumed.measured == 0
    assert [r.median_ms for r in again] == [r.median_ms for r in results[:3]]


@pytest.mark.serial  # which candidate is slower is measured
def test_slow_candidates_are_screened_with_one_timed_call(task):
    builds = LocalBuilder(n_parallel=1, timeout_s=300).build(
        task, [th.Placement.all_on(task.layers, "cpu"), alternating(task)])
    assert all(b.artifact for b in builds)
    # screen=1, no floor: once a median is known, a candidate whose (cold) checking call is
    # slower than it gets one timed call; it is still verified
    runner = LocalRunner(repeat=4, screen=1.0, screen_floor_ms=0.0)
    first, second = runner.run(task, builds)
    assert first.ok and len(first.latencies_ms) == 4
    assert second.ok and len(second.latencies_ms) == 1 and second.max_error < 1e-4
    (unscreened,) = LocalRunner(repeat=4, screen=None).run(task, builds[1:])
    assert len(unscreened.latencies_ms) == 4
    # the default floor (100 ms) keeps fast candidates fully timed
    default = LocalRunner(repeat=4)
    assert [len(r.latencies_ms) for r in default.run(task, builds)] == [4, 4]
    with pytest.raises(ValueError, match="screen must be >= 1"):
        LocalRunner(screen=0.5)


def test_memory_cap_is_recorded_without_building(tmp_path):
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"], memory={"cpu-generic": "10KiB"})
    capped = MeasureTask.create("zoo:mlp", devices, str(tmp_path))
    builder = FakeBuilder()
    measurer = Measurer(capped, builder, FakeRunner(lambda p: 1.0))
    (result,) = measurer.measure([th.Placement.all_on(capped.layers, "cpu-generic")])
    assert result.error == ErrorKind.MEMORY_EXCEEDED and "cpu-generic needs" in result.message
    assert builder.built == []


@pytest.mark.serial  # a run must outlast its timeout
def test_build_timeout_and_run_timeout_are_results(task):
    (slow_build,) = LocalBuilder(n_parallel=1, timeout_s=0.2).build(task, [alternating(task)])
    assert slow_build.error == ErrorKind.BUILD_TIMEOUT
    (built,) = LocalBuilder(n_parallel=1).build(task, [alternating(task)])
    (slow_run,) = LocalRunner(timeout_s=0.2).run(task, [built])
    assert slow_run.error == ErrorKind.RUN_TIMEOUT and not slow_run.ok
    assert slow_run.median_ms == float("inf")


def test_wrong_answer_and_broken_library(task, tmp_path):
    (built,) = LocalBuilder(n_parallel=1).build(task, [alternating(task)])
    wrong_task = MeasureTask(**{**task.__dict__, "reference_file": str(tmp_path / "bad.npz")})
    np.savez(wrong_task.reference_file, *(r + 1.0 for r in task.reference))
    runner = LocalRunner(repeat=1)
    (wrong,) = runner.run(wrong_task, [built])
    assert wrong.error == ErrorKind.WRONG_ANSWER and wrong.max_error > 1e-3
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"\x7fELF garbage")
    (crashed,) = runner.run(task, [BuildResult(str(broken))])
    assert crashed.error == ErrorKind.RUN_ERROR and crashed.message


def test_failed_builds_pass_through_the_runner(task):
    placement = alternating(task)
    builder = FakeBuilder(fail={placement_key(placement): ErrorKind.BUILD_ERROR})
    measurer = Measurer(task, builder, FakeRunner(lambda p: 1.0))
    (result,) = measurer.measure([placement])
    assert result.error == ErrorKind.BUILD_ERROR and not result.ok


def test_tolerances():
    assert tolerance_for("float32") == 1e-4 and tolerance_for("int64") == 0.0
    a = [np.ones(4, np.float32)]
    assert outputs_match([a[0] * (1 + 5e-5)], a)[0]
    assert not outputs_match([a[0] * (1 + 5e-4)], a)[0]
    assert not outputs_match([np.ones(3, np.float32)], a)[0]
    assert not outputs_match([a[0].astype(np.float64)], a)[0]
    assert not outputs_match([np.full(4, np.nan, np.float32)], a)[0]
    ints = [np.arange(4)]
    assert outputs_match([np.arange(4)], ints)[0] and not outputs_match([np.arange(4) + 1], ints)[0]


def test_the_builder_builds_with_its_f_build(task):
    """f_build runs in the worker (a nested function travels by value): what it returns is
    the build, what it raises is the candidate's build error."""
    def build_stub(model_file, input_shapes, devices_json, assignment, out_path):
        with open(out_path, "wb") as handle:
            handle.write(model_file.encode())
        return 0.25

    def build_fails(*args):
        raise th.BuildError("no compiler for this target\nat the end")

    placement = alternating(task)
    (built,) = LocalBuilder(n_parallel=1, f_build=build_stub).build(task, [placement])
    assert built.error == ErrorKind.NONE and built.build_s == 0.25
    with open(built.artifact, "rb") as handle:
        assert handle.read() == task.model_file.encode()
    (failed,) = LocalBuilder(n_parallel=1, f_build=build_fails).build(task, [placement])
    assert failed.error == ErrorKind.BUILD_ERROR and failed.artifact is None
    # the worker's exception comes back re-raised, its text ahead of the message's last line
    assert failed.message.startswith("BuildError: ")
    assert failed.message.endswith("BuildError: no compiler for this target")


def test_the_runner_runs_with_its_f_run(task, tmp_path):
    """f_run's dict is the measurement; what it raises is the candidate's run error."""
    files = (task.inputs_file, task.reference_file)

    def run_stub(lib_path, devices_json, inputs_file, reference_file, *timing):
        assert (inputs_file, reference_file) == files
        return {"ok": True, "max_error": 0.0, "latencies_ms": [3.0, 1.0, 2.0]}

    def run_fails(*args):
        raise ValueError("cannot load the library")

    build = BuildResult(str(tmp_path / "never_loaded.so"))
    (result,) = LocalRunner(f_run=run_stub).run(task, [build])
    assert result.ok and result.median_ms == 2.0
    (failed,) = LocalRunner(f_run=run_fails).run(task, [build])
    assert failed.error == ErrorKind.RUN_ERROR
    assert failed.message.startswith("ValueError: ")
    assert failed.message.endswith("cannot load the library")
