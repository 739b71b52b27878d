"""
Tune the placement of an ONNX model
===================================

Find the fastest correct placement of an ONNX model on two devices when one of them cannot hold
the whole model, then deploy it. Everything here also runs from the command line::

    tvm-hetero tune vgg.onnx -d cpu -d cpu-generic --memory cpu-generic=150KiB \\
        --trials 32 --records vgg.jsonl -o vgg.placement.json --report report/
    tvm-hetero compile vgg.onnx -d cpu -d cpu-generic --placement vgg.placement.json -o vgg.so

Under ``CI=true`` the budget is cut to 10 candidates so that the tutorial runs in a minute; the
figures in the comments are from a full run.
"""

######################################################################
# An ONNX file
# ------------
# Any ONNX file with static shapes works; here the zoo's small VGG is written to disk first.

import os
import tempfile

import onnx

import tvm_hetero as th

workdir = tempfile.mkdtemp(prefix="tune_tutorial_")
path = os.path.join(workdir, "vgg.onnx")
onnx.save(th.zoo_model("vgg"), path)
model = th.load_model(path)
layers = th.extract_layers(model)
print(f"{model.name}: {len(layers)} layers, "
      f"{sum(l.param_bytes for l in layers) / 2**20:.2f} MiB of parameters")

######################################################################
# Two devices, one of them small
# ------------------------------
# ``cpu-generic`` may hold 150 KiB: its layers' parameters plus the largest activations of one
# of them. The 1 MiB dense layer cannot go there, so "everything on cpu-generic" is not a
# candidate and the search must split the model.
devices = th.DeviceSet.parse(["cpu", "cpu-generic"], memory={"cpu-generic": "150KiB"})
print(th.candidates.single_device(layers, devices)[0].devices_used, "is the only single device")

######################################################################
# Search
# ------
# Seeds first (each device alone, the greedy placement, the min-cut on profiled costs), then
# diverse samples, then XGBoost-ranked batches. Every candidate is built, run in a separate
# process and checked against the single-device outputs; every result goes to the records.
trials = 10 if os.environ.get("CI") == "true" else 32
records = os.path.join(workdir, "records.jsonl")
result = th.tune(model, devices, trials=trials, records=records,
                 workdir=os.path.join(workdir, "work"), threshold=8, batch_size=4)
print(f"best: {result.latency.median_ms:.3f} ms; best single device "
      f"{result.best_single[0]} {result.best_single[1].median_ms:.3f} ms; "
      f"speedup {result.speedup:.2f}x after {len(result.trials)} candidates")

######################################################################
# Resume: nothing is measured twice
# ---------------------------------
again = th.tune(model, devices, trials=trials, records=records,
                workdir=os.path.join(workdir, "work"), threshold=8, batch_size=4)
print(f"second run over the same records measured {again.measured} candidates")
assert again.measured == 0 and again.placement == result.placement

######################################################################
# Deploy the winner and look at it
# --------------------------------
compiled = th.build(model, result.placement, devices)
library = compiled.export_library(os.path.join(workdir, "vgg.so"))
report = th.write_report(os.path.join(workdir, "report"), model, devices, records)
print(f"wrote {library}, {report['files']['report']} and its two plots")

######################################################################
# Summary
# -------
# ``tune`` returns the fastest verified placement and its speedup over the best single device;
# the records make the search resumable and feed ``compile --records`` and ``report``.
