"""A built executable at run time: load it, check inputs, run, time, profile, export.

:func:`tvm_hetero.build` makes a :class:`CompiledModel`; :func:`load` reads one back from the
``.so`` it exported. The executable describes itself (``hetero_meta()``: its devices, inputs,
their devices, the placement, each kernel's layers, device, rule and FLOPs), so a loaded one
runs and profiles (:mod:`tvm_hetero.build.profile`) like a built one. Nothing here compiles, but
TVM compiles the CUDA source a library built without a GPU carries when it loads it on a GPU
machine: :func:`load` puts the disk cache of :mod:`tvm_hetero.build.cuda_cache` in front of that.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..devices import DeviceSet, use_every_cpu_thread
from ..errors import BuildError, DeviceError, InputError, ModelError, error_message
from ..frontend.load import InputSpec
from ..frontend.onnx.index_guard import OUT_OF_RANGE
from ..placement import Placement
from . import cuda_cache
from .annotate import WEIGHTS_FUNC

if TYPE_CHECKING:
    from .profile import KernelProfile

# the executable's self-description: the function returning it, its format and version
META_FUNC = "hetero_meta"
META_FORMAT = "tvm_hetero.executable"
META_VERSION = 1
# its optional key describing each kernel (layers, device, rule, FLOPs: what a profile reads);
# libraries built before it was added profile without it
KERNELS_KEY = "kernels"


@dataclass
class LatencySummary:
    """Latency of one inference, in milliseconds, over `repeat` measurements."""

    median: float
    min: float
    max: float
    mean: float
    std: float
    repeat: int
    number: int
    results: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.min, "max": self.max, "mean": self.mean,
                "std": self.std, "repeat": self.repeat, "number": self.number}


def time_function(func: Callable[[], Any], sync: Callable[[], None] | None = None, *,
                  warmup: int = 3, repeat: int = 10, number: int | None = None,
                  min_repeat_ms: float = 50.0) -> LatencySummary:
    """Time ``func()``: `warmup` calls, then `repeat` measurements of `number` calls each.

    When `number` is None it is chosen so that one measurement lasts at least `min_repeat_ms`.
    `sync` waits for the devices to finish (GPU work is asynchronous).
    """
    sync = sync or (lambda: None)
    for _ in range(max(warmup, 0)):
        func()
    sync()
    if number is None:
        number = 1
        while True:
            start = time.perf_counter()
            for _ in range(number):
                func()
            sync()
            elapsed_ms = (time.perf_counter() - start) * 1e3
            if elapsed_ms >= min_repeat_ms or number >= 1 << 20:
                break
            number = max(number * 2, int(number * min_repeat_ms / max(elapsed_ms, 1e-3) * 1.1))
    results = []
    for _ in range(max(repeat, 1)):
        start = time.perf_counter()
        for _ in range(number):
            func()
        sync()
        results.append((time.perf_counter() - start) * 1e3 / number)
    arr = np.array(results)
    return LatencySummary(float(np.median(arr)), float(arr.min()), float(arr.max()),
                          float(arr.mean()), float(arr.std()), len(results), number, results)


class CompiledModel:
    """One executable running a placed model across its devices.

    Attributes
    ----------
    executable : tvm.relax.VMExecutable or tvm.runtime.Module
        The VM executable (``main(*inputs, *weights)``, ``hetero_weights()``, ``hetero_meta()``).
    meta : dict
        The description embedded in the executable (devices, inputs, placement).
    devices : DeviceSet
    inputs : list of InputSpec
    placement : Placement
    libs : dict
        Per-target kernel libraries of an in-memory build (target string -> module).
    stats : tvm_hetero.build.compile.BuildStats or None
        Where the build's time went (None for a loaded one).
    """

    def __init__(self, executable, meta: dict[str, Any], devices: DeviceSet,
                 inputs: list[InputSpec], placement: Placement, libs=None,
                 stats=None):
        self.executable = executable
        self.meta = meta
        self.devices = devices
        self.inputs = inputs
        self.placement = placement
        self.libs = libs or {}
        self.stats = stats
        from ..frontend.shape_ranges import as_ranges

        # {dimension name: ShapeRange} of the dynamic dimensions this executable serves
        self.shape_ranges = as_ranges(meta.get("shape_ranges"))
        self._vm = None
        self._weights = None

    # -- export / load ---------------------------------------------------------------------
    def export_library(self, path: str | os.PathLike) -> str:
        """Write the executable (kernels of every device, weights, metadata) to one ``.so``."""
        path = os.fspath(path)
        if not path.endswith((".so", ".dylib", ".dll", ".tar")):
            raise BuildError(f"export path {path!r} must end in .so (or .tar)")
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise BuildError(f"output directory does not exist: {directory}")
        tmp = path + ".partial" + os.path.splitext(path)[1]
        try:
            self.executable.export_library(tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return path

    # -- running ---------------------------------------------------------------------------
    def _session(self):
        if self._vm is None:
            from tvm import relax

            self.devices.check_runtime()
            self._vm = relax.VirtualMachine(self.executable, self.devices.runtime_devices())
            weights = self._vm[WEIGHTS_FUNC]()
            self._weights = list(weights) if self.meta.get("num_weights") else []
        return self._vm, self._weights

    def prepare_inputs(self, inputs) -> list:
        """Check numpy inputs against the input signature and put each on its device."""
        import tvm

        arrays = match_inputs(inputs, self.inputs, self.shape_ranges)
        runtime = self.devices.runtime_devices()
        placed = self.meta.get("input_devices", [0] * len(arrays))
        return [tvm.runtime.tensor(arr, runtime[dev]) for arr, dev in zip(arrays, placed)]

    def run(self, inputs) -> list[np.ndarray]:
        """Run one inference on numpy inputs (dict by name, or a list in input order).

        Raises
        ------
        InputError
            If the inputs do not match the model, or an index input (of a gather, scatter or
            Expand shape) is out of range.
        """
        vm, weights = self._session()
        args = self.prepare_inputs(inputs)
        try:
            outputs = vm["main"](*args, *weights)
        except Exception as err:  # the imported index checks raise through the VM
            message = error_message(err)
            if message.startswith(OUT_OF_RANGE):
                raise InputError(message) from None
            raise
        return to_numpy(outputs)

    def benchmark(self, inputs, *, warmup: int = 3, repeat: int = 10, number: int | None = None,
                  min_repeat_ms: float = 50.0) -> LatencySummary:
        """Latency of ``main`` with the inputs already on their devices."""
        vm, weights = self._session()
        args = self.prepare_inputs(inputs)
        main = vm["main"]
        runtime = self.devices.runtime_devices()

        def sync():
            for dev in runtime:
                dev.sync()

        return time_function(lambda: main(*args, *weights), sync, warmup=warmup, repeat=repeat,
                             number=number, min_repeat_ms=min_repeat_ms)

    def profile(self, inputs, *, repeat: int = 10, warmup: int = 3,
                statistic: str = "median") -> "KernelProfile":
        """Time every call of ``main`` (kernels, copies between devices, VM builtins).

        Runs ``main`` under the VM's instrument, which times each call instruction
        (:mod:`tvm_hetero.build.profile`); the rows name each kernel's layer, device and rule from
        the executable's description. A library built before it described its kernels
        profiles too, with its kernels' layers and rules ``"unknown"``.

        Parameters
        ----------
        inputs : dict of str to array, or sequence of arrays
            As :meth:`run` takes them.
        repeat : int
            Instrumented runs timed, each after a plain run (default 10).
        warmup : int
            Untimed runs first (default 3; at least one, which records the calls).
        statistic : str
            ``"median"`` (default), ``"min"`` (best) or ``"mean"`` (whose rows add up to the
            mean run exactly): each row's time over the `repeat` runs.

        Returns
        -------
        KernelProfile
            The rows in call order, their shares of the total, the run times.

        Raises
        ------
        InputError
            If the inputs do not match the model, or `repeat`, `warmup` or `statistic` is
            invalid.
        """
        from .profile import STATISTICS, profile_vm

        if repeat < 1 or warmup < 0:
            raise InputError(f"profile needs repeat >= 1 and warmup >= 0 (got {repeat} and "
                             f"{warmup})")
        if statistic not in STATISTICS:
            raise InputError(f"profile statistic must be one of {', '.join(STATISTICS)}, got "
                             f"{statistic!r}")
        vm, weights = self._session()
        args = self.prepare_inputs(inputs)
        try:
            return profile_vm(vm, [*args, *weights], self.devices, self.meta, repeat=repeat,
                              warmup=warmup, statistic=statistic)
        except Exception as err:  # the imported index checks raise through the VM
            message = error_message(err)
            if message.startswith(OUT_OF_RANGE):
                raise InputError(message) from None
            raise


def load(path: str | os.PathLike,
         devices: DeviceSet | Sequence[str] | None = None) -> CompiledModel:
    """Load an exported executable.

    Parameters
    ----------
    path : str
        The ``.so`` written by :meth:`CompiledModel.export_library`.
    devices : DeviceSet or list of str, optional
        The devices to run on; by default the ones it was built for. Given ones must match the
        built ones in number and kind.
    """
    import tvm
    from tvm import relax

    use_every_cpu_thread()
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ModelError(f"compiled model not found: {path}")
    cuda_cache.install()  # CUDA source in the library compiles at load, once per source
    try:
        module = tvm.runtime.load_module(path)
    except Exception as err:
        msg = error_message(err)
        if "loader of that name is not registered" in msg:
            kind = msg.split("{", 1)[-1].split("}", 1)[0]
            raise DeviceError(f"{path} contains {kind} code, but this TVM runtime cannot load "
                              f"it ({kind} runtime absent: no driver or GPU here)") from None
        raise ModelError(f"cannot load {path}: {msg}") from None
    try:
        probe = relax.VirtualMachine(module, [tvm.cpu(0)])
        meta = json.loads(str(probe[META_FUNC]()))
    except Exception:
        raise ModelError(f"{path} is not an executable built by tvm_hetero") from None
    if meta.get("format") != META_FORMAT or int(meta.get("version", 0)) > META_VERSION:
        raise ModelError(f"{path}: unsupported executable format {meta.get('format')} "
                         f"v{meta.get('version')}")
    built = DeviceSet.from_json(meta["devices"])
    if devices is None:
        devices = built
    else:
        devices = devices if isinstance(devices, DeviceSet) else DeviceSet.parse(devices)
        if set(built.names) <= set(devices.names):  # the same --device list as at compile
            devices = DeviceSet([devices[name] for name in built.names])
        _check_same_kinds(built, devices, path)
    inputs = [InputSpec.from_json(s) for s in meta["inputs"]]
    return CompiledModel(module, meta, devices, inputs, Placement(meta["placement"],
                                                                  meta.get("model")))


def _check_same_kinds(built: DeviceSet, given: DeviceSet, path: str) -> None:
    if len(built) != len(given):
        raise DeviceError(f"{path} was built for {len(built)} device(s) "
                          f"({', '.join(built.names)}); {len(given)} given")
    for want, got in zip(built, given):
        if want.device_type != got.device_type or want.kind != got.kind:
            raise DeviceError(f"{path} expects a {want.kind} device where {got.name!r} "
                              f"({got.kind}) was given; built for {', '.join(built.names)}")


def match_inputs(inputs, specs: list[InputSpec], ranges=None) -> list[np.ndarray]:
    """Inputs in the model's order, checked against its input signature.

    Parameters
    ----------
    inputs : dict of str to array, or sequence of arrays
        By name (the Relax or the source model's name) or in order.
    specs : list of InputSpec
        The model's inputs.
    ranges : dict of str to ShapeRange, optional
        The sizes each named dynamic dimension of `specs` may take.

    Returns
    -------
    list of numpy.ndarray
        C-contiguous arrays, one per spec.

    Raises
    ------
    InputError
        A name missing or unknown, a count, shape or dtype that does not match, a dynamic
        dimension outside its range.
    """
    from ..frontend.shape_ranges import bind_dims

    if isinstance(inputs, dict):
        by_name = dict(inputs)
        for spec in specs:  # accept the source (ONNX) names too
            if spec.name not in by_name and spec.source_name in by_name:
                by_name[spec.name] = by_name.pop(spec.source_name)
        unknown = sorted(set(by_name) - {s.name for s in specs})
        missing = [s.name for s in specs if s.name not in by_name]
        if unknown or missing:
            raise InputError(f"inputs do not match the model: missing {missing or 'none'}, "
                             f"unknown {unknown or 'none'}; expected {[s.name for s in specs]}")
        arrays = [by_name[s.name] for s in specs]
    else:
        arrays = list(inputs)
        if len(arrays) != len(specs):
            raise InputError(f"the model takes {len(specs)} input(s), {len(arrays)} given")
    arrays = [np.asarray(arr) for arr in arrays]
    bind_dims([arr.shape for arr in arrays], specs, ranges or {})
    out = []
    for spec, arr in zip(specs, arrays):
        if arr.dtype != np.dtype(spec.dtype):
            raise InputError(f"input {spec.name!r} has dtype {arr.dtype}, the model expects "
                             f"{spec.dtype}")
        out.append(np.require(arr, requirements="C"))  # keeps a 0-d array 0-d
    return out


def to_numpy(value) -> list[np.ndarray]:
    """A VM's output (one tensor, or a nested tuple of them) as a flat list of numpy arrays."""
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    if isinstance(value, (list, tuple)) or hasattr(value, "__len__"):
        return [arr for item in value for arr in to_numpy(item)]
    raise BuildError(f"unexpected output of type {type(value).__name__}")
