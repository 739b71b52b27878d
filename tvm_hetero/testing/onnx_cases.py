"""The onnx package's backend-test cases through tvm_hetero and through plain TVM (for
``benchmarks/onnx_model_cases.py`` and ``benchmarks/onnx_node_suite.py``): run one case (a
folder with model.onnx and test_data_set_N/{input,output}_K.pb) through tvm_hetero's path or
through plain TVM, in pooled worker processes with a timeout, and tabulate the verdicts.

Verdicts: pass, import (the model does not import; a refusal counts here), build, run (the
compiled model raised), mismatch (an output differs: shape, dtype, NaN pattern, or beyond
rtol 1e-3 / atol 1e-7, the onnx backend tests' own tolerance), timeout, crash (the worker died).
"""

from __future__ import annotations

import contextlib
import functools
import os
import zlib

import numpy as np

RTOL, ATOL = 1e-3, 1e-7
DEVICES = ("cpu", "cpu-generic")
VERDICTS = ("pass", "import", "build", "run", "mismatch", "timeout", "crash")


def flatten(values) -> list[np.ndarray]:
    out = []
    for value in values:
        if isinstance(value, (list, tuple)):
            out.extend(flatten(value))
        elif value is not None:
            out.append(np.asarray(value))
    return out


def compare(got: list[np.ndarray], want: list) -> str | None:
    """None when the outputs agree, else what differs."""
    want = flatten(want)
    if len(got) != len(want):
        return f"{len(got)} outputs, {len(want)} expected"
    for index, (a, b) in enumerate(zip(got, want)):
        a = np.asarray(a)
        if a.shape != b.shape:
            return f"output {index}: shape {a.shape}, {b.shape} expected"
        if a.dtype != b.dtype:
            return f"output {index}: dtype {a.dtype}, {b.dtype} expected"
        if b.dtype.kind in "OSU":
            if not np.array_equal(a, b):
                return f"output {index} differs"
            continue
        try:
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True)
        except AssertionError as err:
            lines = [ln for ln in str(err).splitlines() if "Max" in ln or "Mismatched" in ln]
            return f"output {index}: " + "; ".join(ln.strip() for ln in lines)
    return None


def _one_line(err: BaseException) -> str:
    from tvm_hetero.errors import error_message

    return f"{type(err).__name__}: {error_message(err)}"[:300]


class _Failed(Exception):
    """A case path's stage raised: the verdict (the stage) and the error's line."""


@contextlib.contextmanager
def _stage(verdict: str):
    try:
        yield
    except Exception as err:
        raise _Failed(verdict, _one_line(err)) from None


def _case_path(run):
    """A case path ``case_dir -> (verdict, detail)`` from ``run(case_dir, model_proto, inputs)``,
    which returns the outputs and marks its stages with :func:`_stage`: the case is loaded (an
    input that is not a tensor is an ``import`` verdict) and the outputs compared."""

    @functools.wraps(run)
    def path(case_dir: str) -> tuple[str, str]:
        from tvm_hetero.testing import onnx_case

        model_proto, inputs, want = onnx_case(case_dir)
        for name, value in inputs.items():
            if not isinstance(value, np.ndarray):
                return "import", f"input {name!r} is a {type(value).__name__}, not a tensor"
        try:
            got = run(case_dir, model_proto, inputs)
        except _Failed as failed:
            return failed.args
        problem = compare(got, want)
        return ("mismatch", problem) if problem else ("pass", "")

    return path


@_case_path
def run_ours(case_dir: str, model_proto, inputs: dict):
    """tvm_hetero's path: load_model, a random two-device placement, build, run, compare."""
    import tvm_hetero as th
    from tvm_hetero.testing import random_placement

    with _stage("import"):
        model = th.load_model(model_proto, name=os.path.basename(case_dir),
                              input_shapes={k: v.shape for k, v in inputs.items()})
    rng = np.random.default_rng(zlib.crc32(case_dir.encode()))
    with _stage("build"):
        layers = th.extract_layers(model)
        placement = random_placement(layers, list(DEVICES), rng)
        order = list(DEVICES) if rng.integers(2) else list(DEVICES[::-1])
        compiled = th.build(model, placement, order)
    with _stage("run"):
        return compiled.run({spec.name: inputs[spec.source_name or spec.name]
                             for spec in model.inputs})


