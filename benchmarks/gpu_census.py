"""What each CUDA kernel of the suite's models looks like, built all on ``cuda@sm_90`` without
a GPU: the rule that scheduled it, the work it does against its layer's, the resources nvcc
gives it and the blocks it launches against the SMs.

    python benchmarks/gpu_census.py [--models resnet50,mobilenet_v2] [--sms 132] [--no-nvcc]

Per kernel: layer kind (depthwise convolutions apart), rule, the unscheduled kernel's MFLOP and
the scheduled one's (``tvm.s_tir.analysis.estimate_tir_flops``; the ratio shows recomputation),
registers, spills and static shared memory per thread block (``nvcc -cubin -arch=sm_90
-Xptxas -v`` on the build's CUDA source), and thread blocks launched (the product of the
``blockIdx`` loop extents). Per model the totals; at the end the kernels that miss issue 31's
goals: heavy kernels (convolution, matmul, depthwise, pooling) on dlight's ``Fallback`` or
``GeneralReduction``, work over 1.3x, spills, and kernels over 10 MFLOP launching fewer blocks
than the GPU has SMs. About 10-60 s a model on 2 cores. Speed is not measured here: that needs
a GPU (``benchmarks/gpu_check.py``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

from tvm_hetero.target import cuda_multiprocessors
from tvm_hetero.testing.scheduled import estimated_flops, is_depthwise, keep_scheduled
from tvm_hetero.testing.suite import SUITE

CUDA = "cuda@sm_90"
NOT_GEMM = ("dlight.gpu.Fallback", "dlight.gpu.GeneralReduction")
HEAVY_KINDS = ("conv2d", "depthwise", "matmul", "pooling")
MAX_WORK = 1.3
MIN_MFLOP_FOR_SMS = 10.0


def _blocks(func) -> int:
    """Thread blocks a scheduled kernel launches: the product of its blockIdx loop extents."""
    import tvm_ffi
    from tvm import tirx

    extents: dict[str, int] = {}

    def visit(node):
        binding = getattr(node, "thread_binding", None)
        if isinstance(node, tirx.For) and binding is not None:
            tag = str(binding.thread_tag)
            if tag.startswith("blockIdx") and hasattr(node.extent, "value"):
                extents[tag] = max(extents.get(tag, 1), int(node.extent.value))
        return node

    tvm_ffi.structural_map(func.body, visit)
    count = 1
    for extent in extents.values():
        count *= extent
    return count


def nvcc_resources(source: str) -> dict[str, dict[str, int]]:
    """``{kernel: {registers, spill_bytes, shared_bytes}}`` from ``nvcc -Xptxas -v``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernels.cu")
        with open(path, "w") as handle:
            handle.write(source)
        done = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-o",
                               os.path.join(tmp, "k.cubin"), path],
                              capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"nvcc failed: {done.stderr.strip().splitlines()[-1:]}")
    found: dict[str, dict[str, int]] = {}
    kernel = None
    for line in done.stderr.splitlines():
        name = re.search(r"Compiling entry function '(\w+)'", line)
        if name:
            kernel = name.group(1)
            found[kernel] = {"registers": 0, "spill_bytes": 0, "shared_bytes": 0}
            continue
        if kernel is None:
            continue
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if spills:
            found[kernel]["spill_bytes"] = int(spills.group(1)) + int(spills.group(2))
        registers = re.search(r"Used (\d+) registers", line)
        if registers:
            found[kernel]["registers"] = int(registers.group(1))
        shared = re.search(r"(\d+) bytes smem", line)
        if shared:
            found[kernel]["shared_bytes"] = int(shared.group(1))
    return found


