"""How additive are placement costs? The min-cut's predicted latency against the measured
latency of the same placement, with per-candidate build and measure seconds.

For a model on two devices: profile every layer on each device and the copies between them,
generate candidates (single-device, greedy, min-cut, DP, random), predict each from the profile
and measure each with the real builder and runner (verified outputs).

    python benchmarks/measure_mincut.py [--model resnet50] [--random 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

import tvm_hetero as th
from tvm_hetero.search import candidates as gen
from tvm_hetero.measure import LocalBuilder, LocalRunner, MeasureTask, Measurer
from tvm_hetero.measure.profiles import profile_model
from tvm_hetero.measure.status import TaskWeights, probe
from tvm_hetero.testing import light_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--devices", default="cpu,cpu-generic")
    parser.add_argument("--random", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    devices = th.DeviceSet.parse(args.devices.split(","))
    source = args.model if args.model.startswith("zoo:") else light_model(args.model)
    model = th.load_model(source, name=args.model.removeprefix("zoo:"))
    workdir = tempfile.mkdtemp(prefix="tvm_hetero_bench_")

    start = time.perf_counter()
    task = MeasureTask.create(model, devices, workdir)
    task_s = time.perf_counter() - start
    start = time.perf_counter()
    profile = profile_model(model, task.layers, devices)
    profile_s = time.perf_counter() - start
    weights = TaskWeights.for_layers(task.layers)
    statuses = probe(devices, weights)

    rng = np.random.default_rng(0)
    candidates = {f"all on {p.devices_used[0]}": p
                  for p in gen.single_device(task.layers, devices)}
    candidates["greedy"] = gen.greedy(task.layers, devices, statuses, weights)
    candidates["min-cut"] = gen.min_cut(task.layers, devices, profile)
    candidates["dp + local search"] = gen.dp_chain(task.layers, devices, profile)
    for i in range(args.random):
        candidates[f"random {i}"] = gen.random_placement(task.layers, devices, rng)

    measurer = Measurer(task, LocalBuilder(), LocalRunner(repeat=args.repeat, warmup=1,
                                                          timeout_s=1800))
    print(f"{model.name}: {len(task.layers)} layers on {', '.join(devices.names)}; task setup "
          f"(import, layers, reference) {task_s:.1f} s, profile {profile_s:.1f} s")
    header = (f"{'candidate':<20}{'layers per device':>20}{'predicted ms':>14}"
              f"{'measured ms':>13}{'meas/pred':>10}{'build s':>9}{'measure s':>11}")
    print(header)
    print("-" * len(header))
    for title, placement in candidates.items():
        start = time.perf_counter()
        (result,) = measurer.measure([placement])
        wall = time.perf_counter() - start
        counts = "/".join(str(sum(1 for v in placement.assignment.values() if v == d))
                          for d in devices.names)
        predicted = profile.estimate_ms(task.layers, placement)
        measured = result.median_ms if result.ok else float("nan")
        print(f"{title:<20}{counts:>20}{predicted:>14.2f}{measured:>13.2f}"
              f"{measured / predicted:>10.3f}{result.build_s:>9.2f}{wall - result.build_s:>11.2f}"
              + ("" if result.ok else f"  {result.error.value}: {result.message}"), flush=True)


if __name__ == "__main__":
    main()
