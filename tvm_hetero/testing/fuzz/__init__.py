"""Differential testing on generated graphs: the core of ``benchmarks/graph_fuzz.py``.

Each graph of :func:`~tvm_hetero.testing.graph_gen.random_graph` is run by onnxruntime (the
reference), by tvm_hetero (built all on ``cpu``, and under a random two-device placement over
``cpu`` / ``cpu-generic`` through a kernel cache, as the search's builder builds) and by plain
TVM (``from_onnx`` + ``tvm.compile`` for llvm + the Relax VM). Every build and run happens in
a worker process of ``tvm.support.popen_pool`` with a timeout, so a hang or a segfault is an
outcome, not the end of the run.

Outcomes, for each of the three: ``pass``; ``mismatch`` (max |got - want| / max |want| >=
1e-4, NaN or inf where onnxruntime has none, or another shape or dtype); ``crash`` (an
exception while loading, building or running, or the worker died); ``hang`` (over the
timeout); ``refused`` (a clear refusal: our :class:`~tvm_hetero.errors.ModelError`, or
plain TVM's importer raising).

A graph that fails (ours) is reduced by :meth:`Fuzzer.reduce`: nodes deleted one at a time
(their consumers rewired to an earlier value of the same shape, or the node's output made a
graph input fed the value onnxruntime computed for it), each deletion kept only when the
graph stays valid and the same failure persists while plain TVM's outcome stays the same.

The package: :mod:`.outcomes` (outcomes, the comparison, tables), :mod:`.workers` (what runs
in a worker: ours, observed through ``tvm_hetero.build``'s public hooks, and plain TVM),
:mod:`.harness` (:class:`Fuzzer`: the pool, classification, the reduction loop) and
:mod:`.reduction` (:class:`Reduction` and the graph surgery).
"""

from .harness import Fuzzer
from .outcomes import (DEVICES, FAILURES, OUTCOMES, RUNS, SLOW_BUILD_S, TOLERANCE, GraphResult,
                       Outcome, compare, cpu_name, onnxruntime_outputs, outcome_counts)
from .reduction import Reduction
from .workers import run_ours, run_plain_tvm

__all__ = ["DEVICES", "FAILURES", "Fuzzer", "GraphResult", "OUTCOMES", "Outcome", "Reduction",
           "RUNS", "SLOW_BUILD_S", "TOLERANCE", "compare", "cpu_name", "onnxruntime_outputs",
           "outcome_counts", "run_ours", "run_plain_tvm"]
