"""`tvm-hetero compile MODEL --device .. --placement P -o model.so`."""

from __future__ import annotations

from ..errors import HeteroError, PlacementError
from .._native import quiet_native_stderr
from .common import (add_device_args, add_memory_args, add_model_args, load_cli_model,
                     output_path, parse_devices, print_json)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compile", help="build a placed model into one executable library",
        description="Annotate every layer with its device and build one executable that runs "
                    "across the devices.")
    add_model_args(parser)
    add_device_args(parser)
    add_memory_args(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--placement", "-p", metavar="P",
                        help="a placement JSON file, or all:DEVICE to put every layer on one")
    source.add_argument("--records", "-r", metavar="R.jsonl",
                        help="tuning records: build the fastest verified placement in them that "
                             "fits the memory caps given")
    parser.add_argument("--output", "-o", required=True, help="the library to write (.so)")
    parser.add_argument("--save-placement", metavar="PATH",
                        help="also write the placement used as JSON (default: not written)")
    parser.add_argument("--tune-trials", type=int, default=0, metavar="N",
                        help="MetaSchedule trials per device for the placement's kernels "
                             "(default: 0, the optimization table's rules only); needs "
                             "--tuning-db")
    parser.add_argument("--tuning-db", metavar="DIR",
                        help="tuning database directory: kernels tuned there are reused, new "
                             "ones tuned into it; a kernel takes its tuned schedule only where "
                             "that measured faster than the rules (default: none)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..build import build
    from ..layers import extract_layers
    from ..memory import describe_over_cap, over_cap
    from ..optimize import TUNED
    from ..placement import Placement
    from ..prepare import PrepareConfig

    devices = parse_devices(args)
    output_path(args.output)
    model = load_cli_model(args)
    layers = extract_layers(model, PrepareConfig.for_devices(devices))
    if args.records:
        placement = best_record(args.records, model, devices, layers)
    else:
        placement = Placement.parse(args.placement, layers)
    placement.model = placement.model or model.name
    placement.validate(layers, devices)
    exceeded = over_cap(layers, placement, devices)
    if exceeded:
        raise PlacementError(f"placement exceeds memory caps: {describe_over_cap(exceeded)}")
    tuning = None
    if args.tune_trials < 0:
        raise HeteroError(f"--tune-trials must be >= 0, got {args.tune_trials}")
    if args.tune_trials and not args.tuning_db:
        raise HeteroError("--tune-trials needs --tuning-db DIR (where the tuned kernels are "
                          "kept and reused)")
    if args.tuning_db:
        import os

        from ..optimize.tuning import TuningDatabase, tune_kernels

        if not args.tune_trials and not os.path.exists(args.tuning_db):
            raise HeteroError(f"tuning database not found: {args.tuning_db} (give "
                              "--tune-trials N to tune into a new one)")

        tuning = TuningDatabase(args.tuning_db)
        if args.tune_trials:
            # MetaSchedule's native warnings (rules unknown to a target) go to fd 2: shown
            # with -v only
            with quiet_native_stderr(not getattr(args, "verbose", 0)):
                summary = tune_kernels(model, placement, devices, args.tune_trials, tuning,
                                       progress=None if args.json else print)
            if not args.json:
                faster = sum(1 for c in summary.choices if c.use_tuned)
                kept = (f", {summary.kept_rule} Winograd kernels kept their rule"
                        if summary.kept_rule else "")
                print(f"tuning: {summary.tuned} kernels tuned, {summary.reused} reused from "
                      f"{args.tuning_db}{kept}; {faster} of {len(summary.choices)} faster than "
                      f"the rules ({summary.seconds:.0f} s)")
        elif not len(tuning):
            raise HeteroError(f"tuning database {args.tuning_db} holds no tuned kernel (give "
                              "--tune-trials N to tune into it)")
    compiled = build(model, placement, devices, tuning_db=tuning)
    with quiet_native_stderr():  # TVM's "Scope Saving" chatter
        compiled.export_library(args.output)
    if args.save_placement:
        placement.save(output_path(args.save_placement), devices)
    counts = {name: sum(1 for d in placement.assignment.values() if d == name)
              for name in devices.names}
    summary = {"output": args.output, "model": model.name, "devices": devices.names,
               "layers_per_device": counts, "build_seconds": round(compiled.stats.total_s, 3),
               "tuned_kernels": sum(1 for r in compiled.stats.rules.values() if r == TUNED)}
    if args.json:
        print_json(summary)
    else:
        print(f"wrote {args.output}: {model.name}, {len(layers)} layers on "
              + ", ".join(f"{n} ({c})" for n, c in counts.items())
              + f", built in {compiled.stats.total_s:.2f}s")
    return 0


def best_record(path: str, model, devices, layers):
    """The fastest verified placement in a records file, for this model and device set, among
    those within the memory caps given now."""
    import os

    from ..database import Database
    from ..memory import describe_over_cap, over_cap

    if not os.path.isfile(path):
        raise PlacementError(f"records file not found: {path}")
    database = Database(path, model.fingerprint(), devices.fingerprint())
    best = database.best(layers, devices)
    if best is None:
        fastest = database.best()
        if fastest is not None:
            raise PlacementError(
                f"no verified record in {path} fits the memory caps given: the fastest needs "
                f"{describe_over_cap(over_cap(layers, fastest[0], devices))}")
        reason = (f"{database.foreign_records} record(s) are of another model, device set or "
                  "TVM version" if database.foreign_records else "none of them is a verified "
                  "measurement" if len(database) else "it holds no readable record")
        if database.skipped_lines:
            reason += f"; {database.skipped_lines} line(s) are not records"
        raise PlacementError(f"no usable record in {path}: {reason}")
    return best[0]
