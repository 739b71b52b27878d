"""The interface the command line calls: one function per ``tvm-hetero`` command, doing what
the command does (loading, checking, tuning, building, writing files) and returning what it
reports. The CLI (:mod:`tvm_hetero.cli`) parses arguments, calls these and prints; Python code
calls them with the same arguments as the flags::

    result = tvm_hetero.api.compile_model("zoo:resnet", ["cpu", "cpu-generic"], "resnet.so",
                                          records="records.jsonl")
    print(result.to_json())

Models are anything :func:`~tvm_hetero.load_model` accepts (with `input_shapes` for dynamic
inputs), devices a :class:`~tvm_hetero.DeviceSet` or device strings (with `memory` caps);
every user mistake raises a :class:`~tvm_hetero.HeteroError` with one line of text.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ._native import quiet_native_stderr
from .database import best_placement, header_path, read_header
from .devices import DeviceSet
from .errors import HeteroError, InputError, PlacementError, error_message
from .frontend import Model, load_model
from .layer_table import layers_table
from .layers import Layer, extract_layers
from .memory import describe_over_cap, format_bytes, over_cap
from .placement import Placement
from .prepare import PrepareConfig
from .search import DEFAULT_THRESHOLD, STRATEGIES

logger = logging.getLogger(__name__)

__all__ = ["CompileResult", "DEFAULT_THRESHOLD", "ModelLayers", "RunResult", "STRATEGIES",
           "compile_model", "device_set", "device_status", "format_bytes", "inspect_model",
           "optimization_rules", "optimization_table", "read_inputs", "report_records",
           "run_library", "tune_placement"]


def device_set(devices: DeviceSet | Sequence[str],
               memory: dict[str, str | int] | None = None) -> DeviceSet:
    """A device set from device strings (or a set), with `memory` caps (``{name: "64MiB"}``)
    replacing its own."""
    if isinstance(devices, DeviceSet):
        return devices.with_memory_caps(memory) if memory else devices
    return DeviceSet.parse(list(devices), memory=memory)


def _model(model: Any, input_shapes: dict[str, tuple[int, ...]] | None) -> Model:
    if isinstance(model, Model):
        return model
    return load_model(model, input_shapes=input_shapes or {})


def _writable(path: str) -> str:
    """`path`, when the directory it goes into exists."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise HeteroError(f"output directory does not exist: {directory}")
    return path


def _layers(model: Model, devices: DeviceSet) -> list[Layer]:
    """The layers a build for `devices` has (their preparation, not the host's)."""
    return extract_layers(model, PrepareConfig.for_devices(devices))


# -- inspect -----------------------------------------------------------------------------------

@dataclass
class ModelLayers:
    """A model and its operator-level layers (what ``tvm-hetero inspect`` shows)."""

    model: Model
    layers: list[Layer]

    def table(self) -> str:
        """The layers as a text table."""
        return layers_table(self.layers)

    def to_json(self) -> dict[str, Any]:
        """The model's name and inputs, and every layer's fields."""
        return {
            "model": self.model.name,
            "inputs": [spec.to_json() for spec in self.model.inputs],
            "layers": [{"name": layer.name, "kind": layer.kind, "ops": layer.op_kinds,
                        "flops": layer.flops, "param_bytes": layer.param_bytes,
                        "activation_bytes_in": layer.activation_bytes_in,
                        "activation_bytes_out": layer.activation_bytes_out,
                        "outputs": [list(t.shape) for t in layer.outputs],
                        "predecessors": layer.predecessors, "model_inputs": layer.model_inputs}
                       for layer in self.layers],
        }


def inspect_model(model: Any, devices: DeviceSet | Sequence[str] | None = None, *,
                  input_shapes: dict[str, tuple[int, ...]] | None = None) -> ModelLayers:
    """The operator-level layers of a model, as a build for `devices` has them.

    Parameters
    ----------
    model : Model, str or anything :func:`~tvm_hetero.load_model` accepts
    devices : DeviceSet or list of str, optional
        The devices whose preparation (vector lanes, blocked layout) the layers follow
        (default: ``["cpu"]``, the host CPU).
    input_shapes : dict of str to tuple of int, optional
        Static shapes for dynamic inputs.

    Returns
    -------
    ModelLayers
    """
    devices = device_set(devices or ["cpu"])
    loaded = _model(model, input_shapes)
    return ModelLayers(loaded, _layers(loaded, devices))


# -- devices -----------------------------------------------------------------------------------

