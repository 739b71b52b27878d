"""The worker processes of the builders and runners: a ``tvm.support.popen_pool`` executor
started on first use."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable


class WorkerPool:
    """`max_workers` worker processes, started at the first :meth:`submit`; a call running
    longer than `timeout_s` seconds is killed (its future raises ``TimeoutError``) and its
    worker restarted, as is a worker that crashed (``ChildProcessError``).

    Parameters
    ----------
    max_workers : int
    timeout_s : float
    """

    def __init__(self, max_workers: int, timeout_s: float):
        self.max_workers = max_workers
        self.timeout_s = timeout_s
        self._executor = None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` in a worker (both pickled with cloudpickle)."""
        if self._executor is None:
            from tvm.support.popen_pool import PopenPoolExecutor

            self._executor = PopenPoolExecutor(max_workers=self.max_workers,
                                               timeout=self.timeout_s)
        return self._executor.submit(fn, *args)

    def shutdown(self) -> None:
        """Stop the workers (a later :meth:`submit` starts new ones)."""
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None
