"""`tvm-hetero tune MODEL --device .. --records R.jsonl -o placement.json`."""

from __future__ import annotations

import sys

from .. import api
from .common import (add_device_args, add_memory_args, add_model_args, parse_input_shapes,
                     parse_memory, parse_shape_ranges, print_json)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "tune", help="search for the fastest correct placement",
        description="Measure candidate placements (every output verified) and search for the "
                    "fastest; below --threshold samples the best measured wins, past it an "
                    "XGBoost cost model ranks the candidates.")
    add_model_args(parser)
    add_device_args(parser)
    add_memory_args(parser)
    parser.add_argument("--trials", "-n", type=int, default=64,
                        help="candidates to evaluate at most (default: 64)")
    parser.add_argument("--strategy", "-s", choices=api.STRATEGIES, default="xgb",
                        help="search strategy (default: xgb)")
    parser.add_argument("--threshold", type=int, default=api.DEFAULT_THRESHOLD,
                        help=f"samples before the cost model is trained, at least 8, the cost "
                             f"model's minimum (default: {api.DEFAULT_THRESHOLD})")
    parser.add_argument("--max-devices", type=int, metavar="N",
                        help="devices the greedy seed may use at most (default: the fewest, "
                             "by score, whose capacity holds the model)")
    parser.add_argument("--retime", type=int, default=3, metavar="K",
                        help="before declaring the winner, re-time the K best candidates and "
                             "each device alone alternately in one process (default: 3; 0: "
                             "off)")
    parser.add_argument("--retime-rounds", type=int, default=5, metavar="R",
                        help="rounds of that re-timing, best of each (default: 5)")
    parser.add_argument("--batch-size", type=int, default=8,
                        help="candidates per round (default: 8)")
    parser.add_argument("--time-budget", type=float, metavar="SECONDS",
                        help="stop starting rounds after this long (default: no limit)")
    parser.add_argument("--early-stopping", type=int, metavar="N",
                        help="stop after N trials without improvement (default: off)")
    parser.add_argument("--records", "-r", required=True,
                        help="records file (JSON lines); resumed when it exists")
    parser.add_argument("--output", "-o", required=True, help="where to write the placement")
    parser.add_argument("--workdir", help="task, profile and cost model files (default: a "
                                          "directory beside the records)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default: 0)")
    parser.add_argument("--build-timeout", type=float, default=300,
                        help="seconds per build (default: 300)")
    parser.add_argument("--run-timeout", type=float, default=120,
                        help="seconds per run (default: 120)")
    parser.add_argument("--report", metavar="DIR",
                        help="also write the report (markdown, plots) into DIR")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    parser.set_defaults(func=run)


def run(args) -> int:
    from tqdm import tqdm

    bar = tqdm(total=args.trials, desc="tune", unit="cand", disable=None, file=sys.stderr,
               dynamic_ncols=True)

    def progress(trial, best_ms):
        now = f"{trial.result.median_ms:.3f} ms" if trial.result.ok else trial.result.error.value
        bar.set_postfix_str(f"current {now}, best {best_ms:.3f} ms", refresh=False)
        bar.update(1)

    try:
        result, summary = api.tune_placement(
            args.model, args.devices, args.records, args.output,
            memory=parse_memory(args.memory), input_shapes=parse_input_shapes(args.input_shape),
        shape_ranges=parse_shape_ranges(args.shape_range),
            workdir=args.workdir, trials=args.trials, strategy=args.strategy,
            threshold=args.threshold, batch_size=args.batch_size,
            time_budget_s=args.time_budget, early_stopping=args.early_stopping, seed=args.seed,
            max_devices=args.max_devices, retime=args.retime, retime_rounds=args.retime_rounds,
            build_timeout_s=args.build_timeout, run_timeout_s=args.run_timeout,
            report_dir=args.report, callback=progress)
    finally:
        bar.close()
    if args.json:
        print_json(summary)
        return 0
    names = summary["devices"]
    counts = ", ".join(f"{name} {sum(1 for v in result.placement.assignment.values() if v == name)}"
                       for name in names)
    if result.retimed:
        rounds = result.extra["retime"]["rounds"]
        print(f"finalists re-timed alternately ({rounds} rounds, best of each):")
        for placement, searched, again in result.retimed:
            used = list(placement.assignment.values())
            layers = ", ".join(f"{name} {used.count(name)}" for name in names)
            now = f"{again.median_ms:.3f} ms" if again.ok else again.error.value
            print(f"  {now:>12} (searched {searched.median_ms:.3f} ms; layers: {layers})")
    print(f"best placement: {result.latency.median_ms:.3f} ms (layers: {counts})")
    if result.best_single:
        device, single = result.best_single
        print(f"best single device: {device} {single.median_ms:.3f} ms; speedup "
              f"{result.speedup:.2f}x")
    else:
        print("no single device fits or runs the model alone")
    failed = sum(1 for t in result.trials if not t.result.ok)
    print(f"{len(result.trials)} candidates ({result.measured} measured now, {failed} failed) "
          f"in {result.seconds:.1f} s; records {args.records}; placement {args.output}")
    if args.report:
        print(f"report: {summary['report']['report']}")
    if result.extra.get("exhausted"):
        print("the search found no unseen feasible placement: the space is exhausted")
    return 0