def device_status(devices: DeviceSet | Sequence[str], *, model: Any = None,
                  memory: dict[str, str | int] | None = None,
                  input_shapes: dict[str, tuple[int, ...]] | None = None):
    """Probe each device: compute rate, memory, copy bandwidth, and a score weighted for a
    model (equal weights without one).

    Parameters
    ----------
    devices : DeviceSet or list of str
    model : optional
        The model to weight the score for; its layers are those of a build for `devices`.
    memory : dict of str to str or int, optional
        Memory caps by device name.
    input_shapes : dict of str to tuple of int, optional

    Returns
    -------
    tuple of (DeviceSet, TaskWeights, list of DeviceStatus)
        The devices, the weights, one status per device.
    """
    from .status import TaskWeights, probe

    devices = device_set(devices, memory)
    weights = TaskWeights.equal()
    if model is not None:
        weights = TaskWeights.for_layers(_layers(_model(model, input_shapes), devices))
    return devices, weights, probe(devices, weights)


# -- tune --------------------------------------------------------------------------------------

def tune_placement(model: Any, devices: DeviceSet | Sequence[str], records: str, output: str, *,
                   memory: dict[str, str | int] | None = None,
                   input_shapes: dict[str, tuple[int, ...]] | None = None,
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
    model, devices, memory, input_shapes
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
    from .measure import LocalBuilder, LocalRunner
    from .search import tune

    devices = device_set(devices, memory)
    _writable(output)
    _writable(records)
    loaded = _model(model, input_shapes)
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
        from .profiles import Profile
        from .report import write_report

        profile = Profile.load(os.path.join(workdir, "profile.json"), loaded.fingerprint(),
                               devices.fingerprint())
        report = write_report(report_dir, loaded, devices, records, profile)
        summary["report"] = report["files"]
    return result, summary


# -- compile -----------------------------------------------------------------------------------

@dataclass
class CompileResult:
    """What :func:`compile_model` built and wrote.

    Attributes
    ----------
    compiled : CompiledModel
    model : Model
    devices : DeviceSet
    placement : Placement
    layers : list of Layer
    output : str
        The library written.
    tuning : TuningSummary or None
        What MetaSchedule tuning did (None without tuning trials).
    verification : Verification or None
        With `verify`: the reference the library was checked against and its largest
        relative error (None without).
    """

    compiled: Any
    model: Model
    devices: DeviceSet
    placement: Placement
    layers: list[Layer]
    output: str
    tuning: Any = None
    verification: Any = None

    @property
    def layers_per_device(self) -> dict[str, int]:
        """Device name -> layers placed there, in device order."""
        return {name: sum(1 for d in self.placement.assignment.values() if d == name)
                for name in self.devices.names}

    def to_json(self) -> dict[str, Any]:
        """The summary ``compile --json`` prints."""
        from .optimize import TUNED

        out = {"output": self.output, "model": self.model.name, "devices": self.devices.names,
               "layers_per_device": self.layers_per_device,
               "build_seconds": round(self.compiled.stats.total_s, 3),
               "tuned_kernels": sum(1 for r in self.compiled.stats.rules.values()
                                    if r == TUNED),
               "tuned_choice_kernels": len(self.compiled.stats.tuned_choices)}
        if self.verification is not None:
            out["verified"] = self.verification.to_json()
        return out


def compile_model(model: Any, devices: DeviceSet | Sequence[str], output: str, *,
                  placement: Placement | str | None = None, records: str | None = None,
                  memory: dict[str, str | int] | None = None,
                  input_shapes: dict[str, tuple[int, ...]] | None = None,
                  tune_trials: int = 0, tuning_db: str | None = None, tune_share: float = 1.0,
                  save_placement: str | None = None, progress: Callable | None = None,
                  native_warnings: bool = False, verify: bool = False,
                  seed: int = 0, rules=None) -> CompileResult:
    """Build a placed model into one executable library and write it to `output`.

    Parameters
    ----------
    model : Model, str or anything :func:`~tvm_hetero.load_model` accepts
    devices : DeviceSet or list of str
        The devices, in the VM's device order.
    output : str
        The library to write (``.so``); its directory must exist.
    placement : Placement or str, optional
        A placement, a placement JSON file, or ``all:DEVICE``.
    records : str, optional
        Instead of `placement`: a records file, whose fastest verified placement within the
        memory caps is built.
    memory : dict of str to str or int, optional
        Memory caps by device name; a placement exceeding one is refused.
    input_shapes : dict of str to tuple of int, optional
        Static shapes for dynamic inputs.
    tune_trials : int
        MetaSchedule trials per device for the placement's kernels (default 0: the rules
        only); needs `tuning_db`.
    tuning_db : str, optional
        The tuning database directory: kernels tuned there are reused, new ones tuned into it.
    tune_share : float
        Tune only the heaviest kernels, those that make up this share of each device's time
        under the rules (default 1.0: all; see
        :func:`~tvm_hetero.optimize.metaschedule.tune_kernels`, its `kernel_share`).
    save_placement : str, optional
        Also write the placement used there (JSON).
    progress : callable, optional
        Called with one line of text per tuning step.
    native_warnings : bool
        Let MetaSchedule's native warnings through to stderr while tuning (default False).
    verify : bool
        Load the library written, run it on random inputs (from `seed`) and check its outputs
        against an independent reference: onnxruntime for an ONNX model (where installed and
        it accepts the model), else the model built without the optimization rules on the
        first device (see :mod:`tvm_hetero.verify`). A library that disagrees is removed and
        a :class:`~tvm_hetero.errors.VerificationError` raised, naming the kernel and rule at
        fault (found by rebuilding with rules switched off kernel by kernel). Default False.
    seed : int
        Seed of the verification's random inputs (default 0).
    rules : RuleTable, optional
        The optimization table (:func:`tvm_hetero.optimize.default_table` or a variant of it)
        the build, the tuning comparisons and the verification's rebuilds use; None, the
        default: the active table.

    Returns
    -------
    CompileResult

    Raises
    ------
    HeteroError
        Any user mistake: a bad model, device, placement, records file, cap or path.
    VerificationError
        With `verify`: the library's outputs disagree with the reference.
    """
    from .build import build

    if (placement is None) == (records is None):
        raise PlacementError("give a placement or a records file (one of them)")
    devices = device_set(devices, memory)
    _writable(output)
    loaded = _model(model, input_shapes)
    layers = _layers(loaded, devices)
    if records is not None:
        placement = best_placement(records, loaded, devices, layers)
    elif not isinstance(placement, Placement):
        placement = Placement.parse(placement, layers)
    placement.model = placement.model or loaded.name
    placement.validate(layers, devices)
    exceeded = over_cap(layers, placement, devices)
    if exceeded:
        raise PlacementError(f"placement exceeds memory caps: {describe_over_cap(exceeded)}")
    if verify:  # it runs the library: before a build it could not check
        from .annotate import used_devices

        used_devices(placement, devices).check_runtime()
    tuning_summary, tuning = _tune_kernels(loaded, placement, devices, tune_trials, tuning_db,
                                           tune_share, progress, native_warnings, rules)
    compiled = build(loaded, placement, devices, tuning_db=tuning, rules=rules)
    with quiet_native_stderr():  # TVM's "Scope Saving" chatter
        compiled.export_library(output)
    verification = None
    if verify:
        verification = _verify_library(output, loaded, placement, devices, compiled, tuning,
                                       seed, rules)
    if save_placement:
        placement.save(_writable(save_placement), devices)
    return CompileResult(compiled, loaded, devices, placement, layers, output, tuning_summary,
                         verification)


def _verify_library(output, model, placement, devices, compiled, tuning, seed, rules):
    """The library written, loaded back and verified (:func:`~tvm_hetero.verify.verify_build`);
    removed when it disagrees."""
    from .build import load
    from .errors import VerificationError
    from .verify import verify_build

    # loaded from a copy under a fresh path: a process that loaded a library of the same path
    # before would be handed that one again (the dynamic loader matches libraries by path)
    with tempfile.TemporaryDirectory(prefix="tvm_hetero_verify_") as tmp:
        copy = os.path.join(tmp, os.path.basename(output))
        shutil.copyfile(output, copy)
        with quiet_native_stderr():
            written = load(copy, devices)
    try:
        return verify_build(model, placement, devices, written, dict(compiled.stats.rules),
                            tuning=tuning, seed=seed, rule_table=rules)
    except VerificationError:
        if os.path.exists(output):
            os.remove(output)  # a library known to compute wrong answers is not left behind
        raise


def _tune_kernels(model, placement, devices, trials, tuning_db, share, progress,
                  native_warnings, rules):
    """(TuningSummary or None, KernelTuningDatabase or None) of compile's tuning options."""
    if trials < 0:
        raise HeteroError(f"--tune-trials must be >= 0, got {trials}")
    if not 0 < share <= 1:
        raise HeteroError(f"--tune-share must be in (0, 1], got {share}")
    if trials and not tuning_db:
        raise HeteroError("--tune-trials needs --tuning-db DIR (where the tuned kernels are "
                          "kept and reused)")
    if not tuning_db:
        return None, None
    from .optimize.metaschedule import KernelTuningDatabase, tune_kernels

    if not trials and not os.path.exists(tuning_db):
        raise HeteroError(f"tuning database not found: {tuning_db} (give --tune-trials N to "
                          "tune into a new one)")
    database = KernelTuningDatabase(tuning_db)
    if not trials:
        if not len(database):
            raise HeteroError(f"tuning database {tuning_db} holds no tuned kernel (give "
                              "--tune-trials N to tune into it)")
        return None, database
    # MetaSchedule's native warnings (rules unknown to a target) go to fd 2
    with quiet_native_stderr(not native_warnings):
        summary = tune_kernels(model, placement, devices, trials, database, kernel_share=share,
                               progress=progress, rules=rules)
    return summary, database


# -- run ---------------------------------------------------------------------------------------

@dataclass
class RunResult:
    """What :func:`run_library` ran and measured."""

    library: str
    compiled: Any
    outputs: list[np.ndarray]
    latency: Any  # LatencySummary

    def to_json(self) -> dict[str, Any]:
        """The summary ``run --json`` prints."""
        return {"library": self.library, "model": self.compiled.meta.get("model"),
                "devices": self.compiled.devices.names, "latency_ms": self.latency.to_json(),
                "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)}
                            for o in self.outputs]}


