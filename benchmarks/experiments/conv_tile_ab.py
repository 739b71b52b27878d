"""Register-tile A/B on the convolution and matmul kernels of suite models: every such kernel
of the models (prepared for the target, as a build for it is) compiled with the channel-vector
rules' tiles of rules version 14 (A: ``PACKED_ACCUMULATORS = {32: 16, 16: 6}``, Winograd's
products 2 channel blocks x the columns left, blocked-nchwc's tiles over the whole reduction)
and with the current ones (B), timed alone in
alternating rounds in one process (best of rounds), summed per model with each kernel's
number of calls. With ``--cpu-time`` each kernel is timed by the CPU time of its calls
(``time.process_time``) instead of the wall clock: on a machine shared with other jobs that
is what the tile changes (run it with ``TVM_NUM_THREADS=1`` to time one core's work).

    python benchmarks/experiments/conv_tile_ab.py [--models vgg19,squeezenet,resnet50]
                                                  [--target-mcpu haswell] [--rounds 3] [--top 8]
                                                  [--cpu-time]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from collections import Counter

import tvm

import tvm_hetero as th
from tvm_hetero.devices import host_num_cores
from tvm_hetero.layers.classify import kernel_kind
from tvm_hetero.layers.layered import layered_module
from tvm_hetero.optimize.cpu import analysis, blocked_nchwc, schedule_helpers, winograd
from tvm_hetero.optimize.kernel import kernel_for, time_kernel
from tvm_hetero.prepare import PrepareConfig
from tvm_hetero.target import cpu_traits
from tvm_hetero.testing.suite import SUITE

OLD_ACCUMULATORS = {32: 16, 16: 6}


def old_products_tile(channel_blocks, tile_cols, vectors_per_block, registers):
    """Winograd's products tile of rules version 14: 2 channel blocks where the channels allow,
    the most columns (a divisor) the accumulators leave."""
    accumulators = schedule_helpers.PACKED_ACCUMULATORS[registers]
    k_blocks = 2 if channel_blocks % 2 == 0 and 2 * vectors_per_block <= accumulators else 1
    return k_blocks, analysis.largest_divisor(
        tile_cols, max(1, accumulators // (k_blocks * vectors_per_block)))


def without_reduction_blocks(target):
    """`cpu_traits` as blocked-nchwc saw them in rules version 14: its tiles ran over the whole
    reduction whatever the L1 cache (a cache no tile's weights outgrow)."""
    return dataclasses.replace(cpu_traits(target), l1_bytes=1 << 40)


def compiled(func, device, old: bool):
    """``(library, scheduled function, rule)`` of `func` with the old tiles or the current."""
    saved = (dict(schedule_helpers.PACKED_ACCUMULATORS), winograd.products_tile,
             blocked_nchwc.cpu_traits)
    if old:
        schedule_helpers.PACKED_ACCUMULATORS.update(OLD_ACCUMULATORS)
        winograd.products_tile = old_products_tile
        blocked_nchwc.cpu_traits = without_reduction_blocks
    try:
        chosen: dict = {}
        lib, scheduled = kernel_for(func, device, chosen)
    finally:
        schedule_helpers.PACKED_ACCUMULATORS.update(saved[0])
        winograd.products_tile, blocked_nchwc.cpu_traits = saved[1:]
    return lib, scheduled, chosen.get("main")


def cpu_time_ms(lib, func, device, min_ms: float = 20.0) -> float:
    """CPU ms per call of `lib` (the kernel `func` compiled) on random arguments: calls
    repeated until they took `min_ms` of this process's CPU time."""
    import numpy as np

    rng = np.random.default_rng(0)
    dev = device.runtime_device()
    args = [tvm.runtime.tensor(rng.standard_normal([int(d) for d in p.ty.shape])
                               .astype(str(p.ty.dtype)), dev) for p in func.params]
    main_func = lib["main"]
    main_func(*args)
    calls, start = 0, time.process_time()
    while (time.process_time() - start) * 1e3 < min_ms:
        main_func(*args)
        calls += 1
    return (time.process_time() - start) * 1e3 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="vgg19,squeezenet,resnet50")
    parser.add_argument("--target-mcpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=8, help="kernels listed per model")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time by the CPU time of the calls, not the wall clock")
    args = parser.parse_args()
    spec = "cpu"
    if args.target_mcpu:
        spec = json.dumps({"kind": "llvm", "mcpu": args.target_mcpu,
                           "num-cores": host_num_cores(), "name": "cpu"})
    devices = th.DeviceSet.parse([spec])
    device = devices.devices[0]
    new = dict(schedule_helpers.PACKED_ACCUMULATORS)
    clock = "CPU time" if args.cpu_time else "wall clock"
    threads = os.environ.get("TVM_NUM_THREADS", host_num_cores())
    print(f"target {json.dumps(device.target)}; {threads} threads, {clock}; A accumulators "
          f"{OLD_ACCUMULATORS}, B {new} (and Winograd tiles); best of {args.rounds} "
          "alternating rounds")
    totals = []
    for name in args.models.split(","):
        proto, _ = SUITE[name]()
        model = th.load_model(proto, name=name)
        mod = layered_module(model, PrepareConfig.for_devices(devices))
        calls = Counter(layer.func_name
                        for layer in th.extract_layers(model, PrepareConfig.for_devices(devices)))
        rows = []
        for gv, func in mod.functions.items():
            if not isinstance(func, tvm.tirx.PrimFunc):
                continue
            if gv.name_hint not in calls or kernel_kind(func) not in ("conv2d", "matmul"):
                continue
            a = compiled(func, device, old=True)
            b = compiled(func, device, old=False)
            best = [float("inf"), float("inf")]
            for _ in range(args.rounds):
                for i, (lib, scheduled, _) in enumerate((a, b)):
                    timer = cpu_time_ms if args.cpu_time else time_kernel
                    best[i] = min(best[i], timer(lib, scheduled, device))
            rows.append((gv.name_hint, b[2], calls.get(gv.name_hint, 1), *best))
        a_sum = sum(r[2] * r[3] for r in rows)
        b_sum = sum(r[2] * r[4] for r in rows)
        totals.append((name, a_sum, b_sum))
        print(f"\n{name}: conv/matmul kernels {len(rows)}, A {a_sum:.2f} ms, B {b_sum:.2f} ms, "
              f"B/A {b_sum / a_sum:.2f}")
        print(f"  {'kernel':<44}{'rule':<18}{'calls':>6}{'A ms':>9}{'B ms':>9}{'B/A':>6}")
        for row in sorted(rows, key=lambda r: -r[2] * max(r[3], r[4]))[:args.top]:
            print(f"  {row[0][:43]:<44}{str(row[1]):<18}{row[2]:>6}{row[3]:>9.3f}{row[4]:>9.3f}"
                  f"{row[4] / row[3]:>6.2f}")
    print(f"\n{'model':<16}{'A ms':>9}{'B ms':>9}{'B/A':>6}")
    for name, a_sum, b_sum in totals:
        print(f"{name:<16}{a_sum:>9.2f}{b_sum:>9.2f}{b_sum / a_sum:>6.2f}")


if __name__ == "__main__":
    main()
