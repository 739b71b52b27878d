"""Kernels over a shape range against the same kernels built static, alternated in one
process (best of rounds): a linear layer ``[n, K] x [K, N] + bias`` (a row loop of statically
scheduled chunks) and an attention block ``softmax(q k^T / 8) v`` over ``[1, 12, seq, 64]``
(its kernels are over two symbolic extents: `symbolic-loops`).

    python benchmarks/experiments/dynamic_kernels_ab.py [--rows 7 16 128 384] [--rounds 5]

Prints a table and the CPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import tvm_hetero as th

DEVICES = th.DeviceSet.parse(["cpu"])


def linear(k: int = 768, n: int = 3072):
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((k, n)).astype("float32"), "w"),
               numpy_helper.from_array(rng.standard_normal(n).astype("float32"), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["y"])]
    graph = helper.make_graph(
        nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", n])], weights)
    return _model(graph), {"x": lambda s: (s, k)}


def attention(heads: int = 12, width: int = 64):
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, heads, "seq", width])
              for n in "qkv"]
    graph = helper.make_graph(
        nodes, "attention", inputs,
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, [1, heads, "seq", width])],
        [numpy_helper.from_array(np.array(0.125, "float32"), "scale")])
    return _model(graph), {n: (lambda s: (1, heads, s, width)) for n in "qkv"}


def _model(graph):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def build(source, shapes=None, ranges=None):
    model = th.load_model(source, input_shapes=shapes, shape_ranges=ranges)
    layers = th.extract_layers(model, th.PrepareConfig.for_devices(DEVICES))
    return th.build(model, th.Placement.all_on(layers, "cpu"), DEVICES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[7, 16, 128, 384])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print("| kernel | seq | dynamic ms | static ms | dynamic / static | dynamic rules |")
    print("|---|---:|---:|---:|---:|---|")
    rng = np.random.default_rng(1)
    for name, (source, shape_of) in (("linear 768x3072", linear()), ("attention", attention())):
        dynamic = build(source, ranges={"seq": f"1:{max(args.rows)}:{args.rows[0]}"})
        rules = sorted({str(r) for r in dynamic.stats.rules.values()})
        for rows in args.rows:
            static = build(source, shapes={n: f(rows) for n, f in shape_of.items()})
            feed = {n: rng.standard_normal(f(rows)).astype("float32")
                    for n, f in shape_of.items()}
            np.testing.assert_allclose(dynamic.run(feed)[0], static.run(feed)[0],
                                       rtol=1e-4, atol=1e-3)
            best = {"dynamic": float("inf"), "static": float("inf")}
            for _ in range(args.rounds):  # alternated
                for key, compiled in (("dynamic", dynamic), ("static", static)):
                    start = time.perf_counter()
                    compiled.run(feed)
                    best[key] = min(best[key], (time.perf_counter() - start) * 1e3)
            print(f"| {name} | {rows} | {best['dynamic']:.3f} | {best['static']:.3f} | "
                  f"{best['dynamic'] / best['static']:.2f} | {', '.join(rules)} |", flush=True)


if __name__ == "__main__":
    main()
