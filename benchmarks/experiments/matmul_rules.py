"""Matmul rules A/B: the table's old matmul rules (split-k-gemv, then tiled) against
``packed-matmul`` on the suite's matmul shapes, in alternating rounds in one process (best of
rounds), and the small-M products' weight streaming rate against the copy bandwidth
``tvm-hetero devices`` measures, both printed per product.

    python benchmarks/experiments/matmul_rules.py [--target-mcpu haswell] [--rounds 5]
                                                  [--only bandwidth]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from tvm_hetero.devices import DeviceSet, host_num_cores
from tvm_hetero.measure.profiles import measure_transfer
from tvm_hetero.optimize.cpu import PackedMatmul, SplitKGemv, Tiled
from tvm_hetero.optimize.cpu.packed_matmul import matmul_tile
from tvm_hetero.optimize.kernel import time_kernel
from tvm_hetero.target import cpu_traits

# (name, M, K, N, epilogue): the suite's matmul kernels (model_suite's per-kernel table)
SHAPES = [
    ("vit ffn1 +gelu(erf)", 197, 768, 3072, "gelu_erf"),
    ("vit ffn2 +add+res", 197, 3072, 768, "residual"),
    ("vit qkv +add", 197, 768, 768, "bias"),
    ("bert ffn1 +gelu(erf)", 128, 768, 3072, "gelu_erf"),
    ("gpt2 ffn1 +gelu(tanh)", 128, 768, 3072, "gelu_tanh"),
    ("bert ffn2 +add+res", 128, 3072, 768, "residual"),
    ("mlp_b64 4096->2048 relu", 64, 4096, 2048, "relu"),
    ("mlp_b64 1024->4096 relu", 64, 1024, 4096, "relu"),
    ("mlp_b64 2048->1000", 64, 2048, 1000, "bias"),
    ("mlp_b8 4096->2048 relu", 8, 4096, 2048, "relu"),
    ("mlp_b8 1024->4096 relu", 8, 1024, 4096, "relu"),
    ("mlp_b1 4096->2048 relu", 1, 4096, 2048, "relu"),
    ("mlp_b8 2048->1000", 8, 2048, 1000, "bias"),
    ("mlp_b1 2048->1000", 1, 2048, 1000, "bias"),
]
BANDWIDTH_M = (1, 2, 4, 8, 16)
BANDWIDTH_KN = ((4096, 1024), (4096, 2048), (4096, 4096))  # 16, 32, 64 MB of weights


def matmul_kernel(m: int, k: int, n: int, epilogue: str):
    """A fused matmul kernel as the ONNX import makes it: ``[1, M, K] x [K, N]`` + bias and
    `epilogue`, with its op kinds."""
    from tvm import te, tirx

    x = te.placeholder((1, m, k), "float32", name="x")
    w = te.placeholder((k, n), "float32", name="w")
    b = te.placeholder((n,), "float32", name="b")
    r = te.reduce_axis((0, k), name="k")
    mm = te.compute((1, m, n), lambda o, i, j: te.sum(x[o, i, r] * w[r, j], axis=r), name="mm")
    y = te.compute(mm.shape, lambda o, i, j: mm[o, i, j] + b[j], name="bias")
    ops, args = ["matmul", "add"], [x, w, b]
    if epilogue == "relu":
        y = te.compute(y.shape, lambda *i: te.max(y(*i), 0.0), name="relu")
        ops.append("relu")
    elif epilogue == "gelu_erf":
        y = te.compute(y.shape, lambda *i: y(*i) * 0.5 * (1.0 + tirx.erf(y(*i) / math.sqrt(2))),
                       name="gelu")
        ops += ["divide", "erf", "add", "multiply", "multiply"]
    elif epilogue == "gelu_tanh":
        y = te.compute(y.shape, lambda *i: y(*i) * 0.5 * (1.0 + tirx.tanh(0.7978845608 * (
            y(*i) + 0.044715 * tirx.power(y(*i), 3.0)))), name="gelu")
        ops += ["power", "multiply", "add", "multiply", "tir_tanh", "add", "multiply"]
    elif epilogue == "residual":
        res = te.placeholder(y.shape, "float32", name="res")
        y = te.compute(y.shape, lambda *i: y(*i) + res(*i), name="residual")
        ops.append("add")
        args.append(res)
    return te.create_prim_func([*args, y]).with_attr("tvm_hetero.op_kinds", ops)


def old_rule(func, target):
    """The table's matmul rules before packed-matmul: split-k-gemv, else tiled."""
    for rule in (SplitKGemv(), Tiled()):
        scheduled = rule.apply(func, target)
        if scheduled is not None:
            return rule.name, scheduled
    return "none", func


