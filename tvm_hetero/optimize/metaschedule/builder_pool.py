"""MetaSchedule's local builder with its worker processes kept across search iterations.

TVM's ``LocalBuilder`` starts a fresh ``PopenPoolExecutor`` for every batch of candidates (a
memory leak of long-lived workers, its comment says), and each fresh worker's first build
imports ``tvm.s_tir.tensor_intrin``: about 40 s on 2 cores, against well under a second to
build one candidate. With 16 candidates a batch, that import was most of a trial's cost. This
builder keeps its workers for `batches_per_pool` batches, then starts fresh ones (the leak
stays bounded), and builds each candidate as ``LocalBuilder`` does (its worker function).
Its workers, and the tuning process, import the intrinsics through
`import_tensor_intrinsics`, which makes that import itself about 4x faster.
"""

from __future__ import annotations

import inspect
import os

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.builder import local_builder
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

#: batches built by one set of workers before fresh ones are started
BATCHES_PER_POOL = 8


def import_tensor_intrinsics() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (which every MetaSchedule ``TuneContext`` and
    build worker needs) in about a quarter of the time: 22.7 s -> 5.1 s on this project's
    2-core machine, more in a process that has loaded many modules.

    Each of its ~250 TVMScript functions calls ``inspect.stack()``, which asks
    ``inspect.getmodule`` for every frame's module. The import's own frames come from the
    frozen ``importlib._bootstrap`` files, which no module's ``__file__`` names, so every such
    call rescans all of ``sys.modules``. Recording those two files under their modules in
    ``inspect``'s file cache (what a scan would record if frozen modules had files) answers
    the calls at once. Hand-written: no TVM or library option does this.
    """
    for module in ("importlib._bootstrap", "importlib._bootstrap_external"):
        path = os.path.normcase(os.path.abspath(f"<frozen {module}>"))
        inspect.modulesbyfile.setdefault(path, module)
    import tvm.s_tir.tensor_intrin  # noqa: F401 (registers the intrinsics)


@derived_object
class PooledBuilder(PyBuilder):
    """``LocalBuilder`` whose workers serve `batches_per_pool` batches.

    Parameters
    ----------
    max_workers : int
        Worker processes.
    timeout_sec : float
        Seconds one candidate may take to build (its worker is then killed and replaced).
    batches_per_pool : int
        Batches one set of workers builds before it is replaced.
    """

    def __init__(self, max_workers: int, timeout_sec: float,
                 batches_per_pool: int = BATCHES_PER_POOL):
        super().__init__()
        self.max_workers = max_workers
        self.timeout_sec = timeout_sec
        self.batches_per_pool = batches_per_pool
        self.pool = None
        self.batches = 0
        self.pools_started = 0

    def build(self, build_inputs):
        if self.pool is not None and self.batches >= self.batches_per_pool:
            self.shutdown()
        if self.pool is None:
            self.pool = PopenPoolExecutor(max_workers=self.max_workers,
                                          timeout=self.timeout_sec,
                                          initializer=import_tensor_intrinsics)
            self.batches = 0
            self.pools_started += 1
        self.batches += 1
        results = []
        work = [(None, None, build_input.mod, build_input.target,
                 local_builder._serialize_params(build_input.params))
                for build_input in build_inputs]
        for outcome in self.pool.map_with_error_catching(
                lambda args: local_builder._worker_func(*args), work):
            if outcome.status == StatusKind.COMPLETE:
                results.append(BuilderResult(outcome.value, None))
            elif outcome.status == StatusKind.TIMEOUT:
                results.append(BuilderResult(
                    None, f"PooledBuilder: Timeout, killed after {self.timeout_sec} seconds"))
            else:
                results.append(BuilderResult(
                    None, "PooledBuilder: An exception occurred\n" + str(outcome.value)))
        return results

    def shutdown(self) -> None:
        """Stop the workers (a later batch starts fresh ones)."""
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None


__all__ = ["BATCHES_PER_POOL", "PooledBuilder", "import_tensor_intrinsics"]
