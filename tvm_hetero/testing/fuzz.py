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
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

TOLERANCE = 1e-4
DEVICES = ("cpu", "cpu-generic")
OUTCOMES = ("pass", "mismatch", "crash", "hang", "refused")
FAILURES = ("mismatch", "crash", "hang")
# the builds and runs of one graph: ours all on cpu, ours placed, plain TVM
RUNS = ("cpu", "placed", "plain")
SLOW_BUILD_S = 20.0
_SEVERITY = {"hang": 4, "crash": 3, "mismatch": 2, "refused": 1, "pass": 0}


@dataclass
class Outcome:
    """One build-and-run of a graph.

    Attributes
    ----------
    status : str
        One of :data:`OUTCOMES`.
    detail : str
        One line: what failed (stage and message) or which output differs.
    error : float
        The largest relative error over the outputs (0 when none was compared).
    build_s : float or None
        Seconds of the build (None when it did not finish).
    rules : dict
        Kernel -> the rule that scheduled it (ours; None: TVM's default loops).
    kernel_s : dict
        Kernel -> seconds of its code generation (the placed build, compiled per kernel).
    rule_errors : list of str
        Rules that raised on a kernel and were passed over (the build took the next rule).
    output : int or None
        The output that differs most (mismatch).
    """

    status: str
    detail: str = ""
    error: float = 0.0
    build_s: float | None = None
    rules: dict = field(default_factory=dict)
    kernel_s: dict = field(default_factory=dict)
    rule_errors: list = field(default_factory=list)
    output: int | None = None

    @property
    def failed(self) -> bool:
        return self.status in FAILURES

    def signature(self) -> str:
        """The failure class: the status, and for a crash its message without names and
        numbers (a deletion that changes a buffer's name keeps the class)."""
        if self.status != "crash":
            return self.status
        text = re.sub(r"0x[0-9a-fA-F]+", "0x", self.detail)  # pointers
        text = re.sub(r"\b\w*_\w*\b", "_", text)
        return "crash: " + re.sub(r"\d+", "N", text)[:160]


@dataclass
class GraphResult:
    """The outcomes of one generated graph."""

    seed: int
    nodes: int
    ops: list[str]
    outcomes: dict[str, Outcome]
    placement_devices: list[str] = field(default_factory=list)

    @property
    def ours(self) -> Outcome:
        """The worse of our two builds."""
        cpu, placed = self.outcomes["cpu"], self.outcomes["placed"]
        return placed if _SEVERITY[placed.status] > _SEVERITY[cpu.status] else cpu

    @property
    def ours_fail_plain_pass(self) -> bool:
        return self.ours.failed and self.outcomes["plain"].status == "pass"

    def failing_run(self) -> str | None:
        """Our run to reduce: ``cpu`` when it fails (deterministic), else ``placed``."""
        for run in ("cpu", "placed"):
            if self.outcomes[run].failed:
                return run
        return None


# ----------------------------------------------------------------------------------------------
# comparing outputs


def compare(got: list, want: list) -> tuple[float, str, int | None]:
    """(largest relative error, what differs or "", the output that differs most).

    The relative error of an output is max |got - want| / max |want| over its finite
    elements; NaN or inf where the reference has none (or the other way), another shape,
    dtype or number of outputs is an infinite error.
    """
    if len(got) != len(want):
        return math.inf, f"{len(got)} outputs, {len(want)} expected", None
    worst, worst_index = 0.0, None
    for index, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return math.inf, f"output {index}: shape {a.shape}, {b.shape} expected", index
        if a.dtype != b.dtype:
            return math.inf, f"output {index}: dtype {a.dtype}, {b.dtype} expected", index
        if a.dtype.kind not in "fc":
            if not np.array_equal(a, b):
                return math.inf, f"output {index}: values differ", index
            continue
        fa, fb = np.isfinite(a), np.isfinite(b)
        if not np.array_equal(fa, fb) or not np.array_equal(a[~fa], b[~fb], equal_nan=True):
            return math.inf, (f"output {index}: {int((~fa).sum())} NaN/inf, onnxruntime "
                              f"{int((~fb).sum())}"), index
        if not fa.any():
            continue
        diff = np.abs(a[fa].astype(np.float64) - b[fb].astype(np.float64)).max()
        error = float(diff / (np.abs(b[fb].astype(np.float64)).max() + 1e-30))
        if error > worst:
            worst, worst_index = error, index
    if worst >= TOLERANCE:
        return worst, f"output {worst_index}: relative error {worst:.3g}", worst_index
    return worst, "", worst_index


