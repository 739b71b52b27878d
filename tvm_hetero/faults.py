"""Fault injection for tests: a Builder and a Runner that wrap the real ones and make chosen
placements fail the way real candidates fail.

:class:`FaultyBuilder` and :class:`FaultyRunner` wrap a :class:`~tvm_hetero.measure.LocalBuilder`
and a :class:`~tvm_hetero.measure.LocalRunner`. A :class:`FaultPlan`, shared by both, says which
placement gets which :class:`Fault`. Every fault happens inside the wrapped builder's or runner's
own ``tvm.support.popen_pool`` worker process and goes through the real code that turns it into
an error kind: a segfault really kills the worker, a hang really runs into the timeout.

How: for the duration of one ``build`` / ``run`` call the wrapper points
``tvm_hetero.measure.worker.build_candidate`` (or ``run_candidate``) at a module-level function
of this module, which the worker receives pickled by reference; it injects the fault or calls
the real function. The faults, and the error kind each must be recorded with:

================  =========================================================  =============
fault             what happens                                               recorded as
================  =========================================================  =============
``build_raise``   the build raises an exception in the build worker          build_error
``build_crash``   the build worker segfaults                                 build_error
``build_hang``    the build sleeps past the builder's timeout and is killed  build_timeout
``run_raise``     the run raises an exception in the run worker              run_error
``run_crash``     the run worker segfaults (``ctypes.string_at(0)``)         run_error
``run_abort``     the run worker calls ``os.abort()`` (SIGABRT)              run_error
``run_hang``      the run sleeps past the runner's timeout and is killed     run_timeout
``wrong_answer``  it runs; its outputs are perturbed before the check        wrong_answer
================  =========================================================  =============

Example::

    plan = FaultPlan().add(Fault.RUN_CRASH, {placement_key(p)}).add(Fault.BUILD_HANG, pred)
    tune(model, devices, builder=FaultyBuilder(LocalBuilder(timeout_s=10), plan),
         runner=FaultyRunner(LocalRunner(timeout_s=5), plan))
"""

from __future__ import annotations

import contextlib
import functools
import threading
from enum import Enum
from typing import Callable, Collection, Iterable, Union

import numpy as np

from .measure import worker
from .measure.builder import Builder, placement_key
from .measure.result import BuildResult, ErrorKind, MeasureResult
from .measure.runner import Runner
from .measure.task import MeasureTask
from .placement import Placement

__all__ = ["BUILD_FAULTS", "EXPECTED", "Fault", "FaultPlan", "FaultyBuilder", "FaultyRunner",
           "InjectedFault", "RUN_FAULTS"]

HANG_S = 3600.0  # a hang lasts "forever": the timeout, never the sleep, ends it


class Fault(str, Enum):
    """A failure to inject into one candidate."""

    BUILD_RAISE = "build_raise"
    BUILD_CRASH = "build_crash"
    BUILD_HANG = "build_hang"
    RUN_RAISE = "run_raise"
    RUN_CRASH = "run_crash"
    RUN_ABORT = "run_abort"
    RUN_HANG = "run_hang"
    WRONG_ANSWER = "wrong_answer"


BUILD_FAULTS = (Fault.BUILD_RAISE, Fault.BUILD_CRASH, Fault.BUILD_HANG)
RUN_FAULTS = (Fault.RUN_RAISE, Fault.RUN_CRASH, Fault.RUN_ABORT, Fault.RUN_HANG,
              Fault.WRONG_ANSWER)

# The error kind a candidate with each fault must be recorded with
EXPECTED = {
    Fault.BUILD_RAISE: ErrorKind.BUILD_ERROR,
    Fault.BUILD_CRASH: ErrorKind.BUILD_ERROR,
    Fault.BUILD_HANG: ErrorKind.BUILD_TIMEOUT,
    Fault.RUN_RAISE: ErrorKind.RUN_ERROR,
    Fault.RUN_CRASH: ErrorKind.RUN_ERROR,
    Fault.RUN_ABORT: ErrorKind.RUN_ERROR,
    Fault.RUN_HANG: ErrorKind.RUN_TIMEOUT,
    Fault.WRONG_ANSWER: ErrorKind.WRONG_ANSWER,
}

Selector = Union[Callable[[Placement], bool], Collection[str]]


class InjectedFault(RuntimeError):
    """The exception of the ``build_raise`` and ``run_raise`` faults."""


