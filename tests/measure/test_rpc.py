"""RPCRunner end to end: a real TVM RPC tracker and two RPC servers on loopback."""

import dataclasses
import socket
import time

import numpy as np
import pytest

import tvm_hetero as th
from tvm_hetero.measure import BuildResult, ErrorKind, LocalBuilder, MeasureTask
from tvm_hetero.measure.rpc import RPCRunner, tracker_summary

KEY = "tvm_hetero-test"
LOOPBACK = "127.0.0.1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def tracker_port():
    """A tracker and two servers under KEY, all listening on loopback only."""
    pytest.importorskip("tornado", reason="the TVM RPC tracker needs tornado")
    from tvm.rpc.server import Server
    from tvm.rpc.tracker import Tracker

    start = _free_port()  # each scans upward from a free port for one it can bind
    tracker = Tracker(host=LOOPBACK, port=start, port_end=start + 100, silent=True)
    servers = []
    try:
        for _ in range(2):
            start = _free_port()
            servers.append(Server(host=LOOPBACK, port=start, port_end=start + 100,
                                  tracker_addr=(LOOPBACK, tracker.port), key=KEY, silent=True))
        deadline = time.monotonic() + 30
        while True:  # the servers register with the tracker asynchronously
            info = tracker_summary(LOOPBACK, tracker.port)["server_info"]
            if sum(item["key"] == "server:" + KEY for item in info) == 2:
                break
            assert time.monotonic() < deadline, f"servers did not register: {info}"
            time.sleep(0.1)
        yield tracker.port
    finally:
        for server in servers:  # servers first: they reconnect to a vanished tracker for 60 s
            server.terminate()
        tracker.terminate()


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return MeasureTask.create("zoo:cnn", th.DeviceSet.parse(["cpu", "cpu-generic"]),
                              str(tmp_path_factory.mktemp("rpc")))


@pytest.fixture(scope="module")
def builds(task):
    names = [layer.name for layer in task.layers]
    placements = [
        th.Placement.all_on(task.layers, "cpu"),
        th.Placement.all_on(task.layers, "cpu-generic"),
        th.Placement({name: ("cpu", "cpu-generic")[i % 2] for i, name in enumerate(names)}),
    ]
    out = LocalBuilder(n_parallel=2).build(task, placements)
    assert all(b.error == ErrorKind.NONE for b in out), [b.message for b in out]
    return out


def _runner(port, **kwargs):
    options = {"session_timeout_s": 60, "warmup": 1, "repeat": 3, "min_repeat_ms": 10, **kwargs}
    return RPCRunner(KEY, LOOPBACK, port, **options)


@pytest.mark.serial  # a measured latency under a bound
def test_measures_placements_on_remote_servers(tracker_port, task, builds):
    failed = BuildResult(None, ErrorKind.BUILD_ERROR, "BuildError: boom", build_s=0.5)
    results = _runner(tracker_port).run(task, [*builds, failed])
    assert len(results) == len(builds) + 1
    for result in results[:-1]:
        assert result.ok, result.message
        assert result.error == ErrorKind.NONE
        assert len(result.latencies_ms) == 3
        assert all(np.isfinite(x) and x > 0 for x in result.latencies_ms)
        assert 0 < result.median_ms < 1000
        assert result.max_error <= 1e-4
        assert result.run_s > 0
    # a failed build passes through with its error, unmeasured
    assert results[-1].error == ErrorKind.BUILD_ERROR
    assert results[-1].message == "BuildError: boom" and results[-1].build_s == 0.5
    assert not results[-1].latencies_ms


def test_wrong_answer(tracker_port, task, builds, tmp_path):
    wrong = str(tmp_path / "wrong.npz")
    np.savez(wrong, *[ref + 1.0 for ref in task.reference])
    (result,) = _runner(tracker_port).run(dataclasses.replace(task, reference_file=wrong),
                                          builds[2:])
    assert result.error == ErrorKind.WRONG_ANSWER
    assert result.max_error > 1e-4 and not result.latencies_ms
    assert "relative error" in result.message


def test_remote_load_error(tracker_port, task, tmp_path):
    bogus = tmp_path / "bogus.so"
    bogus.write_bytes(b"not a shared library")
    (result,) = _runner(tracker_port).run(task, [BuildResult(str(bogus))])
    assert result.error == ErrorKind.RUN_ERROR
    assert result.message and "\n" not in result.message


def _assert_fast_failures(runner, task, builds):
    start = time.monotonic()
    results = runner.run(task, builds[:2])  # never raises
    assert time.monotonic() - start < 10
    assert len(results) == 2
    for result in results:
        assert result.error in (ErrorKind.RUN_ERROR, ErrorKind.RUN_TIMEOUT)
        assert not result.ok and result.message and "\n" not in result.message
    return results


@pytest.mark.serial  # fails within 10 s
def test_unknown_key_is_a_result_not_an_exception(tracker_port, task, builds):
    runner = RPCRunner("no-such-device", LOOPBACK, tracker_port, session_timeout_s=2)
    results = _assert_fast_failures(runner, task, builds)
    assert "no-such-device" in results[0].message


@pytest.mark.serial  # fails within 10 s
def test_closed_port_is_a_result_not_an_exception(task, builds):
    runner = RPCRunner(KEY, LOOPBACK, _free_port(), session_timeout_s=2)  # nothing listens
    results = _assert_fast_failures(runner, task, builds)
    assert "cannot reach" in results[0].message


@pytest.mark.serial  # a 3 s session timeout, within 30 s
def test_session_timeout(tracker_port, task, builds):
    # each timed repeat lasts at least 10 s; the server ends the 3 s session first
    runner = _runner(tracker_port, session_timeout_s=3, min_repeat_ms=10_000)
    start = time.monotonic()
    (result,) = runner.run(task, builds[:1])
    assert time.monotonic() - start < 30
    assert result.error == ErrorKind.RUN_TIMEOUT, result.message
    # the servers come back for the next session
    (again,) = _runner(tracker_port).run(task, builds[:1])
    assert again.ok, again.message
