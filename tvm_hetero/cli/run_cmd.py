"""`tvm-hetero run model.so --device .. [--inputs in.npz] [--output out.npz] [--repeat N]
[--profile [--profile-top N] [--profile-stat S]]`."""

from __future__ import annotations

from .. import api
from .common import add_device_args, print_json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run", help="run a compiled library and time it",
        description="Load a library written by `compile`, run it on the devices and print the "
                    "latency summary; with --profile also the time of each kernel, copy and "
                    "VM builtin.")
    parser.add_argument("library", help="the .so written by `tvm-hetero compile`")
    add_device_args(parser, required=False)
    parser.add_argument("--inputs", "-i", metavar="IN.npz",
                        help="inputs by name (default: seeded random inputs)")
    parser.add_argument("--output", "-o", metavar="OUT.npz", help="write the outputs here")
    parser.add_argument("--repeat", type=int, default=10,
                        help="timed measurements (default: 10)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first (default: 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of random inputs (default: 0)")
    parser.add_argument("--profile", action="store_true",
                        help="also time every kernel, copy and VM builtin of one inference "
                             "(--repeat instrumented runs) and print them slowest first, "
                             "with layer, device, rule, share and GFLOP/s or GB/s")
    parser.add_argument("--profile-top", type=int, metavar="N",
                        help="with --profile: show the N slowest rows, the rest summed "
                             "(default: all; --json always has all)")
    parser.add_argument("--profile-stat", choices=api.PROFILE_STATISTICS,
                        help="with --profile: each row's time over the runs; the means add up "
                             "to the mean run exactly (default: median)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=run)


def run(args) -> int:
    result = api.run_library(args.library, args.devices, inputs=args.inputs, output=args.output,
                             repeat=args.repeat, warmup=args.warmup, seed=args.seed,
                             profile=args.profile, profile_top=args.profile_top,
                             profile_statistic=args.profile_stat)
    if args.json:
        print_json(result.to_json())
        return 0
    latency = result.latency
    print(f"{result.compiled.meta.get('model')} on {', '.join(result.compiled.devices.names)}: "
          f"median {latency.median:.3f} ms, min {latency.min:.3f} ms, max {latency.max:.3f} "
          f"ms over {latency.repeat}x{latency.number} runs")
    if result.profile is not None:
        print(result.profile_table())
    if args.output:
        print(f"wrote outputs to {args.output}")
    return 0
