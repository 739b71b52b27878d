"""Runners: load each built library in an isolated worker process, verify its outputs against
the reference, and time it. A crash, a hang or a wrong answer is a result, not an exception."""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from typing import Any, Callable

from . import worker
from .pool import WorkerPool
from ..errors import error_message
from .result import MAX_MESSAGE_CHARS, BuildResult, ErrorKind, MeasureResult
from .task import MeasureTask

logger = logging.getLogger(__name__)

# f_run(lib_path, devices_json, inputs_file, reference_file, warmup, repeat, min_repeat_ms,
#       slow_ms) -> {"ok", "max_error", "latencies_ms", "screened"}
RunFunction = Callable[[str, list, str, str, int, int, float, "float | None"], dict[str, Any]]


class Runner(ABC):
    """Measures built candidates of a task."""

    @abstractmethod
    def run(self, task: MeasureTask, builds: list[BuildResult]) -> list[MeasureResult]:
        """One MeasureResult per build, in order (failed builds pass their error through)."""

    def retime(self, task: MeasureTask, builds: list[BuildResult],
               rounds: int) -> list[MeasureResult]:
        """Time built candidates alternately: `rounds` rounds, each running every candidate
        once; a candidate's figure is the best of its rounds (``latencies_ms``), every round's
        kept in ``rounds_ms``. This default runs each round's candidates through :meth:`run`."""
        figures: list[list[float]] = [[] for _ in builds]
        failed: dict[int, MeasureResult] = {}
        for _ in range(rounds):
            for index, build in enumerate(builds):
                if index in failed:
                    continue
                (result,) = self.run(task, [build])
                if result.ok:
                    figures[index].append(result.median_ms)
                else:
                    failed[index] = result
        return [failed.get(index) or retimed_result(rounds_ms, build.build_s)
                for index, (build, rounds_ms) in enumerate(zip(builds, figures))]


def retimed_result(rounds_ms: list[float], build_s: float = 0.0,
                   max_error: float = float("nan")) -> MeasureResult:
    """A re-timed candidate's result: the best of its rounds, every round kept."""
    return MeasureResult(ErrorKind.NONE, [min(rounds_ms)], build_s=build_s,
                         max_error=max_error, rounds_ms=list(rounds_ms),
                         message=f"re-timed: best of {len(rounds_ms)} alternating rounds")


