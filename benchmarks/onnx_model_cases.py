"""The onnx package's small-model tests (backend/test/data/{pytorch-converted,pytorch-operator,
simple}: 140 cases with inputs and reference outputs) through tvm_hetero's path and through
plain TVM, in the same run.

    python benchmarks/onnx_model_cases.py [--workers 1] [--timeout 300] [--only SUBSTRING]

tvm_hetero's path: load_model, a random placement of the layers over `cpu` and `cpu-generic`
(seeded by the case name, random device order), build, run. Plain TVM: from_onnx,
tvm.compile for llvm, run. Both compare with the case's outputs (rtol 1e-3, atol 1e-7, NaN
where the reference has NaN). Prints one line per case and the totals of each path.
"""

from __future__ import annotations

import argparse
import os
import time

from tvm_hetero.testing.onnx_cases import add_case_args, print_totals, run_cases

GROUPS = ("pytorch-converted", "pytorch-operator", "simple")


def case_dirs(only: str | None) -> list[str]:
    import onnx

    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    cases = sorted(os.path.join(data, group, name) for group in GROUPS
                   for name in os.listdir(os.path.join(data, group)))
    return [c for c in cases if not only or only in c]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_case_args(parser, 300, "run the cases whose path contains this")
    args = parser.parse_args()
    cases = case_dirs(args.only)
    start = time.perf_counter()
    print(f"{'case':<58}{'tvm_hetero':<11}{'plain TVM':<11}detail (ours; plain TVM)", flush=True)

    def show(case, verdicts):
        ours, tvm = verdicts["ours"], verdicts["tvm"]
        detail = "; ".join(d for d in (ours[1], tvm[1] if tvm[1] != ours[1] else "") if d)
        name = os.path.join(os.path.basename(os.path.dirname(case)), os.path.basename(case))
        print(f"{name:<58}{ours[0]:<11}{tvm[0]:<11}{detail[:160]}", flush=True)

    results = run_cases(cases, args.workers, args.timeout, progress=show)
    print()
    for case in print_totals(results, len(cases)):
        print(f"  {os.path.basename(case)}")
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
