"""All-on-`cpu` latency with the default optimization rules, and with MetaSchedule tuning at a
stated budget, against onnxruntime on the CPU with the same thread count, measured in the same
run, as a ratio table (goals: <= 1.5x with the default rules, <= 1.0x tuned).

    python benchmarks/cpu_vs_onnxruntime.py [--models ...] [--trials-per-kernel 16]
                                            [--tuning-db DIR] [--rounds 3]

Tuning budget: `--trials-per-kernel` times the model's distinct kernels, global (MetaSchedule's
gradient scheduler shares it by call count). The tuning database is reused across runs: a
second run with the same DIR tunes nothing and measures again. 0 skips tuning.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import onnxruntime as ort

import tvm_hetero as th
from tvm_hetero.devices import host_num_cores
from tvm_hetero.optimize.metaschedule import KernelTuningDatabase, tune_kernels
from tvm_hetero.testing import light_model

SETTLE_S = 1.0
MODELS = ["zoo:mlp", "zoo:cnn", "zoo:vgg", "zoo:resnet", "zoo:transformer", "bvlc_alexnet",
          "squeezenet", "resnet50"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds over all models of onnxruntime, rules, tuned; best of each")
    parser.add_argument("--trials-per-kernel", type=int, default=16)
    parser.add_argument("--tuning-db", default="benchmarks/.tuning",
                        help="tuning databases, one directory per model (default: %(default)s)")
    args = parser.parse_args()
    threads = host_num_cores()
    devices = th.DeviceSet.parse(["cpu"])
    print(f"onnxruntime CPU provider with {threads} threads; tvm_hetero all on cpu "
          f"({devices['cpu'].target['mcpu']}, {threads} cores)")
    rows = []
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
        ort_ms = th.time_function(lambda: session.run(None, feed), repeat=1).median
        plain = th.build(model, "all:cpu", devices, optimize=False)
        rules = th.build(model, "all:cpu", devices)
        kernels = len({layer.func_name for layer in th.extract_layers(model)})
        trials = args.trials_per_kernel * kernels
        tune_s, tuned = 0.0, None
        if trials:
            database = KernelTuningDatabase(os.path.join(args.tuning_db, model.name))
            start = time.perf_counter()
            tune_kernels(model, "all:cpu", devices, trials, database)
            tune_s = time.perf_counter() - start
            tuned = th.build(model, "all:cpu", devices, tuning_db=database)
        repeat = args.repeat if ort_ms < 100 else 3
        plain_ms = plain.benchmark(inputs, repeat=repeat).median
        expected = plain.run(inputs)[0]
        assert np.allclose(rules.run(inputs)[0], expected, rtol=1e-3, atol=1e-4)
        used = 0
        if tuned is not None:
            assert np.allclose(tuned.run(inputs)[0], expected, rtol=1e-3, atol=1e-4)
            used = sum(1 for rule in tuned.stats.rules.values() if rule == "meta-schedule")
        print(f"built {model.name}: unoptimized {plain_ms:.3f} ms, tuning {tune_s:.0f} s",
              flush=True)
        rows.append(dict(name=model.name, session=session, feed=feed, rules=rules, tuned=tuned,
                         inputs=inputs, repeat=repeat, plain_ms=plain_ms, trials=trials,
                         used=used, kernels=kernels, tune_s=tune_s,
                         ort_ms=float("inf"), rules_ms=float("inf"), tuned_ms=float("inf")))
    # Rounds over all models, best median of each: this machine drifts between a fast state
    # and one 1.3-2x slower, for seconds to minutes at a time (both runtimes, small models most).
    # Each runtime's pool threads spin for a while after a run: a pause before each
    # measurement keeps one runtime's spinning threads off the other's cores.
    for _ in range(args.rounds):
        for row in rows:
            session, feed, inputs, repeat = row["session"], row["feed"], row["inputs"], \
                row["repeat"]
            time.sleep(SETTLE_S)
            row["ort_ms"] = min(row["ort_ms"], th.time_function(
                lambda: session.run(None, feed), repeat=repeat).median)
            time.sleep(SETTLE_S)
            row["rules_ms"] = min(row["rules_ms"],
                                  row["rules"].benchmark(inputs, repeat=repeat).median)
            if row["tuned"] is not None:
                time.sleep(SETTLE_S)
                row["tuned_ms"] = min(row["tuned_ms"],
                                      row["tuned"].benchmark(inputs, repeat=repeat).median)
    print(f"{'model':<14}{'ort ms':>9}{'unopt. ms':>11}{'rules ms':>10}{'tuned ms':>10}"
          f"{'rules/ort':>11}{'tuned/ort':>11}{'unopt/ort':>11}{'trials':>8}{'tuned k.':>10}"
          f"{'tune s':>8}")
    for row in rows:
        ort_ms, rules_ms, plain_ms = row["ort_ms"], row["rules_ms"], row["plain_ms"]
        tuned_ms = row["tuned_ms"] if row["tuned"] is not None else float("nan")
        print(f"{row['name']:<14}{ort_ms:>9.3f}{plain_ms:>11.3f}{rules_ms:>10.3f}"
              f"{tuned_ms:>10.3f}{rules_ms / ort_ms:>11.2f}{tuned_ms / ort_ms:>11.2f}"
              f"{plain_ms / ort_ms:>11.2f}{row['trials']:>8}"
              f"{str(row['used']) + '/' + str(row['kernels']):>10}{row['tune_s']:>8.0f}")

if __name__ == "__main__":
    main()
