"""All-on-`cpu` latency with the default optimization rules against onnxruntime on the CPU with
the same thread count, measured in the same run, as a ratio table (goal <= 1.5x with the
default rules).

    python benchmarks/cpu_vs_onnxruntime.py [--models ...]
"""

from __future__ import annotations

import argparse

import numpy as np
import onnxruntime as ort

import tvm_hetero as th
from tvm_hetero.devices import host_num_cores
from tvm_hetero.testing import light_model

MODELS = ["zoo:mlp", "zoo:cnn", "zoo:vgg", "zoo:resnet", "zoo:transformer", "bvlc_alexnet",
          "squeezenet", "resnet50"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    threads = host_num_cores()
    devices = th.DeviceSet.parse(["cpu"])
    print(f"onnxruntime CPU provider with {threads} threads; tvm_hetero all on cpu "
          f"({devices['cpu'].target['mcpu']}, {threads} cores)")
    print(f"{'model':<14}{'ort ms':>10}{'unoptimized ms':>16}{'rules ms':>10}"
          f"{'rules / ort':>13}{'unopt / ort':>13}")
    for name in args.models.split(","):
        source = th.zoo_model(name[4:]) if name.startswith("zoo:") else light_model(name)
        model = th.load_model(source, name=name.removeprefix("zoo:"))
        inputs = model.random_inputs(seed=0)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        session = ort.InferenceSession(source.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        feed = {s.source_name or s.name: inputs[s.name] for s in model.inputs}
        ort_ms = th.time_function(lambda: session.run(None, feed), repeat=args.repeat).median
        plain = th.build(model, "all:cpu", devices, optimize=False)
        rules = th.build(model, "all:cpu", devices)
        repeat = args.repeat if ort_ms < 100 else 3
        plain_ms = plain.benchmark(inputs, repeat=repeat).median
        rules_ms = rules.benchmark(inputs, repeat=repeat).median
        assert np.allclose(rules.run(inputs)[0], plain.run(inputs)[0], rtol=1e-3, atol=1e-4)
        print(f"{model.name:<14}{ort_ms:>10.3f}{plain_ms:>16.3f}{rules_ms:>10.3f}"
              f"{rules_ms / ort_ms:>13.2f}{plain_ms / ort_ms:>13.2f}", flush=True)


if __name__ == "__main__":
    main()
