"""The onnx package's node-level tests (one op per model, from onnx.backend.test.case.node,
written to a temporary folder the way onnx's `backend-test-tools generate-data` writes its
data), run through tvm_hetero's path and through plain TVM in the same run.

    python benchmarks/onnx_node_suite.py [--workers 1] [--timeout 120] [--only OP_OR_NAME]

Each case runs in a pooled worker process with a timeout (a worker that hangs or crashes is
replaced): tvm_hetero's path is load_model, a random placement over `cpu` and `cpu-generic`,
build, run; plain TVM is from_onnx + tvm.compile for llvm. Prints the verdicts per op and the
totals of both paths, and the cases that fail for tvm_hetero but pass for plain TVM.
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
import time
import warnings
from unittest import mock

from tvm_hetero.testing.onnx_cases import (VERDICTS, add_case_args, print_totals, run_cases,
                                            totals)


def generate_cases(folder: str, only: str | None) -> dict[str, str]:
    """{case dir: op type} of the node tests, written with onnx's own data writer."""
    import argparse as _argparse

    from onnx.backend.test import cmd_tools
    from onnx.backend.test.case import node as node_cases

    warnings.filterwarnings("ignore", category=RuntimeWarning)  # the generators' own numpy
    cases = [c for c in node_cases.collect_testcases()
             if not only or only in c.name or only == c.model.graph.node[0].op_type]
    with mock.patch.object(cmd_tools.model_test, "collect_testcases", lambda: cases):
        cmd_tools.generate_data(_argparse.Namespace(output=folder))
    return {os.path.join(folder, "node", c.name): c.model.graph.node[0].op_type
            if len(c.model.graph.node) == 1 else "(expanded) " + c.name.split("_expanded")[0]
            for c in cases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_case_args(parser, 120, "an op type, or a substring of the case names")
    parser.add_argument("--verbose", action="store_true", help="one line per case")
    args = parser.parse_args()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="onnx_node_suite_") as folder:
        ops = generate_cases(folder, args.only)
        print(f"{len(ops)} node cases", flush=True)

        def show(case, verdicts):
            if args.verbose or verdicts["ours"][0] != verdicts["tvm"][0]:
                print(f"  {os.path.basename(case):<60}{verdicts['ours'][0]:<10}"
                      f"{verdicts['tvm'][0]:<10}{verdicts['ours'][1][:120]}", flush=True)

        results = run_cases(sorted(ops), args.workers, args.timeout, progress=show)
    by_op = collections.defaultdict(dict)
    for case, verdicts in results.items():
        by_op[ops[case]][case] = verdicts
    print()
    print(f"{'op':<40}{'cases':>6}  tvm_hetero: " + " ".join(f"{v[:5]:>5}" for v in VERDICTS)
          + "  plain TVM: pass")
    for op in sorted(by_op):
        ours, tvm = totals(by_op[op], "ours"), totals(by_op[op], "tvm")
        print(f"{op[:39]:<40}{len(by_op[op]):>6}              "
              + " ".join(f"{ours[v]:>5}" for v in VERDICTS) + f"{tvm['pass']:>17}")
    print()
    for case in sorted(print_totals(results, len(results))):
        print(f"  {os.path.basename(case)}: {results[case]['ours']}")
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
