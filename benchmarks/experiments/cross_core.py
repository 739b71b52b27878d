"""What it costs one core to read data the other core just wrote, on TVM's thread pool.

Two-task TIR kernels on TVM's CPU runtime (2 threads): ``write`` fills a [2, N] buffer, task i
its row i; ``read same`` then reads row i in task i (the data its own core wrote), ``read
other`` row 1 - i (the data the other core wrote). Each round times write+read pairs both ways
and a compute-only probe (two tasks of fused multiply-adds on registers: it doubles when the
pool's two tasks run one after the other). Rounds are a pause apart, so the table shows this
machine's two timing states. The padding-per-task rule (docs/design.md) came from this gap.

    python benchmarks/experiments/cross_core.py [--kib 64] [--rounds 8]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import tvm
from tvm.script import tirx as T

from tvm_hetero.devices import host_cpu_name, runtime_threads, use_every_cpu_thread

use_every_cpu_thread()  # TVM_NUM_THREADS: every CPU, before the pool starts


def kernels(floats: int):
    @T.prim_func
    def write(a: T.Buffer((2, floats), "float32"), x: T.Buffer((2, floats), "float32")):
        for i in T.parallel(2):
            for j in range(floats):
                x[i, j] = a[i, j] + T.float32(1)

    @T.prim_func
    def read_same(x: T.Buffer((2, floats), "float32"), y: T.Buffer((2, floats), "float32")):
        for i in T.parallel(2):
            for j in range(floats):
                y[i, j] = x[i, j] * T.float32(2)

    @T.prim_func
    def read_other(x: T.Buffer((2, floats), "float32"), y: T.Buffer((2, floats), "float32")):
        for i in T.parallel(2):
            for j in range(floats):
                y[i, j] = x[1 - i, j] * T.float32(2)

    @T.prim_func
    def compute(a: T.Buffer((2, 16), "float32"), b: T.Buffer((2, 16), "float32")):
        for i in T.parallel(2):
            for _ in range(20000):
                for j in T.vectorized(16):
                    b[i, j] = b[i, j] * a[i, j] + a[i, j]

    return write, read_same, read_other, compute


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kib", type=int, default=64, help="KiB each task writes and reads")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=2000, help="write+read pairs per timing")
    args = parser.parse_args()
    floats = args.kib * 1024 // 4
    target = tvm.target.Target({"kind": "llvm", "mcpu": host_cpu_name()})
    write, read_same, read_other, compute = (
        tvm.tirx.build(func, target=target)["main"] for func in kernels(floats))
    dev = tvm.cpu()
    a, x, y = (tvm.runtime.tensor(np.random.rand(2, floats).astype("float32"), dev)
               for _ in range(3))
    probe_args = [tvm.runtime.tensor(np.full((2, 16), 0.5, "float32"), dev) for _ in range(2)]

    def pairs_us(read) -> float:
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(args.pairs):
                write(a, x)
                read(x, y)
            best = min(best, (time.perf_counter() - start) / args.pairs * 1e6)
        return best

    def probe_us() -> float:
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(20):
                compute(*probe_args)
            best = min(best, (time.perf_counter() - start) / 20 * 1e6)
        return best

    print(f"TVM thread pool: {runtime_threads()} threads; each task writes then reads "
          f"{args.kib} KiB; best of 3 timings of {args.pairs} pairs")
    print(f"{'round':>5}{'same half us':>14}{'other half us':>15}{'extra us':>10}"
          f"{'probe us':>10}")
    for index in range(args.rounds):
        time.sleep(0.3)
        same, other = pairs_us(read_same), pairs_us(read_other)
        print(f"{index:>5}{same:>14.2f}{other:>15.2f}{other - same:>10.2f}{probe_us():>10.1f}",
              flush=True)


if __name__ == "__main__":
    main()
