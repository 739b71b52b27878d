"""The harness: :class:`Fuzzer` runs graphs through ours and plain TVM in
``tvm.support.popen_pool`` workers (a timeout is a ``hang``, a dead worker a ``crash``) and
reduces failing ones."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable

from .outcomes import RUNS, GraphResult, Outcome, one_line, onnxruntime_outputs
from .reduction import Reduction, cut_at, deletions, keep_outputs, used_inputs
from .workers import run_ours, run_plain_tvm

# glibc fills each block malloc returns with this byte (XOR 0xff) and each freed block with it
MALLOC_PERTURB_ENV = "MALLOC_PERTURB_"
MALLOC_PERTURB_BYTE = "165"


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
    dirty_memory : bool
        Start the workers with glibc's ``MALLOC_PERTURB_`` set (default True): every buffer
        they allocate, TVM's included, starts filled with a nonzero byte pattern instead of
        the zeros of fresh pages, so a kernel that leaves part of its output unwritten gives
        a wrong answer here rather than passing by chance in a fresh process (generated
        graph 1955: a pad's row never written read 0, right for a zero pad).
    """

    def __init__(self, jobs: int = 1, timeout_s: float = 60.0, *, strict_rules: bool = False,
                 log_path: str | None = None, work_dir: str | None = None,
                 dirty_memory: bool = True):
        self.jobs = jobs
        self.dirty_memory = dirty_memory
        self.timeout_s = timeout_s
        self.strict_rules = strict_rules
        self.log_path = log_path
        self.work_dir = work_dir
        self._pool = None
        self._log = None
        self._saved_perturb = None

    # -- workers ---------------------------------------------------------------------------
    def _executor(self):
        if self._pool is None:
            from tvm.support.popen_pool import PopenPoolExecutor

            self._log = open(self.log_path or os.devnull, "a")
            # the workers start lazily and inherit os.environ then: it stays set until close
            # (glibc reads it at a process's start, so this process is unaffected)
            self._saved_perturb = os.environ.get(MALLOC_PERTURB_ENV)
            if self.dirty_memory:
                os.environ[MALLOC_PERTURB_ENV] = MALLOC_PERTURB_BYTE
            else:
                os.environ.pop(MALLOC_PERTURB_ENV, None)
            self._pool = PopenPoolExecutor(max_workers=self.jobs, timeout=self.timeout_s,
                                           stdout=self._log, stderr=self._log)
        return self._pool

    def close(self) -> None:
        """Stop the workers."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
            if self._saved_perturb is None:
                os.environ.pop(MALLOC_PERTURB_ENV, None)
            else:
                os.environ[MALLOC_PERTURB_ENV] = self._saved_perturb
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
                outcomes[run] = Outcome("crash", "worker died: " + one_line(err, 200))
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
        from ..graph_gen import random_graph, random_inputs

        runs = RUNS if plain_always else ("cpu", "placed")
        pending = []
        for seed in seeds:
            model = random_graph(seed, min_nodes=min_nodes, max_nodes=max_nodes)
            inputs = random_inputs(model, seed)
            try:
                want = onnxruntime_outputs(model, inputs)
            except Exception as err:  # a generator bug: its graphs must run
                raise RuntimeError(f"onnxruntime cannot run generated graph {seed}: "
                                   f"{one_line(err)}") from err
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

        def kept(candidate, candidate_inputs, change: str) -> bool:
            """Whether `candidate` still fails; if so it is the current graph from now on."""
            nonlocal current, current_inputs
            if not still_fails(candidate, candidate_inputs):
                return False
            current, current_inputs = candidate, candidate_inputs
            if log:
                log(f"  {change}: {len(current.graph.node)} nodes")
            return True

        # one output first: the one that differs, else each in turn
        outcome = result.outcomes[run]
        order = list(range(len(model.graph.output)))
        if outcome.output is not None:
            order.remove(outcome.output)
            order.insert(0, outcome.output)
        if len(order) > 1:
            for index in order:
                candidate = keep_outputs(current, [current.graph.output[index].name])
                if candidate is not None and kept(
                        candidate, used_inputs(candidate, current_inputs),
                        f"kept output {index} only"):
                    break
        # the graph cut after one value (its only output), smallest cut first
        cuts = [o for node in current.graph.node for o in node.output
                if o not in {v.name for v in current.graph.output}]
        for name in cuts:
            if time.perf_counter() >= deadline:
                break
            candidate = cut_at(current, name)
            if candidate is None or len(candidate.graph.node) >= len(current.graph.node):
                continue
            if kept(candidate, used_inputs(candidate, current_inputs), f"cut after {name}"):
                break
        progress = True
        while progress and time.perf_counter() < deadline:
            progress = False
            for index in reversed(range(len(current.graph.node))):
                if time.perf_counter() >= deadline:
                    break
                if index >= len(current.graph.node):
                    continue
                for candidate, cand_inputs in deletions(current, current_inputs, index):
                    if kept(candidate, cand_inputs,
                            f"deleted {current.graph.node[index].op_type}"):
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


__all__ = ["Fuzzer"]
