"""Functions that run inside builder and runner worker processes (tvm.support.popen_pool).

They take plain data (paths, JSON-able dicts) so that nothing but module-level functions
crosses the process boundary; a model is loaded once per worker process and cached.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np

_MODELS: dict[str, Any] = {}
_KERNELS: dict[str, Any] = {}  # model file -> KernelCache: kernels reused across candidates


def _quiet_worker_logs() -> None:
    """TVM's worker entry point logs at INFO; the caller, not each worker, reports on builds."""
    logging.getLogger("tvm_hetero").setLevel(
        os.environ.get("TVM_HETERO_WORKER_LOG_LEVEL", "WARNING").upper())


def _model(model_file: str, input_shapes: dict[str, tuple[int, ...]]):
    if model_file not in _MODELS:
        from ..frontend.load import load_model

        if model_file.endswith(".json"):
            import tvm

            with open(model_file, encoding="utf-8") as handle:
                source = tvm.ir.load_json(handle.read())
            _MODELS[model_file] = load_model(source, name="model")
        else:
            _MODELS[model_file] = load_model(model_file, input_shapes=input_shapes)
    return _MODELS[model_file]


def extra_checks(inputs_file: str, reference_file: str) -> list[tuple[str, dict, list]]:
    """``(label, inputs, reference)`` of the other shapes a dynamic model's candidates are
    checked at (``inputs.at-min.npz`` beside `inputs_file`, its reference beside
    `reference_file`); empty for a static model."""
    checks = []
    for where in ("min", "max"):
        at_inputs = inputs_file.replace("inputs.npz", f"inputs.at-{where}.npz")
        at_reference = reference_file.replace("reference.npz", f"reference.at-{where}.npz")
        if at_inputs != inputs_file and os.path.exists(at_inputs) \
                and os.path.exists(at_reference):
            checks.append((where, *_load_pair(at_inputs, at_reference)))
    return checks


def _load_pair(inputs_file: str, reference_file: str) -> tuple[dict, list]:
    with np.load(inputs_file, allow_pickle=False) as data:
        inputs = {key: data[key] for key in data.files}
    with np.load(reference_file, allow_pickle=False) as data:
        reference = [data[f"arr_{i}"] for i in range(len(data.files))]
    return inputs, reference


def _check_all(compiled, reference, checks, outputs) -> tuple[bool, float]:
    """`outputs` (of the timed inputs), then the outputs at each extra check's inputs, against
    their references: (all match, the largest error)."""
    from .reference import outputs_match

    ok, max_error = outputs_match(outputs, reference)
    for _, at_inputs, at_reference in checks:
        if not ok:
            break
        ok, error = outputs_match(compiled.run(at_inputs), at_reference)
        max_error = max(max_error, error)
    return ok, max_error


def build_candidate(model_file: str, input_shapes: dict, devices_json: list,
                    placement: dict[str, str], out_path: str, rules=None) -> float:
    """Build one placement and export it to `out_path`; returns the build seconds. `rules`:
    the optimization table (None: the default table)."""
    from ..build.compile import KernelCache, build
    from ..devices import DeviceSet
    from ..placement import Placement

    _quiet_worker_logs()
    model = _model(model_file, input_shapes)
    kernels = _KERNELS.setdefault(model_file, KernelCache())
    start = time.perf_counter()
    compiled = build(model, Placement(placement), DeviceSet.from_json(devices_json),
                     kernel_cache=kernels, rules=rules)
    tmp = out_path + ".partial.so"
    compiled.export_library(tmp)
    os.replace(tmp, out_path)
    return time.perf_counter() - start


def run_candidate(lib_path: str, devices_json: list, inputs_file: str, reference_file: str,
                  warmup: int, repeat: int, min_repeat_ms: float,
                  slow_ms: float | None = None) -> dict[str, Any]:
    """Load a built library, check its outputs against the reference, time it.

    When the checking call alone took longer than `slow_ms`, the candidate is timed by one
    more call instead of `warmup` + `repeat` measurements (``"screened": True``)."""
    from ..build.runtime import load
    from ..devices import DeviceSet

    _quiet_worker_logs()
    compiled = load(lib_path, DeviceSet.from_json(devices_json))
    inputs, reference = _load_pair(inputs_file, reference_file)
    start = time.perf_counter()
    outputs = compiled.run(inputs)
    check_ms = (time.perf_counter() - start) * 1e3
    ok, max_error = _check_all(compiled, reference, extra_checks(inputs_file, reference_file),
                               outputs)
    if not ok:
        return {"ok": False, "max_error": max_error, "latencies_ms": []}
    screened = slow_ms is not None and check_ms > slow_ms
    if screened:
        latency = compiled.benchmark(inputs, warmup=0, repeat=1, min_repeat_ms=0)
    else:
        latency = compiled.benchmark(inputs, warmup=warmup, repeat=repeat,
                                     min_repeat_ms=min_repeat_ms)
    return {"ok": True, "max_error": max_error, "latencies_ms": latency.results,
            "screened": screened}


def retime_candidates(lib_paths: list[str], devices_json: list, inputs_file: str,
                      reference_file: str, rounds: int, min_repeat_ms: float) -> list[dict]:
    """Load several built libraries into this one process, check each against the reference,
    then time them alternately: each round times every candidate once (one measurement of at
    least `min_repeat_ms`), so that a slow spell of the machine falls on all of them."""
    from ..build.runtime import load
    from ..devices import DeviceSet

    _quiet_worker_logs()
    devices = DeviceSet.from_json(devices_json)
    inputs, reference = _load_pair(inputs_file, reference_file)
    checks = extra_checks(inputs_file, reference_file)
    compiled, out = [], []
    for path in lib_paths:
        model = load(path, devices)
        ok, max_error = _check_all(model, reference, checks, model.run(inputs))
        compiled.append(model if ok else None)
        out.append({"ok": ok, "max_error": max_error, "rounds_ms": []})
    for _ in range(rounds):
        for model, entry in zip(compiled, out):
            if model is not None:
                latency = model.benchmark(inputs, warmup=1, repeat=1,
                                          min_repeat_ms=min_repeat_ms)
                entry["rounds_ms"].append(latency.results[0])
    return out
