"""A tune killed with SIGKILL at random moments and resumed on the same records: every record
acknowledged before a kill survives it, nothing recorded is measured again, and the final
result is the result of an uninterrupted tune with the same seed and candidates.

The tune runs in a subprocess (tests/search/tune_worker_script.py) with a fake builder and a fake
runner whose latency is a fixed function of the placement (a resumed search must be able to
reproduce the uninterrupted one exactly) and which sleeps per candidate so kills land mid-tune.
Each trial is printed, flushed, by the tune's callback: a line the test has read is
acknowledged. Set TVM_HETERO_KILL_SEED to replay one choice of kill moments.
"""

import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("tune_worker_script.py")
TRIALS = 48  # zoo:cnn on two devices: 64 placements
SLEEP_MS = 100  # per run: 48 candidates take ~5 s to measure
KILLS = 6
LINE_TIMEOUT_S = 120  # a hung tune fails the test instead of hanging it


class TuneProcess:
    """One tune_worker_script.py process and the lines it printed."""

    def __init__(self, workdir, records, log, stderr_path):
        self.stderr_path = stderr_path
        self.stderr = open(stderr_path, "w", encoding="utf-8")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--workdir", str(workdir), "--records", str(records),
             "--log", str(log), "--trials", str(TRIALS), "--sleep-ms", str(SLEEP_MS)],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"})
        self.trials = []  # acknowledged trial lines, in order
        self.result = None  # the final "result" line
        self.first_trial_s = None
        self._lines = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _take(self, timeout):
        """Handle one line; False at the end of the output (or `timeout` without a line)."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            return False
        if line is None:
            self._lines.put(None)  # stay at the end
            return False
        data = json.loads(line)
        if data["event"] == "trial":
            if self.first_trial_s is None:
                self.first_trial_s = time.monotonic() - self.started
            self.trials.append(data)
        else:
            self.result = data
        return True

    @property
    def fresh(self):
        return sum(1 for t in self.trials if t["fresh"])

    def wait_fresh(self, count):
        """Until `count` trials measured by this process are acknowledged, or the end."""
        deadline = time.monotonic() + LINE_TIMEOUT_S
        while self.fresh < count and self.result is None and time.monotonic() < deadline:
            if not self._take(timeout=1.0) and self.proc.poll() is not None:
                break

    def kill(self):
        """SIGKILL; then read what it printed before it died (acknowledged too)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=LINE_TIMEOUT_S)
        self._drain()
        assert self.proc.returncode == -signal.SIGKILL, self.describe()

    def finish(self):
        self._drain()
        self.proc.wait(timeout=LINE_TIMEOUT_S)
        assert self.proc.returncode == 0 and self.result is not None, self.describe()

    def _drain(self):
        deadline = time.monotonic() + LINE_TIMEOUT_S
        while time.monotonic() < deadline and (self._take(timeout=1.0) or
                                               self._reader.is_alive()):
            pass
        self.stderr.close()

    def describe(self):
        with open(self.stderr_path, encoding="utf-8", errors="replace") as handle:
            tail = handle.read()[-3000:]
        return f"returncode {self.proc.returncode}; stderr tail:\n{tail}"


def read_records(path):
    """(list of parsed records in file order, number of unparseable lines)."""
    records, bad = [], 0
    if not os.path.exists(path):
        return records, bad
    with open(path, encoding="utf-8") as handle:
        for line in handle.read().split("\n"):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                bad += 1
    return records, bad


def record_key(record):
    return json.dumps(record["placement"], sort_keys=True)


def summary(record):
    result = record["result"]
    return record_key(record), result["error"], result["latencies_ms"], record.get("tags")


