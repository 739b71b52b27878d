"""Check tvm_hetero's CUDA path on a lent GPU machine: built here, run there with TVM's runtime.

The GPU machine (one H200, 16 CPU cores, PyTorch, no TVM) gets what fits the 64 MiB a call
carries: TVM's runtime without its compiler, the tvm-ffi wheel, and a bundle of libraries
built here. So the check has two halves:

    python benchmarks/gpu_check.py build [--bundle out/gpu_bundle]   # here, no GPU (minutes)
    bash benchmarks/gpu_check.sh out/gpu_bundle/carry                # there: unpack, run
    python benchmarks/gpu_check.py run --bundle DIR                  # what gpu_check.sh runs
    python benchmarks/gpu_check.py --dry-run [--workdir DIR]         # no GPU: both halves, small

``build`` makes, for ResNet-50, a BERT-base layer, MobileNetV2 and a DLRM-like recommendation
model (weights made periodic so that they compress), the all-cpu, all-cuda and cpu+cuda
libraries (the split: the largest-weight layers on the CPU until the GPU's share fits a memory
cap, the embedding tables of the recommendation model), onnxruntime's outputs, and the CUDA
kernels compiled with nvcc for sm_90; then packs them with TVM's runtime into
``BUNDLE/carry`` (``.tar.xz``, under 60 MiB). The CPU libraries are built twice, for
x86-64-v4 (AVX-512) and x86-64-v3 (AVX2); ``run`` takes the one ``/proc/cpuinfo`` allows.

``run`` imports nothing that needs TVM's compiler: per model it checks every placement's
output against onnxruntime, times the three and PyTorch (fp32, TF32 off, eager and CUDA graph,
the models converted from the same ONNX files by onnx2torch) alternately, best median of the
rounds, times the all-cuda build's kernels one by one through the VM's instrument and names
the slowest kernel classes, and prints one table. Without a GPU it stops with one ``Error:``
line (exit 2).

``--dry-run`` builds a small bundle (a small recommendation model, the CPU libraries for this
CPU only), compiles its CUDA kernels, and runs ``run --cpu-only`` in a subprocess on TVM's
runtime alone (the installed ``tvm`` copied without ``libtvm_compiler.so``), against a
stand-in CUDA driver so that the CUDA libraries load and take their kernels from the bundle:
the runner proven without a GPU and without the compiler.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from gpu_check_lib.runner import CheckError  # noqa: E402  (numpy only: safe without TVM)

DEFAULT_BUNDLE = os.path.join("out", "gpu_bundle")


def cmd_build(args) -> int:
    from gpu_check_lib import bundle as B

    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in B.MODELS]
    if unknown:
        raise CheckError(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(B.MODELS)}")
    staging = os.path.join(args.bundle, "staging")
    if os.path.exists(staging) and not args.reuse:
        import shutil

        shutil.rmtree(staging)
    start = time.perf_counter()
    B.build_bundle(staging, [B.MODELS[n] for n in names], arch=args.arch,
                   log=lambda line: print(line, flush=True), reuse=args.reuse)
    if not args.no_pack:
        B.pack(staging, os.path.join(args.bundle, "carry"),
               log=lambda line: print(line, flush=True))
    print(f"gpu_check build took {time.perf_counter() - start:.0f} s")
    return 0


def cmd_run(args) -> int:
    from gpu_check_lib.runner import run_bundle

    models = [n.strip() for n in args.models.split(",") if n.strip()] if args.models else None
    return run_bundle(args.bundle, rounds=args.rounds, repeat=args.repeat,
                      min_repeat_ms=args.min_repeat_ms, tolerance=args.tolerance,
                      cpu_only=args.cpu_only, anchor=not args.no_anchor,
                      kernels=not args.no_kernel_times, budget_s=args.budget_s, models=models,
                      log=lambda line: print(line, flush=True))


def cmd_kernels(args) -> int:
    from gpu_check_lib.bundle import load_cuda_libraries

    hits, compiled, errors = load_cuda_libraries(args.bundle, compile=not args.no_compile)
    print(f"CUDA kernels: {compiled} module(s) compiled with nvcc, {hits} from the bundle, "
          f"{len(errors)} librar{'y' if len(errors) == 1 else 'ies'} failing")
    for lib, error in errors.items():
        print(f"  {lib}: {error}")
    return 0


def cmd_dry_run(args) -> int:
    """Build the small bundle, then run its runner on TVM's runtime alone, CPU only."""
    from gpu_check_lib import bundle as B

    workdir = args.workdir or tempfile.mkdtemp(prefix="tvm_hetero_gpu_check_")
    staging = os.path.join(workdir, "staging")
    start = time.perf_counter()
    print(f"dry run: building a small bundle in {staging} (no GPU needed)", flush=True)
    B.build_bundle(staging, [B.dry_run_model()], arch=args.arch, variants=[B.host_variant()],
                   log=lambda line: print(line, flush=True))
    site = B.tvm_runtime_tree(os.path.join(workdir, "site"))
    print(f"built in {time.perf_counter() - start:.1f} s; running it on TVM's runtime alone "
          f"({site}/tvm, no libtvm_compiler.so)", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu_check_stub_") as tmp:
        env = B.runtime_only_env(site_dir=site, libcuda_dir=B.stub_libcuda(tmp))
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "run", "--bundle",
                               staging, "--cpu-only", "--rounds", "1", "--repeat", "3",
                               "--min-repeat-ms", "5"], env=env, text=True)
    print(f"dry run took {time.perf_counter() - start:.1f} s")
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="build a small bundle and run it CPU-only on TVM's runtime alone")
    parser.add_argument("--workdir", help="--dry-run's folder (default: a temp dir)")
    parser.add_argument("--arch", default="sm_90", help="the CUDA arch built for (sm_90)")
    sub = parser.add_subparsers(dest="command")
    build = sub.add_parser("build", help="build the bundle here (no GPU needed)")
    build.add_argument("--bundle", default=DEFAULT_BUNDLE,
                       help=f"output folder (default {DEFAULT_BUNDLE}; carry BUNDLE/carry)")
    build.add_argument("--models", default="resnet50,bert_layer,mobilenet_v2,recommendation",
                       help="comma-separated models (default: all four)")
    build.add_argument("--arch", default="sm_90", help="the CUDA arch (default sm_90)")
    build.add_argument("--no-pack", action="store_true", help="build only, no BUNDLE/carry")
    build.add_argument("--reuse", action="store_true",
                       help="keep the models an earlier build finished (after a failure)")
    run = sub.add_parser("run", help="run an (unpacked) bundle on a GPU machine")
    run.add_argument("--bundle", required=True, help="the unpacked bundle folder")
    run.add_argument("--models", help="comma-separated models of the bundle (default all)")
    run.add_argument("--rounds", type=int, default=3, help="alternating timing rounds (3)")
    run.add_argument("--repeat", type=int, default=5, help="measurements per timing (5)")
    run.add_argument("--min-repeat-ms", type=float, default=40.0,
                     help="least duration of one measurement (40 ms)")
    run.add_argument("--tolerance", type=float, default=1e-3,
                     help="largest relative error counted correct (1e-3)")
    run.add_argument("--budget-s", type=float, default=240.0,
                     help="start no model after this many seconds (240)")
    run.add_argument("--cpu-only", action="store_true",
                     help="no GPU: run the all-cpu libraries, only load the CUDA ones")
    run.add_argument("--no-anchor", action="store_true", help="skip the PyTorch anchor")
    run.add_argument("--no-kernel-times", action="store_true",
                     help="skip the all-cuda build's per-kernel times")
    kernels = sub.add_parser("kernels", help="(internal) compile a bundle's CUDA kernels")
    kernels.add_argument("--bundle", required=True)
    kernels.add_argument("--no-compile", action="store_true",
                         help="fail on a kernel not in the bundle instead of compiling it")
    args = parser.parse_args(argv)
    try:
        if args.dry_run:
            return cmd_dry_run(args)
        if args.command is None:
            parser.error("give a command (build, run) or --dry-run")
        return {"build": cmd_build, "run": cmd_run, "kernels": cmd_kernels}[args.command](args)
    except CheckError as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    except RuntimeError as err:  # a build or load step failing (nvcc, gcc, TVM's loader)
        from gpu_check_lib.cuda_kernels import error_line

        print(f"Error: {error_line(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
