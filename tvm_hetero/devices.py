"""Devices: named TVM targets with a runtime device and an optional memory cap.

A device string is one of

- ``cpu``: the host CPU, LLVM with ``mcpu`` read from LLVM (never ``native``, which TVM 0.27
  silently turns into a generic CPU);
- ``cpu-generic``: LLVM for a generic x86-64 (SSE2 only), a second, different CPU target;
- ``cuda`` / ``cuda:N``: an NVIDIA GPU; ``arch`` from the GPU when one is present, else
  ``DEFAULT_CUDA_ARCH`` with one warning line saying so; ``cuda:N@sm_80`` sets the arch;
- a JSON dict of any TVM target, e.g. ``{"kind": "opencl"}``; an optional ``"name"`` key names it.

Any of them may carry an index (``cpu:1``) and be given a name: ``gpu0=cuda:0``.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable

from .errors import DeviceError, error_message
from .target import cuda_target, present_gpu

logger = logging.getLogger(__name__)

DEFAULT_CUDA_ARCH = "sm_90"
GENERIC_X86_MCPU = "x86-64"

_SIZE_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_size(text: str | int) -> int:
    """Parse a memory size such as ``"64MiB"``, ``"1.5GB"`` or ``4096`` into bytes.

    Raises
    ------
    DeviceError
        If the text is not a non-negative number with a known unit.
    """
    if isinstance(text, int):
        if text < 0:
            raise DeviceError(f"memory size must not be negative: {text}")
        return text
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    unit = match.group(2).upper() if match else ""
    if not match or (unit and unit not in _SIZE_UNITS):
        raise DeviceError(
            f"invalid memory size {text!r}: use a number with a unit such as 512MiB, 2GiB, 1GB"
        )
    return int(float(match.group(1)) * _SIZE_UNITS[unit or "B"])


@lru_cache(maxsize=None)
def host_cpu_name() -> str:
    """The LLVM name of the host CPU (e.g. ``znver3``), as LLVM detects it."""
    import tvm  # registers the LLVM target functions
    import tvm_ffi

    del tvm
    return str(tvm_ffi.get_global_func("target.llvm_get_system_cpu")())


@lru_cache(maxsize=None)
def host_num_cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


THREADS_ENV = ("TVM_NUM_THREADS", "OMP_NUM_THREADS")


def use_every_cpu_thread() -> None:
    """Have TVM's CPU runtime run its parallel loops on every CPU this process may use.

    Left alone, TVM's thread pool takes half the logical CPUs on x86 (it assumes the other half
    are hyper-threads): one thread on a 2-vCPU machine, half the speed of onnxruntime given the
    same two CPUs. The pool reads ``TVM_NUM_THREADS`` once, when it starts (at the first parallel
    kernel), so this sets it, unless the user set it (or ``OMP_NUM_THREADS``), where tvm_hetero
    is about to run kernels: :func:`~tvm_hetero.build` and :func:`~tvm_hetero.load` (hence in
    the builder and runner worker processes), :meth:`DeviceSet.check_runtime` (before a
    compiled model's first run, profiling, probing and tuning; tuning's worker processes are
    started after it and inherit it) and kernel timing. Importing tvm_hetero sets nothing.
    """
    import os

    if not any(name in os.environ for name in THREADS_ENV):
        os.environ["TVM_NUM_THREADS"] = str(host_num_cores())


def runtime_threads() -> int:
    """The threads TVM's CPU runtime runs parallel loops on in this process."""
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())


def host_cpu_model() -> str:
    """The host CPU's model name (``/proc/cpuinfo``), or the platform's processor string, for
    the tables benchmarks print."""
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def host_target_dict() -> dict[str, Any]:
    """The JSON-dict target of the host CPU."""
    return {"kind": "llvm", "mcpu": host_cpu_name(), "num-cores": host_num_cores()}


def _cuda_arch(index: int, text: str) -> str:
    """The sm_XY arch of GPU `index` when one is present, else ``DEFAULT_CUDA_ARCH``, said in
    one warning line (the device string `text` names the device in it)."""
    device = present_gpu(index)
    if device is not None:
        return "sm_" + str(device.compute_version).replace(".", "")
    logger.warning("device %r: no GPU %d here to read the architecture from; compiling for "
                   "%s (give %s@sm_XY to choose another)", text, index, DEFAULT_CUDA_ARCH,
                   text.split("@")[0])
    return DEFAULT_CUDA_ARCH


