"""Search quality: each strategy's found latency over the exhaustive optimum, and the
measurements it needs to get within 5 % of it.

For each small model (<= 12 layers) under a memory cap that forces a split, every feasible
placement is measured once (real builds, verified outputs) into a records file: the exhaustive
optimum. Each strategy then searches over 5 seeds against those records (the same
measurements for everyone: lookups, not new runs), with a budget of half the feasible space.

    python benchmarks/search_quality.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import tvm_hetero as th
from tvm_hetero.search import tune

CASES = [  # model, memory caps that force a split: the fast device (cpu) cannot hold it all
    ("zoo:vgg", {"cpu": "600KiB"}),
    ("zoo:cnn", {"cpu": "100KiB"}),
    ("zoo:mlp", {"cpu": "600KiB"}),
]
# (label, strategy, use the profile): without the profile there is no min-cut/DP seed and the
# cost model learns from placement features alone
VARIANTS = [("xgb", "xgb", True), ("best-of-samples", "best-of-samples", True),
            ("random", "random", True), ("greedy", "greedy", True), ("mincut", "mincut", True),
            ("xgb, no profile", "xgb", False), ("best-of-samples, no prof.", "best-of-samples",
                                                False)]


def needed(history, target):
    for index, best in enumerate(history, 1):
        if best <= target:
            return index
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    root = args.workdir or tempfile.mkdtemp(prefix="tvm_hetero_quality_")
    rows = []
    for source, caps in CASES:
        devices = th.DeviceSet.parse(["cpu", "cpu-generic"], memory=caps)
        model = th.load_model(source)
        workdir = os.path.join(root, model.name)
        records = os.path.join(workdir, "records.jsonl")
        start = time.perf_counter()
        truth = tune(model, devices, strategy="exhaustive", trials=1, records=records,
                     workdir=workdir)
        feasible = len(truth.trials)
        optimum = truth.latency.median_ms
        print(f"{model.name}: {len(th.extract_layers(model))} layers, {feasible} feasible "
              f"placements under {caps}, measured in {time.perf_counter() - start:.0f} s; "
              f"optimum {optimum:.3f} ms, best single device "
              f"{truth.best_single[1].median_ms if truth.best_single else float('nan'):.3f} ms",
              flush=True)
        budget = max(8, feasible // 2)
        for label, strategy, use_profile in VARIANTS:
            ratios, counts = [], []
            for seed in range(args.seeds):
                result = tune(model, devices, strategy=strategy, trials=budget,
                              records=records, workdir=workdir, seed=seed, threshold=8,
                              batch_size=4, use_profile=use_profile)
                assert result.measured == 0  # every candidate comes from the records
                ratios.append(result.latency.median_ms / optimum)
                counts.append(needed(result.history, optimum * 1.05))
            reached = [c for c in counts if c is not None]
            rows.append((model.name, label, float(np.mean(ratios)), float(np.max(ratios)),
                         len(reached), float(np.mean(reached)) if reached else float("nan"),
                         budget))
    print()
    print(f"{'model':<8}{'strategy':<27}{'found/opt mean':>15}{'worst':>8}"
          f"{'runs <=1.05x':>13}{'measurements to 1.05x':>23}{'budget':>8}")
    for name, strategy, mean, worst, reached, count, budget in rows:
        print(f"{name:<8}{strategy:<27}{mean:>15.3f}{worst:>8.3f}{reached:>9}/{args.seeds:<3}"
              f"{count:>23.1f}{budget:>8}")


if __name__ == "__main__":
    main()
