"""A whole tune of ResNet-50 (the onnx package graph) on two devices with a memory cap that
forces a split: its wall time over one full single-device build, and the per-candidate build
time as the kernel cache fills.

    python benchmarks/tune_resnet50.py [--trials 12] [--cap 64MiB] [--capped cpu]

The cap goes on the fast device (``cpu``) by default: ResNet-50's ~98 MiB of weights do not
fit in 64 MiB there, so every feasible placement splits the model.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import tvm_hetero as th
from tvm_hetero.search import tune
from tvm_hetero.testing import light_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--cap", default="64MiB")
    parser.add_argument("--capped", default="cpu", choices=["cpu", "cpu-generic"])
    parser.add_argument("--strategy", default="xgb")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="tvm_hetero_r50_")

    start = time.perf_counter()
    model = th.load_model(light_model("resnet50"), name="resnet50")
    layers = th.extract_layers(model)
    compiled = th.build(model, th.Placement.all_on(layers, "cpu"), ["cpu"])
    compiled.export_library(os.path.join(workdir, "single.so"))
    single_s = time.perf_counter() - start
    print(f"one full single-device build (import, prepare, build, export): {single_s:.1f} s")

    devices = th.DeviceSet.parse(["cpu", "cpu-generic"], memory={args.capped: args.cap})
    start = time.perf_counter()
    result = tune(light_model("resnet50"), devices, trials=args.trials, strategy=args.strategy,
                  workdir=workdir, threshold=8, batch_size=4)
    tune_s = time.perf_counter() - start
    print(f"tune ({args.strategy}, {args.trials} trials): "
          f"{tune_s:.1f} s = {tune_s / single_s:.1f} x one single-device build")
    print(f"  ({args.capped} capped at {args.cap})")
    if result.best_single:
        print(f"best: {result.latency.median_ms:.1f} ms, best single device "
              f"{result.best_single[0]} {result.best_single[1].median_ms:.1f} ms, speedup "
              f"{result.speedup:.2f}x")
    print(f"{'#':>3} {'source':<14}{'build s':>9}{'run s':>8}{'median ms':>11}")
    for index, trial in enumerate(result.trials):
        r = trial.result
        print(f"{index:>3} {trial.source:<14}{r.build_s:>9.2f}{r.run_s:>8.2f}"
              f"{r.median_ms if r.ok else float('nan'):>11.1f}"
              + ("" if r.ok else f"  {r.error.value}"))


if __name__ == "__main__":
    main()
