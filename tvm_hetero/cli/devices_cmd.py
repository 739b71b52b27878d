"""`tvm-hetero devices --device .. [--model MODEL]`: each device's measured status."""

from __future__ import annotations

from .. import api
from .common import (add_device_args, add_input_shape_arg, add_memory_args, parse_input_shapes,
                     parse_memory, parse_shape_ranges, print_json)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "devices", help="probe the devices: compute rate, memory, bandwidth, score",
        description="Measure each device's compute rate (GFLOP/s of a matmul built for it), "
                    "memory (its cap, or its total) and copy bandwidth, and score them with "
                    "weights for a model (equal weights without --model).")
    add_device_args(parser)
    add_memory_args(parser)
    parser.add_argument("--model", help="weight the score for this model (default: equal "
                                        "weights)")
    add_input_shape_arg(parser)
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
    parser.set_defaults(func=run)


def run(args) -> int:
    devices, weights, statuses = api.device_status(
        args.devices, model=args.model, memory=parse_memory(args.memory),
        input_shapes=parse_input_shapes(args.input_shape),
        shape_ranges=parse_shape_ranges(args.shape_range))
    if args.json:
        print_json({"weights": weights.__dict__, "devices": [s.to_json() for s in statuses]})
        return 0
    print(f"weights: compute {weights.compute:.2f}, memory {weights.memory:.2f}, bandwidth "
          f"{weights.bandwidth:.2f}" + (f" (for {args.model})" if args.model else " (equal)"))
    print(f"{'device':<14}{'target':<28}{'GFLOP/s':>9}{'memory':>14}{'copy GB/s':>11}"
          f"{'score':>7}")
    for dev, status in zip(devices, statuses):
        target = dev.target.get("mcpu") or dev.target.get("arch") or ""
        memory = api.format_bytes(status.memory_bytes) + (" cap" if status.memory_is_cap else "")
        print(f"{dev.name:<14}{dev.kind + ' ' + target:<28}{status.gflops:>9.2f}{memory:>14}"
              f"{status.bandwidth_gbs:>11.2f}{status.score:>7.3f}")
    return 0
