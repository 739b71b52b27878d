"""Fakes of the measurement side (tests of search logic run in milliseconds), in the manner of
MetaSchedule's ``DummyBuilder`` / ``DummyRunner``."""

from __future__ import annotations

from ..measure import BuildResult, ErrorKind, MeasureResult, placement_key
from ..measure.runner import Runner
from ..placement import Placement


class FakeBuilder:
    """A builder that builds nothing (tests of search logic run in milliseconds). `fail` maps
    placement keys (:func:`~tvm_hetero.measure.placement_key`) to the error kind to report."""

    def __init__(self, fail: dict | None = None):
        self.fail = fail or {}
        self.built: list[Placement] = []

    def build(self, task, placements):
        del task
        out = []
        for placement in placements:
            self.built.append(placement)
            key = placement_key(placement)
            if key in self.fail:
                out.append(BuildResult(None, self.fail[key], "injected failure",
                                       placement=placement))
            else:
                out.append(BuildResult("fake:" + key, placement=placement))
        return out


class FakeRunner(Runner):
    """A runner whose latency is ``cost_ms(placement)``, called once per run (a stateful
    callable can model noise); re-timing takes :meth:`Runner.retime`'s rounds of runs."""

    def __init__(self, cost_ms):
        self.cost_ms = cost_ms

    def run(self, task, builds):
        del task
        return [MeasureResult(build.error, message=build.message)
                if build.error != ErrorKind.NONE
                else MeasureResult(ErrorKind.NONE, [float(self.cost_ms(build.placement))])
                for build in builds]
