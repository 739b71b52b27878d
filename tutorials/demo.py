"""
The tvm_hetero demo
===================

One network, two devices, one executable. On a CPU-only machine the two devices are the host CPU
(``cpu``: LLVM for this processor, AVX2/AVX-512 where present) and a generic x86-64
(``cpu-generic``: SSE2 only): two real code generators, real copies between devices.

Run it with ``make demo`` (it sets everything up) or ``python tutorials/demo.py --out out``.
"""

######################################################################
# Load a model and split it into layers
# -------------------------------------
# ``zoo:resnet`` is a residual CNN built by code (no download): a stem, three residual blocks,
# two parallel branches joined by a concat, a dense head.

import argparse
import os

import numpy as np

import tvm_hetero as th
from tvm_hetero.layers import layers_table
from tvm_hetero.testing import max_relative_error, onnx_reference


def main(out_dir: str = "out", model_name: str = "zoo:resnet") -> None:
    os.makedirs(out_dir, exist_ok=True)
    model = th.load_model(model_name)
    layers = th.extract_layers(model)
    print(layers_table(layers))

    ######################################################################
    # The devices
    # -----------
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
    for dev in devices:
        print(f"device {dev.name:<12} target {dev.target}")

    ######################################################################
    # Three placements: everything on each device, and a split by hand
    # -----------------------------------------------------------------
    # The split puts the convolutions on the host CPU and everything else on the generic
    # x86-64: every edge between the two is a copy that the AnnotateDevice pass inserts.
    split = th.Placement({l.name: "cpu" if l.kind == "conv2d" else "cpu-generic"
                          for l in layers}, model=model.name)
    placements = {
        "all on cpu": th.Placement.all_on(layers, "cpu"),
        "all on cpu-generic": th.Placement.all_on(layers, "cpu-generic"),
        "conv on cpu, rest on cpu-generic": split,
    }

    ######################################################################
    # Build each into one executable, check it against onnxruntime, time it
    # ---------------------------------------------------------------------
    inputs = model.random_inputs(seed=0)
    reference = onnx_reference(model.onnx_model, inputs, model)
    print(f"\n{'placement':<36}{'build s':>9}{'median ms':>11}{'min ms':>9}{'rel. error':>12}")
    for title, placement in placements.items():
        compiled = th.build(model, placement, devices)
        error = max_relative_error(compiled.run(inputs), reference)
        latency = compiled.benchmark(inputs, repeat=10)
        print(f"{title:<36}{compiled.stats.total_s:>9.2f}{latency.median:>11.3f}"
              f"{latency.min:>9.3f}{error:>12.1e}")

    ######################################################################
    # Deploy the split: one library, the placement beside it
    # -------------------------------------------------------
    compiled = th.build(model, split, devices)
    library = compiled.export_library(os.path.join(out_dir, f"{model.name}_split.so"))
    split.save(os.path.join(out_dir, f"{model.name}_split.json"), devices)
    loaded = th.load(library)
    again = loaded.run(inputs)
    assert np.array_equal(again[0], compiled.run(inputs)[0])
    print(f"\nwrote {library} ({os.path.getsize(library) / 1024:.0f} KiB) and the placement "
          f"{os.path.join(out_dir, model.name + '_split.json')}; reloaded and ran it.")
    print(f"run it again with: tvm-hetero run {library} --device cpu --device cpu-generic")


######################################################################
# Summary
# -------
# A placement is a plain ``{layer: device}`` mapping. ``tvm_hetero.build`` annotates every
# layer with its device, compiles each layer's kernel for its own device's target and links
# everything into one executable that copies tensors between devices where the placement
# crosses them.

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="tvm_hetero demo")
    parser.add_argument("--out", default="out")
    parser.add_argument("--model", default="zoo:resnet")
    args = parser.parse_args()
    main(args.out, args.model)
