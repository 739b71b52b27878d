"""`tvm-hetero compile MODEL --device .. --placement P -o model.so`."""

from __future__ import annotations

from .common import (add_device_args, add_model_args, load_cli_model, output_path, print_json,
                     quiet_native_warnings)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compile", help="build a placed model into one executable library",
        description="Annotate every layer with its device and build one executable that runs "
                    "across the devices.")
    add_model_args(parser)
    add_device_args(parser)
    parser.add_argument("--placement", "-p", required=True, metavar="P",
                        help="a placement JSON file, or all:DEVICE to put every layer on one")
    parser.add_argument("--output", "-o", required=True, help="the library to write (.so)")
    parser.add_argument("--save-placement", metavar="PATH",
                        help="also write the placement used as JSON (default: not written)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..build import build
    from ..devices import DeviceSet
    from ..layers import extract_layers
    from ..placement import Placement

    devices = DeviceSet.parse(args.devices)
    output_path(args.output)
    model = load_cli_model(args)
    layers = extract_layers(model)
    placement = Placement.parse(args.placement, layers)
    placement.model = placement.model or model.name
    compiled = build(model, placement, devices)
    with quiet_native_warnings():
        compiled.export_library(args.output)
    if args.save_placement:
        placement.save(output_path(args.save_placement), devices)
    counts = {name: sum(1 for d in placement.assignment.values() if d == name)
              for name in devices.names}
    summary = {"output": args.output, "model": model.name, "devices": devices.names,
               "layers_per_device": counts, "build_seconds": round(compiled.stats.total_s, 3)}
    if args.json:
        print_json(summary)
    else:
        print(f"wrote {args.output}: {model.name}, {len(layers)} layers on "
              + ", ".join(f"{n} ({c})" for n, c in counts.items())
              + f", built in {compiled.stats.total_s:.2f}s")
    return 0
