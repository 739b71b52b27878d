"""
A CPU and a GPU: embedding tables beyond the GPU's memory
=========================================================

A recommendation model (DLRM-like: embedding tables looked up by sparse ids, a bottom MLP over
dense features, pairwise dot-product interaction, a top MLP) has most of its bytes in its
tables and most of its FLOPs in its dense layers. When the GPU may not hold the tables (here a
cap of 32 MiB against 195 MiB of tables: the real case, scaled down a thousandfold so that it
builds in seconds), the placement a user would choose is the one built here: the tables, and
the lookups and pooling around them, on the CPU; the dense layers on the GPU; one executable.

With a GPU the tutorial runs that executable and the all-CPU one, checks both against
onnxruntime and times them. Without one (CI, or any machine lacking a GPU) it builds the split
for ``sm_90`` without running it (compile-only), and says so: how fast the split runs is
unknown until it runs on a GPU; the all-CPU build is still run and checked. An output further
from onnxruntime's than ``--tolerance`` (relative to the largest output) ends the tutorial with
an error. Under ``CI=true`` the model is a quarter the size (tables of 25,000
rows, dense layers 512 wide, batch 512) and the cap 8 MiB, so that the tutorial runs in
seconds; the figures in the comments are those of the full size. The same build from the
command line::

    python tutorials/cpu_and_gpu.py --out rec      # writes rec/dlrm.onnx, rec/dlrm.placement.json
    tvm-hetero compile rec/dlrm.onnx -d cpu -d cuda --memory cuda=32MiB \\
        -p rec/dlrm.placement.json -o dlrm.so
"""

######################################################################
# The model
# ---------
# Eight tables of 100,000 x 64 float32 rows (24.4 MiB each), four ids per sample and table
# (sum-pooled bags), dense layers 1024 wide, batch 2048.

import argparse
import os
import sys
import tempfile

import onnx

import tvm_hetero as th
from tvm_hetero.build.memory import format_bytes, memory_use
from tvm_hetero.testing import max_relative_error, onnx_reference
from tvm_hetero.testing.recommendation import recommendation_model

parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
parser.add_argument("--out", help="directory for dlrm.onnx, dlrm.placement.json, dlrm.so "
                                  "(default: a temporary one)")
parser.add_argument("--tolerance", type=float, default=1e-4,
                    help="largest relative error against onnxruntime (default 1e-4)")
args = parser.parse_args()
size, cap = {}, "32MiB"
if os.environ.get("CI") == "true":
    size, cap = {"rows": 25_000, "dense": 512, "batch": 512}, "8MiB"
workdir = args.out or tempfile.mkdtemp(prefix="cpu_and_gpu_")
os.makedirs(workdir, exist_ok=True)

proto, feed = recommendation_model(**size)
path = os.path.join(workdir, "dlrm.onnx")
onnx.save(proto, path)
model = th.load_model(path, name="dlrm")

######################################################################
# A GPU that may hold 32 MiB
# --------------------------
# ``--memory cuda=32MiB`` caps what a placement may put on the GPU: its layers' parameters plus
# the largest activations of one of them. All on the GPU needs 216 MiB: not a candidate.
devices = th.DeviceSet.parse(["cpu", "cuda"], memory={"cuda": cap})
gpu_here = devices["cuda"].runtime_available()
layers = th.extract_layers(model, th.PrepareConfig.for_devices(devices))
tables = [layer for layer in layers if layer.param_bytes > 2**20 and layer.kind == "other"]
flops = sum(layer.flops for layer in layers)
dense_flops = sum(layer.flops for layer in layers if layer.kind == "matmul")
print(f"{model.name}: {len(layers)} layers; {len(tables)} embedding tables, "
      f"{format_bytes(sum(t.param_bytes for t in tables))}; {flops / 1e9:.2f} GFLOP, "
      f"{100 * dense_flops / flops:.0f} % of it in the dense layers")
all_gpu = memory_use(layers, th.Placement.all_on(layers, "cuda"))["cuda"].total
print(f"all on cuda needs {format_bytes(all_gpu)} > cap {cap}; the only single device: "
      f"{[p.devices_used for p in th.candidates.single_device(layers, devices)]}")

