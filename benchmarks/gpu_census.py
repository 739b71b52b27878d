"""What each CUDA kernel of the suite's models (or of ONNX files) looks like, built all on
``cuda@sm_90`` without a GPU: the rule that scheduled it, the work it does against its layer's,
the resources nvcc gives it and the blocks it launches against the SMs.

    python benchmarks/gpu_census.py [--models resnet50,mobilenet_v2] [--sms 132] [--no-nvcc]
    python benchmarks/gpu_census.py --models path/convnext_tiny.onnx \
        --input-shape pixel_values=1,3,224,224

``--models`` takes suite names and ``.onnx`` paths; ``--input-shape NAME=D0,D1,..``
(repeatable) pins a dynamic input of the ONNX files that have one of that name.

Per kernel: layer kind (depthwise convolutions apart), rule, the unscheduled kernel's MFLOP and
the scheduled one's (``tvm.s_tir.analysis.estimate_tir_flops``; the ratio shows recomputation),
registers, spills and static shared memory per thread block (``nvcc -cubin -arch=sm_90
-Xptxas -v`` on the build's CUDA source), and thread blocks launched (the product of the
``blockIdx`` loop extents). Per model the totals; at the end the kernels that miss the census
goals: heavy kernels (convolution, matmul, depthwise, pooling) on dlight's ``Fallback`` or
``GeneralReduction``, work over 1.3x, spills, and kernels over 10 MFLOP launching fewer blocks
than the GPU has SMs. About 10-60 s a model on 2 cores. Speed is not measured here: that needs
a GPU (``benchmarks/gpu_check.py``).
"""

from __future__ import annotations

import argparse
import os
import sys

from tvm_hetero.target import cuda_multiprocessors
from tvm_hetero.testing.gpu_census import GOALS, census, misses
from tvm_hetero.testing.scheduled import load_checked_model
from tvm_hetero.testing.suite import SUITE

ARCH = "sm_90"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SUITE),
                        help="comma-separated suite models and .onnx paths (default: the suite)")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,..",
                        help="static shape for a dynamic input of the ONNX files, repeatable")
    parser.add_argument("--sms", type=int, default=cuda_multiprocessors(ARCH),
                        help="SMs of the GPU (default: sm_90's in tvm_hetero.target, 132)")
    parser.add_argument("--no-nvcc", action="store_true", help="skip the nvcc resource check")
    parser.add_argument("--kernels", action="store_true", help="print every kernel's row")
    args = parser.parse_args()
    import tvm_hetero as th
    from tvm_hetero.cli.common import parse_input_shapes

    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in SUITE and not os.path.isfile(n)]
    if unknown:
        sys.exit(f"error: neither suite models nor files: {', '.join(unknown)}")
    pins = parse_input_shapes(args.input_shape)
    print(f"built all on cuda@{ARCH} (no GPU: nothing runs); SMs {args.sms}\n")
    print(f"{'model':20s} {'kernels':>7s} {'build s':>8s} {'MFLOP':>9s} {'work':>6s} "
          f"{'heavy on Fallback/GenRed':>24s} {'spills':>6s} {'< SMs':>6s}")
    missed = []
    for spec in names:
        name = spec
        try:
            name, model = load_checked_model(spec, pins)
            rows, build_s = census(model, ARCH, with_nvcc=not args.no_nvcc)
        except (th.HeteroError, RuntimeError, ValueError) as err:
            print(f"{name:20s} failed: {str(err).splitlines()[0][:100]}", flush=True)
            missed.append(f"{name}: build failed")
            continue
        total = sum(r.mflop for r in rows)
        work = sum(r.scheduled_mflop for r in rows) / max(total, 1e-9)
        heavy = sum(r.kind in GOALS.heavy_kinds and r.rule in GOALS.not_gemm_rules
                    for r in rows)
        spills = sum(bool(r.spill_bytes) for r in rows)
        few = sum(r.mflop >= GOALS.min_mflop_for_sms and r.blocks < args.sms for r in rows)
        print(f"{name:20s} {len(rows):7d} {build_s:8.1f} {total:9.1f} {work:6.2f} "
              f"{heavy:24d} {spills:6d} {few:6d}", flush=True)
        for row in rows:
            problems = misses(row, args.sms, ARCH)
            if args.kernels or problems:
                missed.append(f"{name}: {row.kernel} ({row.kind}, {row.rule}, "
                              f"{row.mflop:.1f} MFLOP, {row.blocks} blocks of {row.threads}, "
                              f"{row.registers} registers): {'; '.join(problems) or 'ok'}")
    print(f"\nkernels that miss a goal (heavy kernels on Fallback/GeneralReduction, work > "
          f"{GOALS.max_work}x, spills, > {GOALS.min_mflop_for_sms:g} MFLOP on fewer blocks "
          f"than SMs, threads or shared memory over the limits):")
    print("\n".join(f"  {line}" for line in missed) or "  none")


if __name__ == "__main__":
    main()
