"""Row-loop chunk policies on a dynamic export, against static builds, alternated in one
process (best of rounds).

A policy ``FIRST:MAX:STEP`` starts every row loop at the least power of two of at least FIRST
rows (and of enough work, up to MAX) and divides by STEP down to 1; ``cur`` is the package's
own (:func:`tvm_hetero.optimize.row_loop.chunk_levels`).

    python benchmarks/experiments/chunk_ab.py --exports EXPORTS --model bert_base \\
        --sizes 16 128 384 --variants cur 1:64:2 256:256:2

Prints one line per size and the CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tvm_hetero as th  # noqa: E402
from tvm_hetero.optimize import row_loop  # noqa: E402

from dynamic_shapes import CASES, best_ms, cpu_name, file_inputs, inputs_at  # noqa: E402


def policy(spec: str):
    first_min, most, step = (int(x) for x in spec.split(":"))

    def levels(flops_per_row, weight_elements):
        chunk = 1
        while chunk < most and (
                chunk < first_min or chunk * flops_per_row < row_loop.MIN_CHUNK_FLOPS
                or chunk * flops_per_row < row_loop.MIN_WEIGHT_REUSE * weight_elements):
            chunk *= 2
        out = [chunk]
        while out[-1] > 1:
            out.append(max(1, out[-1] // step))
        return out
    return levels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exports", default="out/real_models/exports")
    parser.add_argument("--model", default="bert_base", choices=list(CASES))
    parser.add_argument("--sizes", nargs="+", type=int, default=[16, 128, 384])
    parser.add_argument("--variants", nargs="+", default=["cur", "256:256:2"])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    path = os.path.join(args.exports, f"{args.model}.torchscript.onnx")
    named, shape_range, _ = CASES[args.model]
    dim = next(iter(named))
    specs = file_inputs(path)
    devices = th.DeviceSet.parse(["cpu"])
    shapes = {n: tuple(named.get(d, 1) if isinstance(d, str) else d for d in dims)
              for n, dims, _ in specs}
    own = row_loop.chunk_levels
    libs = {}
    try:
        for variant in args.variants:
            row_loop.chunk_levels = own if variant == "cur" else policy(variant)
            start = time.perf_counter()
            model = th.load_model(path, input_shapes=shapes, shape_ranges={dim: shape_range})
            libs[variant] = th.build(model, "all:cpu", devices)
            print(f"build {variant}: {time.perf_counter() - start:.1f} s", flush=True)
    finally:
        row_loop.chunk_levels = own
    for size in args.sizes:
        static = {n: tuple(size if isinstance(d, str) else d for d in shape)
                  for n, shape in shapes.items()}
        start = time.perf_counter()
        libs[f"static{size}"] = th.build(th.load_model(path, input_shapes=static), "all:cpu",
                                         devices)
        print(f"build static {size}: {time.perf_counter() - start:.1f} s", flush=True)
    print(cpu_name())
    for size in args.sizes:
        feed = inputs_at(specs, named, size, seed=size)
        names = [*args.variants, f"static{size}"]
        best = dict.fromkeys(names, float("inf"))
        for _ in range(args.rounds):  # alternated: a slow spell falls on all
            for name in names:
                best[name] = min(best[name], best_ms(lambda: libs[name].run(feed), 1))
        base = best[f"static{size}"]
        print(f"size {size}: static {base:.2f} ms; " + "; ".join(
            f"{v} {best[v]:.2f} ({best[v] / base:.2f}x)" for v in args.variants), flush=True)


if __name__ == "__main__":
    main()
