"""`tvm-hetero inspect MODEL`: the model's layers."""

from __future__ import annotations

from .. import api
from .common import (add_device_args, add_model_args, parse_input_shapes, parse_shape_ranges,
                     print_json)


def register(subparsers) -> None:
    parser = subparsers.add_parser("inspect", help="list a model's operator-level layers",
                                   description="Split a model into operator-level layers (one "
                                               "fused operator group each) and list them, as "
                                               "a build for the devices given has them "
                                               "(default: the host CPU, cpu).")
    add_model_args(parser)
    add_device_args(parser, required=False)
    parser.add_argument("--json", action="store_true", help="print the layers as JSON")
    parser.set_defaults(func=run)


def run(args) -> int:
    found = api.inspect_model(args.model, args.devices,
                              input_shapes=parse_input_shapes(args.input_shape),
        shape_ranges=parse_shape_ranges(args.shape_range))
    if args.json:
        print_json(found.to_json())
    else:
        print(f"model {found.model.name}: inputs " + ", ".join(
            f"{s.name} {list(s.shape)} {s.dtype}" for s in found.model.inputs))
        print(found.table())
    return 0
