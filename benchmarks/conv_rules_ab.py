"""Convolution-class rules A/B on whole suite models: the table without ``depthwise-rows`` and
without the vector ``exp``/``sigmoid`` (A) against the default table (B), each model built both
ways and run in alternating rounds in one process (best median of rounds), with onnxruntime
timed in the same rounds; the error of each against onnxruntime.

    python benchmarks/conv_rules_ab.py [--models mobilenet_v2,efficientnet_block]
                                       [--target-mcpu haswell] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json

import tvm_hetero as th
from tvm_hetero.devices import host_num_cores
from tvm_hetero.optimize import RuleTable, default_table
from tvm_hetero.optimize.cpu import DepthwiseRows
from tvm_hetero.testing import max_relative_error
from tvm_hetero.testing.suite import add_ab_args, alternating_best, cpu_devices, suite_case

MODELS = "mobilenet_v2,efficientnet_block,mobilenet_v3_block,shufflenet"


def without_conv_class_rules() -> RuleTable:
    """Table A: no depthwise-rows, exp and sigmoid left to LLVM (only erf/tanh/pow rewritten)."""
    return default_table().without(DepthwiseRows).with_fast_exp(False)


def build(model, spec_devices, rules: RuleTable):
    return th.build(model, "all:" + spec_devices.devices[0].name, spec_devices, rules=rules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ab_args(parser, MODELS)
    args = parser.parse_args()
    threads = host_num_cores()
    devices = cpu_devices(args.target_mcpu, threads)
    print(f"target {json.dumps(devices.devices[0].target)}; {threads} threads; best of "
          f"{args.rounds} alternating rounds")
    print(f"{'model':<20}{'ort ms':>9}{'A ms':>9}{'B ms':>9}{'A/ort':>7}{'B/ort':>7}"
          f"{'A err':>9}{'B err':>9}")
    for name in [m for m in args.models.split(",") if m]:
        proto, feed, model, inputs, session, want = suite_case(name, threads)
        new = build(model, devices, default_table())
        old = build(model, devices, without_conv_class_rules())
        best = alternating_best(session, feed, {"A": old, "B": new}, inputs, args.rounds,
                                args.repeat)
        errors = [max_relative_error(c.run(inputs), want) for c in (old, new)]
        print(f"{name:<20}{best['ort']:>9.3f}{best['A']:>9.3f}{best['B']:>9.3f}"
              f"{best['A'] / best['ort']:>7.2f}{best['B'] / best['ort']:>7.2f}"
              f"{errors[0]:>9.1e}{errors[1]:>9.1e}", flush=True)


if __name__ == "__main__":
    main()
