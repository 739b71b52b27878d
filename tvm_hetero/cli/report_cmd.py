"""`tvm-hetero report RECORDS --model M --device .. -o DIR`: tables and plots of a search."""

from __future__ import annotations

from .common import (add_device_args, add_input_shape_arg, add_memory_args, load_cli_model,
                     output_path, parse_devices, print_json)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report", help="write a report (markdown, plots) of a records file",
        description="Read a records file and write report.md, placement.png (the layers in "
                    "order, coloured by device, copies marked) and search.png (best latency so "
                    "far per strategy).")
    parser.add_argument("records", help="the records file written by `tune`")
    parser.add_argument("--model", required=True, help="the model the records are of")
    add_input_shape_arg(parser)
    add_device_args(parser)
    add_memory_args(parser)
    parser.add_argument("--output", "-o", required=True, help="directory to write into")
    parser.add_argument("--profile", action="store_true",
                        help="profile each layer on each device for the cost columns (default: "
                             "use the tune's stored profile when there is one)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=run)


def stored_profile(model, layers, devices, records: str, measure: bool):
    """The profile a tune stored beside its records, or a new one when asked."""
    import os

    from ..profiles import Profile, profile_model

    path = os.path.join(os.path.splitext(os.path.abspath(records))[0] + ".work", "profile.json")
    found = Profile.load(path, model.fingerprint(), devices.fingerprint())
    if found is not None or not measure:
        return found
    return profile_model(model, layers, devices)


def run(args) -> int:
    import os

    from ..errors import HeteroError
    from ..layers import extract_layers
    from ..report import write_report

    devices = parse_devices(args)
    if not os.path.isfile(args.records):
        raise HeteroError(f"records file not found: {args.records}")
    output_path(args.output)  # its parent must exist; the directory itself is created
    model = load_cli_model(args)
    layers = extract_layers(model)
    profile = stored_profile(model, layers, devices, args.records, args.profile)
    summary = write_report(args.output, model, devices, args.records, profile, layers)
    if args.json:
        print_json({k: v for k, v in summary.items() if k != "layers"} | {"layers": len(layers)})
    else:
        print_summary(summary)
    return 0


def print_summary(summary) -> None:
    print(f"{summary['model']} on {', '.join(summary['devices'])}: best {summary['median_ms']:.3f}"
          f" ms" + (f", {summary['speedup']:.2f}x over {summary['best_single_device']['device']}"
                    if summary["speedup"] else ""))
    devices = summary["devices"]
    width = max([len("layer")] + [len(row["layer"]) for row in summary["layers"]]) + 2
    print(f"{'layer':<{width}}{'kind':<14}{'MFLOP':>9}{'params KiB':>11}  {'device':<12}"
          + "".join(f"{d[:13] + ' ms':>17}" for d in devices) + "  sent across")
    for row in summary["layers"]:
        costs = "".join(f"{row['cost_ms'][d]:>17.3f}" if d in row["cost_ms"] else f"{'-':>17}"
                        for d in devices)
        sent = f"{row['bytes_sent'] / 1024:.1f} KiB" if row["sent_to"] else ""
        print(f"{row['layer']:<{width}}{row['kind']:<14}{row['flops'] / 1e6:>9.2f}"
              f"{row['param_bytes'] / 1024:>11.1f}  {row['device']:<12}{costs}  {sent}")
    files = summary["files"]
    print(f"wrote {files['report']}, {files['placement_plot']}, {files['search_plot']}")
