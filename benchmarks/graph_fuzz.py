"""Differential testing on generated graphs: random valid ONNX graphs, each built with
tvm_hetero (all on `cpu`, and under a random `cpu`/`cpu-generic` placement) and with plain TVM,
run on random inputs and compared with onnxruntime. Goal: no mismatch, crash or hang of ours
where plain TVM passes.

    python benchmarks/graph_fuzz.py --graphs 150 --seed 0 --jobs 1 [--out out/fuzz]
        [--timeout-s 60] [--reduce-budget-s 600] [--no-reduce] [--strict-rules]

Graph i has seed S + i (``tvm_hetero.testing.graph_gen.random_graph(S + i)``; inputs from the
same seed), so one graph is rerun with ``--graphs 1 --seed S+i``. Every build and run is a
worker process of ``tvm.support.popen_pool`` with the timeout: outcomes are pass, mismatch
(relative error max|got - want| / max|want| >= 1e-4, NaN/inf or shape differences), crash
(an exception or a dead worker), hang (over the timeout) and refused (our clear error).

Each graph on which ours fails is reduced (nodes deleted while the same failure persists and
plain TVM's outcome stays the same) and written to --out as ``seed{S}_{run}_{status}.onnx``,
with its inputs (``.npz``) and a summary naming its kernels' rules (``.json``).
``results.jsonl`` there holds every graph's outcomes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections import defaultdict
from dataclasses import asdict

from tvm_hetero.testing.fuzz import (OUTCOMES, RUNS, SLOW_BUILD_S, Fuzzer,
                                     cpu_name, outcome_counts)
from tvm_hetero.testing.graph_gen import random_graph, random_inputs


def print_table(results) -> None:
    counts = outcome_counts(results)
    header = f"{'':<16}" + "".join(f"{o:>10}" for o in OUTCOMES)
    print(header)
    print("-" * len(header))
    for column, row in counts.items():
        print(f"{column:<16}" + "".join(f"{row[o]:>10}" for o in OUTCOMES))
    ours_only = sum(r.ours_fail_plain_pass for r in results)
    plain_only = sum(r.outcomes["plain"].failed and r.ours.status == "pass" for r in results)
    print(f"ours fails where plain TVM passes: {ours_only}; plain TVM fails where ours "
          f"passes: {plain_only}")


def print_builds(results, top: int = 10) -> None:
    builds = []
    for r in results:
        for run in RUNS:
            o = r.outcomes[run]
            if o.build_s is not None:
                builds.append((o.build_s, r.seed, run))
            elif o.status == "hang":
                builds.append((float("inf"), r.seed, run))
    builds.sort(reverse=True)
    slow = [b for b in builds if b[0] > SLOW_BUILD_S]
    print(f"\nslowest builds (seconds; > {SLOW_BUILD_S:g} s flagged; {len(slow)} flagged, a "
          "hang counts as inf):")
    for seconds, seed, run in builds[:top]:
        flag = "  SLOW" if seconds > SLOW_BUILD_S else ""
        print(f"  seed {seed:<8} {run:<7} {seconds:8.2f}{flag}")
    kernels = []
    for r in results:
        o = r.outcomes["placed"]
        for kernel, seconds in o.kernel_s.items():
            kernels.append((seconds, r.seed, kernel, o.rules.get(kernel)))
    kernels.sort(reverse=True)
    print("slowest kernels (code generation of the placed builds, one kernel each):")
    for seconds, seed, kernel, rule in kernels[:top]:
        print(f"  seed {seed:<8} {seconds:7.2f} s  {kernel:<48} {rule}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", default="out/fuzz")
    parser.add_argument("--timeout-s", type=float, default=60.0)
    parser.add_argument("--min-nodes", type=int, default=4)
    parser.add_argument("--max-nodes", type=int, default=20)
    parser.add_argument("--reduce-budget-s", type=float, default=600.0,
                        help="seconds of reduction per failing graph (default 600)")
    parser.add_argument("--no-reduce", action="store_true")
    parser.add_argument("--strict-rules", action="store_true",
                        help="a rule that raises is a crash (default: the next rule is taken "
                             "and the raising rule listed)")
    args = parser.parse_args()
    import tvm

    os.makedirs(args.out, exist_ok=True)
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    print(f"command: {command}")
    print(f"seed {args.seed}, graphs {args.graphs} (seeds {args.seed}.."
          f"{args.seed + args.graphs - 1}), jobs {args.jobs}, timeout {args.timeout_s:g} s")
    print(f"CPU: {cpu_name()} ({os.cpu_count()} CPUs); TVM {tvm.__version__}", flush=True)
    start = time.perf_counter()
    fuzzer = Fuzzer(args.jobs, args.timeout_s, strict_rules=args.strict_rules,
                    log_path=os.path.join(args.out, "workers.log"),
                    work_dir=os.path.join(args.out, "progress"))
    done = 0
    records = open(os.path.join(args.out, "results.jsonl"), "w")

    def progress(result):
        nonlocal done
        done += 1
        records.write(json.dumps({"seed": result.seed, "nodes": result.nodes,
                                  "ops": result.ops, **{run: asdict(o) for run, o in
                                                        result.outcomes.items()}},
                                 default=str) + "\n")
        records.flush()
        bad = {run: o for run, o in result.outcomes.items() if o.status != "pass"}
        if bad:
            print(f"[{done}/{args.graphs}] seed {result.seed} ({result.nodes} nodes): " +
                  "; ".join(f"{run} {o.status}: {o.detail[:160]}" for run, o in bad.items()),
                  flush=True)
        elif done % 10 == 0:
            print(f"[{done}/{args.graphs}] {time.perf_counter() - start:.0f} s", flush=True)

    try:
        results = fuzzer.run_graphs(range(args.seed, args.seed + args.graphs),
                                    min_nodes=args.min_nodes, max_nodes=args.max_nodes,
                                    progress=progress)
        records.close()
        run_s = time.perf_counter() - start
        print()
        print_table(results)
        print_builds(results)
        raised = defaultdict(set)
        for r in results:
            for run in ("cpu", "placed"):
                for line in r.outcomes[run].rule_errors:
                    raised[line.split(" raised")[0]].add(r.seed)
        if raised:
            print("\nrules that raised (the build took the next rule):")
            for rule, seeds in sorted(raised.items()):
                print(f"  {rule}: {len(seeds)} graphs, e.g. seed {min(seeds)}")
        failing = [r for r in results if r.ours.failed]
        classes = defaultdict(list)
        if failing and not args.no_reduce:
            print(f"\nreducing {len(failing)} failing graphs "
                  f"(budget {args.reduce_budget_s:g} s each):", flush=True)
        for r in failing:
            if args.no_reduce:
                classes[r.outcomes[r.failing_run()].signature()].append((r, None))
                continue
            model = random_graph(r.seed, min_nodes=args.min_nodes, max_nodes=args.max_nodes)
            began = time.perf_counter()
            print(f"seed {r.seed}: {r.failing_run()} {r.outcomes[r.failing_run()].status}, "
                  f"{r.nodes} nodes", flush=True)
            reduction = fuzzer.reduce(model, random_inputs(model, r.seed), r,
                                      budget_s=args.reduce_budget_s,
                                      log=lambda line: print(line, flush=True))
            path = reduction.save(args.out)
            print(f"  -> {path}: {len(reduction.model.graph.node)} nodes "
                  f"({reduction.checks} checks, {time.perf_counter() - began:.0f} s); ours "
                  f"{reduction.outcome.status}: {reduction.outcome.detail[:200]}; plain TVM "
                  f"{reduction.plain.status}")
            for line in reduction.describe().splitlines():
                print(f"     {line}")
            for kernel, rule in reduction.outcome.rules.items():
                print(f"     kernel {kernel}: {rule}")
            classes[reduction.signature].append((r, reduction))
        if classes:
            print("\nfailure classes (ours):")
            for signature, members in classes.items():
                seeds = [r.seed for r, _ in members]
                plain_pass = sum(r.outcomes["plain"].status == "pass" for r, _ in members)
                print(f"  {signature}: {len(members)} graphs (plain TVM passes {plain_pass}); "
                      f"seeds {seeds[:12]}")
                for r, reduction in members:
                    if reduction is None:
                        continue
                    rules = sorted({str(v) for v in reduction.outcome.rules.values()})
                    ops = [n.op_type for n in reduction.model.graph.node]
                    print(f"    seed {r.seed}: {' '.join(ops)}; rules {', '.join(rules)}")
        print(f"\n{len(results)} graphs in {run_s:.0f} s ({run_s / max(len(results), 1):.1f} s a "
              f"graph); total {time.perf_counter() - start:.0f} s; command: {command}")
        ours_fail = sum(r.ours_fail_plain_pass for r in results)
        return 1 if ours_fail else 0
    finally:
        fuzzer.close()


if __name__ == "__main__":
    sys.exit(main())