def log_lines(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return [line.split() for line in handle.read().splitlines() if line.strip()]


def key_of(placement_json):
    from tvm_hetero import Placement
    from tvm_hetero.measure import placement_key

    return placement_key(Placement(placement_json))


def comparable(result):
    """What an interrupted tune must reproduce (`measured` counts this process only)."""
    return {k: v for k, v in result.items() if k != "measured"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted tune. Its workdir (cached device status and layer profile: what the
    candidates depend on besides the seed) is shared by every tune of this file."""
    root = tmp_path_factory.mktemp("kill_resume")
    workdir = root / "work"
    tune = TuneProcess(workdir, root / "reference.jsonl", root / "reference.log",
                       root / "reference.err")
    tune.finish()
    records, bad = read_records(root / "reference.jsonl")
    assert bad == 0 and len(records) == TRIALS == len(tune.result["trials"])
    assert tune.result["measured"] == TRIALS
    assert tune.result["placement"] is not None
    return dict(root=root, workdir=workdir, result=tune.result, records=records)


def check_after_run(records_path, log_path, acknowledged, recorded_before, log_before,
                    reference_records, where):
    """The invariants after a killed (or finished) run."""
    records, bad = read_records(records_path)
    # a line cut by a kill could only be the last one; none is expected from SIGKILL
    assert bad <= 1, f"{where}: {bad} unreadable lines"
    keys = [record_key(r) for r in records]
    assert len(keys) == len(set(keys)), f"{where}: a placement was recorded twice"
    by_key = {record_key(r): r for r in records}
    # every acknowledged trial is on disk with the result that was printed
    for trial in acknowledged:
        matches = [r for r in records if key_of(r["placement"]) == trial["key"]]
        assert matches, f"{where}: acknowledged trial {trial['key']} lost"
        assert matches[0]["result"]["error"] == trial["error"]
        assert matches[0]["result"]["latencies_ms"] == trial["latencies_ms"]
    # nothing recorded before this run was built or run again by it
    recorded_keys = {key_of(json.loads(k)) for k in recorded_before}
    again = [line for line in log_lines(log_path)[log_before:] if line[1] in recorded_keys]
    assert not again, f"{where}: measured again: {again}"
    # what was recorded is what the uninterrupted tune recorded for those placements
    want = {record_key(r): summary(r) for r in reference_records}
    for key, record in by_key.items():
        assert summary(record) == want.get(key), f"{where}: {summary(record)} != {want.get(key)}"
    return records


@pytest.mark.serial  # kills at moments in time; at least 5 must land before the end
def test_killed_tune_resumes_to_the_uninterrupted_result(reference, tmp_path):
    seed = int(os.environ.get("TVM_HETERO_KILL_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    records_path, log_path = tmp_path / "records.jsonl", tmp_path / "tune.log"
    acknowledged = []  # every trial line read so far, all runs
    kills, stats = [], []
    startup_s = None  # set by the first run (killed after its first trials)
    for attempt in range(KILLS + 3):
        before, _ = read_records(records_path)
        recorded_before = {record_key(r) for r in before}
        log_before = len(log_lines(log_path))
        tune = TuneProcess(reference["workdir"], records_path, log_path,
                           tmp_path / f"run{attempt}.err")
        where = f"seed {seed}, run {attempt}"
        if len(kills) < KILLS:
            if len(kills) % 2 == 0:  # after a few trials measured here, mid-batch
                moment = ("after acks", rng.randint(1, 3), rng.uniform(0.0, 0.2))
                tune.wait_fresh(moment[1])
                time.sleep(moment[2])
            else:  # anywhere from the process start to shortly after its first trial
                moment = ("at time", rng.uniform(0.2, (startup_s or 3.0) + 0.6))
                time.sleep(max(0.0, moment[1] - (time.monotonic() - tune.started)))
            finished = tune.result is not None or tune.proc.poll() is not None
            tune.kill()
            if not finished:
                kills.append(moment)
        else:
            tune.finish()
        acknowledged += tune.trials
        records = check_after_run(records_path, log_path, acknowledged, recorded_before,
                                  log_before, reference["records"], where)
        stats.append({"run": attempt, "kill": moment if tune.result is None else None,
                      "fresh_acked": tune.fresh, "new_records": len(records) - len(before),
                      "builds": sum(1 for line in log_lines(log_path)[log_before:]
                                    if line[0] == "build")})
        if tune.result is not None:
            break
        if startup_s is None and tune.first_trial_s is not None:
            startup_s = tune.first_trial_s  # a resumed start: model, task, cached profile
    print(f"kill seed {seed}: {json.dumps(stats)}")
    assert len(kills) >= 5, (seed, stats)
    assert tune.result is not None, (seed, stats)
    assert comparable(tune.result) == comparable(reference["result"]), (seed, stats)
    # the records: the uninterrupted tune's, in the same order
    final, bad = read_records(records_path)
    assert bad == 0
    assert [summary(r) for r in final] == [summary(r) for r in reference["records"]]
    # each placement was run to a record exactly once (a build killed before its record
    # existed is built again: that is not measuring twice)
    runs = [line[1] for line in log_lines(log_path) if line[0] == "run"]
    ran_to_record = {key_of(r["placement"]) for r in final if r["result"]["error"] != "build_error"}
    assert set(runs) == ran_to_record


def test_a_truncated_last_line_is_survived(reference, tmp_path):
    """A writer killed mid-line: that record is measured again, nothing else, same result."""
    records_path, log_path = tmp_path / "records.jsonl", tmp_path / "tune.log"
    shutil.copy(reference["root"] / "reference.jsonl", records_path)
    data = records_path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    cut = last_start + (len(data) - last_start) // 2
    records_path.write_bytes(data[:cut])  # half of the last line, no newline
    lost = reference["records"][-1]
    tune = TuneProcess(reference["workdir"], records_path, log_path, tmp_path / "a.err")
    tune.finish()
    assert tune.result["measured"] == 1
    assert {line[1] for line in log_lines(log_path)} == {key_of(lost["placement"])}
    assert comparable(tune.result) == comparable(reference["result"])
    records, bad = read_records(records_path)
    assert bad == 1  # the cut line stays, on a line of its own
    assert [summary(r) for r in records] == [summary(r) for r in reference["records"]]
    assert records_path.read_bytes().startswith(data[:cut] + b"\n")
    # and resuming once more measures nothing
    again = TuneProcess(reference["workdir"], records_path, log_path, tmp_path / "b.err")
    again.finish()
    assert again.result["measured"] == 0 and len(log_lines(log_path)) <= 2
    assert comparable(again.result) == comparable(reference["result"])
