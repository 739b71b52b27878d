"""`tvm-hetero compile MODEL --device .. --placement P -o model.so`."""

from __future__ import annotations

from .. import api
from .common import (add_device_args, add_memory_args, add_model_args, parse_input_shapes,
                     parse_memory, parse_shape_ranges, print_json)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compile", help="build a placed model into one executable library",
        description="Annotate every layer with its device and build one executable that runs "
                    "across the devices. With --verify the library is then run on seeded "
                    "random inputs and its outputs checked against an independent reference: "
                    "onnxruntime for an ONNX model (when installed), else the model built "
                    "without the optimization rules (TVM's default loops) on the first device; "
                    "a library that disagrees is an error naming the kernel and rule at fault, "
                    "and is not kept.")
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
                        help="MetaSchedule trials per device for the placement's kernels, "
                             "whose rules' own alternatives are timed too (default: 0, the "
                             "optimization table's rules only); needs --tuning-db")
    parser.add_argument("--tuning-db", metavar="DIR",
                        help="tuning database directory: kernels tuned there are reused, new "
                             "ones tuned into it; a kernel takes its tuned schedule only where "
                             "that measured faster than the rules (default: none)")
    parser.add_argument("--tune-share", type=float, default=1.0, metavar="F",
                        help="tune only the heaviest kernels: those that make up this share of "
                             "each device's time under the rules, e.g. 0.8 for a small "
                             "--tune-trials (default: 1.0, every kernel)")
    parser.add_argument("--verify", action="store_true",
                        help="run the library on seeded random inputs and check its outputs "
                             "against onnxruntime (ONNX models), else against the model built "
                             "without optimization rules; on a mismatch, name the kernel and "
                             "rule at fault, remove the library and fail (default: off)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of --verify's random inputs (default: 0)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    parser.set_defaults(func=run)


def run(args) -> int:
    result = api.compile_model(
        args.model, args.devices, args.output, placement=args.placement, records=args.records,
        memory=parse_memory(args.memory), input_shapes=parse_input_shapes(args.input_shape),
        shape_ranges=parse_shape_ranges(args.shape_range),
        tune_trials=args.tune_trials, tuning_db=args.tuning_db, tune_share=args.tune_share,
        save_placement=args.save_placement, progress=None if args.json else print,
        native_warnings=bool(args.verbose), verify=args.verify, seed=args.seed)
    if args.json:
        print_json(result.to_json())
        return 0
    tuning = result.tuning
    if tuning is not None:
        faster = sum(1 for c in tuning.choices if c.use_tuned or c.use_choices)
        by_choices = sum(1 for c in tuning.choices if c.use_choices)
        kept = "".join(f", {count} {what} kept their rule" for count, what in (
            (tuning.kept_rule, "Winograd kernels"),
            (tuning.symbolic, "kernels with shapes known only at run time"),
            (tuning.unsearchable, "kernels MetaSchedule cannot search"),
            (tuning.left_to_rules, "light kernels (--tune-share)")) if count)
        print(f"tuning: {tuning.tuned} kernels tuned, {tuning.reused} reused from "
              f"{args.tuning_db}{kept}; {faster} of {len(tuning.choices)} faster than the rules "
              f"({by_choices} by the rule's measured choices; {tuning.seconds:.0f} s)")
    print(f"wrote {args.output}: {result.model.name}, {len(result.layers)} layers on "
          + ", ".join(f"{n} ({c})" for n, c in result.layers_per_device.items())
          + f", built in {result.compiled.stats.total_s:.2f}s")
    if result.verification is not None:
        print(f"verified against {result.verification.reference.describe()}: largest relative "
              f"error {result.verification.max_error:.2g}")
    return 0
