"""
The tvm_hetero demo
===================

One network, two devices, one executable. On a CPU-only machine the two devices are the host CPU
(``cpu``: LLVM for this processor) and a generic x86-64 (``cpu-generic``: SSE2 only): two real
code generators, real copies between them. The fast device, ``cpu``, is given a memory cap that
the model's large dense layer does not fit in (as an accelerator with little memory would be),
so the search has to split the model between it and the slower ``cpu-generic``.

Run it with ``make demo`` (it sets everything up) or ``python tutorials/demo.py --out out``.
Under ``CI=true`` the search budget is cut to 10 candidates.
"""

import argparse
import os
import sys

import numpy as np

import tvm_hetero as th
from tvm_hetero.build.memory import format_bytes
from tvm_hetero.cli.report_cmd import print_summary
from tvm_hetero.frontend.zoo import DEFAULT_MODEL
from tvm_hetero.layers.table import layers_table
from tvm_hetero.testing import max_relative_error, onnx_reference


def main(out_dir: str, model_name: str, trials: int, cap: str) -> None:
    os.makedirs(out_dir, exist_ok=True)

    ######################################################################
    # 1. The model, split into operator-level layers
    model = th.load_model(model_name)
    layers = th.extract_layers(model)
    print(f"== 1. {model.name}: {len(layers)} layers (one fused operator group each)")
    print(layers_table(layers))

    ######################################################################
    # 2. The devices, probed and scored for this model
    # the device with the most memory first: the VM keeps the model's constants on it
    devices = th.DeviceSet.parse(["cpu-generic", "cpu"], memory={"cpu": cap})
    weights = th.TaskWeights.for_layers(layers)
    print(f"\n== 2. devices (score weights: compute {weights.compute:.2f}, memory "
          f"{weights.memory:.2f}, bandwidth {weights.bandwidth:.2f})")
    for dev, status in zip(devices, th.probe(devices, weights)):
        print(f"  {dev.name:<12} {dev.target['mcpu']:<8} {status.gflops:6.2f} GFLOP/s  "
              f"{format_bytes(status.memory_bytes):>10}{' cap' if status.memory_is_cap else '    '}"
              f"  {status.bandwidth_gbs:6.1f} GB/s copies  score {status.score:.3f}")

    ######################################################################
    # 3. Search: every candidate built, run in a separate process, verified, recorded
    records = os.path.join(out_dir, "records.jsonl")
    print(f"\n== 3. tune: up to {trials} candidates, records in {records}")

    def progress(trial, best_ms):
        outcome = f"{trial.result.median_ms:8.3f} ms" if trial.result.ok else \
            f"{trial.result.error.value:>11}"
        print(f"  {len(progress.seen) + 1:3d} {trial.source:<14}{outcome}   best {best_ms:.3f} ms")
        progress.seen.append(trial)

    progress.seen = []
    result = th.tune(model, devices, trials=trials, records=records,
                     workdir=os.path.join(out_dir, "work"), threshold=8, batch_size=4,
                     callback=progress)
    device, single = result.best_single
    print(f"  best placement {result.latency.median_ms:.3f} ms, best single device ({device}) "
          f"{single.median_ms:.3f} ms: speedup {result.speedup:.2f}x "
          f"({result.measured} candidates measured in {result.seconds:.0f} s)")

    ######################################################################
    # 4. The report: why each layer went where it went
    profile = th.Profile.load(os.path.join(out_dir, "work", "profile.json"),
                              model.fingerprint(), devices.fingerprint())
    print("\n== 4. report")
    print_summary(th.write_report(out_dir, model, devices, records, profile, layers))

    ######################################################################
    # 5. Deploy: one library running across both devices, checked against onnxruntime
    compiled = th.build(model, result.placement, devices)
    library = compiled.export_library(os.path.join(out_dir, f"{model.name}.so"))
    result.placement.save(os.path.join(out_dir, f"{model.name}.placement.json"), devices)
    inputs = model.random_inputs(seed=1)
    outputs = th.load(library).run(inputs)
    error = max_relative_error(outputs, onnx_reference(model.onnx_model, inputs, model))
    assert error < 1e-4 and np.all(np.isfinite(outputs[0]))
    print(f"\n== 5. wrote {library} ({os.path.getsize(library) / 1024:.0f} KiB); reloaded, ran, "
          f"matches onnxruntime (relative error {error:.1e})")
    print(f"   run it again: tvm-hetero run {library} --device cpu-generic --device cpu")


######################################################################
# Summary
# -------
# A placement is a plain ``{layer: device}`` mapping; ``tune`` finds the fastest verified one,
# ``build`` compiles each layer for its own device into one executable.

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="tvm_hetero demo")
    parser.add_argument("--out", default="out")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--trials", type=int,
                        default=10 if os.environ.get("CI") == "true" else 32)
    parser.add_argument("--cap", default="600KiB", help="memory cap of cpu (the fast device)")
    args = parser.parse_args()
    main(args.out, args.model, args.trials, args.cap)
    sys.exit(0)
