"""One tune with a deterministic fake builder and runner, for
tests/search/test_kill_resume.py (which kills it with SIGKILL and runs it again on the same
records).

Usage::

    python tests/search/tune_worker_script.py --workdir W --records R --log L [--trials N]
        [--model zoo:cnn] [--seed S] [--sleep-ms MS] [--batch-size B] [--threshold T]

Prints one JSON line per trial, flushed as soon as the trial is known (a line the test has
read is acknowledged: its record must survive a kill), then one ``result`` line. Appends
``build KEY`` and ``run KEY`` lines to `L` (flushed) for each placement built and run.

The latency of a placement is a fixed function of it (no timing noise: a resumed tune must
find exactly what an uninterrupted one finds); some placements fail to build or give wrong
answers, also as a fixed function of the placement. Each run sleeps `--sleep-ms` so that a
kill lands mid-tune.
"""

import argparse
import json
import sys
import time
import zlib

from tvm_hetero.measure import ErrorKind, MeasureResult, placement_key
from tvm_hetero.search import tune
from tvm_hetero.testing import FakeBuilder, FakeRunner


def cost_ms(layers, placement) -> float:
    """Per (layer, device) costs from a hash, plus 0.25 ms per device switch."""
    total, previous = 0.0, None
    for layer in layers:
        device = placement.assignment[layer.name]
        total += 0.5 + (zlib.crc32(f"{layer.name}@{device}".encode()) % 1000) / 1000
        if previous is not None and device != previous:
            total += 0.25
        previous = device
    return round(total, 6)


def fails_to_build(key: str) -> bool:
    return int(key, 16) % 7 == 0


def gives_wrong_answers(key: str) -> bool:
    return int(key, 16) % 11 == 0


class LoggedBuilder(FakeBuilder):
    """FakeBuilder that logs every build (one line per placement, flushed)."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def build(self, task, placements):
        for placement in placements:
            key = placement_key(placement)
            if fails_to_build(key):
                self.fail[key] = ErrorKind.BUILD_ERROR
            self.log.write(f"build {key}\n")
        self.log.flush()
        return super().build(task, placements)


class SleepyRunner(FakeRunner):
    """FakeRunner with a deterministic latency that takes `sleep_s` per candidate run."""

    def __init__(self, log, sleep_s):
        super().__init__(cost_ms=None)
        self.log = log
        self.sleep_s = sleep_s
        self.ran = set()

    def run(self, task, builds):
        out = []
        for build in builds:
            if build.error != ErrorKind.NONE:
                out.append(MeasureResult(build.error, message=build.message))
                continue
            key = placement_key(build.placement)
            self.log.write(f"run {key}\n")
            self.log.flush()
            self.ran.add(key)
            time.sleep(self.sleep_s)
            if gives_wrong_answers(key):
                out.append(MeasureResult(ErrorKind.WRONG_ANSWER, max_error=1.0,
                                         message="outputs differ (fake)"))
            else:
                out.append(MeasureResult(ErrorKind.NONE,
                                         [cost_ms(task.layers, build.placement)]))
        return out


def trial_json(trial) -> dict:
    return {"key": placement_key(trial.placement), "source": trial.source,
            "error": trial.result.error.value, "latencies_ms": trial.result.latencies_ms}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--records", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--model", default="zoo:cnn")
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sleep-ms", type=float, default=80.0)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--threshold", type=int, default=8)
    args = parser.parse_args(argv)

    with open(args.log, "a", encoding="utf-8") as log:
        builder = LoggedBuilder(log)
        runner = SleepyRunner(log, args.sleep_ms / 1000)

        def built_here():  # measured by this process, not replayed from the records
            return {placement_key(p) for p in builder.built}

        def callback(trial, best_ms):
            line = trial_json(trial)
            line.update(event="trial", fresh=line["key"] in built_here(), best_ms=best_ms)
            print(json.dumps(line), flush=True)

        result = tune(args.model, ["cpu", "cpu-generic"], trials=args.trials, strategy="xgb",
                      records=args.records, workdir=args.workdir, seed=args.seed,
                      threshold=args.threshold, batch_size=args.batch_size, builder=builder,
                      runner=runner, callback=callback, retime=0)
    print(json.dumps({
        "event": "result", "placement": result.placement.assignment if result.placement
        else None, "latencies_ms": result.latency.latencies_ms if result.latency else None,
        "history": result.history, "trials": [trial_json(t) for t in result.trials],
        "measured": result.measured, "best_single": result.best_single[0]
        if result.best_single else None}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