@_case_path
def run_plain_tvm(case_dir: str, model_proto, inputs: dict):
    """Plain TVM: from_onnx + tvm.compile for llvm, run on the CPU, compare."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from tvm_hetero.build.runtime import to_numpy

    with _stage("import"):
        mod = from_onnx(model_proto, shape_dict={k: list(v.shape) for k, v in inputs.items()},
                        dtype_dict={k: str(v.dtype) for k, v in inputs.items()},
                        keep_params_in_input=False)
    with _stage("build"):
        executable = tvm.compile(mod, target="llvm")
        vm = relax.VirtualMachine(executable, tvm.cpu())
    with _stage("run"):
        names = [p.name for p in mod["main"].params]
        by_name = {relax_name: value for relax_name, value in zip(names, inputs.values())}
        args = [tvm.runtime.tensor(by_name[n], tvm.cpu()) for n in names]
        return to_numpy(vm["main"](*args))


def run_cases(case_dirs: list[str], workers: int, timeout_s: float, progress=None) -> dict:
    """{case dir: {"ours": (verdict, detail), "tvm": (verdict, detail)}}, the cases run in
    pooled worker processes (a worker that times out or dies is replaced)."""
    import sys

    import cloudpickle
    from tvm.support.popen_pool import PopenPoolExecutor

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    pool = PopenPoolExecutor(max_workers=workers, timeout=timeout_s,
                             stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
    jobs = [(case, path, pool.submit(func, case))
            for case in case_dirs for path, func in (("ours", run_ours), ("tvm", run_plain_tvm))]
    results: dict = {case: {} for case in case_dirs}
    for case, path, future in jobs:
        try:
            results[case][path] = future.result()
        except TimeoutError:
            results[case][path] = ("timeout", f"over {timeout_s:.0f} s")
        except Exception as err:  # the worker died (segfault) or could not answer
            kind = "timeout" if "timeout" in str(err).lower() else "crash"
            results[case][path] = (kind, str(err).strip().splitlines()[-1][:200]
                                   if str(err).strip() else type(err).__name__)
        if progress is not None and len(results[case]) == 2:
            progress(case, results[case])
    pool.shutdown()
    return results


def totals(results: dict, path: str) -> dict[str, int]:
    """``{verdict: cases}`` of one path (``ours`` or ``tvm``)."""
    counts = dict.fromkeys(VERDICTS, 0)
    for verdicts in results.values():
        counts[verdicts[path][0]] += 1
    return counts


def add_case_args(parser, timeout: float, only_help: str) -> None:
    """The options of the scripts that run cases: ``--workers``, ``--timeout``, ``--only``."""
    parser.add_argument("--workers", type=int, default=1, help="worker processes (default: 1)")
    parser.add_argument("--timeout", type=float, default=timeout,
                        help=f"seconds per case and path (default: {timeout:g})")
    parser.add_argument("--only", help=only_help)


def print_totals(results: dict, cases: int) -> list[str]:
    """Print the verdict counts of both paths over `cases` cases; returns the cases that fail
    for tvm_hetero and pass for plain TVM."""
    print(f"{'path':<12}" + "".join(f"{v:>10}" for v in VERDICTS) + f"{'of':>7}")
    for path, label in (("ours", "tvm_hetero"), ("tvm", "plain TVM")):
        counts = totals(results, path)
        print(f"{label:<12}" + "".join(f"{counts[v]:>10}" for v in VERDICTS) + f"{cases:>7}")
    worse = [c for c, v in results.items() if v["ours"][0] != "pass" and v["tvm"][0] == "pass"]
    print(f"fail for tvm_hetero but pass for plain TVM: {len(worse)}")
    return worse
