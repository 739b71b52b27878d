"""Builders: turn candidate placements into libraries, in parallel worker processes with a
timeout. A failure becomes a BuildResult with its error kind, never an exception."""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import os
import time
from abc import ABC, abstractmethod
from typing import Callable

from ..errors import error_message
from ..placement import Placement
from . import worker
from .pool import WorkerPool
from .result import MAX_MESSAGE_CHARS, BuildResult, ErrorKind
from .task import MeasureTask

logger = logging.getLogger(__name__)


def placement_key(placement: Placement) -> str:
    """A short stable hash of a placement (file names, record keys)."""
    return hashlib.sha256(placement.key().encode()).hexdigest()[:16]


class Builder(ABC):
    """Builds candidate placements of a task into loadable libraries."""

    @abstractmethod
    def build(self, task: MeasureTask, placements: list[Placement]) -> list[BuildResult]:
        """One BuildResult per placement, in order."""


# f_build(model_file, input_shapes, devices_json, assignment, out_path) -> build seconds
BuildFunction = Callable[[str, dict, list, dict, str], float]


class LocalBuilder(Builder):
    """Builds in `n_parallel` worker processes (``tvm.support.popen_pool``), each build killed
    after `timeout_s` seconds.

    Parameters
    ----------
    n_parallel : int
        Worker processes (default: the number of CPU cores).
    timeout_s : float
        Seconds one build may take (default 300).
    f_build : callable, optional
        What a worker process runs to build one candidate, called as
        ``f_build(model_file, input_shapes, devices_json, assignment, out_path)`` and returning
        the build seconds (default :func:`tvm_hetero.measure.worker.build_candidate`). It is
        pickled with each submission (cloudpickle: a module-level function or a
        ``functools.partial`` of one travels by reference); whatever it raises, and a worker
        that dies in it, becomes the candidate's ``build_error``.
    """

    def __init__(self, n_parallel: int | None = None, timeout_s: float = 300.0,
                 f_build: BuildFunction | None = None):
        from ..devices import host_num_cores

        self.n_parallel = n_parallel or host_num_cores()
        self.timeout_s = timeout_s
        self.f_build = f_build or worker.build_candidate
        self._pool = WorkerPool(self.n_parallel, timeout_s)

    def build(self, task: MeasureTask, placements: list[Placement]) -> list[BuildResult]:
        out_dir = os.path.join(task.workdir, "candidates")
        os.makedirs(out_dir, exist_ok=True)
        futures = []
        for placement in placements:
            path = os.path.join(out_dir, placement_key(placement) + ".so")
            futures.append((path, time.perf_counter(), self._pool.submit(
                self.f_build, task.model_file, task.input_shapes,
                task.devices.to_json(), placement.assignment, path)))
        results = []
        for placement, (path, start, future) in zip(placements, futures):
            try:
                build_s = future.result()
                results.append(BuildResult(path, build_s=build_s, placement=placement))
            except TimeoutError:
                results.append(BuildResult(None, ErrorKind.BUILD_TIMEOUT,
                                           f"killed after {self.timeout_s:g} s",
                                           time.perf_counter() - start, placement))
            except (concurrent.futures.CancelledError, Exception) as err:  # noqa: B014
                results.append(BuildResult(None, ErrorKind.BUILD_ERROR,
                                           error_message(err, with_type=True,
                                                         max_chars=MAX_MESSAGE_CHARS),
                                           time.perf_counter() - start, placement))
        return results
