"""Fault injection for tests: a builder and a runner that make chosen placements fail the way
real candidates fail.

:class:`FaultyBuilder` and :class:`FaultyRunner` are a :class:`~tvm_hetero.measure.LocalBuilder`
and a :class:`~tvm_hetero.measure.LocalRunner` whose build and run functions (their `f_build` and
`f_run`) are :func:`build_with_faults` and :func:`run_with_faults`. A :class:`FaultPlan`, shared
by both, says which placement gets which :class:`Fault`. Every fault happens inside the real
builder's or runner's own ``tvm.support.popen_pool`` worker process and goes through the real
code that turns it into an error kind: a segfault really kills the worker, a hang really runs
into the timeout.

How: before each batch the builder (runner) writes the faults of its placements (their
libraries) into a dict that its `f_build` (`f_run`) is a ``functools.partial`` of; the partial
is pickled with every submission, so the worker receives the faults of its candidate with it.
The faults, and the error kind each must be recorded with:

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
``wrong_answer``  it runs, checked against a reference moved far off         wrong_answer
================  =========================================================  =============

Example::

    plan = FaultPlan().add(Fault.RUN_CRASH, {placement_key(p)}).add(Fault.BUILD_HANG, pred)
    tune(model, devices, builder=FaultyBuilder(plan, timeout_s=10),
         runner=FaultyRunner(plan, timeout_s=5))
"""

from __future__ import annotations

import functools
import os
import threading
from enum import Enum
from typing import Callable, Collection, Iterable, Union

import numpy as np

from ..measure import worker
from ..measure.builder import LocalBuilder, placement_key
from ..measure.result import BuildResult, ErrorKind, MeasureResult
from ..measure.runner import LocalRunner, Runner
from ..measure.task import MeasureTask
from ..placement import Placement

__all__ = ["BUILD_FAULTS", "EXPECTED", "Fault", "FaultPlan", "FaultyBuilder", "FaultyRunner",
           "InjectedFault", "RUN_FAULTS", "build_with_faults", "run_with_faults"]

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
    """A build function (`f_build`) for a build worker: inject the fault of `placement`, or
    build it normally.

    Parameters
    ----------
    faults : dict of str to str
        Placement key -> :class:`Fault` value, for the faulty placements.
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


def _moved_far_off(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """One element of each array moved far off (a wrong result, not noise): by 1 plus three
    times the array's largest magnitude m, so the original's relative error against the moved
    array, (1 + 3m) / (1 + 4m) at worst, exceeds 3/4."""
    out = []
    for array in arrays:
        array = np.array(array, copy=True)
        if array.size:
            if array.dtype == np.bool_:
                array.flat[0] = not array.flat[0]
            else:
                magnitude = np.abs(array).max() if array.dtype.kind in "fc" else 0
                array.flat[0] = array.flat[0] + 1 + 3 * magnitude
        out.append(array)
    return out


def run_with_faults(faults: dict[str, str], lib_path: str, devices_json: list,
                    inputs_file: str, reference_file: str, *args, **kwargs):
    """A run function (`f_run`) for the run worker: inject the run fault of the library at
    `lib_path`, or run it normally.

    Parameters
    ----------
    faults : dict of str to str
        Library path -> run :class:`Fault` value, for the faulty candidates. ``wrong_answer``
        runs :func:`tvm_hetero.measure.worker.run_candidate` against a reference with one
        element of each output moved far off; the other faults never return.
    lib_path, devices_json, inputs_file, reference_file, *args, **kwargs
        As for :func:`tvm_hetero.measure.worker.run_candidate`.

    Returns
    -------
    dict
        What ``run_candidate`` returns (``ok`` False for ``wrong_answer``).
    """
    fault = faults.get(lib_path)
    if fault == Fault.RUN_RAISE.value:
        raise InjectedFault("injected run failure")
    if fault == Fault.RUN_CRASH.value:
        _segfault()
    if fault == Fault.RUN_ABORT.value:
        _abort()
    if fault == Fault.RUN_HANG.value:
        _hang()
    if fault is None:
        return worker.run_candidate(lib_path, devices_json, inputs_file, reference_file,
                                    *args, **kwargs)
    if fault != Fault.WRONG_ANSWER.value:
        raise ValueError(f"not a run fault: {fault!r}")
    with np.load(reference_file, allow_pickle=False) as data:
        reference = [data[f"arr_{i}"] for i in range(len(data.files))]
    wrong_reference = lib_path + ".wrong_reference.npz"
    np.savez(wrong_reference, *_moved_far_off(reference))
    try:
        return worker.run_candidate(lib_path, devices_json, inputs_file, wrong_reference,
                                    *args, **kwargs)
    finally:
        os.remove(wrong_reference)


# -- the builder and the runner (parent process) ----------------------------------------------

class FaultyBuilder(LocalBuilder):
    """A :class:`~tvm_hetero.measure.LocalBuilder` that injects build faults into the
    placements a plan selects (its `f_build` is :func:`build_with_faults`: the faults run in
    its workers and its timeout kills the hangs).

    Parameters
    ----------
    plan : FaultPlan
        Placements with a run fault are built normally (the runner injects those).
    n_parallel, timeout_s
        As for :class:`~tvm_hetero.measure.LocalBuilder`.

    Attributes
    ----------
    built : list of str
        Keys of every placement handed to this builder, in order (faulty or not).
    """

    def __init__(self, plan: FaultPlan, n_parallel: int | None = None,
                 timeout_s: float = 300.0):
        self._faults: dict[str, str] = {}  # placement key -> build fault, sent with each build
        super().__init__(n_parallel, timeout_s,
                         f_build=functools.partial(build_with_faults, self._faults))
        self.plan = plan
        self.built: list[str] = []

    def build(self, task: MeasureTask, placements: list[Placement]) -> list[BuildResult]:
        for placement in placements:
            key = placement_key(placement)
            self.built.append(key)
            fault = self.plan.fault_for(placement)
            if fault in BUILD_FAULTS:
                self._faults[key] = fault.value
                self.plan.injected[key] = fault
        return super().build(task, placements)


class FaultyRunner(LocalRunner):
    """A :class:`~tvm_hetero.measure.LocalRunner` that injects run faults (crash, abort, hang,
    exception, wrong outputs) into the builds of the placements a plan selects (its `f_run` is
    :func:`run_with_faults`: the faults run in its worker process, its timeout kills the
    hangs).

    Parameters
    ----------
    plan : FaultPlan
        Needs ``BuildResult.placement`` to find a build's placement.
    **runner_args
        As for :class:`~tvm_hetero.measure.LocalRunner` (`timeout_s`, `warmup`, ...).

    Attributes
    ----------
    ran : list of str
        Keys of the placements whose library this runner ran (failed builds pass through).
    """

    def __init__(self, plan: FaultPlan, **runner_args):
        self._faults: dict[str, str] = {}  # library path -> run fault, sent with each run
        super().__init__(**runner_args, f_run=functools.partial(run_with_faults, self._faults))
        self.plan = plan
        self.ran: list[str] = []

    def run(self, task: MeasureTask, builds: list[BuildResult]) -> list[MeasureResult]:
        for build in builds:
            if build.error != ErrorKind.NONE or build.placement is None:
                continue
            key = placement_key(build.placement)
            self.ran.append(key)
            fault = self.plan.fault_for(build.placement)
            if fault in RUN_FAULTS:
                self._faults[build.artifact] = fault.value
                self.plan.injected[key] = fault
        return super().run(task, builds)

    # re-timing runs each round's candidates through run (the faults apply), as the runner
    # this replaces did, not LocalRunner's one process for all
    retime = Runner.retime
