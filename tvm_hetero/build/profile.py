"""Per-kernel profiles of a built executable: where one inference's time goes.

TVM 0.27's Relax VM has no profiler, but it calls an instrument (``vm.set_instrument``) before
and after every call instruction. :func:`profile_vm` times each call of ``main`` with
``time.perf_counter`` there (synchronizing the devices that are not CPUs, whose work is
asynchronous) and names it from the executable's self-description (``hetero_meta()``'s
``kernels``: each kernel's layers, device, rule and FLOPs, written by the build):

- one row per kernel call: the kernel, its layer, device and rule, its time, its share of the
  total, its GFLOP/s (or GB/s, bytes read and written, for a kernel that does no arithmetic);
- one row per copy between devices (``vm.builtin.to_device``), with its GB/s;
- one row for all other VM builtins (allocation, shape checks, reshapes): ``(vm builtins)``;
- one row for the time between calls (the VM's dispatch and the instrument's own
  callbacks): ``(between calls)``.

Each row's time is the median over the repeated runs (or the best, ``statistic="min"``, or the
mean); the total is the sum of the rows, so the shares add up to 1. In each run the rows add up
to its wall time exactly; over runs, the mean's sum is the mean run, while the medians' sum
falls below the median run where the runs vary (a loaded machine slows some calls of each
run): the table then says so. An instrumented run is slower than a plain one by the callbacks:
the profile holds both run times. A library built before kernels
were described still profiles; its kernels' layers and rules are then ``"unknown"``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

logger = logging.getLogger(__name__)

# what a row's layer or rule is where the library does not record it
UNKNOWN = "unknown"
# row kinds
KERNEL, COPY, BUILTIN, OTHER = "kernel", "copy", "builtin", "other"
BUILTINS_ROW = "(vm builtins)"
BETWEEN_ROW = "(between calls)"
STATISTICS = ("median", "min", "mean")
_STATISTIC = {"median": np.median, "min": np.min, "mean": np.mean}
_COPY_BUILTIN = "vm.builtin.to_device"
_WIDTH = 40  # the widest a table cell gets


@dataclass
class ProfileRow:
    """One row of a :class:`KernelProfile`.

    Attributes
    ----------
    name : str
        The kernel (PrimFunc) called; ``vm.builtin.to_device`` for a copy; ``(vm builtins)``
        and ``(between calls)`` for the two summary rows.
    kind : str
        ``kernel``, ``copy``, ``builtin`` or ``other`` (the time between calls).
    layer : str or None
        The layer the kernel computes (a layout transform goes with the layer it serves);
        ``"unknown"`` where the library does not record it; None for rows that are no kernel.
    device : str or None
        The device the kernel ran on; ``"SRC -> DST"`` for a copy; None for summary rows.
    rule : str or None
        The optimization rule that scheduled the kernel (``BuildStats.rules``); None for a
        kernel that kept TVM's default loops and for rows that are no kernel; ``"unknown"``
        where the library does not record it.
    time_ms : float
        Milliseconds per run (the profile's statistic over its repeats).
    share : float
        `time_ms` over the profile's total.
    calls : int
        Calls per run this row covers (1 but for ``(vm builtins)``).
    flops : float or None
        Floating-point operations per call (TVM's estimate of the kernel as written).
    bytes : int or None
        Bytes of the tensors the call reads and writes (a copy: the tensor copied).
    gflops : float or None
        ``flops / time``, in GFLOP/s, for kernels with FLOPs.
    gbps : float or None
        ``bytes / time``, in GB/s, for copies and kernels without FLOPs.
    index : int
        Position of the call in ``main`` (-1 for the summary rows).
    """

    name: str
    kind: str
    layer: str | None
    device: str | None
    rule: str | None
    time_ms: float
    share: float
    calls: int = 1
    flops: float | None = None
    bytes: int | None = None
    gflops: float | None = None
    gbps: float | None = None
    index: int = -1

    @property
    def rate(self) -> str:
        """The row's speed as text: ``12.3 GFLOP/s``, ``4.5 GB/s`` or ``-``."""
        if self.gflops is not None:
            return f"{self.gflops:.2f} GFLOP/s"
        if self.gbps is not None:
            return f"{self.gbps:.2f} GB/s"
        return "-"


@dataclass
class KernelProfile:
    """Where the time of one run of ``main`` goes, kernel by kernel.

    Attributes
    ----------
    rows : list of ProfileRow
        Every call of ``main`` in call order (kernels and copies), then ``(vm builtins)`` and
        ``(between calls)``.
    total_ms : float
        The sum of the rows' times: the shares' denominator.
    run_ms : float
        The statistic of the instrumented runs' wall times (near `total_ms`).
    plain_ms : float
        The statistic of as many runs without the instrument, alternating with the
        instrumented ones: what the instrument costs is ``run_ms - plain_ms``.
    statistic : str
        ``median``, ``min`` (best) or ``mean``, over `repeat` runs, of each row and run
        time.
    repeat, warmup : int
        Instrumented (and plain) runs timed; untimed runs first.
    model : str or None
    devices : list of str
    described : bool
        Whether the library records its kernels (layers, rules, FLOPs); False for one built
        before it did, whose kernel rows say ``unknown``.
    """

    rows: list[ProfileRow]
    total_ms: float
    run_ms: float
    plain_ms: float
    statistic: str
    repeat: int
    warmup: int
    model: str | None = None
    devices: list[str] = field(default_factory=list)
    described: bool = True

    @property
    def calls(self) -> int:
        """Call instructions of one run of ``main`` (kernels, copies, builtins)."""
        return sum(row.calls for row in self.rows if row.kind != OTHER)

    @property
    def overhead_us(self) -> float:
        """What the instrument adds to a call, in microseconds: ``(run_ms - plain_ms)`` over
        the calls (0 where noise makes it negative)."""
        return max(self.run_ms - self.plain_ms, 0.0) * 1e3 / max(self.calls, 1)

    def by_time(self) -> list[ProfileRow]:
        """The rows, slowest first."""
        return sorted(self.rows, key=lambda row: -row.time_ms)

    def to_json(self) -> dict[str, Any]:
        """Every row and the totals, as JSON-serializable data."""
        return {"model": self.model, "devices": list(self.devices),
                "statistic": self.statistic, "repeat": self.repeat, "warmup": self.warmup,
                "total_ms": self.total_ms, "run_ms": self.run_ms, "plain_ms": self.plain_ms,
                "calls": self.calls, "overhead_us": self.overhead_us,
                "described": self.described, "rows": [asdict(row) for row in self.rows]}

    def table(self, top: int | None = None) -> str:
        """A fixed-width text table, slowest first: the `top` rows (all when None), the rest
        summed into one row, then the totals."""
        ranked = self.by_time()
        shown = ranked if top is None or top >= len(ranked) else ranked[:max(top, 0)]
        header = ("kernel", "layer", "device", "rule", "ms", "share", "speed")
        lines = [header]
        for row in shown:
            rule = row.rule if row.rule is not None else ("(none)" if row.kind == KERNEL
                                                           else "-")
            name = row.name if row.calls == 1 else f"{row.name} x{row.calls}"
            lines.append((name, row.layer or "-", row.device or "-", rule,
                          f"{row.time_ms:.3f}", f"{row.share * 100:.1f}%", row.rate))
        rest = ranked[len(shown):]
        if rest:
            ms = sum(row.time_ms for row in rest)
            lines.append((f"({len(rest)} more rows)", "", "", "", f"{ms:.3f}",
                          f"{sum(row.share for row in rest) * 100:.1f}%", ""))
        widths = [min(max(len(line[i]) for line in lines), _WIDTH) for i in range(len(header))]
        right = {4, 5}  # numbers

        def cut(cell):  # a long kernel name ends in ".." (--json has it whole)
            return cell if len(cell) <= _WIDTH else cell[:_WIDTH - 2] + ".."

        def fmt(line):
            return "  ".join(cut(cell).rjust(w) if i in right else cut(cell).ljust(w)
                             for i, (cell, w) in enumerate(zip(line, widths))).rstrip()

        runs = f"{self.repeat} run" + ("s" if self.repeat != 1 else "")
        footer = [f"total {self.total_ms:.3f} ms (the rows' {self.statistic}s over {runs}); a "
                  f"run: {self.run_ms:.3f} ms instrumented, {self.plain_ms:.3f} ms plain "
                  f"(~{self.overhead_us:.1f} us per call)"]
        if self.statistic == "median" and abs(self.run_ms - self.total_ms) > 0.1 * self.run_ms:
            footer.append("the runs varied (a loaded machine?): the rows' medians do not add up "
                          "to the median run (the mean statistic's do)")
        if not self.described:
            footer.append("this library does not record its kernels' layers and rules "
                          "(built before it did): they show as unknown")
        return "\n".join([fmt(line) for line in lines] + footer)


@dataclass
class _Call:
    """What the first (untimed) instrumented run saw of one top-level call."""

    name: str
    start: int  # positions of its before/after events in a run's event list
    end: int
    bytes: int
    device: str | None
    target: str | None = None  # a copy's destination


def profile_vm(vm, args: Sequence, devices, meta: dict[str, Any], *, repeat: int = 10,
               warmup: int = 3, statistic: str = "median") -> KernelProfile:
    """Profile ``vm["main"](*args)``: see the module's description.

    Parameters
    ----------
    vm : tvm.runtime.vm.VirtualMachine
        A VM over the executable; its instrument is set during the profile and cleared after.
    args : sequence
        ``main``'s arguments, already on their devices (inputs, then weights).
    devices : DeviceSet
        The VM's devices, in its order (names the devices).
    meta : dict
        The executable's ``hetero_meta()`` (its ``kernels``, when present, name the rows).
    repeat : int
        Instrumented runs timed, each after a plain one (default 10).
    warmup : int
        Untimed runs first (default 3; at least one, the run that records the calls).
    statistic : str
        ``median`` (default), ``min`` or ``mean``: of each row's times over the runs.

    Returns
    -------
    KernelProfile
    """
    import tvm

    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
    if repeat < 1 or warmup < 0:
        raise ValueError("repeat must be >= 1 and warmup >= 0")
    main = vm["main"]
    runtime = devices.runtime_devices()
    cpu = tvm.cpu(0).dlpack_device_type()
    names = {(int(dev.dlpack_device_type()), dev.index): name
             for dev, name in zip(runtime, devices.names)}
    asynchronous = [dev for dev in runtime if dev.dlpack_device_type() != cpu]

    def sync():
        for dev in asynchronous:
            dev.sync()

    def device_name(dev) -> str:
        return names.get((int(dev.dlpack_device_type()), dev.index), str(dev))

    calls: list[_Call] = []
    depth = [0]
    events = [0]

    def record(_func, name, before, _ret, *call_args):
        """The untimed run: each top-level call, its bytes and device."""
        events[0] += 1
        if not before:
            depth[0] -= 1
            if depth[0] == 0:
                calls[-1].end = events[0] - 1
            return 0
        depth[0] += 1
        if depth[0] > 1:
            return 0
        tensors = [a for a in call_args if isinstance(a, tvm.runtime.Tensor)]
        nbytes = sum(_nbytes(t) for t in tensors)
        device = device_name(tensors[-1].device) if tensors else None
        target = None
        if name == _COPY_BUILTIN and len(call_args) >= 3:
            target = names.get((int(call_args[1]), int(call_args[2])))
            nbytes = _nbytes(tensors[0]) if tensors else nbytes
        calls.append(_Call(str(name), events[0] - 1, -1, nbytes, device, target))
        return 0

    stamps: list[float] = []
    clock, append = time.perf_counter, stamps.append  # the timed callback does nothing else

    if asynchronous:
        def stamp(*_):
            sync()
            append(clock())
            return 0
    else:
        def stamp(*_):
            append(clock())
            return 0

    plain, runs, per_run = [], [], []
    try:
        vm.set_instrument(record)
        main(*args)
        sync()
        vm.set_instrument(None)
        for _ in range(max(warmup - 1, 0)):
            main(*args)
        sync()
        for _ in range(repeat):
            start = clock()
            main(*args)
            sync()
            plain.append(clock() - start)
            stamps.clear()
            vm.set_instrument(stamp)
            start = clock()
            main(*args)
            sync()
            runs.append(clock() - start)
            vm.set_instrument(None)
            if len(stamps) != events[0]:
                raise RuntimeError(f"main made {len(stamps)} instrumented calls in one run and "
                                   f"{events[0]} in another: it cannot be profiled per call")
            per_run.append([stamps[c.end] - stamps[c.start] for c in calls])
    finally:
        vm.set_instrument(None)
    return _summarize(calls, np.array(per_run) * 1e3, np.array(runs) * 1e3,
                      np.array(plain) * 1e3, meta, devices, statistic, repeat, warmup)


def _summarize(calls: list[_Call], times: np.ndarray, runs: np.ndarray, plain: np.ndarray,
               meta: dict[str, Any], devices, statistic: str, repeat: int,
               warmup: int) -> KernelProfile:
    """The rows from each call's times (``times[run, call]``, ms) and the runs' wall times."""
    stat: Callable = _STATISTIC[statistic]
    kernels = meta.get("kernels")
    described = kernels is not None
    kernels = kernels or {}
    seen: dict[str, int] = {}
    rows: list[ProfileRow] = []
    builtin = np.zeros(len(runs))
    builtin_calls = 0
    for index, call in enumerate(calls):
        ms = float(stat(times[:, index]))
        if call.name == _COPY_BUILTIN:
            target = call.target or "?"
            rows.append(ProfileRow(call.name, COPY, None, f"{call.device} -> {target}", None,
                                   ms, 0.0, bytes=call.bytes, gbps=_rate(call.bytes, ms),
                                   index=index))
        elif "." in call.name:  # the VM's builtins (vm.builtin.*); kernels have no dot
            builtin += times[:, index]
            builtin_calls += 1
        else:
            info = kernels.get(call.name)
            occurrence = seen.get(call.name, 0)
            seen[call.name] = occurrence + 1
            if info is None:
                layer, rule, flops = UNKNOWN, UNKNOWN, None
            else:
                layers = info.get("layers") or [None]
                layer = layers[min(occurrence, len(layers) - 1)]
                rule, flops = info.get("rule"), info.get("flops")
            device = call.device or (info or {}).get("device")
            has_flops = flops is not None and flops > 0
            rows.append(ProfileRow(call.name, KERNEL, layer, device, rule, ms, 0.0,
                                   flops=flops, bytes=call.bytes,
                                   gflops=_rate(flops, ms) if has_flops else None,
                                   gbps=None if has_flops else _rate(call.bytes, ms),
                                   index=index))
    if builtin_calls:
        rows.append(ProfileRow(BUILTINS_ROW, BUILTIN, None, None, None,
                               float(stat(builtin)), 0.0, calls=builtin_calls))
    between = runs - times.sum(axis=1)
    rows.append(ProfileRow(BETWEEN_ROW, OTHER, None, None, None,
                           max(float(stat(between)), 0.0), 0.0))
    total = sum(row.time_ms for row in rows)
    for row in rows:
        row.share = row.time_ms / total if total > 0 else 0.0
    logger.debug("profiled %d calls of main over %d runs", len(calls), repeat)
    return KernelProfile(rows, total, float(stat(runs)), float(stat(plain)), statistic,
                         repeat, warmup, meta.get("model"), list(devices.names), described)


def _nbytes(tensor) -> int:
    """Bytes of a runtime tensor (sub-byte types rounded up per element)."""
    dtype = tensor.dtype
    bits = int(dtype.bits) * int(dtype.lanes) if hasattr(dtype, "bits") \
        else np.dtype(str(dtype)).itemsize * 8
    return int(np.prod(tuple(tensor.shape), dtype=np.int64)) * max(-(-bits // 8), 1)


def _rate(amount, ms: float) -> float | None:
    """``amount`` per second, in billions (GFLOP/s, GB/s)."""
    if amount is None or ms <= 0:
        return None
    return float(amount) / (ms * 1e-3) / 1e9


__all__ = ["BETWEEN_ROW", "BUILTINS_ROW", "KernelProfile", "ProfileRow", "UNKNOWN",
           "profile_vm"]
