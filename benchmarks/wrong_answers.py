"""Wrong answers: many random placements over the zoo and the onnx package's light graphs, each
built with tvm_hetero and its outputs compared with onnxruntime's. Goal: 0 wrong outputs.

    python benchmarks/wrong_answers.py [--placements 1000] [--models NAME=WEIGHT,...] [--seed 0]

The placements are shared out by weight (fast models get most); a model with fewer distinct
placements than its share gets all of them (each layer on `cpu` or `cpu-generic`, times both
device orders: the first device holds the constant pool). Each placement draws a fraction p
and puts each layer on `cpu-generic` with probability p, so near-single-device placements are
drawn as well as evenly mixed ones. Inputs are seeded (3 seeds per model, by turns).
An output is wrong when max |got - want| / max |want| >= 1e-4, or when it holds NaN or inf
where onnxruntime's does not, or has another shape. Build failures (`tvm_hetero.build` raised)
and run failures (`run` raised) are counted apart.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

import tvm_hetero as th
from tvm_hetero.testing import light_model, max_relative_error, onnx_reference

TOLERANCE = 1e-4
DEVICES = ("cpu", "cpu-generic")
WEIGHTS = {"zoo:mlp": 1, "zoo:cnn": 2, "zoo:vgg": 4, "zoo:resnet": 5, "zoo:transformer": 5,
           "squeezenet": 2.5, "bvlc_alexnet": 0.5}
INPUT_SEEDS = 3


def relative_error(got, want) -> float:
    """max_relative_error, with NaN/inf against a finite reference or a shape mismatch = inf."""
    if len(got) != len(want):
        return math.inf
    for a, b in zip(got, want):
        b = np.asarray(b)
        if a.shape != b.shape or not np.array_equal(np.isfinite(a), np.isfinite(b)):
            return math.inf
    return max_relative_error(got, want)


def share(total: int, weights: dict[str, float], caps: dict[str, int]) -> dict[str, int]:
    """`total` split by weight, no model above its cap, leftovers to the uncapped ones."""
    quota = {name: 0 for name in weights}
    left = total
    while left > 0:
        open_ = {n: w for n, w in weights.items() if quota[n] < caps[n]}
        if not open_:
            break
        weight_sum = sum(open_.values())
        given = 0
        for name, weight in open_.items():
            add = min(caps[name] - quota[name], max(1, int(left * weight / weight_sum)))
            add = min(add, left - given)
            quota[name] += add
            given += add
        left -= given
        if given == 0:
            break
    return quota


def placements_for(layer_names, count: int, rng: np.random.Generator):
    """`count` distinct (assignment, device order) pairs; all of them when there are fewer."""
    n = len(layer_names)
    orders = [DEVICES, DEVICES[::-1]]
    if count >= 2 ** n * 2:
        return [(tuple(DEVICES[(bits >> i) & 1] for i in range(n)), order)
                for bits in range(2 ** n) for order in orders]
    seen, out = set(), []
    while len(out) < count:
        p = rng.uniform()
        devices = tuple(DEVICES[int(x)] for x in rng.uniform(size=n) < p)
        order = orders[int(rng.integers(2))]
        if (devices, order) not in seen:
            seen.add((devices, order))
            out.append((devices, order))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--placements", type=int, default=1000,
                        help="placements in all (default: 1000)")
    parser.add_argument("--models", default=",".join(f"{n}={w}" for n, w in WEIGHTS.items()),
                        help="NAME=WEIGHT,... (zoo:NAME or a light graph of the onnx package)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    weights = {}
    for item in args.models.split(","):
        name, _, weight = item.partition("=")
        weights[name] = float(weight or 1)

    loaded = {}
    for name in weights:
        onnx_model = th.zoo_model(name[4:]) if name.startswith("zoo:") else light_model(name)
        model = th.load_model(onnx_model, name=name.removeprefix("zoo:"))
        loaded[name] = (onnx_model, model, [layer.name for layer in th.extract_layers(model)])
    caps = {name: 2 ** (len(layers) + 1) for name, (_, _, layers) in loaded.items()}
    quota = share(args.placements, weights, caps)
    device_sets = {order: th.DeviceSet.parse(list(order)) for order in (DEVICES, DEVICES[::-1])}

    header = (f"{'model':<16}{'layers':>7}{'placements':>11}{'wrong':>7}{'build fail':>11}"
              f"{'run fail':>9}{'worst rel err':>15}{'build s':>9}{'seconds':>9}")
    print(header)
    print("-" * len(header), flush=True)
    totals = dict(placements=0, wrong=0, build=0, run=0)
    worst_all, wrong_examples, start_all = 0.0, [], time.perf_counter()
    for index, (name, (onnx_model, model, layers)) in enumerate(loaded.items()):
        start = time.perf_counter()
        rng = np.random.default_rng([args.seed, index])
        references = []
        for seed in range(INPUT_SEEDS):
            inputs = model.random_inputs(seed=seed)
            references.append((inputs, onnx_reference(onnx_model, inputs, model)))
        wrong = build_fail = run_fail = 0
        worst, build_s = 0.0, []
        todo = placements_for(layers, quota[name], rng)
        for number, (devices, order) in enumerate(todo):
            placement = th.Placement(dict(zip(layers, devices)))
            inputs, want = references[number % INPUT_SEEDS]
            try:
                began = time.perf_counter()
                compiled = th.build(model, placement, device_sets[order])
                build_s.append(time.perf_counter() - began)
            except Exception as err:  # counted and reported, the sweep goes on
                build_fail += 1
                print(f"  BUILD FAILED {name} {order}: {type(err).__name__}: {err}", flush=True)
                continue
            try:
                got = compiled.run(inputs)
            except Exception as err:
                run_fail += 1
                print(f"  RUN FAILED {name} {order}: {type(err).__name__}: {err}", flush=True)
                continue
            error = relative_error(got, want)
            worst = max(worst, error)
            if error >= TOLERANCE:
                wrong += 1
                wrong_examples.append((name, order, placement.assignment, error))
                print(f"  WRONG {name} {order}: relative error {error:.3g}", flush=True)
        totals["placements"] += len(todo)
        totals["wrong"] += wrong
        totals["build"] += build_fail
        totals["run"] += run_fail
        worst_all = max(worst_all, worst)
        median_build = float(np.median(build_s)) if build_s else float("nan")
        print(f"{model.name:<16}{len(layers):>7}{len(todo):>11}{wrong:>7}{build_fail:>11}"
              f"{run_fail:>9}{worst:>15.2e}{median_build:>9.2f}"
              f"{time.perf_counter() - start:>9.1f}", flush=True)
    print("-" * len(header))
    print(f"{'total':<16}{'':>7}{totals['placements']:>11}{totals['wrong']:>7}"
          f"{totals['build']:>11}{totals['run']:>9}{worst_all:>15.2e}{'':>9}"
          f"{time.perf_counter() - start_all:>9.1f}")
    print(f"{totals['placements']} placements over {len(loaded)} models on "
          f"{', '.join(DEVICES)} (both device orders): {totals['wrong']} wrong outputs, "
          f"{totals['build']} build failures, {totals['run']} run failures (tolerance "
          f"{TOLERANCE:g} relative to the largest output)")
    for name, order, assignment, error in wrong_examples[:5]:
        print(f"wrong: {name} on {list(order)}, error {error:.3g}: {assignment}")


if __name__ == "__main__":
    main()
