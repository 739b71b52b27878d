"""A/B of rule tables on suite models: each variant's table passed to its build, the model
checked against onnxruntime, then all variants and onnxruntime timed in alternating rounds
(best median).  python benchmarks/experiments/decode_ab.py --models llama_decode --variants
default,split-k-first [--rounds 5]"""
import argparse
import tvm_hetero as th
from tvm_hetero.devices import host_num_cores
from tvm_hetero.optimize import RuleTable, default_table
from tvm_hetero.optimize.cpu import SplitKGemv
from tvm_hetero.testing import max_relative_error
from tvm_hetero.testing import suite as s
from tvm_hetero.testing.suite import copy_bandwidth_gbs, cpu_name, weight_bytes


def old_reduction(table: RuleTable) -> RuleTable:
    """The reduction rules before row-reductions joined them (RULES_VERSION 21)."""
    table = table.without("row-reductions", "cpu", "reduction")
    assert [r.name for r in table["cpu", "reduction"]] == ["reduction-chains", "parallel-loops",
                                                          "dlight.cpu.Reduction"]
    return table


def split_k_first(table: RuleTable) -> RuleTable:
    return table.with_rule("cpu", "matmul", SplitKGemv())


VARIANTS = {"default": lambda table: table, "old-reduction": old_reduction,
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
            c = th.build(model, "all:cpu", ["cpu"], rules=VARIANTS[variant](default_table()))
            err = max_relative_error(c.run(inputs), want)
            builds[variant] = c
            print(f"{name} {variant}: error {err:.1e}, rules "
                  f"{sorted(set(map(str, c.stats.rules.values())))}", flush=True)
        best = s.alternating_best(session, feed, builds, inputs, a.rounds, a.repeat)
        mb = weight_bytes(proto) / 1e6
        print(f"{name} ({mb:.1f} MB of weights): " + "  ".join(
            f"{k} {v:.3f} ms ({v / best['ort']:.2f}x, {mb / v:.1f} GB/s)"
            for k, v in best.items()), flush=True)


if __name__ == "__main__":
    main()
