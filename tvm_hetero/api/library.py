"""The library's commands: ``compile`` (build a placed model, tune its kernels, verify, write
the ``.so``) and ``run`` (load one, run it, time it, profile its kernels)."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .._native import quiet_native_stderr
from ..search.records import best_placement
from ..devices import DeviceSet
from ..errors import HeteroError, InputError, PlacementError, error_message
from ..frontend.load import Model
from ..layers.extract import Layer
from ..build.memory import describe_over_cap, over_cap
from ..placement import Placement
from .common import as_model, device_set, layers_for, writable


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
        from ..optimize import TUNED

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
                  input_shapes: dict[str, tuple] | None = None,
                  shape_ranges: dict | None = None,
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
    input_shapes : dict of str to tuple, optional
        Shapes for dynamic inputs (a dimension a size, or a name `shape_ranges` gives).
    shape_ranges : dict, optional
        ``{dimension: (min, max[, opt])}``: dimensions kept dynamic (see
        :func:`~tvm_hetero.load_model`).
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
        first device (see :mod:`tvm_hetero.measure.reference`). A library that disagrees is
        removed and a :class:`~tvm_hetero.errors.VerificationError` raised, naming the kernel
        and rule at fault (found by rebuilding with rules switched off kernel by kernel).
        Default False.
    seed : int
        Seed of the verification's random inputs (default 0).
    rules : RuleTable, optional
        The optimization table (:func:`tvm_hetero.optimize.default_table` or a variant of it)
        the build, the tuning comparisons and the verification's rebuilds use; None, the
        default: the default table.

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
    from ..build.compile import build

    if (placement is None) == (records is None):
        raise PlacementError("give a placement or a records file (one of them)")
    devices = device_set(devices, memory)
    writable(output)
    loaded = as_model(model, input_shapes, shape_ranges)
    layers = layers_for(loaded, devices)
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
        from ..build.annotate import used_devices

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
        placement.save(writable(save_placement), devices)
    return CompileResult(compiled, loaded, devices, placement, layers, output, tuning_summary,
                         verification)


def _verify_library(output, model, placement, devices, compiled, tuning, seed, rules):
    """The library written, loaded back and verified
    (:func:`~tvm_hetero.measure.reference.verify_build`); removed when it disagrees."""
    from ..errors import VerificationError
    from ..build.runtime import load
    from ..measure.reference import verify_build

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
    from ..optimize.metaschedule import KernelTuningDatabase, tune_kernels

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
    """What :func:`run_library` ran and measured.

    Attributes
    ----------
    library : str
    compiled : CompiledModel
    outputs : list of numpy.ndarray
    latency : LatencySummary
    profile : KernelProfile or None
        With `profile`: the time of every call of ``main`` (None without).
    profile_top : int or None
        The rows :meth:`profile_table` shows (None: all).
    """

    library: str
    compiled: Any
    outputs: list[np.ndarray]
    latency: Any  # LatencySummary
    profile: Any = None  # KernelProfile
    profile_top: int | None = None

    def profile_table(self) -> str:
        """The profile as text, slowest first, its `profile_top` rows and the rest summed."""
        return self.profile.table(self.profile_top) if self.profile is not None else ""

    def to_json(self) -> dict[str, Any]:
        """The summary ``run --json`` prints (with a profile: all its rows)."""
        out = {"library": self.library, "model": self.compiled.meta.get("model"),
               "devices": self.compiled.devices.names, "latency_ms": self.latency.to_json(),
               "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)}
                           for o in self.outputs]}
        if self.profile is not None:
            out["profile"] = self.profile.to_json()
        return out


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
                repeat: int = 10, warmup: int = 3, seed: int = 0, profile: bool = False,
                profile_top: int | None = None,
                profile_statistic: str | None = None) -> RunResult:
    """Load a library written by :func:`compile_model`, run it once, time it, and with
    `profile` time each of its kernels and copies (:meth:`CompiledModel.profile`).

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
    profile : bool
        Also profile the library, over `repeat` instrumented runs after `warmup` untimed
        ones (default False).
    profile_top : int, optional
        With `profile`: the slowest rows :meth:`RunResult.profile_table` shows, the rest
        summed (default: all).
    profile_statistic : str, optional
        With `profile`: each row's ``median`` (None, the default), ``min`` or ``mean`` over
        the runs.

    Returns
    -------
    RunResult

    Raises
    ------
    HeteroError
        A library, device or inputs file that does not fit, an invalid count, or
        `profile_top` or another statistic without `profile`.
    """
    from ..build.runtime import load

    if repeat < 1 or warmup < 0:
        raise InputError("--repeat must be >= 1 and --warmup >= 0")
    if profile_top is not None and not profile:
        raise InputError("--profile-top needs --profile")
    if profile_statistic is not None and not profile:
        raise InputError("--profile-stat needs --profile")
    if profile_top is not None and profile_top < 1:
        raise InputError(f"--profile-top must be >= 1, got {profile_top}")
    if output:
        writable(output)
    with quiet_native_stderr():  # TVM's "Scope Saving" chatter
        compiled = load(library, devices)
    compiled.devices.check_runtime()
    if isinstance(inputs, str):
        inputs = read_inputs(inputs)
    elif inputs is None:
        rng = np.random.default_rng(seed)  # dynamic dimensions at their tuning point
        tuning_point = {name: r.opt for name, r in compiled.shape_ranges.items()}
        inputs = {spec.name: spec.random(rng, tuning_point) for spec in compiled.inputs}
    outputs = compiled.run(inputs)
    latency = compiled.benchmark(inputs, warmup=warmup, repeat=repeat)
    profiled = compiled.profile(inputs, repeat=repeat, warmup=warmup,
                                statistic=profile_statistic or "median") if profile else None
    if output:
        np.savez(output, **{f"output_{i}": out for i, out in enumerate(outputs)})
    return RunResult(library, compiled, outputs, latency, profiled, profile_top)
