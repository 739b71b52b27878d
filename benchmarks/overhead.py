"""Overhead of tvm_hetero over plain TVM, and the build time of a two-device ResNet-50.

For each model, the all-on-`cpu` placement built by tvm_hetero without its optimization rules
(`optimize=False`, and prepared without Winograd convolutions, so that the same loops are
compared) against `tvm.compile` of the same module for the same target with TVM's own default
CPU pipeline (which fuses), both timed the same way in this run. Prints a table; the goal is a
latency ratio <= 1.01. The last column is the model's build with the default optimization
rules (Winograd included), for scale.

    python benchmarks/overhead.py [--models mlp,cnn,...] [--repeat N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import tvm
from tvm import relax

import tvm_hetero as th
from tvm_hetero.testing import light_model, random_placement

MODELS = ["zoo:mlp", "zoo:cnn", "zoo:resnet", "zoo:transformer", "squeezenet", "resnet50"]


def load(name: str):
    if name.startswith("zoo:"):
        return th.load_model(name)
    return th.load_model(light_model(name), name=name)


def prepared_direct(model):
    """`model` prepared without Winograd convolutions: the same algorithm as tvm.compile's (its
    module the layered one, which build takes as it is)."""
    import dataclasses

    layered = th.prepare(model.mod, th.PrepareConfig.for_host(winograd=False))
    return dataclasses.replace(model, mod=layered, onnx_model=None, _fingerprint=None,
                               _layered=None)


def interleaved(measure_a, measure_b, rounds):
    """Alternate the two measurements `rounds` times (machine noise hits both alike) and keep
    the best median of each."""
    a_runs, b_runs = [], []
    for _ in range(rounds):
        a_runs.append(measure_a())
        b_runs.append(measure_b())
    return min(a_runs, key=lambda s: s.median), min(b_runs, key=lambda s: s.median)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
    cpu = devices["cpu"]

    print("all-on-cpu latency: tvm_hetero vs plain tvm.compile (same target, TVM's default "
          "CPU pipeline), interleaved, best median of each")
    header = (f"{'model':<16}{'layers':>7}{'hetero ms':>12}{'tvm ms':>12}{'ratio':>8}"
              f"{'with rules ms':>15}")
    print(header)
    print("-" * len(header))
    for name in args.models.split(","):
        model = load(name)
        direct = prepared_direct(model)
        layers = th.extract_layers(direct)
        inputs = model.random_inputs(seed=0)
        compiled = th.build(direct, th.Placement.all_on(layers, "cpu"), devices, optimize=False)
        optimized = th.build(model, "all:cpu", devices)
        repeat = args.repeat if sum(l.flops for l in layers) < 1e9 else 3
        target = cpu.tvm_target()
        executable = tvm.compile(model.mod, target=target,
                                 relax_pipeline=relax.get_default_pipeline(target))
        vm = relax.VirtualMachine(executable, cpu.runtime_device())
        tvm_args = [tvm.runtime.tensor(inputs[s.name], cpu.runtime_device())
                    for s in model.inputs]
        plain_main = vm["main"]
        ours, plain = interleaved(
            lambda: compiled.benchmark(inputs, repeat=repeat),
            lambda: th.time_function(lambda: plain_main(*tvm_args), repeat=repeat),
            args.rounds)
        rules = optimized.benchmark(inputs, repeat=repeat)
        print(f"{model.name:<16}{len(layers):>7}{ours.median:>12.3f}{plain.median:>12.3f}"
              f"{ours.median / plain.median:>8.3f}{rules.median:>15.3f}", flush=True)

    print()
    print("ResNet-50 (onnx package graph) build time, two-device random placement")
    model = load("resnet50")
    start = time.perf_counter()
    layers = th.extract_layers(model)
    prepare_s = time.perf_counter() - start
    placement = random_placement(layers, devices.names, np.random.default_rng(0))
    start = time.perf_counter()
    compiled = th.build(model, placement, devices, optimize=False)
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    th.build(model, placement, devices)
    rules_s = time.perf_counter() - start
    stats = compiled.stats
    print(f"layers {len(layers)}, on cpu {sum(v == 'cpu' for v in placement.assignment.values())}"
          f", on cpu-generic {sum(v == 'cpu-generic' for v in placement.assignment.values())}")
    print(f"prepare (import, fuse, extract layers, once per model): {prepare_s:.2f} s")
    print(f"build of the placed module: {build_s:.2f} s (annotate {stats.annotate_s:.2f}, "
          f"lower {stats.lower_s:.2f}, codegen {stats.codegen_s:.2f}); with the optimization "
          f"rules {rules_s:.2f} s ({rules_s / build_s:.2f}x)")


if __name__ == "__main__":
    main()
