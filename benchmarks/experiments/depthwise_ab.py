"""Depthwise convolutions in the blocked layout, A/B on whole suite models: the previous way (A:
``PrepareConfig(blocked_depthwise=False)``, ONNX Clip imported by TVM's converter and Relax
``clip`` left as it is, so depthwise convolutions and clips ran NCHW between layout transforms)
against the default (B), and optionally (C) the default with the blocked layout from 0 FLOPs
(small models too); each model built every way and run in alternating rounds in one process
(best median of rounds), onnxruntime timed in the same rounds.

    python benchmarks/experiments/depthwise_ab.py [--models mobilenet_v2,efficientnet_block]
                                                  [--target-mcpu haswell] [--rounds 5]
                                                  [--small-blocked]
"""

from __future__ import annotations

import argparse
import importlib
import json
from dataclasses import replace

import tvm_hetero as th
from tvm_hetero.devices import host_num_cores
from tvm_hetero.frontend.onnx import FIXES
from tvm_hetero.prepare import PrepareConfig
from tvm_hetero.testing import max_relative_error
from tvm_hetero.testing.suite import add_ab_args, alternating_best, cpu_devices, suite_case

blocked_conv_layout = importlib.import_module("tvm_hetero.prepare.blocked_conv_layout")

MODELS = "mobilenet_v2,efficientnet_block,mobilenet_v3_block,shufflenet"


def build_with(proto, name, devices, previous: bool, **overrides):
    """`proto` loaded and built for `devices` with the preparation config's `overrides`; the
    previous import and clips when `previous`."""
    for_devices = PrepareConfig.for_devices.__func__
    clip_fix, clip_pass = FIXES["Clip"], blocked_conv_layout.ClipAsMinMax

    def patched(cls, devs, **more):
        return replace(for_devices(cls, devs, **more), **overrides)

    PrepareConfig.for_devices = classmethod(patched)
    if previous:
        del FIXES["Clip"]
        blocked_conv_layout.ClipAsMinMax = lambda: (lambda mod: mod)
    try:
        model = th.load_model(proto, name=name)
        return th.build(model, "all:" + devices.devices[0].name, devices)
    finally:
        PrepareConfig.for_devices = classmethod(for_devices)
        FIXES["Clip"], blocked_conv_layout.ClipAsMinMax = clip_fix, clip_pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ab_args(parser, MODELS)
    parser.add_argument("--small-blocked", action="store_true",
                        help="also C: the default with blocked_min_model_flops=0")
    args = parser.parse_args()
    threads = host_num_cores()
    devices = cpu_devices(args.target_mcpu, threads)
    variants = {"A": {"blocked_depthwise": False}, "B": {}}
    if args.small_blocked:
        variants["C"] = {"blocked_min_model_flops": 0.0}
    print(f"target {json.dumps(devices.devices[0].target)}; {threads} threads; best of "
          f"{args.rounds} alternating rounds")
    print(f"{'model':<20}{'ort ms':>9}" + "".join(f"{k + ' ms':>9}" for k in variants)
          + "".join(f"{k + '/ort':>7}" for k in variants)
          + "".join(f"{k + ' err':>9}" for k in variants))
    for name in [m for m in args.models.split(",") if m]:
        proto, feed, model, inputs, session, want = suite_case(name, threads)
        built = {key: build_with(proto, name, devices, key == "A", **over)
                 for key, over in variants.items()}
        best = alternating_best(session, feed, built, inputs, args.rounds, args.repeat)
        errors = {key: max_relative_error(c.run(inputs), want) for key, c in built.items()}
        print(f"{name:<20}{best['ort']:>9.3f}" + "".join(f"{best[k]:>9.3f}" for k in variants)
              + "".join(f"{best[k] / best['ort']:>7.2f}" for k in variants)
              + "".join(f"{errors[k]:>9.1e}" for k in variants), flush=True)


if __name__ == "__main__":
    main()