######################################################################
# The placement
# -------------
# Start from everything on the GPU and move layers off it, largest parameters first, until it
# fits the cap (``candidates.repair``): the eight tables move to the CPU. Then keep each
# embedding bag whole on the CPU: a layer whose inputs all come from the CPU, or whose outputs
# all go there, follows (the index check before each lookup, the pooling after it), so that
# the ids need not visit the GPU and only pooled vectors (2048 x 64 per table) cross. (It also
# keeps the index checks off the GPU, where they have no GPU kernel yet.)
placement = th.candidates.repair(th.Placement.all_on(layers, "cuda"), layers, devices)
moved = sorted(name for name, device in placement.assignment.items() if device == "cpu")
print(f"moved off cuda for the cap: {', '.join(moved)}")
successors = {layer.name: [] for layer in layers}
for layer in layers:
    for pred in layer.predecessors:
        successors[pred].append(layer.name)
assignment = dict(placement.assignment)
changed = True
while changed:
    changed = False
    for layer in layers:
        feeds_cpu = successors[layer.name] and all(assignment[n] == "cpu"
                                                   for n in successors[layer.name])
        reads_cpu = layer.predecessors and all(assignment[n] == "cpu"
                                               for n in layer.predecessors)
        if assignment[layer.name] == "cuda" and (feeds_cpu or reads_cpu):
            assignment[layer.name] = "cpu"
            changed = True
placement = th.Placement(assignment, model.name)
for device, use in memory_use(layers, placement).items():
    names = [layer.name for layer in layers if placement[layer.name] == device]
    print(f"  {device:<5} {len(names):2d} layers, {format_bytes(use.total):>9}: "
          f"{', '.join(names[:6])}{', ...' if len(names) > 6 else ''}")
placement.save(os.path.join(workdir, "dlrm.placement.json"), devices)

######################################################################
# One executable
# --------------
# Each layer's kernel is compiled for its device: the CPU's by the CPU rules, the GPU's by GPU
# rules (without a GPU: CUDA code for ``sm_90``, kept as source in the library and compiled
# where it is loaded).
compiled = th.build(model, placement, devices)
library = compiled.export_library(os.path.join(workdir, "dlrm.so"))
print(f"built in {compiled.stats.total_s:.1f} s: {library} "
      f"({os.path.getsize(library) / 2**20:.0f} MiB with the tables)")
for device in devices.names:
    # a kernel shared by layers on both devices is built once per device, named after it
    rules = {compiled.stats.rules.get(f"{layer.func_name}_{device}",
                                      compiled.stats.rules.get(layer.func_name))
             for layer in layers if placement[layer.name] == device}
    print(f"  {device:<5} kernels scheduled by: {', '.join(sorted(rules, key=str))}")

######################################################################
# Check it, and time it (with a GPU)
# ----------------------------------
# All on the CPU against the split, both checked against onnxruntime first (without a GPU, the
# all-CPU build only). Inputs are moved to their devices before timing.
want = onnx_reference(proto, feed)
inputs = {spec.name: feed[spec.source_name or spec.name] for spec in model.inputs}
all_cpu = th.build(model, th.Placement.all_on(layers, "cpu"), devices)
runs = [("all on cpu", all_cpu)] + ([("cpu + cuda", compiled)] if gpu_here else [])
for name, candidate in runs:
    error = max_relative_error(candidate.run(inputs), want)
    if not error <= args.tolerance:  # NaN too
        sys.exit(f"error: {name}: largest relative error against onnxruntime {error:.1e}, "
                 f"over the tolerance {args.tolerance:g}")
    timing = f"{candidate.benchmark(inputs, repeat=20).median:8.3f} ms   " if gpu_here else ""
    print(f"  {name:<11} {timing}largest relative error {error:.1e}")
if not gpu_here:
    print("no GPU here: compile-only (the split was built for sm_90, not run); "
          "run this tutorial on a machine with a GPU to time it")

######################################################################
# Summary
# -------
# A memory cap on the GPU keeps the tables on the CPU; the dense layers, most of the FLOPs,
# go to the GPU; one library holds both devices' kernels and the copies between them.