def census(model, with_nvcc: bool) -> tuple[list[dict], float]:
    """Every CUDA kernel of `model` built all on cuda: a row per kernel; the build seconds."""

    import tvm_hetero as th
    from tvm_hetero.classify import classify_bindings, kernel_kind
    from tvm_hetero.layered import placed_module

    devices = th.DeviceSet.parse([CUDA])
    layers = th.extract_layers(model, th.PrepareConfig.for_devices(devices))
    placement = th.Placement.all_on(layers, "cuda")
    scheduled: dict = {}
    start = time.perf_counter()
    compiled = th.build(model, placement, devices, extra_passes=[keep_scheduled(scheduled)])
    build_s = time.perf_counter() - start
    resources: dict[str, dict[str, int]] = {}
    if with_nvcc:
        for lib in compiled.libs.values():
            for imported in lib.imports:
                if imported.kind == "cuda":
                    resources.update(nvcc_resources(imported.inspect_source()))
    mod = placed_module(model, devices, placement)
    rows = []
    for binding, info in classify_bindings(mod):
        if info is None:
            continue
        name = binding.value.args[0].name_hint
        if name not in scheduled or any(r["kernel"] == name for r in rows):
            continue
        func = mod[binding.value.args[0]]
        kind = kernel_kind(func, name)
        kind = "depthwise" if kind == "conv2d" and is_depthwise(func) else kind
        kernel_resources = {k: v for k, v in resources.items()
                            if k == f"{name}_kernel" or k.startswith(f"{name}_kernel")}
        rows.append(dict(
            kernel=name, kind=kind, rule=compiled.stats.rules.get(name),
            mflop=estimated_flops(func) / 1e6, scheduled_mflop=estimated_flops(scheduled[name]) / 1e6,
            blocks=_blocks(scheduled[name]),
            registers=max((r["registers"] for r in kernel_resources.values()), default=None),
            spill_bytes=sum(r["spill_bytes"] for r in kernel_resources.values()),
            shared_bytes=max((r["shared_bytes"] for r in kernel_resources.values()),
                             default=None)))
    return rows, build_s


def misses(row: dict, sms: int) -> list[str]:
    """Which of issue 31's no-GPU goals a kernel misses."""
    out = []
    if row["kind"] in HEAVY_KINDS and row["rule"] in NOT_GEMM:
        out.append("heavy kernel on " + row["rule"].rsplit(".", 1)[-1])
    work = row["scheduled_mflop"] / max(row["mflop"], 1e-9)
    if row["mflop"] > 0.01 and work > MAX_WORK:
        out.append(f"work {work:.1f}x")
    if row["spill_bytes"]:
        out.append(f"spills {row['spill_bytes']} B")
    if row["mflop"] >= MIN_MFLOP_FOR_SMS and row["blocks"] < sms:
        out.append(f"{row['blocks']} blocks < {sms} SMs")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SUITE))
    parser.add_argument("--sms", type=int, default=cuda_multiprocessors("sm_90"),
                        help="SMs of the GPU (default: sm_90's in tvm_hetero.target, 132)")
    parser.add_argument("--no-nvcc", action="store_true", help="skip the nvcc resource check")
    parser.add_argument("--kernels", action="store_true", help="print every kernel's row")
    args = parser.parse_args()
    import tvm_hetero as th

    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in SUITE]
    if unknown:
        sys.exit(f"error: unknown suite models: {', '.join(unknown)}")
    print(f"built all on {CUDA} (no GPU: nothing runs); SMs {args.sms}\n")
    print(f"{'model':20s} {'kernels':>7s} {'build s':>8s} {'MFLOP':>9s} {'work':>6s} "
          f"{'heavy on Fallback/GenRed':>24s} {'spills':>6s} {'< SMs':>6s}")
    missed = []
    for name in names:
        proto, _ = SUITE[name]()
        model = th.load_model(proto, name=name)
        try:
            rows, build_s = census(model, not args.no_nvcc)
        except (th.HeteroError, RuntimeError) as err:
            print(f"{name:20s} failed: {str(err).splitlines()[0][:100]}")
            missed.append(f"{name}: build failed")
            continue
        total = sum(r["mflop"] for r in rows)
        work = sum(r["scheduled_mflop"] for r in rows) / max(total, 1e-9)
        heavy = sum(r["kind"] in HEAVY_KINDS and r["rule"] in NOT_GEMM for r in rows)
        spills = sum(bool(r["spill_bytes"]) for r in rows)
        few = sum(r["mflop"] >= MIN_MFLOP_FOR_SMS and r["blocks"] < args.sms for r in rows)
        print(f"{name:20s} {len(rows):7d} {build_s:8.1f} {total:9.1f} {work:6.2f} "
              f"{heavy:24d} {spills:6d} {few:6d}", flush=True)
        for row in rows:
            problems = misses(row, args.sms)
            if args.kernels or problems:
                missed.append(f"{name}: {row['kernel']} ({row['kind']}, {row['rule']}, "
                              f"{row['mflop']:.1f} MFLOP, {row['blocks']} blocks, "
                              f"{row['registers']} registers): {'; '.join(problems) or 'ok'}")
    print(f"\nkernels that miss a goal (heavy kernels on Fallback/GeneralReduction, work > "
          f"{MAX_WORK}x, spills, > {MIN_MFLOP_FOR_SMS:g} MFLOP on fewer blocks than SMs):")
    print("\n".join(f"  {line}" for line in missed) or "  none")


if __name__ == "__main__":
    main()
