"""The Measurer: measures a task's candidate placements through a builder and a runner and ties
the results to the placement records. Failures are recorded with an error kind; the search goes
on."""

from __future__ import annotations

import logging
import os
from typing import Iterable

from ..build.memory import describe_over_cap, over_cap
from ..placement import Placement
from .builder import Builder, LocalBuilder, placement_key
from .result import ErrorKind, MeasureResult
from .runner import LocalRunner, Runner
from .task import MeasureTask

logger = logging.getLogger(__name__)


class Measurer:
    """Measures placements of one task: what the records already hold is returned, not
    measured again; a placement over a memory cap is recorded as ``memory_exceeded`` without
    being built (caps are checked afresh for recorded results too: a verdict or a figure
    recorded under other caps is not reused); the rest are built in parallel and run one at a
    time, and every result is committed to the records as soon as it exists.

    Parameters
    ----------
    task : MeasureTask
    builder : Builder, optional
        Default :class:`LocalBuilder`.
    runner : Runner, optional
        Default :class:`LocalRunner`.
    database : PlacementRecords, optional
        Where results go (and come from on resume).
    keep_artifacts : bool
        Keep each candidate's library under ``workdir/candidates`` (default: delete once run).
    """

    def __init__(self, task: MeasureTask, builder: Builder | None = None,
                 runner: Runner | None = None, database=None, keep_artifacts: bool = False):
        self.task = task
        self.builder = builder or LocalBuilder()
        self.runner = runner or LocalRunner()
        self.database = database
        self.keep_artifacts = keep_artifacts
        self.measured = 0  # candidates built and run by this measurer
        self.retimed = 0  # candidates built again and re-timed by this measurer

    def measure(self, placements: Iterable[Placement],
                tags: dict | None = None) -> list[MeasureResult]:
        """Results for `placements`, in order; `tags` go into their new records."""
        placements = list(placements)
        results: dict[int, MeasureResult] = {}
        todo: list[tuple[int, Placement]] = []
        seen: dict[str, int] = {}
        for index, placement in enumerate(placements):
            placement.validate(self.task.layers, self.task.devices)
            recorded = self.database.get(placement) if self.database is not None else None
            key = placement_key(placement)
            # the caps are checked afresh: a recorded result may date from other caps
            exceeded = over_cap(self.task.layers, placement, self.task.devices)
            if exceeded:
                verdict = MeasureResult(ErrorKind.MEMORY_EXCEEDED,
                                        message=describe_over_cap(exceeded))
                results[index] = verdict if recorded is not None else \
                    self._commit(placement, verdict, tags)
            elif recorded is not None and recorded.error != ErrorKind.MEMORY_EXCEEDED:
                results[index] = recorded
            elif key in seen:  # the same candidate twice in one batch: measured once
                continue
            else:
                seen[key] = index
                todo.append((index, placement))
        if todo:
            builds = self.builder.build(self.task, [p for _, p in todo])
            for (index, placement), build in zip(todo, builds):
                (result,) = self.runner.run(self.task, [build])
                results[index] = self._commit(placement, result, tags)
                self.measured += 1
                if build.artifact and not self.keep_artifacts and os.path.exists(build.artifact):
                    os.remove(build.artifact)
        for index, placement in enumerate(placements):  # duplicates within the batch
            if index not in results:
                results[index] = results[seen[placement_key(placement)]]
        return [results[i] for i in range(len(placements))]

    def retime(self, placements: list[Placement], rounds: int,
               tags: dict | None = None) -> list[MeasureResult]:
        """Build `placements` again and time them alternately in one process (see
        :meth:`Runner.retime`). Figures and wrong answers are committed with `tags`, after the
        earlier records of the same placements (which stay in the file); a build or run that
        failed this time (a timeout, a crash) is returned, not recorded over a measurement."""
        builds = self.builder.build(self.task, list(placements))
        try:
            results = self.runner.retime(self.task, builds, rounds)
        finally:
            for build in builds:
                if build.artifact and not self.keep_artifacts and os.path.exists(build.artifact):
                    os.remove(build.artifact)
        self.retimed += len(placements)
        return [self._commit(p, r, tags) if r.ok or r.error == ErrorKind.WRONG_ANSWER else r
                for p, r in zip(placements, results)]

    def _commit(self, placement: Placement, result: MeasureResult,
                tags: dict | None = None) -> MeasureResult:
        if self.database is not None:
            self.database.commit(placement, result, tags)
        logger.info("measured %s: %s", placement_key(placement),
                    f"{result.median_ms:.3f} ms" if result.ok else result.error.value)
        return result