def onnxruntime_outputs(model, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's (CPU) outputs of an ONNX model."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def _one_line(err: BaseException, limit: int = 300) -> str:
    from ..errors import error_message

    return error_message(err, with_type=True, max_chars=limit)


# ----------------------------------------------------------------------------------------------
# worker functions (run inside popen_pool workers)


class _RulesOnly(Exception):
    """Raised in place of code generation by a rules-only build."""


class _Capture:
    """Inside a worker: the rules ``build`` chooses (filled while it schedules, so they are
    known when code generation then fails), the rules that raised, and optionally no code
    generation at all (`rules_only`)."""

    def __init__(self, rules_only: bool = False):
        self.rules: dict = {}
        self.rule_errors: list[str] = []
        self.rules_only = rules_only

    def __enter__(self):
        import sys

        build_module = sys.modules["tvm_hetero.build"]
        self._module = build_module
        self._saved = (build_module.schedule_passes, build_module._link_per_target)
        original = self._saved[0]

        def schedule_passes(*args, **kwargs):
            chosen = kwargs.get("chosen", args[3] if len(args) > 3 else None)
            if chosen is not None:
                self.rules = chosen
            return original(*args, **kwargs)

        def no_codegen(*args, **kwargs):
            raise _RulesOnly()

        build_module.schedule_passes = schedule_passes
        if self.rules_only:
            build_module._link_per_target = no_codegen
        capture = self

        class Handler(logging.Handler):
            def emit(self, record):
                message = record.getMessage()
                if message.startswith("rule "):
                    capture.rule_errors.append(message[:200])

        self._handler = Handler(logging.WARNING)
        logging.getLogger("tvm_hetero.optimize").addHandler(self._handler)
        return self

    def __exit__(self, *exc):
        self._module.schedule_passes, self._module._link_per_target = self._saved
        logging.getLogger("tvm_hetero.optimize").removeHandler(self._handler)
        return False


def _kernel_cache(progress_path: str | None):
    """A KernelCache timing each kernel's code generation (and writing the kernel it starts
    to `progress_path`, so that the kernel of a hang is known)."""
    from ..build import KernelCache

    class TimedKernelCache(KernelCache):
        def __init__(self):
            super().__init__()
            self.seconds: dict[str, float] = {}

        def get(self, gv, func, target):
            if progress_path:
                with open(progress_path, "w") as file:
                    file.write(gv.name_hint)
            start = time.perf_counter()
            try:
                return super().get(gv, func, target)
            finally:
                self.seconds[gv.name_hint] = self.seconds.get(gv.name_hint, 0.0) + \
                    time.perf_counter() - start

    return TimedKernelCache()


def _placement(model, devices: tuple[str, ...], seed: int):
    """A random placement over `devices` (both used when there are two layers or more) and a
    random device order, for the layers a build for that set has."""
    import tvm_hetero as th
    from tvm_hetero.prepare import PrepareConfig

    from .models import random_placement

    rng = np.random.default_rng(seed)
    order = list(devices) if rng.integers(2) else list(devices[::-1])
    device_set = th.DeviceSet.parse(order)
    layers = th.extract_layers(model, PrepareConfig.for_devices(device_set))
    placement = random_placement(layers, list(devices), rng)
    used = set(placement.assignment.values())
    if len(layers) >= 2 and len(used) < 2:  # move one layer to the other device
        layer = layers[int(rng.integers(len(layers)))].name
        other = next(d for d in devices if d not in used)
        placement = th.Placement({**placement.assignment, layer: other})
    return placement, order


def run_ours(model_bytes: bytes, inputs: dict, want: list, run: str, seed: int,
             strict_rules: bool = False, rules_only: bool = False,
             progress_path: str | None = None) -> Outcome:
    """tvm_hetero's path: load, build (`run`: ``cpu`` all on cpu; ``placed`` a random
    placement seeded by `seed`, through a timing kernel cache), run, compare with `want`.

    Never raises: every failure is an :class:`Outcome`.
    """
    import onnx

    from ..optimize import STRICT_RULES_ENV

    os.environ[STRICT_RULES_ENV] = "1" if strict_rules else "0"
    import tvm_hetero as th
    from tvm_hetero.errors import ModelError

    try:
        model = th.load_model(onnx.load_from_string(model_bytes), name=f"fuzz_{seed}")
    except ModelError as err:
        return Outcome("refused", _one_line(err))
    except Exception as err:  # noqa: BLE001 (any failure is an outcome)
        return Outcome("crash", "load: " + _one_line(err))
    with _Capture(rules_only) as capture:
        cache = None
        start = time.perf_counter()
        try:
            if run == "cpu":
                compiled = th.build(model, "all:cpu", ["cpu"])
            else:
                placement, order = _placement(model, DEVICES, seed)
                cache = _kernel_cache(progress_path)
                compiled = th.build(model, placement, order, kernel_cache=cache)
        except Exception as err:  # noqa: BLE001
            stopped = isinstance(err, _RulesOnly) or isinstance(err.__cause__, _RulesOnly)
            if stopped:
                outcome = Outcome("pass")
            elif isinstance(err, ModelError):  # a clear refusal, wherever it comes
                outcome = Outcome("refused", "build: " + _one_line(err))
            else:
                outcome = Outcome("crash", "build: " + _one_line(err))
            outcome.rules = dict(capture.rules)
            outcome.rule_errors = list(capture.rule_errors)
            return outcome
        build_s = time.perf_counter() - start
    outcome = Outcome("pass", build_s=build_s, rules=dict(compiled.stats.rules),
                      rule_errors=list(capture.rule_errors))
    if cache is not None:  # BuildStats' own per-kernel times where it has them
        outcome.kernel_s = dict(getattr(compiled.stats, "kernel_compile_s", None)
                                or cache.seconds)
    try:
        got = compiled.run({spec.name: inputs[spec.source_name or spec.name]
                            for spec in model.inputs})
    except Exception as err:  # noqa: BLE001
        outcome.status, outcome.detail = "crash", "run: " + _one_line(err)
        return outcome
    return _compared(outcome, got, want)


def run_plain_tvm(model_bytes: bytes, inputs: dict, want: list) -> Outcome:
    """Plain TVM: ``from_onnx`` + ``tvm.compile`` for llvm + the Relax VM on the CPU."""
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    model = onnx.load_from_string(model_bytes)
    init_names = {init.name for init in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in init_names]
    try:
        mod = from_onnx(model, shape_dict={n: list(inputs[n].shape) for n in names},
                        dtype_dict={n: str(inputs[n].dtype) for n in names},
                        keep_params_in_input=False)
    except Exception as err:  # noqa: BLE001
        return Outcome("refused", _one_line(err))
    start = time.perf_counter()
    try:
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    except Exception as err:  # noqa: BLE001
        return Outcome("crash", "build: " + _one_line(err))
    outcome = Outcome("pass", build_s=time.perf_counter() - start)
    try:
        result = vm["main"](*[tvm.runtime.tensor(inputs[n], tvm.cpu()) for n in names])
        got = _flatten(result)
    except Exception as err:  # noqa: BLE001
        outcome.status, outcome.detail = "crash", "run: " + _one_line(err)
        return outcome
    return _compared(outcome, got, want)


def _compared(outcome: Outcome, got: list, want: list) -> Outcome:
    """`outcome` with `got` compared with `want`: its error, and a mismatch where they
    differ."""
    outcome.error, detail, outcome.output = compare(got, want)
    if detail:
        outcome.status, outcome.detail = "mismatch", detail
    return outcome


def _flatten(value) -> list[np.ndarray]:
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    if isinstance(value, (list, tuple)) or type(value).__name__ in ("Array", "List"):
        return [a for item in value for a in _flatten(item)]
    return [np.asarray(value)]


# ----------------------------------------------------------------------------------------------
# the harness


class Fuzzer:
    """Runs generated graphs (or any ONNX model) through ours and plain TVM in worker
    processes, and reduces failing ones.

    Parameters
    ----------
    jobs : int
        Worker processes.
    timeout_s : float
        Seconds each build-and-run may take (load, build, run) before it is a ``hang``.
    strict_rules : bool
        Builds with ``TVM_HETERO_STRICT_RULES=1``: a rule that raises is a crash (by default
        the build takes the next rule, as it does for a user, and the rule is recorded in
        :attr:`Outcome.rule_errors`).
    log_path : str, optional
        Where the workers' stdout and stderr go (default: discarded).
    work_dir : str, optional
        A folder for the kernel-progress files that name the kernel of a hang.
    """

    def __init__(self, jobs: int = 1, timeout_s: float = 60.0, *, strict_rules: bool = False,
                 log_path: str | None = None, work_dir: str | None = None):
        self.jobs = jobs
        self.timeout_s = timeout_s
        self.strict_rules = strict_rules
        self.log_path = log_path
        self.work_dir = work_dir
        self._pool = None
        self._log = None

    # -- workers ---------------------------------------------------------------------------
    def _executor(self):
        if self._pool is None:
            from tvm.support.popen_pool import PopenPoolExecutor

            self._log = open(self.log_path or os.devnull, "a")
            self._pool = PopenPoolExecutor(max_workers=self.jobs, timeout=self.timeout_s,
                                           stdout=self._log, stderr=self._log)
        return self._pool

    def close(self) -> None:
        """Stop the workers."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _progress_path(self, key: str) -> str | None:
        if self.work_dir is None:
            return None
        os.makedirs(self.work_dir, exist_ok=True)
        return os.path.join(self.work_dir, f"kernel_{key}.txt")

    def submit(self, model, inputs: dict, want: list, runs: Iterable[str] = RUNS, *,
               seed: int = 0, rules_only: bool = False) -> dict[str, Any]:
        """Start `runs` of one model; returns ``{run: future}`` (see :meth:`collect`)."""
        data = model.SerializeToString()
        pool = self._executor()
        futures = {}
        for run in runs:
            if run == "plain":
                futures[run] = pool.submit(run_plain_tvm, data, inputs, want)
            else:
                progress = self._progress_path(f"{seed}_{run}") if run == "placed" else None
                futures[run] = pool.submit(run_ours, data, inputs, want, run, seed,
                                           self.strict_rules, rules_only, progress)
                futures[run].progress_path = progress
        return futures

    def collect(self, futures: dict[str, Any]) -> dict[str, Outcome]:
        """The outcomes of :meth:`submit`'s futures: a timeout is a ``hang``, a worker that
        died a ``crash``."""
        outcomes = {}
        for run, future in futures.items():
            try:
                outcomes[run] = future.result()
            except TimeoutError:
                detail = f"over {self.timeout_s:g} s"
                path = getattr(future, "progress_path", None)
                if path and os.path.exists(path):
                    with open(path) as file:
                        detail += f" (compiling kernel {file.read().strip()})"
                outcomes[run] = Outcome("hang", detail)
            except Exception as err:  # noqa: BLE001 (the worker died: a segfault, an abort)
                outcomes[run] = Outcome("crash", "worker died: " + _one_line(err, 200))
        return outcomes

    def check(self, model, inputs: dict, runs: Iterable[str] = RUNS, *,
              seed: int = 0) -> dict[str, Outcome]:
        """Build and run one model every way in `runs`, against onnxruntime."""
        want = onnxruntime_outputs(model, inputs)
        return self.collect(self.submit(model, inputs, want, runs, seed=seed))

    def run_graphs(self, seeds: Iterable[int], *, min_nodes: int = 4, max_nodes: int = 20,
                   plain_always: bool = True,
                   progress: Callable[[GraphResult], None] | None = None) -> list[GraphResult]:
        """Generate, run and classify one graph per seed (graph and inputs from the seed).

        The reference is computed here (onnxruntime); the runs of every graph are queued at
        once and run `jobs` at a time. Without `plain_always`, plain TVM runs only the graphs
        on which ours fails (its outcome is ``pass`` for the others, unchecked): a third
        less work, for tests that only ask whether ours fails where plain TVM passes.
        """
        from .graph_gen import random_graph, random_inputs

        runs = RUNS if plain_always else ("cpu", "placed")
        pending = []
        for seed in seeds:
            model = random_graph(seed, min_nodes=min_nodes, max_nodes=max_nodes)
            inputs = random_inputs(model, seed)
            try:
                want = onnxruntime_outputs(model, inputs)
            except Exception as err:  # a generator bug: its graphs must run
                raise RuntimeError(f"onnxruntime cannot run generated graph {seed}: "
                                   f"{_one_line(err)}") from err
            pending.append((seed, model, inputs, want,
                            self.submit(model, inputs, want, runs, seed=seed)))
        results = []
        for seed, model, inputs, want, futures in pending:
            outcomes = self.collect(futures)
            if "plain" not in outcomes:
                if any(o.failed for o in outcomes.values()):
                    outcomes.update(self.collect(self.submit(model, inputs, want, ("plain",),
                                                             seed=seed)))
                else:
                    outcomes["plain"] = Outcome("pass", "not run (ours passed)")
            result = GraphResult(seed, len(model.graph.node),
                                 [n.op_type for n in model.graph.node], outcomes)
            results.append(result)
            if progress is not None:
                progress(result)
        return results

    # -- reduction -------------------------------------------------------------------------
    def reduce(self, model, inputs: dict, result: GraphResult, *, budget_s: float = 900.0,
               log: Callable[[str], None] | None = None) -> "Reduction":
        """The smallest graph (by deleting nodes one at a time) on which our failing run
        still fails the same way while plain TVM's outcome stays the same.

        Parameters
        ----------
        model : onnx.ModelProto
            The failing graph; `inputs` its inputs; `result` its outcomes.
        budget_s : float
            Stop deleting after this many seconds (the graph reduced so far is returned).
        """
        run = result.failing_run()
        if run is None:
            raise ValueError("nothing fails in this graph")
        target = result.outcomes[run].signature()
        plain = result.outcomes["plain"].status
        deadline = time.perf_counter() + budget_s
        checks = 0

        def still_fails(candidate, candidate_inputs) -> bool:
            nonlocal checks
            checks += 1
            try:
                want = onnxruntime_outputs(candidate, candidate_inputs)
            except Exception:  # noqa: BLE001 (a deletion onnxruntime refuses: not kept)
                return False
            outcomes = self.collect(self.submit(candidate, candidate_inputs, want,
                                                (run, "plain"), seed=result.seed))
            return outcomes[run].signature() == target and outcomes["plain"].status == plain

        current, current_inputs = model, dict(inputs)
        # one output first: the one that differs, else each in turn
        outcome = result.outcomes[run]
        order = list(range(len(model.graph.output)))
        if outcome.output is not None:
            order.remove(outcome.output)
            order.insert(0, outcome.output)
        if len(order) > 1:
            for index in order:
                candidate = _keep_outputs(current, [current.graph.output[index].name])
                if candidate is None:
                    continue
                cand_inputs = _used_inputs(candidate, current_inputs)
                if still_fails(candidate, cand_inputs):
                    current, current_inputs = candidate, cand_inputs
                    if log:
                        log(f"  kept output {index} only: {len(current.graph.node)} nodes")
                    break
        # the graph cut after one value (its only output), smallest cut first
        cuts = [o for node in current.graph.node for o in node.output
                if o not in {v.name for v in current.graph.output}]
        for name in cuts:
            if time.perf_counter() >= deadline:
                break
            candidate = _cut_at(current, name)
            if candidate is None or len(candidate.graph.node) >= len(current.graph.node):
                continue
            cand_inputs = _used_inputs(candidate, current_inputs)
            if still_fails(candidate, cand_inputs):
                current, current_inputs = candidate, cand_inputs
                if log:
                    log(f"  cut after {name}: {len(current.graph.node)} nodes")
                break
        progress = True
        while progress and time.perf_counter() < deadline:
            progress = False
            for index in reversed(range(len(current.graph.node))):
                if time.perf_counter() >= deadline:
                    break
                if index >= len(current.graph.node):
                    continue
                for candidate, cand_inputs in _deletions(current, current_inputs, index):
                    if still_fails(candidate, cand_inputs):
                        if log:
                            log(f"  deleted {current.graph.node[index].op_type}: "
                                f"{len(candidate.graph.node)} nodes")
                        current, current_inputs = candidate, cand_inputs
                        progress = True
                        break
        # the reduced graph once more, with the rules of its kernels
        want = onnxruntime_outputs(current, current_inputs)
        outcomes = self.collect(self.submit(current, current_inputs, want, (run, "plain"),
                                            seed=result.seed))
        final = outcomes[run]
        if not final.rules and final.status in ("hang", "crash"):  # rules without codegen
            rules = self.collect(self.submit(current, current_inputs, want, (run,),
                                             seed=result.seed, rules_only=True))[run]
            final.rules = rules.rules
        return Reduction(result.seed, run, target, current, current_inputs, final,
                         outcomes["plain"], checks, len(model.graph.node))


@dataclass
class Reduction:
    """A failing graph reduced: the model, its inputs, and its outcomes."""

    seed: int
    run: str
    signature: str
    model: Any
    inputs: dict
    outcome: Outcome
    plain: Outcome
    checks: int
    original_nodes: int

    def describe(self) -> str:
        """One line per node: op, input shapes -> output shapes, attributes."""
        import onnx

        inferred = onnx.shape_inference.infer_shapes(self.model)
        shapes = {}
        for value in [*inferred.graph.input, *inferred.graph.value_info,
                      *inferred.graph.output]:
            dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
            shapes[value.name] = dims
        for init in self.model.graph.initializer:
            shapes[init.name] = list(init.dims)
        inits = {init.name for init in self.model.graph.initializer}
        lines = []
        for node in self.model.graph.node:
            ins = ", ".join(("const" if n in inits else "") + str(shapes.get(n, "?"))
                            for n in node.input if n)
            outs = ", ".join(str(shapes.get(n, "?")) for n in node.output)
            attrs = ", ".join(f"{a.name}={onnx.helper.get_attribute_value(a)}"
                              for a in node.attribute)
            lines.append(f"{node.op_type}({ins}) -> {outs}" + (f" [{attrs}]" if attrs else ""))
        return "\n".join(lines)

    def save(self, directory: str) -> str:
        """Write ``seed{S}_{run}_{status}.onnx`` (+ ``.npz`` inputs, ``.json`` summary)."""
        import onnx

        os.makedirs(directory, exist_ok=True)
        stem = os.path.join(directory, f"seed{self.seed}_{self.run}_{self.outcome.status}")
        onnx.save(self.model, stem + ".onnx")
        np.savez(stem + ".npz", **self.inputs)
        summary = {"seed": self.seed, "run": self.run, "signature": self.signature,
                   "nodes": len(self.model.graph.node), "original_nodes": self.original_nodes,
                   "checks": self.checks, "ours": asdict(self.outcome),
                   "plain": asdict(self.plain), "graph": self.describe().splitlines()}
        with open(stem + ".json", "w") as file:
            json.dump(summary, file, indent=1, default=str)
        return stem + ".onnx"


# ----------------------------------------------------------------------------------------------
# graph surgery for the reduction


def _valid(model) -> bool:
    import onnx

    try:
        onnx.checker.check_model(model, full_check=True)
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception:  # noqa: BLE001
        return False
    return True


def _prune(model):
    """Drop nodes no output needs, then unused initializers and graph inputs; None if the
    graph has no output left or is invalid."""
    import onnx

    graph = model.graph
    if not graph.output:
        return None
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(n for n in node.input if n)
    keep.reverse()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(keep)
    inits = [i for i in graph.initializer if i.name in needed]
    del out.graph.initializer[:]
    out.graph.initializer.extend(inits)
    inputs = [i for i in graph.input if i.name in needed]
    del out.graph.input[:]
    out.graph.input.extend(inputs)
    del out.graph.value_info[:]
    produced = {o for n in keep for o in n.output}
    if not produced & {o.name for o in out.graph.output}:
        return None  # every output would be a graph input or a constant
    return out if _valid(out) else None


def _keep_outputs(model, names: list[str]):
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    outputs = [o for o in model.graph.output if o.name in names]
    del out.graph.output[:]
    out.graph.output.extend(outputs)
    return _prune(out)


def _cut_at(model, name: str):
    """The graph computing only `name` (its one output)."""
    import onnx

    try:
        info = _value_infos(model)[name]
    except Exception:  # noqa: BLE001
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.output[:]
    out.graph.output.append(info)
    return _prune(out)


def _used_inputs(model, inputs: dict) -> dict:
    names = {i.name for i in model.graph.input}
    return {k: v for k, v in inputs.items() if k in names}


def _value_infos(model) -> dict[str, Any]:
    """Every value's ValueInfoProto (inputs, intermediates, outputs) by name."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    return {v.name: v for v in [*inferred.graph.input, *inferred.graph.value_info,
                                *inferred.graph.output]}


