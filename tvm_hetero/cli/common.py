"""Helpers shared by the subcommands: their common arguments, how to parse them, JSON output."""

from __future__ import annotations

import json
import sys

from ..errors import DeviceError, ModelError


def add_device_args(parser, required: bool = True) -> None:
    parser.add_argument(
        "--device", "-d", action="append", dest="devices", required=required, metavar="DEVICE",
        help="a device, repeatable; order = VM device order: cpu, cpu-generic, cuda, cuda:N, "
             "cuda@sm_80, NAME=DEVICE or a JSON target dict")


def add_memory_args(parser) -> None:
    parser.add_argument("--memory", "-m", action="append", default=[], metavar="DEVICE=SIZE",
                        help="memory cap of a device, repeatable, e.g. cpu-generic=64MiB "
                             "(default: no cap)")


def parse_memory(items: list[str]) -> dict[str, str]:
    caps = {}
    for item in items:
        name, sep, size = item.partition("=")
        if not sep or not name or not size:
            raise DeviceError(f"invalid --memory {item!r}: use DEVICE=SIZE, e.g. cpu=512MiB")
        caps[name] = size
    return caps


def add_input_shape_arg(parser) -> None:
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,..",
                        help="shape for a dynamic model input, repeatable: each dimension a "
                             "size, or a name given a range by --shape-range "
                             "(input_ids=1,seq)")
    parser.add_argument("--shape-range", action="append", default=[],
                        metavar="DIM=MIN:MAX[:OPT]",
                        help="keep a dynamic dimension dynamic: one library serves every "
                             "size from MIN to MAX, tuned at OPT (default MAX); repeatable "
                             "(seq=1:512:128)")


def add_model_args(parser) -> None:
    parser.add_argument("model", help="zoo:NAME (zoo:mlp, zoo:cnn, zoo:vgg, zoo:resnet, "
                                      "zoo:transformer), a path to an .onnx file, or a .pt2 "
                                      "file saved by torch.export.save (needs the torch "
                                      "extra)")
    add_input_shape_arg(parser)


def parse_input_shapes(items: list[str]) -> dict[str, tuple]:
    from ..api import is_dimension_text

    shapes = {}
    for item in items:
        name, _, dims = item.partition("=")
        try:
            shapes[name] = tuple(int(d) if d.strip().lstrip("-").isdigit() else d.strip()
                                 for d in dims.split(","))
            if not name or any(isinstance(d, int) and d <= 0
                               or isinstance(d, str) and not is_dimension_text(d)
                               for d in shapes[name]):
                raise ValueError
        except ValueError:
            raise ModelError(f"invalid --input-shape {item!r}: use NAME=1,3,224,224 (a "
                             "dynamic dimension by name: NAME=1,seq; one another fixes: "
                             "NAME=1,past+1)") from None
    return shapes


def parse_shape_ranges(items: list[str]) -> dict:
    from ..api import parse_shape_range

    ranges = {}
    for item in items:
        name, shape_range = parse_shape_range(item)
        if name in ranges:
            raise ModelError(f"--shape-range {name} given twice")
        ranges[name] = shape_range
    return ranges


def print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


__all__ = ["add_device_args", "add_input_shape_arg", "add_memory_args", "add_model_args",
           "parse_input_shapes", "parse_memory", "parse_shape_ranges", "print_json"]
