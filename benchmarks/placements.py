"""Correctness sweep: random placements over the zoo and the onnx package's real graphs, each
output compared with onnxruntime and with the single-device build. Prints counts per model.

    python benchmarks/placements.py [--placements N] [--models ...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tvm_hetero as th
from tvm_hetero.testing import light_model, max_relative_error, onnx_reference, random_placement

MODELS = ["zoo:mlp", "zoo:cnn", "zoo:resnet", "zoo:transformer", "bvlc_alexnet", "squeezenet",
          "resnet50"]
TOLERANCE = 1e-4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--placements", type=int, default=10)
    parser.add_argument("--devices", default="cpu,cpu-generic")
    args = parser.parse_args()
    devices = th.DeviceSet.parse(args.devices.split(","))
    print(f"{'model':<16}{'layers':>7}{'placements':>11}{'wrong':>7}{'failed':>8}"
          f"{'max rel err':>13}{'build s':>9}")
    totals = [0, 0, 0]
    for name in args.models.split(","):
        onnx_model = th.zoo_model(name[4:]) if name.startswith("zoo:") else light_model(name)
        model = th.load_model(onnx_model, name=name.removeprefix("zoo:"))
        layers = th.extract_layers(model)
        inputs = model.random_inputs(seed=11)
        reference = onnx_reference(onnx_model, inputs, model)
        single = th.build(model, th.Placement.all_on(layers, devices.names[0]), devices)
        single_out = single.run(inputs)
        rng = np.random.default_rng(0)
        wrong = failed = 0
        worst, build_s = 0.0, []
        for _ in range(args.placements):
            placement = random_placement(layers, devices.names, rng)
            try:
                start = time.perf_counter()
                compiled = th.build(model, placement, devices)
                build_s.append(time.perf_counter() - start)
                out = compiled.run(inputs)
            except Exception as err:  # counted and reported, the sweep goes on
                failed += 1
                print(f"  FAILED {name}: {type(err).__name__}: {err}")
                continue
            error = max(max_relative_error(out, reference), max_relative_error(out, single_out))
            worst = max(worst, error)
            wrong += error >= TOLERANCE
        totals[0] += args.placements
        totals[1] += wrong
        totals[2] += failed
        print(f"{model.name:<16}{len(layers):>7}{args.placements:>11}{wrong:>7}{failed:>8}"
              f"{worst:>13.2e}{np.median(build_s):>9.2f}", flush=True)
    print(f"total: {totals[0]} placements, {totals[1]} wrong outputs, {totals[2]} failures "
          f"(tolerance {TOLERANCE:g} relative to the largest output)")


if __name__ == "__main__":
    main()
