"""`tvm-hetero run model.so --device .. [--inputs in.npz] [--output out.npz] [--repeat N]`."""

from __future__ import annotations

import os

import numpy as np

from ..errors import InputError
from .._native import quiet_native_stderr
from .common import add_device_args, output_path, print_json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run", help="run a compiled library and time it",
        description="Load a library written by `compile`, run it on the devices and print the "
                    "latency summary.")
    parser.add_argument("library", help="the .so written by `tvm-hetero compile`")
    add_device_args(parser, required=False)
    parser.add_argument("--inputs", "-i", metavar="IN.npz",
                        help="inputs by name (default: seeded random inputs)")
    parser.add_argument("--output", "-o", metavar="OUT.npz", help="write the outputs here")
    parser.add_argument("--repeat", type=int, default=10,
                        help="timed measurements (default: 10)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first (default: 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of random inputs (default: 0)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=run)


def _read_inputs(path: str) -> dict[str, np.ndarray]:
    if not os.path.isfile(path):
        raise InputError(f"inputs file not found: {path}")
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive of named arrays")
        with data:
            return {key: data[key] for key in data.files}
    except Exception as err:
        raise InputError(f"cannot read inputs {path}: {err}; write them with numpy.savez") \
            from None


def run(args) -> int:
    from ..build import load

    if args.repeat < 1 or args.warmup < 0:
        raise InputError("--repeat must be >= 1 and --warmup >= 0")
    if args.output:
        output_path(args.output)
    with quiet_native_stderr():  # TVM's "Scope Saving" chatter
        compiled = load(args.library, args.devices)
    compiled.devices.check_runtime()
    if args.inputs:
        inputs = _read_inputs(args.inputs)
    else:
        rng = np.random.default_rng(args.seed)
        inputs = {spec.name: spec.random(rng) for spec in compiled.inputs}
    outputs = compiled.run(inputs)
    latency = compiled.benchmark(inputs, warmup=args.warmup, repeat=args.repeat)
    if args.output:
        np.savez(args.output, **{f"output_{i}": out for i, out in enumerate(outputs)})
    summary = {"library": args.library, "model": compiled.meta.get("model"),
               "devices": compiled.devices.names, "latency_ms": latency.to_json(),
               "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outputs]}
    if args.json:
        print_json(summary)
    else:
        print(f"{summary['model']} on {', '.join(compiled.devices.names)}: "
              f"median {latency.median:.3f} ms, min {latency.min:.3f} ms, max {latency.max:.3f} "
              f"ms over {latency.repeat}x{latency.number} runs")
        if args.output:
            print(f"wrote outputs to {args.output}")
    return 0
