"""A/B of the reduction table on RMS norms (ReduceMean of x^2, + eps, Sqrt, Div, Mul x, Mul w):
the table before row-reductions joined it, with it second (after reduction-chains) and first
for norms only (the default). Builds with each table in turn, checks against an optimize=False
build, then times them alternately (best of rounds).

    python benchmarks/experiments/rms_norm_rules.py [--rounds 5]
"""
import argparse
import math
import numpy as np
import tvm_hetero as th
from tvm_hetero.testing import max_relative_error
from tvm_hetero.testing import suite as s
from tvm_hetero.optimize import default_table
from tvm_hetero.optimize.cpu.row_reductions import RowReductions, reduces_only


def rms_model(shape, reciprocal=False):
    g = s.GraphBuilder(seed=1)
    d = shape[-1]
    mean = g.op("ReduceMean", [g.op("Pow", ["x", g.scalar(2.0)])], axes=[-1], keepdims=1)
    root = g.op("Sqrt", [g.op("Add", [mean, g.scalar(1e-6)])])
    inv = g.op("Reciprocal", [root]) if reciprocal else g.op("Div", [g.scalar(1.0), root])
    w = g.const(np.linspace(0.5, 1.5, d).astype(np.float32))
    out = g.op("Mul", [g.op("Mul", ["x", inv]), w])
    return g.model("rms", [s.float_input("x", shape)], [out]), {"x": s.normal_array(shape)}


def tables():
    def variant(position):
        table = default_table().without("row-reductions", "cpu", "reduction")  # the one before
        if position is None:
            return table
        return table.with_rule("cpu", "reduction", RowReductions() if position else
                               RowReductions().unless(reduces_only, "plain reduction"), position)
    return {"before": variant(None), "row-second": variant(1),
            "norms-first (default)": variant(0)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    shapes = [[1, 1, 1024], [1, 1, 4096], [1, 8, 1024], [1, 128, 1024], [2, 64, 768],
              [4, 32, 768], [1, 1, 1000]]
    for shape in shapes:
        proto, feed = rms_model(shape, reciprocal=shape[1] == 8)
        model = th.load_model(proto)
        ref = th.build(model, "all:cpu", ["cpu"], optimize=False).run(feed)
        builds = {}
        for key, rules in tables().items():
            c = th.build(model, "all:cpu", ["cpu"], rules=rules)
            err = max_relative_error(c.run(feed), ref)
            builds[key] = c
            print(shape, key, sorted(set(c.stats.rules.values())), f"err {err:.1e}")
        best = dict.fromkeys(builds, math.inf)
        for r in range(a.rounds):
            for key in list(builds)[r % 3:] + list(builds)[:r % 3]:
                best[key] = min(best[key], builds[key].benchmark(feed, repeat=5).median)
        print(shape, "  ".join(f"{k} {v * 1e3:.1f} us" for k, v in best.items()), flush=True)


if __name__ == "__main__":
    main()
