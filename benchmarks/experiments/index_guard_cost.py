"""The cost of the run-time index checks (tvm_hetero/frontend/onnx/index_guard.py) on a
BERT-like embedding: token ids (1, SEQ) -> word embedding (30522 x 768) + position embedding +
layer norm. Built with the checks (the default) and without (the Gather fix taken out of the
converter map for this build only), both on `cpu`, timed alternately in one process, best of
the rounds.

    python benchmarks/experiments/index_guard_cost.py [--seq 128] [--rounds 5]
"""

from __future__ import annotations

import argparse
from unittest import mock

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import tvm_hetero as th
from tvm_hetero.frontend.onnx import FIXES

VOCAB, HIDDEN = 30522, 768


def embedding_model(seq: int):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a.astype(np.float32), name) for name, a in [
        ("word", rng.standard_normal((VOCAB, HIDDEN)) * 0.02),
        ("position", rng.standard_normal((512, HIDDEN)) * 0.02),
        ("gamma", np.ones(HIDDEN)), ("beta", np.zeros(HIDDEN))]]
    inits.append(numpy_helper.from_array(np.arange(seq, dtype=np.int64)[None], "positions"))
    nodes = [helper.make_node("Gather", ["word", "ids"], ["w"]),
             helper.make_node("Gather", ["position", "positions"], ["p"]),
             helper.make_node("Add", ["w", "p"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1,
                              epsilon=1e-12)]
    graph = helper.make_graph(
        nodes, "embedding", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, HIDDEN])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def build(proto, checked: bool):
    fixes = dict(FIXES)
    if not checked:
        del fixes["Gather"]
    with mock.patch.dict(FIXES, fixes, clear=True):
        model = th.load_model(proto, name="embedding")
    layers = th.extract_layers(model)
    return model, th.build(model, th.Placement({l.name: "cpu" for l in layers}), ["cpu"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    proto = embedding_model(args.seq)
    builds = {name: build(proto, checked) for name, checked in
              (("checked", True), ("unchecked", False))}
    ids = {"ids": np.random.default_rng(1).integers(0, VOCAB, (1, args.seq))}
    outputs = [b.run(ids)[0] for _, b in builds.values()]
    np.testing.assert_array_equal(outputs[0], outputs[1])
    best = {name: float("inf") for name in builds}
    for _ in range(args.rounds):
        for name, (_, compiled) in builds.items():
            best[name] = min(best[name], compiled.benchmark(ids, repeat=20).median)
    print(f"BERT-like embedding, seq {args.seq}, vocab {VOCAB} x {HIDDEN}, on cpu "
          f"(best of {args.rounds} rounds, medians of 20 runs)")
    print(f"{'build':<12}{'ms':>10}")
    for name, value in best.items():
        print(f"{name:<12}{value:>10.4f}")
    print(f"cost of the checks: {best['checked'] - best['unchecked']:+.4f} ms "
          f"({(best['checked'] / best['unchecked'] - 1) * 100:+.1f} %)")


if __name__ == "__main__":
    main()
