"""The placement search's commands: ``tune`` (search, write the winner) and ``report`` (the
report of a search's records)."""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from ..search.records import header_path, read_header
from ..devices import DeviceSet
from ..errors import HeteroError
from ..frontend.load import load_model
from ..search import DEFAULT_THRESHOLD
from .common import as_model, device_set, layers_for, writable


# -- tune --------------------------------------------------------------------------------------

def tune_placement(model: Any, devices: DeviceSet | Sequence[str], records: str, output: str, *,
                   memory: dict[str, str | int] | None = None,
                   input_shapes: dict[str, tuple] | None = None,
                   shape_ranges: dict | None = None,
                   workdir: str | None = None, trials: int = 64, strategy: str = "xgb",
                   threshold: int = DEFAULT_THRESHOLD, batch_size: int = 8,
                   time_budget_s: float | None = None, early_stopping: int | None = None,
                   seed: int = 0, max_devices: int | None = None, retime: int = 3,
                   retime_rounds: int = 5, build_timeout_s: float = 300.0,
                   run_timeout_s: float = 120.0, report_dir: str | None = None,
                   callback: Callable | None = None):
    """Search for the fastest correct placement (:func:`~tvm_hetero.search.tune` with the
    local builder and runner), write it to `output`, and the report when asked.

    Parameters
    ----------
    model, devices, memory, input_shapes, shape_ranges
        As for :func:`compile_model`.
    records : str
        The records file (JSON lines), resumed when it exists.
    output : str
        Where the winning placement is written (JSON).
    workdir : str, optional
        Task, profile and cost model files (default: ``RECORDS.work`` beside the records).
    trials, strategy, threshold, batch_size, time_budget_s, early_stopping, seed, max_devices,
    retime, retime_rounds, callback
        As for :func:`~tvm_hetero.search.tune`.
    build_timeout_s, run_timeout_s : float
        Seconds per build and per run (defaults 300 and 120).
    report_dir : str, optional
        Also write the report (markdown, plots) there.

    Returns
    -------
    tuple of (TuneResult, dict)
        The search's result, and its summary (:meth:`TuneResult.to_json` with the device
        names, ``output`` and, with `report_dir`, ``report``: the files written).

    Raises
    ------
    HeteroError
        No candidate ran correctly, or a bad model, device, cap or path.
    """
    from ..measure import LocalBuilder, LocalRunner
    from ..search import tune

    devices = device_set(devices, memory)
    writable(output)
    writable(records)
    loaded = as_model(model, input_shapes, shape_ranges)
    workdir = workdir or os.path.splitext(os.path.abspath(records))[0] + ".work"
    result = tune(loaded, devices, trials=trials, strategy=strategy, records=records,
                  workdir=workdir, threshold=threshold, batch_size=batch_size,
                  time_budget_s=time_budget_s, early_stopping=early_stopping, seed=seed,
                  max_devices=max_devices, retime=retime, retime_rounds=retime_rounds,
                  builder=LocalBuilder(timeout_s=build_timeout_s),
                  runner=LocalRunner(timeout_s=run_timeout_s), callback=callback)
    if result.placement is None:
        wrong = "".join(
            f"; every candidate using {device} ({count}) computed outputs that differ from "
            f"{result.reference}" for device, count in result.wrong_output_devices.items())
        hint = (f" (`compile --verify -p all:{next(iter(result.wrong_output_devices))}` names "
                "the kernel and rule at fault)") if wrong else ""
        raise HeteroError(f"no candidate ran correctly ({len(result.trials)} tried{wrong})"
                          f"{hint}; see {records}")
    result.placement.model = loaded.name
    result.placement.meta = {"median_ms": result.latency.median_ms}
    result.placement.save(output, devices)
    summary = {**result.to_json(), "devices": devices.names, "output": output}
    if report_dir:
        from ..measure.profiles import Profile
        from ..search.report import write_report

        profile = Profile.load(os.path.join(workdir, "profile.json"), loaded.fingerprint(),
                               devices.fingerprint())
        report = write_report(report_dir, loaded, devices, records, profile)
        summary["report"] = report["files"]
    return result, summary


# -- report ------------------------------------------------------------------------------------

def report_records(records: str, output_dir: str | None = None, *, model: Any = None,
                   devices: DeviceSet | Sequence[str] | None = None,
                   input_shapes: dict[str, tuple] | None = None,
                   shape_ranges: dict | None = None,
                   memory: dict[str, str | int] | None = None,
                   profile: bool = False) -> dict[str, Any]:
    """Write the report (``report.md``, ``placement.png``, ``search.png``) of a records file.

    Parameters
    ----------
    records : str
        The records file written by :func:`tune_placement`.
    output_dir : str, optional
        Where to write (default: ``NAME.report`` beside the records ``NAME.jsonl``).
    model, devices : optional
        The model and devices the records are of (default: the header ``tune`` wrote beside
        the records); the layers are those of a build for the devices.
    input_shapes, shape_ranges : dict, optional
        Shapes and ranges for dynamic inputs (over the header's).
    memory : dict of str to str or int, optional
        Memory caps, replacing the header's.
    profile : bool
        Profile each layer on each device for the cost columns when the tune stored no
        profile (default False: no cost columns then).

    Returns
    -------
    dict
        The summary of :func:`~tvm_hetero.write_report` (files written, best placement, ...).
    """
    from ..measure.profiles import Profile, profile_model
    from ..search.report import write_report

    if not os.path.isfile(records):
        raise HeteroError(f"records file not found: {records}")
    output_dir = output_dir or os.path.splitext(records)[0] + ".report"
    writable(output_dir)  # its parent must exist; the directory itself is created
    loaded, devices = _records_model_and_devices(records, model, devices, input_shapes,
                                                 memory, shape_ranges)
    layers = layers_for(loaded, devices)
    path = os.path.join(os.path.splitext(os.path.abspath(records))[0] + ".work", "profile.json")
    stored = Profile.load(path, loaded.fingerprint(), devices.fingerprint())
    if stored is None and profile:
        stored = profile_model(loaded, layers, devices)
    return write_report(output_dir, loaded, devices, records, stored, layers)


def _records_model_and_devices(records, model, devices, input_shapes, memory,
                               shape_ranges=None):
    """The model and devices of a records file: those given, else its header's (caps given
    replace the header's)."""
    header = None
    if model is None or not devices:
        header = read_header(records)
        if header is None:
            missing = " and ".join(flag for flag, given in (("--model", model),
                                                            ("--device", devices))
                                   if not given)
            raise HeteroError(f"{records} has no header ({header_path(records)} not found): "
                              f"give {missing}")
    devices = device_set(devices if devices else header["devices"], memory)
    if model is not None:
        return as_model(model, input_shapes, shape_ranges), devices
    shapes = {**header["input_shapes"], **(input_shapes or {})}
    return load_model(header["model"], input_shapes=shapes,
                      shape_ranges=shape_ranges), devices
