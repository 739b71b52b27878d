"""Whether each CUDA kernel of the suite's models (or of ONNX files) computes the right values,
without a GPU: every kernel of the all-``cuda@sm_90`` build emulated on the CPU
(:mod:`tvm_hetero.testing.gpu_emulation`: thread-bound loops made serial, GPU memory scopes
global, built for LLVM) and compared with its unscheduled kernel on seeded random inputs.

    python benchmarks/gpu_emulation_check.py [--models mlp_b8,bert_layer] [--seed 0]
    python benchmarks/gpu_emulation_check.py --models path/convnext_tiny.onnx \
        --input-shape pixel_values=1,3,224,224

``--models`` takes suite names and ``.onnx`` paths; ``--input-shape NAME=D0,D1,..``
(repeatable) pins a dynamic input of the ONNX files that have one of that name.

Per model: CUDA kernels checked (and the rules that scheduled them), the largest relative
error (max |got - want| / max |want| per buffer), kernels over the dtype's tolerance or with
thread loops of uneven extents (wrong schedules, with the rule that scheduled each, from
``compiled.stats.rules``), kernels that cannot be emulated (tensor-core fragments, GPU
intrinsics) and the seconds spent. Kernels without thread-bound loops (run on the host) are
not CUDA kernels and are not counted (a model's run-time index checks run on the host CPU).
What the emulation cannot see (races between
threads, the GPU lowering itself) is in the module's docstring. About 10-120 s a model on 2
cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

from tvm_hetero.testing.gpu_emulation import (CannotEmulate, ScheduleMismatch, buffer_errors,
                                              check_gpu_schedule, cuda_build_kernels)
from tvm_hetero.testing.scheduled import load_checked_model
from tvm_hetero.testing.suite import SUITE

CUDA = "cuda@sm_90"
DEFAULT_MODELS = "mlp_b8,bert_layer,mobilenet_v2,resnet50,shufflenet,llama_decode"


def last_block_dropped(func):
    """`func` with its first ``blockIdx`` loop of extent above 1 one shorter (the outputs of
    the last thread block never written), or None when it has none: a wrong schedule the check
    must report."""
    import tvm_ffi
    from tvm import tirx

    found = []

    def visit(node):
        if isinstance(node, tirx.For) and node.thread_binding is not None and \
                str(node.thread_binding.thread_tag).startswith("blockIdx") and \
                getattr(node.extent, "value", 1) > 1:
            found.append(node)
        return node

    tvm_ffi.structural_map(func.body, visit, order="pre")
    if not found:
        return None

    def shorten(node):
        if node.same_as(found[0]):
            return tirx.For(node.loop_var, node.min,
                            tirx.IntImm(node.extent.ty, node.extent.value - 1), node.kind,
                            node.body, node.thread_binding, node.annotations)
        return node

    return tvm_ffi.structural_map(func, (tirx.For, shorten), order="pre")


def check_model(spec: str, seed: int, mutants: bool = False, input_shapes=None) -> dict:
    """Build `spec` (a suite model or an ``.onnx`` path, pinned by `input_shapes`) all on cuda
    and check every CUDA kernel (with `mutants`, also each kernel with its last thread block
    dropped, which must be reported): a row for the table."""
    from tvm_hetero.measure.reference import tolerance_for

    start = time.perf_counter()
    name, model = load_checked_model(spec, input_shapes)
    kernels = cuda_build_kernels(model)
    row = dict(model=name, checked=0, max_error=0.0, wrong=[], cannot=[],
               build_s=time.perf_counter() - start,
               rules=Counter(str(rule).rsplit(".", 1)[-1] for _, _, rule in kernels.values()),
               mutants=0, caught=0, missed=[])
    start = time.perf_counter()
    for kernel, (original, scheduled, rule) in kernels.items():
        try:
            errors = buffer_errors(original, scheduled, seed)
        except CannotEmulate as err:
            row["cannot"].append(f"{kernel} ({rule}): {err}")
            continue
        except ScheduleMismatch as err:  # thread loops of uneven extents
            row["checked"] += 1
            row["wrong"].append(f"{kernel} ({rule}): {err}")
            continue
        row["checked"] += 1
        dtypes = {p.name: str(p.ty.dtype) for p in scheduled.params}
        worst = max(errors, key=errors.get)
        row["max_error"] = max(row["max_error"], errors[worst])
        if any(err > tolerance_for(dtypes[b]) for b, err in errors.items()):
            row["wrong"].append(f"{kernel} ({rule}): buffer {worst} error "
                                f"{errors[worst]:.3g}")
        mutant = last_block_dropped(scheduled) if mutants else None
        if mutant is not None:
            row["mutants"] += 1
            try:
                check_gpu_schedule(original, mutant, seed=seed)
                row["missed"].append(f"{kernel} ({rule})")
            except ScheduleMismatch:
                row["caught"] += 1
    row["check_s"] = time.perf_counter() - start
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS,
                        help=f"comma-separated suite models and .onnx paths (default: "
                             f"{DEFAULT_MODELS})")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,..",
                        help="static shape for a dynamic input of the ONNX files, repeatable")
    parser.add_argument("--seed", type=int, default=0, help="seed of the inputs (default 0)")
    parser.add_argument("--mutants", action="store_true",
                        help="also check each kernel with its last thread block dropped (a "
                             "wrong schedule): the column 'caught' counts those reported")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in SUITE and not os.path.isfile(n)]
    if unknown:
        sys.exit(f"error: neither suite models nor files: {', '.join(unknown)}")
    import tvm_hetero as th
    from tvm_hetero.cli.common import parse_input_shapes

    pins = parse_input_shapes(args.input_shape)

    print(f"built all on {CUDA}, every CUDA kernel emulated on the CPU against its "
          f"unscheduled kernel (seed {args.seed})\n")
    print(f"{'model':16s} {'kernels':>7s} {'max error':>10s} {'wrong':>5s} {'cannot':>6s} "
          f"{'build s':>7s} {'check s':>7s} {'caught':>7s}  rules (kernels)")
    notes = []
    for name in names:
        try:
            row = check_model(name, args.seed, args.mutants, pins)
            name = row["model"]
        except (th.HeteroError, ValueError) as err:
            print(f"{name:16s} build failed: {str(err).splitlines()[0][:90]}", flush=True)
            continue
        caught = f"{row['caught']}/{row['mutants']}" if args.mutants else "-"
        print(f"{name:16s} {row['checked']:7d} {row['max_error']:10.2e} {len(row['wrong']):5d} "
              f"{len(row['cannot']):6d} {row['build_s']:7.1f} {row['check_s']:7.1f} "
              f"{caught:>7s}  "
              + ", ".join(f"{rule} {n}" for rule, n in row["rules"].most_common()),
              flush=True)
        notes += [f"  {name}: wrong: {line}" for line in row["wrong"]]
        notes += [f"  {name}: cannot emulate: {line}" for line in row["cannot"]]
        notes += [f"  {name}: last block dropped, not caught: {line}" for line in row["missed"]]
    print("\nwrong kernels and kernels not emulated:")
    print("\n".join(notes) or "  none")


if __name__ == "__main__":
    main()