class LocalRunner(Runner):
    """Runs one candidate at a time (measurements must not overlap) in a worker process that
    is killed after `timeout_s` and restarted after a crash.

    Parameters
    ----------
    timeout_s : float
        Seconds one candidate may take to load, check and time (default 120).
    warmup, repeat : int
        Untimed calls first, then timed measurements (defaults 2 and 5).
    min_repeat_ms : float
        Each measurement repeats the call until it lasts this long (default 50 ms).
    screen : float or None
        A candidate whose checking call takes longer than `screen` times the fastest
        candidate this runner has measured for the task, and longer than `screen_floor_ms`,
        is timed by one more call instead of the warm-up and repeats: it cannot win, and on a
        slow device those repeats are most of a search's time (default 3; None times every
        candidate fully).
    screen_floor_ms : float
        Candidates whose checking call is faster than this are always timed fully: their
        repeats are cheap, and a cold first call of a fast model is mostly overhead
        (default 100 ms).
    f_run : callable, optional
        What the worker process runs to check and time one built candidate, called as
        ``f_run(lib_path, devices_json, inputs_file, reference_file, warmup, repeat,
        min_repeat_ms, slow_ms)`` and returning a dict with ``ok``, ``max_error``,
        ``latencies_ms`` and ``screened`` (default
        :func:`tvm_hetero.measure.worker.run_candidate`). It is pickled with each submission,
        like :class:`~tvm_hetero.measure.LocalBuilder`'s `f_build`; whatever it raises, and a
        worker that dies in it, becomes the candidate's ``run_error``.
    """

    def __init__(self, timeout_s: float = 120.0, warmup: int = 2, repeat: int = 5,
                 min_repeat_ms: float = 50.0, screen: float | None = 3.0,
                 screen_floor_ms: float = 100.0, f_run: RunFunction | None = None):
        if screen is not None and screen < 1:
            raise ValueError(f"screen must be >= 1 (or None), got {screen}")
        self.screen_floor_ms = screen_floor_ms
        self.timeout_s = timeout_s
        self.warmup = warmup
        self.repeat = repeat
        self.min_repeat_ms = min_repeat_ms
        self.screen = screen
        self.f_run = f_run or worker.run_candidate
        self._best_ms: dict[str, float] = {}  # task work directory -> fastest median seen
        self._pool = WorkerPool(1, timeout_s)

    def run(self, task: MeasureTask, builds: list[BuildResult]) -> list[MeasureResult]:
        return [self._run_one(task, build) for build in builds]

    def retime(self, task: MeasureTask, builds: list[BuildResult],
               rounds: int) -> list[MeasureResult]:
        """All candidates loaded into one worker process and timed there alternately (see
        :meth:`Runner.retime`); the worker may take `timeout_s` per candidate."""
        results: dict[int, MeasureResult] = {}
        ready = [(i, b) for i, b in enumerate(builds) if b.error == ErrorKind.NONE]
        for index, build in enumerate(builds):
            if build.error != ErrorKind.NONE:
                results[index] = MeasureResult(build.error, message=build.message,
                                               build_s=build.build_s)
        if ready:
            pool = WorkerPool(1, self.timeout_s * len(ready))
            try:
                future = pool.submit(worker.retime_candidates, [b.artifact for _, b in ready],
                                     task.devices.to_json(), task.inputs_file,
                                     task.reference_file, rounds, self.min_repeat_ms)
                try:
                    outs = future.result()
                except TimeoutError:
                    outs = MeasureResult(ErrorKind.RUN_TIMEOUT, message=f"re-timing killed "
                                         f"after {self.timeout_s * len(ready):g} s")
                except Exception as err:  # a crash of the re-timing worker is its result
                    outs = MeasureResult(ErrorKind.RUN_ERROR, message=error_message(
                        err, with_type=True, max_chars=MAX_MESSAGE_CHARS))
            finally:
                pool.shutdown()
            for position, (index, build) in enumerate(ready):
                if isinstance(outs, MeasureResult):
                    results[index] = outs
                elif not outs[position]["ok"]:
                    results[index] = MeasureResult(
                        ErrorKind.WRONG_ANSWER, max_error=outs[position]["max_error"],
                        message=f"outputs differ from {task.reference_source} when re-timed: "
                                f"relative error {outs[position]['max_error']:.3g}")
                else:
                    results[index] = retimed_result(outs[position]["rounds_ms"], build.build_s,
                                                    outs[position]["max_error"])
        return [results[i] for i in range(len(builds))]

    def _run_one(self, task: MeasureTask, build: BuildResult) -> MeasureResult:
        if build.error != ErrorKind.NONE:
            return MeasureResult(build.error, message=build.message, build_s=build.build_s)
        start = time.perf_counter()
        best = self._best_ms.get(task.workdir)
        slow_ms = max(best * self.screen, self.screen_floor_ms) \
            if best is not None and self.screen is not None else None
        future = self._pool.submit(
            self.f_run, build.artifact, task.devices.to_json(), task.inputs_file,
            task.reference_file, self.warmup, self.repeat, self.min_repeat_ms, slow_ms)
        try:
            out = future.result()
        except TimeoutError:
            return MeasureResult(ErrorKind.RUN_TIMEOUT,
                                 message=f"killed after {self.timeout_s:g} s",
                                 build_s=build.build_s, run_s=time.perf_counter() - start)
        except ChildProcessError as err:
            return MeasureResult(ErrorKind.RUN_ERROR,
                                 message=f"worker crashed: {error_message(err)}",
                                 build_s=build.build_s, run_s=time.perf_counter() - start)
        except Exception as err:  # any error inside the run is the candidate's result
            return MeasureResult(ErrorKind.RUN_ERROR, message=error_message(
                err, with_type=True, max_chars=MAX_MESSAGE_CHARS),
                                 build_s=build.build_s, run_s=time.perf_counter() - start)
        run_s = time.perf_counter() - start
        if not out["ok"]:
            return MeasureResult(ErrorKind.WRONG_ANSWER, build_s=build.build_s, run_s=run_s,
                                 max_error=out["max_error"],
                                 message=f"outputs differ from {task.reference_source}: "
                                         f"relative error {out['max_error']:.3g}")
        result = MeasureResult(ErrorKind.NONE, out["latencies_ms"], build_s=build.build_s,
                               run_s=run_s, max_error=out["max_error"])
        if not out.get("screened"):
            self._best_ms[task.workdir] = min(result.median_ms,
                                              self._best_ms.get(task.workdir, float("inf")))
        return result