def read_inputs(path: str) -> dict[str, np.ndarray]:
    """Inputs by name from an ``.npz`` file (written by ``numpy.savez``)."""
    if not os.path.isfile(path):
        raise InputError(f"inputs file not found: {path}")
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive of named arrays")
        with data:
            return {key: data[key] for key in data.files}
    except Exception as err:
        raise InputError(f"cannot read inputs {path}: {error_message(err)}; write them with "
                         "numpy.savez") from None


def run_library(library: str, devices: DeviceSet | Sequence[str] | None = None, *,
                inputs: str | dict[str, np.ndarray] | None = None, output: str | None = None,
                repeat: int = 10, warmup: int = 3, seed: int = 0) -> RunResult:
    """Load a library written by :func:`compile_model`, run it once, time it.

    Parameters
    ----------
    library : str
        The ``.so``.
    devices : DeviceSet or list of str, optional
        The devices to run on (default: the ones it was built for).
    inputs : str or dict of str to numpy.ndarray, optional
        Inputs by name, or an ``.npz`` file of them (default: random inputs from `seed`).
    output : str, optional
        Write the outputs there (``.npz``: ``output_0``, ``output_1``, ...).
    repeat, warmup : int
        Timed measurements and untimed runs first (defaults 10 and 3).
    seed : int
        Seed of the random inputs (default 0).

    Returns
    -------
    RunResult
    """
    from .build import load

    if repeat < 1 or warmup < 0:
        raise InputError("--repeat must be >= 1 and --warmup >= 0")
    if output:
        _writable(output)
    with quiet_native_stderr():  # TVM's "Scope Saving" chatter
        compiled = load(library, devices)
    compiled.devices.check_runtime()
    if isinstance(inputs, str):
        inputs = read_inputs(inputs)
    elif inputs is None:
        rng = np.random.default_rng(seed)
        inputs = {spec.name: spec.random(rng) for spec in compiled.inputs}
    outputs = compiled.run(inputs)
    latency = compiled.benchmark(inputs, warmup=warmup, repeat=repeat)
    if output:
        np.savez(output, **{f"output_{i}": out for i, out in enumerate(outputs)})
    return RunResult(library, compiled, outputs, latency)