def _intermediates(model, inputs: dict, names: list[str]) -> dict[str, np.ndarray]:
    """onnxruntime's values of intermediate tensors."""
    import onnx

    infos = _value_infos(model)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output}
    probe.graph.output.extend(infos[n] for n in names if n not in existing)
    out_names = [o.name for o in probe.graph.output]
    values = onnxruntime_outputs(probe, inputs)
    return {n: v for n, v in zip(out_names, values) if n in names}


def _deletions(model, inputs: dict, index: int):
    """Graphs without node `index`: its outputs' readers rewired to an earlier value of the
    same type and shape (its own inputs first), or its outputs made graph inputs (fed what
    onnxruntime computed for them)."""
    import onnx

    try:
        infos = _value_infos(model)
    except Exception:  # noqa: BLE001
        return
    node = model.graph.node[index]
    outputs = [o for o in node.output if o]

    def type_of(name):
        info = infos.get(name)
        return None if info is None else info.type.SerializeToString()

    earlier = [n for n in node.input if n] + [i.name for i in model.graph.input]
    for prior in model.graph.node[:index]:
        earlier.extend(prior.output)
    replacement = {}
    for out in outputs:
        match = next((e for e in dict.fromkeys(earlier) if type_of(e) is not None
                      and type_of(e) == type_of(out)), None)
        if match is None:
            break
        replacement[out] = match
    else:
        candidate = _rewired(model, index, replacement)
        if candidate is not None:
            yield candidate, _used_inputs(candidate, inputs)
    # the node's outputs as graph inputs
    try:
        values = _intermediates(model, inputs, outputs)
    except Exception:  # noqa: BLE001
        return
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[index]
    graph_outputs = [o for o in out.graph.output if o.name not in outputs]
    del out.graph.output[:]
    out.graph.output.extend(graph_outputs)
    out.graph.input.extend(infos[o] for o in outputs)
    candidate = _prune(out)
    if candidate is not None:
        new_inputs = dict(inputs)
        new_inputs.update(values)
        yield candidate, _used_inputs(candidate, new_inputs)


