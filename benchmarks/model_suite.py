"""The architecture suite against onnxruntime: every model all on one CPU device through
tvm_hetero's default rules (no tuning), checked against onnxruntime, then rounds alternating
onnxruntime (CPU provider, same thread count) and tvm_hetero, the best median of each.

    python benchmarks/model_suite.py [--models a,b] [--rounds 3] [--list]
                                     [--target-mcpu haswell | --device SPEC]
                                     [--no-kernel-times] [--json out.json]
                                     [--tune-trials N --tuning-db DIR [--tune-share F]
                                      [--tune-only]]

Prints the ratio tvm_hetero / onnxruntime per model, the geometric mean and the worst, the CPU
(/proc/cpuinfo) and the target; then a kernel census: every kernel no rule scheduled
(``compiled.stats.rules`` None: TVM's default loops), by layer kind and fused ops, and (unless
--no-kernel-times) each kernel timed alone under the rules the build chose
(``tvm_hetero.measure.profiles.kernel_for``), summed per kernel class, to attribute the time.
For the models whose weights exceed the last-level cache (a decode step: every weight read
from memory once per call) it prints the weight bytes per millisecond of each runtime (GB/s)
beside the copy bandwidth ``tvm-hetero devices`` measures (``profiles.measure_transfer``).
Models: ``tvm_hetero/testing/suite/``.

With ``--tune-trials N --tuning-db DIR`` each model's all-on-device placement is first tuned
with MetaSchedule (``tvm_hetero.tune_kernels``: N trials per model, shared by its kernels; with
``--tune-share F`` only the heaviest kernels making up that share of its time under the rules),
then built with the database, and a "tuned" column is timed beside "rules" in the same
alternating rounds. DIR is one database for the suite, reused across runs: kernels already
there are not tuned again (``--tuning-db DIR`` alone builds the tuned column from what DIR
holds). ``--tune-only`` tunes into DIR and stops (a long tune, in the background, for a later
timed run).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import time
from collections import defaultdict

import onnxruntime as ort

import tvm_hetero as th
from tvm_hetero.devices import host_num_cores
from tvm_hetero.layers.layered import layered_module
from tvm_hetero.measure.profiles import kernel_for, time_kernel
from tvm_hetero.testing import max_relative_error
from tvm_hetero.testing.suite import (SUITE, copy_bandwidth_gbs, cpu_name, ort_cpu_session,
                                      suite_case, weight_bytes)

TOLERANCE = 1e-3  # max |ours - ort| / max |ort| over the outputs
SETTLE_S = 0.5


def last_level_cache_bytes() -> int | None:
    """The largest data cache of CPU 0 (sysfs: its L3 slice, not the whole package's), else
    the C library's L3 size, else None."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    best = None
    try:
        indexes = [name for name in os.listdir(base) if name.startswith("index")]
    except OSError:
        indexes = []
    for index in indexes:
        path = os.path.join(base, index)
        try:
            with open(os.path.join(path, "type")) as kind, \
                    open(os.path.join(path, "size")) as size:
                if kind.read().strip() == "Instruction":
                    continue
                text = size.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            value = int(text.rstrip("KMG")) * scale
        except (OSError, ValueError):
            continue
        best = value if best is None else max(best, value)
    if best is None:
        try:
            best = os.sysconf("SC_LEVEL3_CACHE_SIZE") or None
        except (ValueError, OSError):
            best = None
    return best


def ratio_summary(ratios: dict[str, float]) -> str:
    """"geometric mean G over N models; worst NAME R" of ours/ort ratios by model."""
    geomean = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
    worst = max(ratios, key=ratios.get)
    return (f"geometric mean {geomean:.2f} over {len(ratios)} models; worst {worst} "
            f"{ratios[worst]:.2f}")


def kernel_class(layer, rule) -> str:
    """A kernel's class for the census: layer kind, the rule (or None), the fused ops."""
    ops = []
    for op in layer.op_kinds:  # repeated ops once, in order
        if op not in ops:
            ops.append(op)
    return f"{layer.kind} [{rule}] {'+'.join(ops)}"


def shape_text(layer) -> str:
    return " ".join("x".join(map(str, t.shape)) for t in layer.inputs) + " -> " + \
        " ".join("x".join(map(str, t.shape)) for t in layer.outputs)


def ort_op_times(proto, feed, runs: int = 20) -> dict[str, float]:
    """onnxruntime's own profile: ms per run by op type (its fused node kinds)."""
    session = ort_cpu_session(proto, host_num_cores(),
                              os.path.join(tempfile.gettempdir(), "model_suite_ort"))
    for _ in range(3 + runs):
        session.run(None, feed)
    path = session.end_profiling()
    with open(path) as handle:
        events = json.load(handle)
    os.remove(path)
    totals: dict[str, list[float]] = defaultdict(list)
    for event in events:
        args = event.get("args", {})
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            totals[args.get("op_name", "?")].append(event["dur"] / 1e3)
    # the last `runs` calls of each node (the first 3 are warm-up)
    nodes = {op: len(durs) // (3 + runs) for op, durs in totals.items()}
    return {op: sum(durs[-runs * max(nodes[op], 1):]) / runs for op, durs in totals.items()}


def tune(name, model, device_set, args):
    """Tune one model's all-on-device kernels into args.tuning_db: (summary, seconds)."""
    start = time.perf_counter()
    summary = th.tune_kernels(model, f"all:{device_set.devices[0].name}", device_set,
                              args.tune_trials, args.tuning_db, kernel_share=args.tune_share)
    seconds = time.perf_counter() - start
    left = f", {summary.left_to_rules} light kernels left to the rules" \
        if summary.left_to_rules else ""
    print(f"{name}: tuned {summary.tuned} kernels, {summary.reused} reused{left}; "
          f"{sum(c.trials for c in summary.choices)} trials in the database for them, "
          f"faster than the rules: {sum(c.use_tuned for c in summary.choices)} by "
          f"MetaSchedule, {sum(c.use_choices for c in summary.choices)} by the rule's "
          f"measured choices; "
          f"{seconds:.0f} s", flush=True)
    return summary, seconds


def prepare(name, device_set, kernel_times, args):
    """Build one model (and its tuned build), check it against onnxruntime, census its kernels."""
    proto, feed, model, inputs, session, want = suite_case(name, host_num_cores())
    ort_ops = ort_op_times(proto, feed)
    start = time.perf_counter()
    device = device_set.devices[0]
    compiled = th.build(model, f"all:{device.name}", device_set)
    build_s = time.perf_counter() - start
    error = max_relative_error(compiled.run(inputs), want)
    tuned = summary = None
    tune_s = 0.0
    if args.tuning_db:
        summary, tune_s = tune(name, model, device_set, args)
        tuned = th.build(model, f"all:{device.name}", device_set, tuning_db=args.tuning_db)
        error = max(error, max_relative_error(tuned.run(inputs), want))
    # the layers a build for this device set has (its lanes: 8-lane blocks for haswell)
    config = th.PrepareConfig.for_devices(device_set)
    layers = th.extract_layers(model, config)
    rules = compiled.stats.rules
    kernels = []
    mod = layered_module(model, config) if kernel_times else None
    timed: dict[str, tuple[float, str | None]] = {}
    for layer in layers:
        rule = rules.get(layer.func_name, "?")
        ms = None
        if kernel_times:
            if layer.func_name not in timed:
                chosen: dict = {}
                func = mod[mod.get_global_var(layer.func_name)]
                lib, scheduled = kernel_for(func, device, chosen)
                timed[layer.func_name] = (time_kernel(lib, scheduled, device), chosen.get("main"))
            ms = timed[layer.func_name][0]
        kernels.append(dict(layer=layer.name, func=layer.func_name, kind=layer.kind,
                            ops=list(layer.op_kinds), rule=rule, shape=shape_text(layer),
                            param_mb=layer.param_bytes / 2**20, gflop=layer.flops / 1e9,
                            klass=kernel_class(layer, rule), ms=ms))
    return dict(name=name, model=model, compiled=compiled, inputs=inputs, session=session,
                feed=feed, ort_ops=ort_ops, error=error, build_s=build_s, kernels=kernels,
                weight_bytes=weight_bytes(proto),
                tuned=tuned, tune_s=tune_s,
                trials=sum(c.trials for c in summary.choices) if summary else 0,
                tuned_kernels=sum(c.use_tuned or c.use_choices for c in summary.choices)
                if summary else 0,
                ort_ms=math.inf, ours_ms=math.inf, tuned_ms=math.inf)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SUITE))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--list", action="store_true", help="print the model names and exit")
    parser.add_argument("--device", default="cpu", help="the tvm_hetero device (default cpu)")
    parser.add_argument("--target-mcpu", help="an LLVM CPU for the device (haswell: AVX2)")
    parser.add_argument("--no-kernel-times", action="store_true")
    parser.add_argument("--json", help="write the raw figures here")
    parser.add_argument("--tune-trials", type=int, default=0, metavar="N",
                        help="MetaSchedule trials per model before timing (needs --tuning-db)")
    parser.add_argument("--tuning-db", metavar="DIR",
                        help="the tuning database, one for the suite, reused across runs; "
                             "alone: the tuned column from what it holds")
    parser.add_argument("--tune-share", type=float, default=1.0, metavar="F",
                        help="tune only the heaviest kernels, this share of each model's time "
                             "under the rules (default 1.0: all)")
    parser.add_argument("--tune-only", action="store_true",
                        help="tune into --tuning-db and stop: nothing built or timed")
    args = parser.parse_args()
    if args.list:
        print("\n".join(SUITE))
        return
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in SUITE]
    if unknown:
        print(f"Error: unknown model(s) {', '.join(unknown)}; --list shows the suite")
        sys.exit(2)
    if (args.tune_trials or args.tune_only) and not args.tuning_db:
        print("Error: --tune-trials and --tune-only need --tuning-db DIR")
        sys.exit(2)
    if args.tune_trials < 0 or not 0 < args.tune_share <= 1:
        print("Error: --tune-trials must be >= 0 and --tune-share in (0, 1]")
        sys.exit(2)
    spec = args.device
    if args.target_mcpu:
        spec = json.dumps({"kind": "llvm", "mcpu": args.target_mcpu,
                           "num-cores": host_num_cores(), "name": "cpu"})
    try:
        device_set = th.DeviceSet.parse([spec])
    except th.DeviceError as err:
        print(f"Error: {err}")
        sys.exit(2)
    target = device_set.devices[0].target
    threads = host_num_cores()
    print(f"CPU: {cpu_name()}, {threads} cores; target {json.dumps(target)}")
    if args.tune_only:  # a long run's log: each kernel ranked, left out, compared
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        logging.getLogger("tvm_hetero.optimize.metaschedule").addHandler(handler)
        logging.getLogger("tvm_hetero.optimize.metaschedule").setLevel(logging.INFO)
        total = time.perf_counter()
        for name in names:
            proto, _ = SUITE[name]()
            try:
                tune(name, th.load_model(proto, name=name), device_set, args)
            except Exception as err:  # a model the frontend cannot take: a result
                print(f"{name}: FAILED {type(err).__name__}: "
                      f"{str(err).strip().splitlines()[0][:200]}", flush=True)
        print(f"tuned into {args.tuning_db} in {time.perf_counter() - total:.0f} s")
        return
    tuning = f"and tuned ({args.tune_trials} MetaSchedule trials per model, share " \
        f"{args.tune_share}, database {args.tuning_db})" if args.tuning_db else ", no tuning"
    print(f"onnxruntime {ort.__version__} CPU provider, {threads} intra-op threads; "
          f"tvm_hetero default rules {tuning}; tolerance {TOLERANCE} (max abs error / max abs)")

    rows, failures = [], {}
    for name in names:
        start = time.perf_counter()
        try:
            row = prepare(name, device_set, not args.no_kernel_times, args)
        except Exception as err:  # a model the frontend or a rule cannot take: a result
            failures[name] = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200]}"
            print(f"{name}: FAILED {failures[name]}", flush=True)
            continue
        unscheduled = sum(1 for k in row["kernels"] if k["rule"] is None)
        print(f"{name}: built in {row['build_s']:.1f} s, {len(row['kernels'])} layers, "
              f"{unscheduled} unscheduled, error {row['error']:.1e}, "
              f"prepared in {time.perf_counter() - start:.0f} s", flush=True)
        if not row["error"] <= TOLERANCE:
            failures[name] = f"wrong answer: relative error {row['error']:.2e}"
        rows.append(row)

    for _ in range(args.rounds):
        for row in rows:
            repeat = args.repeat
            session, feed = row["session"], row["feed"]
            time.sleep(SETTLE_S)
            row["ort_ms"] = min(row["ort_ms"], th.time_function(
                lambda: session.run(None, feed), repeat=repeat).median)
            time.sleep(SETTLE_S)
            row["ours_ms"] = min(row["ours_ms"],
                                 row["compiled"].benchmark(row["inputs"], repeat=repeat).median)
            if row["tuned"] is not None:
                time.sleep(SETTLE_S)
                row["tuned_ms"] = min(row["tuned_ms"], row["tuned"].benchmark(
                    row["inputs"], repeat=repeat).median)

    copy_gbs = copy_bandwidth_gbs(device_set.devices[0]) if rows else None
    llc = last_level_cache_bytes()

    tuned_head = f"{'tuned ms':>10}{'tuned/ort':>10}{'trials':>8}{'tuned k.':>9}{'tune s':>8}" \
        if args.tuning_db else ""
    print(f"\n{'model':<20}{'ort ms':>10}{'ours ms':>10}{'ours/ort':>10}{tuned_head}{'layers':>8}"
          f"{'unsched.':>10}{'error':>10}{'kernels ms':>12}")
    ratios, tuned_ratios = {}, {}
    for row in rows:
        ratio = row["ours_ms"] / row["ort_ms"]
        if row["name"] not in failures:
            ratios[row["name"]] = ratio
        tuned_cols = ""
        if args.tuning_db:
            tuned_ratio = row["tuned_ms"] / row["ort_ms"]
            if row["name"] not in failures:
                tuned_ratios[row["name"]] = tuned_ratio
            tuned_cols = (f"{row['tuned_ms']:>10.3f}{tuned_ratio:>10.2f}{row['trials']:>8}"
                          f"{row['tuned_kernels']:>9}{row['tune_s']:>8.0f}")
        ksum = f"{sum(k['ms'] for k in row['kernels']):.3f}" if not args.no_kernel_times \
            else "-"
        mark = " WRONG" if row["name"] in failures else ""
        print(f"{row['name']:<20}{row['ort_ms']:>10.3f}{row['ours_ms']:>10.3f}{ratio:>10.2f}"
              f"{tuned_cols}{len(row['kernels']):>8}"
              f"{sum(1 for k in row['kernels'] if k['rule'] is None):>10}"
              f"{row['error']:>10.1e}{ksum:>12}{mark}")
    for name, why in failures.items():
        if name not in {r["name"] for r in rows}:
            print(f"{name:<20} FAILED: {why}")
    if ratios:
        print(f"{ratio_summary(ratios)}; <= 1.5x: {sum(r <= 1.5 for r in ratios.values())}"
              f"/{len(ratios)}")
    if tuned_ratios:
        print(f"tuned: {ratio_summary(tuned_ratios)}; {sum(r['trials'] for r in rows)} trials "
              f"in the database, {sum(r['tune_s'] for r in rows):.0f} s of tuning")
    streaming = [row for row in rows if llc is None or row["weight_bytes"] > llc]
    if streaming:
        cache = f"{llc / 2**20:.0f} MiB" if llc else "unknown"
        print(f"\nWeights beyond the last-level cache ({cache}): weight bytes per ms (GB/s); "
              f"copy bandwidth (tvm-hetero devices) {copy_gbs:.1f} GB/s")
        print(f"  {'model':<20}{'weights MB':>11}{'ours GB/s':>11}{'ort GB/s':>10}"
              f"{'ours/copy':>11}")
        for row in streaming:
            ours_gbs = row["weight_bytes"] / row["ours_ms"] / 1e6
            ort_gbs = row["weight_bytes"] / row["ort_ms"] / 1e6
            print(f"  {row['name']:<20}{row['weight_bytes'] / 1e6:>11.1f}{ours_gbs:>11.1f}"
                  f"{ort_gbs:>10.1f}{ours_gbs / copy_gbs:>11.2f}")

    print("\nKernel census: kernels with no rule (TVM default loops), by class")
    census = defaultdict(lambda: {"models": set(), "layers": 0, "ms": 0.0})
    for row in rows:
        for k in row["kernels"]:
            if k["rule"] is None:
                entry = census[k["klass"]]
                entry["models"].add(row["name"])
                entry["layers"] += 1
                entry["ms"] += k["ms"] or 0.0
    for klass, entry in sorted(census.items(), key=lambda kv: (-kv[1]["ms"], -kv[1]["layers"])):
        ms = "" if args.no_kernel_times else f"{entry['ms']:>9.3f} ms"
        print(f"  {klass:<60} {entry['layers']:>4} layers {ms}  "
              f"{', '.join(sorted(entry['models']))}")

    if not args.no_kernel_times:
        print("\nTime by kernel class (each kernel timed alone, times its calls), over the suite")
        classes = defaultdict(lambda: {"ms": 0.0, "layers": 0, "models": defaultdict(float)})
        for row in rows:
            for k in row["kernels"]:
                entry = classes[k["klass"]]
                entry["ms"] += k["ms"]
                entry["layers"] += 1
                entry["models"][row["name"]] += k["ms"]
        for klass, entry in sorted(classes.items(), key=lambda kv: -kv[1]["ms"])[:40]:
            top = sorted(entry["models"].items(), key=lambda kv: -kv[1])[:4]
            print(f"  {klass:<60} {entry['layers']:>4} layers {entry['ms']:>9.3f} ms  "
                  + ", ".join(f"{m} {ms:.2f}" for m, ms in top))
        print("\nSlowest kernels per model (ms, share of the model's kernel sum)")
        for row in rows:
            total = sum(k["ms"] for k in row["kernels"]) or 1.0
            top = sorted(row["kernels"], key=lambda k: -k["ms"])[:4]
            print(f"  {row['name']} (ours {row['ours_ms']:.3f}, ort {row['ort_ms']:.3f} ms)")
            for k in top:
                print(f"    {k['ms']:>8.3f} {100 * k['ms'] / total:>4.0f}%  {k['klass']}  "
                      f"{k['shape']}  {k['param_mb']:.1f} MB {k['gflop']:.3f} GFLOP")

    print("\nonnxruntime's own profile: ms per run by op type, over the suite")
    ort_total = defaultdict(lambda: {"ms": 0.0, "models": defaultdict(float)})
    for row in rows:
        for op, ms in row["ort_ops"].items():
            ort_total[op]["ms"] += ms
            ort_total[op]["models"][row["name"]] += ms
    for op, entry in sorted(ort_total.items(), key=lambda kv: -kv[1]["ms"])[:25]:
        top = sorted(entry["models"].items(), key=lambda kv: -kv[1])[:4]
        print(f"  {op:<24} {entry['ms']:>9.3f} ms  " + ", ".join(f"{m} {ms:.2f}" for m, ms in top))

    if args.json:
        keys = ("name", "ort_ms", "ours_ms", "error", "build_s", "ort_ops", "kernels",
                "tuned_ms", "trials", "tuned_kernels", "tune_s", "weight_bytes")
        out = {"cpu": cpu_name(), "target": target, "threads": threads,
               "copy_gbs": copy_gbs, "last_level_cache_bytes": llc,
               "onnxruntime": ort.__version__, "tolerance": TOLERANCE, "failures": failures,
               "models": [{key: row[key] for key in keys} for row in rows]}
        with open(args.json, "w") as handle:
            json.dump(out, handle, indent=1)


if __name__ == "__main__":
    main()
