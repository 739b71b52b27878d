"""The float32 matmul kernels of whole models against the machine's FMA peak, measured in the
same process: each model built all on ``cpu``, profiled per kernel (``CompiledModel.profile``,
the best of the rounds per kernel), and every matmul kernel of at least ``--min-gflop`` GFLOP
printed with its rule, GFLOP/s and share of the peak; the peak
(:func:`tvm_hetero.testing.peak.fma_peak_gflops`: independent vector FMAs on every core, no
loads) is measured before and after each model, the higher kept. Prints the CPU, the peak and,
per kernel, whether it reaches ``--goal`` (default 70 %) of it.

    python benchmarks/matmul_peak.py MODEL.onnx [MODEL.onnx ...] [--input-shape NAME=1,128]
                                     [--min-gflop 0.5] [--goal 0.7] [--repeat 10]

A model exported by ``benchmarks/real_models.py`` pins its inputs from the ``.json`` beside it
(``out/real_models/exports/<model>.<exporter>.json``) when ``--input-shape`` gives none.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

import tvm_hetero as th
from tvm_hetero.devices import DeviceSet, host_cpu_model
from tvm_hetero.errors import HeteroError, error_message
from tvm_hetero.testing.peak import fma_peak_gflops


def input_shapes(path: str, given: list[str]) -> dict | None:
    """`--input-shape` pins, else those of the export's ``.json`` beside `path`, else None."""
    if given:
        return {name: tuple(int(d) for d in dims.split(","))
                for name, dims in (item.split("=", 1) for item in given)}
    meta = os.path.splitext(path)[0] + ".json"
    if os.path.exists(meta):
        with open(meta, encoding="utf-8") as f:
            shapes = json.load(f).get("input_shapes")
        return {k: tuple(v) for k, v in shapes.items()} if shapes else None
    return None


def matmul_kernels(profile, min_flops: float) -> list[dict]:
    """Per matmul kernel of at least `min_flops`: its best call time over the profile's rows."""
    best = collections.defaultdict(lambda: None)
    info = {}
    for row in profile.rows:
        if row.kind != "kernel" or not row.flops or row.flops < min_flops \
                or "matmul" not in row.name:
            continue
        per_call = row.time_ms / max(row.calls, 1)
        if best[row.name] is None or per_call < best[row.name]:
            best[row.name] = per_call
            info[row.name] = row
    return [{"kernel": name, "rule": info[name].rule, "gflop": info[name].flops / 1e9,
             "ms": ms, "gflops": info[name].flops / ms / 1e6} for name, ms in best.items()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="ONNX files")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS")
    parser.add_argument("--min-gflop", type=float, default=0.5)
    parser.add_argument("--goal", type=float, default=0.7, help="share of the peak to reach")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    devices = DeviceSet.parse(["cpu"])
    target = devices.devices[0].target
    print(f"CPU: {host_cpu_model()}; target {json.dumps(target)}")
    peaks, rows = [], []
    for path in args.models:
        try:
            model = th.load_model(path, input_shapes=input_shapes(path, args.input_shape))
            compiled = th.build(model, "all:cpu", devices)
        except HeteroError as err:  # a line of its own; the others go on
            print(f"{os.path.basename(path)}: {error_message(err)}")
            continue
        before = fma_peak_gflops(target)
        profile = compiled.profile(model.random_inputs(), repeat=args.repeat, statistic="min")
        peak = max(before, fma_peak_gflops(target))
        peaks.append(peak)
        for kernel in matmul_kernels(profile, args.min_gflop * 1e9):
            rows.append({"model": model.name, **kernel, "peak": peak})
    print(f"FMA peak: {max(peaks):.0f} GFLOP/s (independent vector FMAs on every core, "
          f"measured beside each model: {', '.join(f'{p:.0f}' for p in peaks)})")
    print(f"{'model':24s} {'kernel':44s} {'rule':14s} {'GFLOP':>6s} {'ms':>7s} "
          f"{'GFLOP/s':>8s} {'of peak':>7s}")
    for r in sorted(rows, key=lambda r: r["gflops"] / r["peak"]):
        share = r["gflops"] / r["peak"]
        print(f"{r['model'][:24]:24s} {r['kernel'][:44]:44s} {str(r['rule'])[:14]:14s} "
              f"{r['gflop']:6.2f} {r['ms']:7.3f} {r['gflops']:8.1f} {share:6.0%}"
              f"{'' if share >= args.goal else '  below'}")
    reached = sum(r["gflops"] / r["peak"] >= args.goal for r in rows)
    print(f"{reached} of {len(rows)} matmul kernels of at least {args.min_gflop} GFLOP reach "
          f"{args.goal:.0%} of the peak")
    return 0


if __name__ == "__main__":
    sys.exit(main())