class FaultPlan:
    """Which fault, if any, each placement gets.

    Rules are tried in the order they were added; the first that selects a placement decides.
    A decision is remembered per placement (by :func:`~tvm_hetero.measure.placement_key`), so
    the builder and the runner sharing a plan agree, and a stateful rule
    (:meth:`in_order`) is asked once per placement.

    Attributes
    ----------
    injected : dict of str to Fault
        Placement key -> the fault actually injected (filled by the builder and the runner).
    """

    def __init__(self):
        self._rules: list[Callable[[Placement], Fault | None]] = []
        self._decided: dict[str, Fault | None] = {}
        self._lock = threading.Lock()
        self.injected: dict[str, Fault] = {}

    def add(self, fault: Fault | str, select: Selector) -> "FaultPlan":
        """Give `fault` to the placements `select` picks.

        Parameters
        ----------
        fault : Fault or str
        select : callable or collection of str
            A predicate on a :class:`Placement`, or a set of placement keys.

        Returns
        -------
        FaultPlan
            self, for chaining.
        """
        fault = Fault(fault)
        if callable(select):
            predicate = select
        else:
            keys = frozenset(select)
            predicate = lambda p: placement_key(p) in keys  # noqa: E731
        self._rules.append(lambda p: fault if predicate(p) else None)
        return self

    def in_order(self, faults: Iterable[Fault | str],
                 eligible: Callable[[Placement], bool] = lambda p: True) -> "FaultPlan":
        """Give `faults`, one each, to the first eligible placements asked about (the order a
        search proposes them in), so a test needs not know the candidates in advance.

        Parameters
        ----------
        faults : iterable of Fault or str
        eligible : callable, optional
            Only placements it accepts get a fault (default: all).

        Returns
        -------
        FaultPlan
            self, for chaining.
        """
        queue = [Fault(f) for f in faults]

        def rule(placement: Placement) -> Fault | None:
            if queue and eligible(placement):
                return queue.pop(0)
            return None

        self._rules.append(rule)
        return self

    def fault_for(self, placement: Placement) -> Fault | None:
        """The fault of `placement` (None: measured normally)."""
        key = placement_key(placement)
        with self._lock:
            if key not in self._decided:
                fault = None
                for rule in self._rules:
                    fault = rule(placement)
                    if fault is not None:
                        break
                self._decided[key] = fault
            return self._decided[key]


# -- what runs inside worker processes (module level: pickled by reference) -------------------

