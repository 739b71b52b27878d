"""A/B of rule tables on suite models: each variant's table set, the model built, checked
against onnxruntime, then all variants and onnxruntime timed in alternating rounds (best
median).  python benchmarks/experiments/decode_ab.py --models llama_decode --variants
default,split-k-first [--rounds 5]"""
import argparse, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import suite_models as s
from model_suite import copy_bandwidth_gbs, cpu_name, weight_bytes
import tvm_hetero as th
from tvm_hetero.devices import host_num_cores
from tvm_hetero.optimize import table as tb
from tvm_hetero.optimize.cpu import SplitKGemv
from tvm_hetero.optimize.cpu.row_reductions import RowReductions
from tvm_hetero.testing import max_relative_error


def old_reduction():  # the reduction table before row-reductions joined it (RULES_VERSION 21)
    rules = tb._TABLE[("cpu", "reduction")]
    rules[:] = [r for r in rules if r.name != "row-reductions"]
    assert [r.name for r in rules] == ["reduction-chains", "parallel-loops",
                                       "dlight.cpu.Reduction"]


def split_k_first():
    rules = tb._TABLE[("cpu", "matmul")]
    rules.insert(0, SplitKGemv())


VARIANTS = {"default": lambda: None, "old-reduction": old_reduction,
            "split-k-first": split_k_first}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="llama_decode")
    p.add_argument("--variants", default="default,old-reduction")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    copy = copy_bandwidth_gbs(th.DeviceSet.parse(["cpu"]).devices[0])
    print(f"CPU: {cpu_name()}, {host_num_cores()} cores; {a.rounds} rounds alternating; copy "
          f"bandwidth (tvm-hetero devices) {copy:.1f} GB/s")
    for name in a.models.split(","):
        proto, feed, model, inputs, session, want = s.suite_case(name, host_num_cores())
        builds = {}
        for variant in a.variants.split(","):
            tb.reset_table()
            VARIANTS[variant]()
            c = th.build(model, "all:cpu", ["cpu"])
            err = max_relative_error(c.run(inputs), want)
            builds[variant] = c
            print(f"{name} {variant}: error {err:.1e}, rules "
                  f"{sorted(set(map(str, c.stats.rules.values())))}", flush=True)
        tb.reset_table()
        best = s.alternating_best(session, feed, builds, inputs, a.rounds, a.repeat)
        mb = weight_bytes(proto) / 1e6
        print(f"{name} ({mb:.1f} MB of weights): " + "  ".join(
            f"{k} {v:.3f} ms ({v / best['ort']:.2f}x, {mb / v:.1f} GB/s)"
            for k, v in best.items()), flush=True)


if __name__ == "__main__":
    main()