@dataclass(frozen=True)
class Device:
    """One device of a placement.

    Parameters
    ----------
    name : str
        The name placements use (``cpu``, ``cpu-generic``, ``cuda:1``, or the user's own).
    target : dict
        The TVM target as a JSON dict (the only form TVM 0.27 accepts).
    device_type : str
        The runtime device kind: ``cpu``, ``cuda``, ``opencl``, ...
    device_id : int
        The runtime device index within its kind.
    memory_cap : int or None
        Bytes this device may hold, when the user limits it.
    """

    name: str
    target: dict[str, Any]
    device_type: str
    device_id: int = 0
    memory_cap: int | None = None

    @property
    def kind(self) -> str:
        """The target kind: ``llvm``, ``cuda``, ``opencl``, ..."""
        return self.target["kind"]

    @property
    def family(self) -> str:
        """``cpu``, ``cuda`` or ``other``: the key of per-device-kind tables."""
        if self.kind in ("llvm", "c"):
            return "cpu"
        return "cuda" if self.kind == "cuda" else "other"

    def tvm_target(self):
        """The ``tvm.target.Target`` (with the host CPU as host for non-CPU targets)."""
        import tvm

        if self.family == "cpu":
            return tvm.target.Target(self.target)
        host = self.target.get("host", host_target_dict())
        target = {k: v for k, v in self.target.items() if k != "host"}
        return tvm.target.Target(target, host=host)

    def runtime_device(self):
        """The ``tvm.runtime.Device`` this device runs on."""
        import tvm

        return tvm.device(self.device_type, self.device_id)

    def runtime_available(self) -> bool:
        """Whether this TVM runtime can run code on this device here."""
        import tvm

        try:
            return bool(tvm.runtime.enabled(self.kind_runtime)) and self.runtime_device().exist
        except Exception:
            return False

    @property
    def kind_runtime(self) -> str:
        return "llvm" if self.family == "cpu" else self.device_type

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "target": self.target, "device_type": self.device_type,
               "device_id": self.device_id}
        if self.memory_cap is not None:
            out["memory_cap"] = self.memory_cap
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Device":
        try:
            return cls(name=data["name"], target=dict(data["target"]),
                       device_type=data["device_type"], device_id=int(data["device_id"]),
                       memory_cap=data.get("memory_cap"))
        except (KeyError, TypeError, ValueError) as err:
            raise DeviceError(f"malformed device description {data!r}: "
                              f"{error_message(err)}") from None


_TARGET_TO_DEVICE_TYPE = {
    "llvm": "cpu", "c": "cpu", "cuda": "cuda", "rocm": "rocm", "opencl": "opencl",
    "vulkan": "vulkan", "metal": "metal", "webgpu": "webgpu", "hexagon": "hexagon",
}


def _validate_target(target: dict[str, Any], text: str) -> None:
    import tvm

    try:
        parsed = tvm.target.Target(target)
    except Exception as err:  # TVM raises several types; report them as one
        raise DeviceError(f"invalid TVM target in device {text!r}: "
                          f"{error_message(err)}") from None
    mcpu = target.get("mcpu")
    if parsed.kind.name == "llvm" and mcpu:
        from tvm.target import codegen

        from ._native import quiet_native_stderr

        triple = str(target.get("mtriple", ""))
        with quiet_native_stderr():  # LLVM prints its own complaint before answering
            valid = codegen.llvm_is_valid_cpu(str(mcpu), triple)
        if not valid:  # LLVM would silently build for a generic CPU instead
            raise DeviceError(f"device {text!r}: LLVM does not know the CPU {mcpu!r}; "
                              f"this machine's is {host_cpu_name()!r}")


def parse_device(text: str, cpu_ids: Iterable[int] = ()) -> Device:
    """Parse one device string (see the module docstring) into a :class:`Device`.

    Parameters
    ----------
    text : str
        The device string.
    cpu_ids : iterable of int
        Runtime ids already taken by CPU devices: a new CPU device takes the next free one, so
        that ``cpu`` and ``cpu-generic`` become ``cpu(0)`` and ``cpu(1)``.
    """
    raw = text.strip()
    name = None
    if "=" in raw and not raw.startswith("{"):
        name, raw = (s.strip() for s in raw.split("=", 1))
        if not re.fullmatch(r"[A-Za-z0-9_.:\-]+", name or ""):
            raise DeviceError(f"invalid device name {name!r} in {text!r}")
    taken = set(cpu_ids)
    next_cpu = next(i for i in range(len(taken) + 1) if i not in taken)

    if raw.startswith("{"):
        try:
            target = json.loads(raw)
        except json.JSONDecodeError as err:
            raise DeviceError(f"device {text!r} is not valid JSON: {err.msg}") from None
        if not isinstance(target, dict) or "kind" not in target:
            raise DeviceError(f"device JSON {text!r} must be an object with a \"kind\"")
        name = name or target.pop("name", None)
        index = int(target.pop("device_id", 0 if target["kind"] not in ("llvm", "c") else next_cpu))
        device_type = _TARGET_TO_DEVICE_TYPE.get(target["kind"])
        if device_type is None:
            raise DeviceError(f"unknown target kind {target['kind']!r} in device {text!r}")
        _validate_target(target, text)
        return Device(name or f"{target['kind']}:{index}", target, device_type, index)

    match = re.fullmatch(r"(cpu-generic|cpu|cuda)(?::(\d+))?(?:@(sm_\d+))?", raw)
    if not match:
        raise DeviceError(
            f"unknown device {text!r}: use cpu, cpu-generic, cuda, cuda:N, cuda@sm_80, "
            "NAME=DEVICE or a JSON target dict"
        )
    short, index_text, arch = match.groups()
    if arch and short != "cuda":
        raise DeviceError(f"device {text!r}: only cuda takes an @arch")
    if short == "cuda":
        index = int(index_text or 0)
        target = cuda_target(arch or _cuda_arch(index, text.strip()))
        return Device(name or (f"cuda:{index}" if index_text else "cuda"), target, "cuda", index)
    index = int(index_text) if index_text else next_cpu
    if short == "cpu":
        target = host_target_dict()
    else:
        target = {"kind": "llvm", "mcpu": GENERIC_X86_MCPU, "num-cores": host_num_cores()}
    default_name = short if not index_text else f"{short}:{index}"
    return Device(name or default_name, target, "cpu", index)