def compile_kernel(func, target):
    import tvm

    mod = tvm.IRModule({"main": func.with_attr("target", target)
                        .with_attr("global_symbol", "main")})
    return tvm.tirx.build(mod, target=target)


def best_of(candidates, device, rounds: int) -> list[float]:
    best = [math.inf] * len(candidates)
    for _ in range(rounds):  # alternating: A, B, A, B, ...
        for i, (lib, func) in enumerate(candidates):
            best[i] = min(best[i], time_kernel(lib, func, device, repeat=3))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-mcpu", default=None, help="an LLVM CPU (haswell: AVX2)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=("shapes", "bandwidth"), default=None)
    args = parser.parse_args()
    spec = "cpu"
    if args.target_mcpu:
        spec = json.dumps({"kind": "llvm", "mcpu": args.target_mcpu,
                           "num-cores": host_num_cores(), "name": "cpu"})
    device = DeviceSet.parse([spec]).devices[0]
    target = device.tvm_target()
    print(f"target {target}; best of {args.rounds} alternating rounds")
    new = PackedMatmul()
    if args.only != "bandwidth":
        print(f"{'kernel':<26}{'old rule':>14}{'old ms':>9}{'new ms':>9}{'speed-up':>9}"
              f"{'new GFLOP/s':>12}")
        for name, m, k, n, epilogue in SHAPES:
            func = matmul_kernel(m, k, n, epilogue)
            old_name, old = old_rule(func, target)
            scheduled = new.apply(func, target)
            if scheduled is None:
                print(f"{name:<26}{old_name:>14}  (packed-matmul declines: N not whole vectors)")
                continue
            candidates = [(compile_kernel(old, target), old),
                          (compile_kernel(scheduled, target), scheduled)]
            old_ms, new_ms = best_of(candidates, device, args.rounds)
            print(f"{name:<26}{old_name:>14}{old_ms:>9.3f}{new_ms:>9.3f}{old_ms / new_ms:>8.2f}x"
                  f"{2 * m * k * n / new_ms / 1e6:>12.1f}", flush=True)
    if args.only != "shapes":
        print("\ncopy: the copy bandwidth `tvm-hetero devices` measures (measure_transfer), "
              "taken\nin the same rounds as the kernel (alternating), best of each")
        print(f"{'M':>3} {'K x N':>12}{'weights MB':>11}{'tile':>6}{'ms':>9}{'GB/s':>8}"
              f"{'copy GB/s':>10}{'of copy':>9}")
        for k, n in BANDWIDTH_KN:
            for m in BANDWIDTH_M:
                func = matmul_kernel(m, k, n, "relu")
                scheduled = new.apply(func, target)
                lib = compile_kernel(scheduled, target)
                new_ms, copy = math.inf, 0.0
                for _ in range(args.rounds):
                    copy = max(copy, measure_transfer(device, device).bandwidth_gbs)
                    new_ms = min(new_ms, time_kernel(lib, scheduled, device, repeat=3))
                gbs = k * n * 4 / new_ms / 1e6
                print(f"{m:>3} {f'{k}x{n}':>12}{k * n * 4 / 2**20:>11.0f}{tile_of(m, n, target):>6}"
                      f"{new_ms:>9.3f}{gbs:>8.2f}{copy:>10.2f}{gbs / copy:>8.0%}", flush=True)


def tile_of(m: int, n: int, target) -> str:
    """The packed-matmul register tile (rows x vectors) of an M x N product on `target`."""
    traits = cpu_traits(target)
    rows, vectors = matmul_tile(m, n // traits.lanes, traits.registers)
    return f"{rows}x{vectors}"

if __name__ == "__main__":
    np.random.seed(0)
    main()
