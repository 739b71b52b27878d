"""`tvm-hetero report RECORDS [--model M --device .. -o DIR]`: tables and plots of a search."""

from __future__ import annotations

from .. import api
from .common import (add_device_args, add_input_shape_arg, add_memory_args, parse_input_shapes,
                     parse_memory, parse_shape_ranges, print_json)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report", help="write a report (markdown, plots) of a records file",
        description="Read a records file and write report.md, placement.png (the layers in "
                    "order, coloured by device, copies marked) and search.png (best latency so "
                    "far per strategy). The model and devices come from the header `tune` "
                    "writes beside the records (NAME.header.json); the flags override it.")
    parser.add_argument("records", help="the records file written by `tune`")
    parser.add_argument("--model", help="the model the records are of (default: the header's)")
    add_input_shape_arg(parser)
    add_device_args(parser, required=False)
    add_memory_args(parser)
    parser.add_argument("--output", "-o", help="directory to write into (default: NAME.report "
                                               "beside the records NAME.jsonl)")
    parser.add_argument("--profile", action="store_true",
                        help="profile each layer on each device for the cost columns (default: "
                             "use the tune's stored profile when there is one)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=run)


def run(args) -> int:
    summary = api.report_records(args.records, args.output, model=args.model,
                                 devices=args.devices,
                                 input_shapes=parse_input_shapes(args.input_shape),
        shape_ranges=parse_shape_ranges(args.shape_range),
                                 memory=parse_memory(args.memory), profile=args.profile)
    if args.json:
        print_json({k: v for k, v in summary.items() if k != "layers"}
                   | {"layers": len(summary["layers"])})
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