def _rewired(model, index: int, replacement: dict[str, str]):
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[index]
    for node in out.graph.node:
        node.input[:] = [replacement.get(n, n) for n in node.input]
    graph_inputs = {i.name for i in out.graph.input}
    outputs, seen = [], set()
    for value in out.graph.output:
        name = replacement.get(value.name, value.name)
        if name in graph_inputs or name in seen:
            continue  # an output that would only echo an input (or another output)
        seen.add(name)
        new = onnx.ValueInfoProto()
        new.CopyFrom(value)
        new.name = name
        outputs.append(new)
    del out.graph.output[:]
    out.graph.output.extend(outputs)
    return _prune(out)


# ----------------------------------------------------------------------------------------------
# tables


def outcome_counts(results: list[GraphResult]) -> dict[str, dict[str, int]]:
    """``{column: {outcome: count}}`` for ours on cpu, ours placed, ours (worse of the two)
    and plain TVM."""
    columns = {"ours cpu": lambda r: r.outcomes["cpu"], "ours placed": lambda r: r.outcomes[
        "placed"], "ours (either)": lambda r: r.ours, "plain TVM": lambda r: r.outcomes["plain"]}
    counts = {}
    for column, get in columns.items():
        counts[column] = dict.fromkeys(OUTCOMES, 0)
        for result in results:
            counts[column][get(result).status] += 1
    return counts


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's processor string."""
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


__all__ = ["DEVICES", "FAILURES", "Fuzzer", "GraphResult", "OUTCOMES", "Outcome", "Reduction",
           "RUNS", "SLOW_BUILD_S", "TOLERANCE", "compare", "cpu_name", "onnxruntime_outputs",
           "outcome_counts", "run_ours", "run_plain_tvm"]
