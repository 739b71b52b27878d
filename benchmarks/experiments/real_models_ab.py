"""Real-model exports (and suite models) built by two trees of tvm_hetero, timed in one process:
each side builds every model all on ``cpu`` in a process of its own (its tree first on
``PYTHONPATH``) and exports ``OUT/SIDE/NAME.so``; then one process loads both sides' libraries
and times them in rounds alternating with onnxruntime (2 threads), the best median of each.

    python benchmarks/experiments/real_models_ab.py --before-tree DIR [--after-tree DIR]
        [--models fasterrcnn_mnv3_fpn,...] [--suite mobilenet_v2,...] [--exports DIR]
        [--out DIR] [--rounds 5] [--time-only]

``--before-tree`` is a checkout of the revision to compare with (``git worktree add --detach
DIR REV``); ``--after-tree`` defaults to this repository. The exports come from
``benchmarks/real_models_export.py`` (both exporters of each model, under ``--exports``). A side's
libraries already under ``--out`` are kept (``--time-only``: build nothing). Prints per model the
milliseconds of onnxruntime, before and after, after/before and each over onnxruntime, both
sides' relative errors against onnxruntime, and how many kernels each side gave each of the
rules named by ``--rules`` (default: the depthwise rules).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTERS = ("torchscript", "dynamo")


def cases(models: list[str], suite: list[str]) -> list[str]:
    return [f"{m}.{e}" for m in models for e in EXPORTERS] + [f"suite.{s}" for s in suite]


def load(key: str, exports: str, out: str):
    """``(model, onnxruntime feed)`` of a case."""
    import onnx

    import tvm_hetero as th

    if key.startswith("suite."):
        name = key.split(".", 1)[1]
        return th.load_model(onnx.load(os.path.join(out, "onnx", f"{name}.onnx")), name=name), None
    name, exporter = key.split(".")
    with open(os.path.join(exports, f"{name}.{exporter}.json")) as handle:
        record = json.load(handle)
    with np.load(os.path.join(exports, f"{name}.inputs.npz")) as arrays:
        feed = {k: arrays[k] for k in record["inputs"]}
    path = os.path.join(exports, record["path"])
    return th.load_model(path, name=name, input_shapes={k: tuple(v.shape)
                                                        for k, v in feed.items()}), feed


def build_side(side: str, keys: list[str], exports: str, out: str) -> None:
    """Build and export each case with the tvm_hetero importable here (one side)."""
    import tvm_hetero as th
    from tvm_hetero.build.compile import BuildStats

    os.makedirs(os.path.join(out, side), exist_ok=True)
    for key in keys:
        record = os.path.join(out, side, f"{key}.json")
        if os.path.exists(record):
            continue
        start = time.perf_counter()
        model, _ = load(key, exports, out)
        stats = BuildStats()
        compiled = th.build(model, "all:cpu", ["cpu"], stats=stats)
        compiled.export_library(os.path.join(out, side, f"{key}.so"))
        rules: dict[str, int] = {}
        for rule in stats.rules.values():
            rules[str(rule)] = rules.get(str(rule), 0) + 1
        with open(record, "w") as handle:
            json.dump({"build_s": time.perf_counter() - start, "rules": rules}, handle)
        print(f"{side} {key}: built in {time.perf_counter() - start:.1f} s", flush=True)
        del compiled, model
        gc.collect()


def time_both(keys: list[str], exports: str, out: str, rounds: int, repeat: int,
              rule_names: list[str]) -> None:
    import onnx

    import tvm_hetero as th
    from tvm_hetero.measure.reference import reference_session
    from tvm_hetero.testing import max_relative_error
    from tvm_hetero.testing.suite import alternating_best, cpu_name, suite_case
    from tvm_hetero.testing.suite.harness import ort_cpu_session

    print(f"CPU: {cpu_name()}; best median ms of {rounds} alternating rounds of {repeat}")
    print(f"{'model':36s} {'ort':>8s} {'before':>8s} {'after':>8s} {'after/bef':>9s} "
          f"{'bef/ort':>7s} {'aft/ort':>7s} {'errors':>15s}  kernels of {', '.join(rule_names)}")
    for key in keys:
        if key.startswith("suite."):
            _, feed, model, inputs, session, want = suite_case(key.split(".", 1)[1], 2)
        else:
            model, feed = load(key, exports, out)
            name, exporter = key.split(".")
            with open(os.path.join(exports, f"{name}.{exporter}.json")) as handle:
                path = os.path.join(exports, json.load(handle)["path"])
            proto = onnx.load(path)
            want = reference_session(proto).run(None, feed)
            session = ort_cpu_session(proto, 2)
            del proto
            inputs = {s.name: feed[s.source_name or s.name] for s in model.inputs}
        loaded = {side: th.load(os.path.join(out, side, f"{key}.so"))
                  for side in ("before", "after")}
        errors = {side: max_relative_error(c.run(inputs), want) for side, c in loaded.items()}
        best = alternating_best(session, feed, loaded, inputs, rounds, repeat)
        counts = []
        for side in ("before", "after"):
            with open(os.path.join(out, side, f"{key}.json")) as handle:
                rules = json.load(handle)["rules"]
            counts.append("/".join(str(rules.get(r, 0)) for r in rule_names))
        print(f"{key:36s} {best['ort']:8.2f} {best['before']:8.2f} {best['after']:8.2f} "
              f"{best['after'] / best['before']:9.3f} {best['before'] / best['ort']:7.2f} "
              f"{best['after'] / best['ort']:7.2f} {errors['before']:7.1e}/{errors['after']:7.1e}"
              f"  {counts[0]} -> {counts[1]}", flush=True)
        del loaded, session
        gc.collect()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-tree")
    parser.add_argument("--after-tree", default=REPO)
    parser.add_argument("--models", default="fasterrcnn_mnv3_fpn,ssdlite320_mnv3,"
                        "efficientnet_b0,mobilenet_v3_large,regnet_y_1_6gf,deeplabv3_mnv3,"
                        "convnext_tiny")
    parser.add_argument("--suite", default="mobilenet_v2,mobilenet_v3_block,efficientnet_block")
    parser.add_argument("--exports", default=os.path.join("out", "real_models", "exports"))
    parser.add_argument("--out", default=os.path.join("out", "real_models_ab"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rules", default="strided-depthwise-rows,depthwise-nchwc,"
                        "depthwise-rows,tiled")
    parser.add_argument("--time-only", action="store_true")
    parser.add_argument("--build-side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    keys = cases([m for m in args.models.split(",") if m], [s for s in args.suite.split(",") if s])
    if args.build_side:  # a side's own process
        build_side(args.build_side, keys, args.exports, args.out)
        return
    if not args.time_only:
        if not args.before_tree:
            sys.exit("error: --before-tree DIR is needed to build (or --time-only)")
        import onnx

        from tvm_hetero.testing.suite import SUITE

        os.makedirs(os.path.join(args.out, "onnx"), exist_ok=True)
        for key in keys:  # this tree's suite models, for both sides
            if key.startswith("suite."):
                name = key.split(".", 1)[1]
                onnx.save(SUITE[name]()[0], os.path.join(args.out, "onnx", f"{name}.onnx"))
        for side, tree in (("before", args.before_tree), ("after", args.after_tree)):
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            subprocess.run([sys.executable, os.path.abspath(__file__), "--build-side", side,
                            "--models", args.models, "--suite", args.suite,
                            "--exports", os.path.abspath(args.exports),
                            "--out", os.path.abspath(args.out)],
                           env=env, cwd=os.path.abspath(tree), check=True)
    time_both(keys, args.exports, args.out, args.rounds, args.repeat,
              [r for r in args.rules.split(",") if r])


if __name__ == "__main__":
    main()
