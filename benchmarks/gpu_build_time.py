"""Build time of a suite model all on ``cuda@sm_90`` against all on ``cpu`` (the goal: at
most 2x), and what compiling its CUDA costs, cold and from the disk cache.

    python benchmarks/gpu_build_time.py [--model resnet50] [--rounds 2] [--no-nvcc]
                                        [--per-kernel] [--passes 8]

The cpu and cuda builds alternate in one process, ``--rounds`` times; the best round counts.
Without a CUDA runtime (no GPU) TVM compiles no CUDA at build time: the library carries CUDA
source, compiled when a GPU machine loads it. That compile is measured here the way TVM does it
on that machine, through ``tvm_callback_cuda_compile`` with ``TVM_CUDA_COMPILE_MODE=nvcc`` (nvcc
is on these machines; NVRTC is not), behind :mod:`tvm_hetero.build.cuda_cache` with a fresh cache
directory: "cold" compiles every CUDA module, "warm" finds them all cached. ``--per-kernel``
builds with a ``KernelCache`` (as a tune's candidates are), one CUDA module per kernel, each
its own cache entry; by default a plain build: one CUDA module for all the kernels.
``--passes N`` prints the N slowest TVM passes of one cuda build (``PassTimingInstrument``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time


def _build(th, model, devices, kernel_cache=None, timing=None):
    """``(compiled, stats, seconds, pass timing report or "")`` of one all-on-one build."""
    import tvm
    from tvm_hetero.build.compile import BuildStats

    layers = th.extract_layers(model, th.PrepareConfig.for_devices(devices))
    placement = th.Placement.all_on(layers, devices.names[0])
    stats = BuildStats()
    start = time.perf_counter()
    with tvm.transform.PassContext(instruments=[timing] if timing else []):
        compiled = th.build(model, placement, devices, stats=stats, kernel_cache=kernel_cache)
        report = timing.render() if timing else ""  # cleared when the context exits
    return compiled, stats, time.perf_counter() - start, report


def _top_passes(profile: str, count: int) -> list[tuple[float, str]]:
    """``(ms, pass)`` of the passes with the most self time in PassTimingInstrument's report
    (``name: total us [self us] (...)`` lines, every nesting, summed by name)."""
    totals: dict[str, float] = {}
    for line in profile.splitlines():
        found = re.match(r"\s*(.+?): \d+us \[(\d+)us\]", line)
        if found:
            name = found.group(1)
            totals[name] = totals.get(name, 0.0) + int(found.group(2)) / 1e3
    return sorted(((ms, name) for name, ms in totals.items()), reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-nvcc", action="store_true", help="skip compiling the CUDA source")
    parser.add_argument("--per-kernel", action="store_true",
                        help="build with a KernelCache: one CUDA module per kernel")
    parser.add_argument("--passes", type=int, default=0,
                        help="print the N slowest TVM passes of one cuda build")
    args = parser.parse_args()
    os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")
    import tvm
    import tvm_hetero as th
    from tvm_hetero.build import cuda_cache
    from tvm_hetero.build.compile import KernelCache
    from tvm_hetero.devices import host_cpu_model, host_num_cores
    from tvm_hetero.testing.suite import SUITE

    if args.model not in SUITE:
        sys.exit(f"error: unknown suite model {args.model!r}")
    proto, _ = SUITE[args.model]()
    model = th.load_model(proto, name=args.model)
    cpu, cuda = th.DeviceSet.parse(["cpu"]), th.DeviceSet.parse(["cuda@sm_90"])
    cache = cuda_cache.install(tempfile.mkdtemp(prefix="gpu_build_time."))
    print(f"{args.model}: built here on {host_cpu_model()} ({host_num_cores()} cores), no GPU; "
          f"best of {args.rounds} alternating rounds; CUDA compiled with "
          f"{cuda_cache.compiler_version(os.environ['TVM_CUDA_COMPILE_MODE'])} "
          f"({os.environ['TVM_CUDA_COMPILE_MODE']}), "
          f"{'one CUDA module per kernel' if args.per_kernel else 'one CUDA module'}\n")
    cpu_s, cuda_s, cuda_stats, compiled = [], [], None, None
    for _ in range(args.rounds):
        cpu_s.append(_build(th, model, cpu)[2])
        kernels = KernelCache() if args.per_kernel else None
        compiled, stats, seconds, _ = _build(th, model, cuda, kernels)
        cuda_s.append(seconds)
        if cuda_stats is None or seconds <= min(cuda_s):
            cuda_stats = stats
    modules = cuda_cache.cuda_modules(compiled.executable)
    source_bytes = sum(len(m.inspect_source("cuda")) for m in modules)
    cold_s = warm_s = float("nan")
    cold = warm = None
    if not args.no_nvcc:
        before = cache.snapshot()
        start = time.perf_counter()
        cuda_cache.compile_module_sources(compiled.executable, arch="sm_90")
        cold_s, cold = time.perf_counter() - start, cache.snapshot().since(before)
        before = cache.snapshot()
        start = time.perf_counter()
        cuda_cache.compile_module_sources(compiled.executable, arch="sm_90")
        warm_s, warm = time.perf_counter() - start, cache.snapshot().since(before)
    best_cpu, best_cuda = min(cpu_s), min(cuda_s)
    print(f"{'all-cpu s':>10s} {'all-cuda s':>10s} {'ratio':>6s} {'+CUDA cold s':>12s} "
          f"{'ratio':>6s} {'+CUDA warm s':>12s} {'ratio':>6s} {'modules':>7s} {'compiled':>8s} "
          f"{'cached':>6s} {'kernels':>7s} {'CUDA KB':>8s}")
    print(f"{best_cpu:10.1f} {best_cuda:10.1f} {best_cuda / best_cpu:6.2f} "
          f"{best_cuda + cold_s:12.1f} {(best_cuda + cold_s) / best_cpu:6.2f} "
          f"{best_cuda + warm_s:12.1f} {(best_cuda + warm_s) / best_cpu:6.2f} "
          f"{len(modules):7d} {cold.compiles if cold else 0:8d} {warm.hits if warm else 0:6d} "
          f"{len(cuda_stats.rules):7d} {source_bytes / 1024:8.0f}")
    print(f"\nall-cuda build (best round): lower {cuda_stats.lower_s:.1f} s, codegen "
          f"{cuda_stats.codegen_s:.1f} s (of which the cuda target's tirx.build "
          f"{sum(v for k, v in cuda_stats.target_compile_s.items() if 'cuda' in k):.1f} s); "
          f"CUDA compiled during the build: {cuda_stats.cuda_compiles} (no CUDA runtime here); "
          f"rounds cpu {', '.join(f'{s:.1f}' for s in cpu_s)} / "
          f"cuda {', '.join(f'{s:.1f}' for s in cuda_s)} s")
    if cold is not None:
        print(f"CUDA compile (as a GPU machine loading the library does): cold {cold_s:.1f} s, "
              f"{cold.compiles} module(s) compiled; warm {warm_s:.2f} s, {warm.compiles} "
              f"compiled, {warm.hits} from the cache")
    if args.passes:
        timing = tvm.ir.instrument.PassTimingInstrument()
        report = _build(th, model, cuda, KernelCache() if args.per_kernel else None, timing)[3]
        print("\nTVM passes with the most self time in one all-cuda build (ms, summed by pass):")
        for ms, name in _top_passes(report, args.passes):
            print(f"  {ms:9.1f}  {name}")


if __name__ == "__main__":
    main()