@dataclass
class DeviceSet:
    """An ordered set of named devices. The order is the VM's device order.

    Constants of the model are loaded onto the first device when the VM starts; put the device
    with the most memory (usually the host CPU) first.
    """

    devices: list[Device] = field(default_factory=list)

    def __post_init__(self):
        names = [d.name for d in self.devices]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise DeviceError(f"device names must be unique; repeated: {', '.join(dup)}")
        seen = {}
        for dev in self.devices:
            key = (dev.device_type, dev.device_id)
            if key in seen:
                raise DeviceError(
                    f"devices {seen[key]!r} and {dev.name!r} both use runtime device "
                    f"{dev.device_type}({dev.device_id}); give them different indices"
                )
            seen[key] = dev.name
        if not self.devices:
            raise DeviceError("a device set needs at least one device")

    @classmethod
    def parse(cls, texts: Iterable[str], memory: dict[str, str | int] | None = None) -> "DeviceSet":
        """Build a device set from device strings and optional ``{name: size}`` caps."""
        devices: list[Device] = []
        for text in texts:
            cpu_ids = [d.device_id for d in devices if d.device_type == "cpu"]
            devices.append(parse_device(text, cpu_ids))
        dset = cls(devices)
        if memory:
            dset = dset.with_memory_caps(memory)
        return dset

    def with_memory_caps(self, memory: dict[str, str | int]) -> "DeviceSet":
        unknown = sorted(set(memory) - set(self.names))
        if unknown:
            raise DeviceError(f"memory cap for unknown device(s): {', '.join(unknown)}; "
                              f"devices are {', '.join(self.names)}")
        from dataclasses import replace

        return DeviceSet([replace(d, memory_cap=parse_size(memory[d.name])) if d.name in memory
                          else d for d in self.devices])

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.devices]

    def __len__(self) -> int:
        return len(self.devices)

    def __iter__(self):
        return iter(self.devices)

    def __getitem__(self, key: int | str) -> Device:
        if isinstance(key, int):
            return self.devices[key]
        for dev in self.devices:
            if dev.name == key:
                return dev
        raise DeviceError(f"unknown device {key!r}; devices are {', '.join(self.names)}")

    def index(self, name: str) -> int:
        return self.names.index(self[name].name)

    def runtime_devices(self) -> list:
        """The ``tvm.runtime.Device`` list to give ``relax.VirtualMachine``, in order."""
        return [d.runtime_device() for d in self.devices]

    def check_runtime(self) -> None:
        """Raise :class:`DeviceError` naming the first device that cannot run here; log a
        warning when TVM's CPU runtime has fewer threads than a CPU device's ``num-cores``.
        Sets TVM's CPU threads first (:func:`use_every_cpu_thread`): kernels run next."""
        use_every_cpu_thread()
        for dev in self.devices:
            if not dev.runtime_available():
                raise DeviceError(
                    f"device {dev.name!r} ({dev.kind}) cannot run here: this TVM runtime has no "
                    f"{dev.kind} support or no such device is present "
                    f"({dev.device_type}({dev.device_id}))"
                )
        cores = max((int(dev.target.get("num-cores", 1)) for dev in self.devices
                     if dev.family == "cpu"), default=1)
        threads = runtime_threads() if cores > 1 else cores
        if threads < cores:
            logger.warning("TVM's CPU runtime runs %d thread(s), the CPU devices declare %d "
                           "cores: set TVM_NUM_THREADS=%d before TVM starts its thread pool",
                           threads, cores, cores)

    def to_json(self) -> list[dict[str, Any]]:
        return [d.to_json() for d in self.devices]

    @classmethod
    def from_json(cls, data: list[dict[str, Any]]) -> "DeviceSet":
        return cls([Device.from_json(d) for d in data])

    def fingerprint(self) -> str:
        """A short stable hash of the targets and runtime devices (names and memory caps
        excluded: records, profiles and statuses stay valid when a cap changes, and whatever
        reuses them checks the caps given now)."""
        import hashlib

        body = json.dumps([[d.target, d.device_type, d.device_id] for d in self.devices],
                          sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:16]