# -- report ------------------------------------------------------------------------------------

def report_records(records: str, output_dir: str | None = None, *, model: Any = None,
                   devices: DeviceSet | Sequence[str] | None = None,
                   input_shapes: dict[str, tuple[int, ...]] | None = None,
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
    input_shapes : dict of str to tuple of int, optional
        Static shapes for dynamic inputs (over the header's).
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
    from .profiles import Profile, profile_model
    from .report import write_report

    if not os.path.isfile(records):
        raise HeteroError(f"records file not found: {records}")
    output_dir = output_dir or os.path.splitext(records)[0] + ".report"
    _writable(output_dir)  # its parent must exist; the directory itself is created
    loaded, devices = _records_model_and_devices(records, model, devices, input_shapes, memory)
    layers = _layers(loaded, devices)
    path = os.path.join(os.path.splitext(os.path.abspath(records))[0] + ".work", "profile.json")
    stored = Profile.load(path, loaded.fingerprint(), devices.fingerprint())
    if stored is None and profile:
        stored = profile_model(loaded, layers, devices)
    return write_report(output_dir, loaded, devices, records, stored, layers)


def _records_model_and_devices(records, model, devices, input_shapes, memory):
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
        return _model(model, input_shapes), devices
    shapes = {**header["input_shapes"], **(input_shapes or {})}
    return load_model(header["model"], input_shapes=shapes), devices


# -- optimizations -----------------------------------------------------------------------------

def optimization_table() -> list[tuple[str, str, list[str]]]:
    """The optimization table: (device family, layer kind, rule names in the order tried)."""
    from .optimize import table_rows

    return table_rows()


def optimization_rules() -> dict[str, str]:
    """Every rule of the table, by name: its description."""
    from .optimize import rules_for

    return {rule.name: rule.description for family, kind, _ in optimization_table()
            for rule in rules_for(family, kind)}