def _no_core_dump() -> None:
    """A deliberate crash must not leave a core file behind."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass


def _segfault() -> None:
    import ctypes

    _no_core_dump()
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def _abort() -> None:
    import os

    _no_core_dump()
    os.abort()


def _hang() -> None:
    import time

    time.sleep(HANG_S)


def build_with_faults(faults: dict[str, str], model_file: str, input_shapes: dict,
                      devices_json: list, placement: dict[str, str], out_path: str) -> float:
    """In a build worker: inject the fault of `placement`, or build it normally.

    Parameters
    ----------
    faults : dict of str to str
        Placement key -> :class:`Fault` value, for the faulty placements of one batch.
    model_file, input_shapes, devices_json, placement, out_path
        As for :func:`tvm_hetero.measure.worker.build_candidate`.

    Returns
    -------
    float
        The build seconds (placements without a fault).
    """
    fault = faults.get(placement_key(Placement(placement)))
    if fault == Fault.BUILD_RAISE.value:
        raise InjectedFault("injected build failure")
    if fault == Fault.BUILD_CRASH.value:
        _segfault()
    if fault == Fault.BUILD_HANG.value:
        _hang()
    return worker.build_candidate(model_file, input_shapes, devices_json, placement, out_path)


def _perturbed(outputs: list[np.ndarray]) -> list[np.ndarray]:
    """One element of each output moved far off (a wrong result, not noise)."""
    out = []
    for array in outputs:
        array = np.array(array, copy=True)
        if array.size:
            if array.dtype == np.bool_:
                array.flat[0] = not array.flat[0]
            else:
                magnitude = np.abs(array).max() if array.dtype.kind in "fc" else 0
                array.flat[0] = array.flat[0] + 1 + magnitude
        out.append(array)
    return out


def run_with_fault(fault: str, lib_path: str, *args, **kwargs):
    """In the run worker: inject a run fault.

    Parameters
    ----------
    fault : str
        A run :class:`Fault` value. ``wrong_answer`` runs
        :func:`tvm_hetero.measure.worker.run_candidate` with the library's outputs perturbed
        before they are checked against the reference; the others never return.
    lib_path, *args, **kwargs
        As for :func:`tvm_hetero.measure.worker.run_candidate`.

    Returns
    -------
    dict
        What ``run_candidate`` returns (``ok`` False for ``wrong_answer``).
    """
    if fault == Fault.RUN_RAISE.value:
        raise InjectedFault("injected run failure")
    if fault == Fault.RUN_CRASH.value:
        _segfault()
    if fault == Fault.RUN_ABORT.value:
        _abort()
    if fault == Fault.RUN_HANG.value:
        _hang()
    if fault != Fault.WRONG_ANSWER.value:
        raise ValueError(f"not a run fault: {fault!r}")
    from .measure import task as task_module

    real = task_module.outputs_match  # run_candidate imports it at call time

    def perturbed_match(got, want):
        return real(_perturbed(got), want)

    task_module.outputs_match = perturbed_match
    try:
        return worker.run_candidate(lib_path, *args, **kwargs)
    finally:
        task_module.outputs_match = real


# -- the wrappers (parent process) ------------------------------------------------------------

_PATCH_LOCK = threading.Lock()


@contextlib.contextmanager
def _worker_function(name: str, replacement):
    """Point ``tvm_hetero.measure.worker.<name>`` at `replacement` for one call of the
    wrapped builder or runner (they look it up when they submit work)."""
    with _PATCH_LOCK:
        original = getattr(worker, name)
        setattr(worker, name, replacement)
        try:
            yield
        finally:
            setattr(worker, name, original)


class FaultyBuilder(Builder):
    """A builder that injects build faults into the placements a plan selects.

    Parameters
    ----------
    inner : Builder
        The real builder (a :class:`~tvm_hetero.measure.LocalBuilder`: the faults run in its
        workers and its timeout kills the hangs).
    plan : FaultPlan
        Placements with a run fault are built normally (the runner injects those).

    Attributes
    ----------
    built : list of str
        Keys of every placement handed to this builder, in order (faulty or not).
    """

    def __init__(self, inner: Builder, plan: FaultPlan):
        self.inner = inner
        self.plan = plan
        self.built: list[str] = []

    def build(self, task: MeasureTask, placements: list[Placement]) -> list[BuildResult]:
        faults = {}
        for placement in placements:
            key = placement_key(placement)
            self.built.append(key)
            fault = self.plan.fault_for(placement)
            if fault in BUILD_FAULTS:
                faults[key] = fault.value
                self.plan.injected[key] = fault
        if not faults:
            return self.inner.build(task, placements)
        with _worker_function("build_candidate", functools.partial(build_with_faults, faults)):
            return self.inner.build(task, placements)


class FaultyRunner(Runner):
    """A runner that injects run faults (crash, abort, hang, exception, wrong outputs) into the
    builds of the placements a plan selects.

    Parameters
    ----------
    inner : Runner
        The real runner (a :class:`~tvm_hetero.measure.LocalRunner`: the faults run in its
        worker process, its timeout kills the hangs).
    plan : FaultPlan
        Needs ``BuildResult.placement`` to find a build's placement.

    Attributes
    ----------
    ran : list of str
        Keys of the placements whose library this runner ran (failed builds pass through).
    """

    def __init__(self, inner: Runner, plan: FaultPlan):
        self.inner = inner
        self.plan = plan
        self.ran: list[str] = []

    def run(self, task: MeasureTask, builds: list[BuildResult]) -> list[MeasureResult]:
        return [self._run_one(task, build) for build in builds]

    def _run_one(self, task: MeasureTask, build: BuildResult) -> MeasureResult:
        if build.error != ErrorKind.NONE or build.placement is None:
            return self.inner.run(task, [build])[0]
        key = placement_key(build.placement)
        self.ran.append(key)
        fault = self.plan.fault_for(build.placement)
        if fault not in RUN_FAULTS:
            return self.inner.run(task, [build])[0]
        self.plan.injected[key] = fault
        with _worker_function("run_candidate", functools.partial(run_with_fault, fault.value)):
            return self.inner.run(task, [build])[0]
