"""Which XGBoost objective ranks placements better: regression on log-latency or
rank:pairwise? Trained on half of a model's measured placements (from a records file, e.g.
the exhaustive records search_quality.py writes), evaluated on the other half.

    python benchmarks/experiments/cost_model_objective.py --records DIR/cnn/records.jsonl \
        --model zoo:cnn --memory cpu-generic=100KiB
"""

from __future__ import annotations

import argparse

import numpy as np

import tvm_hetero as th
from tvm_hetero.cost_model import Featurizer, XGBCostModel, XGBParams
from tvm_hetero.measure.profiles import profile_model
from tvm_hetero.search.records import PlacementRecords


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    n = len(a)
    concordant = discordant = 0
    for i in range(n):
        for j in range(i + 1, n):
            s = np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])
            concordant += s > 0
            discordant += s < 0
    return (concordant - discordant) / max(concordant + discordant, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", required=True)
    parser.add_argument("--model", default="zoo:cnn")
    parser.add_argument("--memory", action="append", default=[])
    parser.add_argument("--splits", type=int, default=20)
    parser.add_argument("--train", type=float, default=0.5)
    args = parser.parse_args()
    caps = dict(item.split("=", 1) for item in args.memory)
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"], memory=caps)
    model = th.load_model(args.model)
    layers = th.extract_layers(model)
    db = PlacementRecords(args.records, model.fingerprint(), devices.fingerprint())
    pairs = [(p, r.median_ms) for p, r in db.records() if r.ok]
    featurize = Featurizer(layers, devices.names, profile_model(model, layers, devices))
    features = featurize([p for p, _ in pairs])
    latency = np.array([ms for _, ms in pairs])
    rng = np.random.default_rng(0)
    print(f"{len(pairs)} measured placements; {args.splits} random {args.train:.0%} splits")
    print(f"{'objective':<10}{'kendall tau':>12}{'top-1 regret':>14}{'top-3 best regret':>19}")
    for objective in ("reg", "rank"):
        taus, regret1, regret3 = [], [], []
        for _ in range(args.splits):
            order = rng.permutation(len(pairs))
            cut = int(len(pairs) * args.train)
            train, test = order[:cut], order[cut:]
            cost_model = XGBCostModel(XGBParams(objective=objective, num_warmup_samples=4))
            cost_model.fit(features[train], latency[train])
            scores = cost_model.predict(features[test])
            taus.append(kendall_tau(scores, -latency[test]))
            ranked = test[np.argsort(-scores)]
            best = latency[test].min()
            regret1.append(latency[ranked[0]] / best)
            regret3.append(latency[ranked[:3]].min() / best)
        print(f"{objective:<10}{np.mean(taus):>12.3f}{np.mean(regret1):>14.3f}"
              f"{np.mean(regret3):>19.3f}")


if __name__ == "__main__":
    main()
