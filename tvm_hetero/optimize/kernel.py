"""One layer's kernel compiled alone for one device, scheduled as the placed executable
schedules it, and timed: what profiles and the tuned-vs-rules comparison measure."""

from __future__ import annotations

import numpy as np

from ..devices import Device, DeviceSet, use_every_cpu_thread
from ..errors import ModelError
from ..frontend.onnx.index_guard import BOUNDS_PARAM_ATTR
from .pass_ import OptimizeLayers, schedule_passes


def _random_tensor(shape, dtype, dev, rng, low: int = 0, high: int = 4):
    import tvm

    if np.issubdtype(np.dtype(dtype), np.integer):
        data = rng.integers(low, high, size=shape).astype(dtype)
    else:
        data = rng.standard_normal(shape).astype(dtype)
    return tvm.runtime.tensor(data, dev)


def _bounds_param(func) -> int | None:
    """The bounds parameter's position in an index-check kernel (None for other kernels)."""
    attrs = func.attrs
    if attrs is None or BOUNDS_PARAM_ATTR not in attrs:
        return None
    return int(attrs[BOUNDS_PARAM_ATTR])


def schedule_kernel(func, device: Device, chosen: dict | None = None, rules=None):
    """A layer's PrimFunc alone in a module, scheduled by the rules the placed executable's
    kernels get on `device` (``main``). `chosen` receives ``{"main": rule name}``; `rules` is
    the optimization table (a :class:`~tvm_hetero.optimize.table.RuleTable`; None: the default
    table)."""
    import tvm

    target = device.tvm_target()
    mod = tvm.IRModule({"main": func.with_attr("target", target)
                        .with_attr("global_symbol", "main")})
    passes = schedule_passes(DeviceSet([device]), rules=rules)
    with target:
        scheduled = tvm.transform.Sequential(passes)(mod)
    if chosen is not None:
        for step in passes:
            if isinstance(step, OptimizeLayers):
                chosen.update(step.chosen)
    return scheduled


def build_kernel(scheduled, device: Device):
    """The library of a module `schedule_kernel` returned."""
    import tvm

    return tvm.tirx.build(scheduled, target=device.tvm_target())


def kernel_for(func, device: Device, chosen: dict | None = None, rules=None,
               dims: dict[str, int] | None = None):
    """A layer's PrimFunc compiled alone for one device, scheduled by the rules the placed
    executable's kernels get: ``(library, scheduled PrimFunc)`` (a rule may change the
    parameters' layout: time the library with the scheduled function's parameters).
    `chosen` receives ``{"main": rule name}``; `rules` is the optimization table (None: the
    default table). `dims` fixes symbolic dimensions *after* scheduling: the kernel a dynamic
    executable runs, at one shape."""
    import tvm

    from ..relax_ir import bounded_kernel

    scheduled = schedule_kernel(func, device, chosen, rules)
    if dims:
        scheduled = tvm.IRModule({"main": bounded_kernel(scheduled["main"], dims)})
    return build_kernel(scheduled, device), scheduled["main"]


def time_kernel(lib, func, device: Device, repeat: int = 3, min_repeat_ms: int = 20,
                seed: int = 0) -> float:
    """Median ms of one call of `lib` (the kernel `func` compiled), on random arguments."""
    import tvm

    use_every_cpu_thread()
    dev = device.runtime_device()
    rng = np.random.default_rng(seed)
    args = []
    bounds = _bounds_param(func)  # index checks: bounds above the random indices (in [0, 4))
    for position, param in enumerate(func.params):  # TVM 0.27: a param's type is its BufferType
        buf = param.ty
        if not all(isinstance(d, tvm.tirx.IntImm) for d in buf.shape):
            raise ModelError(f"kernel parameter {param.name} has a shape known only at run "
                             f"time ({list(buf.shape)}): time relax_ir.bounded_kernel(func, "
                             "bounds) instead")
        low, high = (4, 1 << 16) if position == bounds else (0, 4)
        args.append(_random_tensor([int(d) for d in buf.shape], str(buf.dtype), dev, rng,
                                   low, high))
    timer = lib.time_evaluator("main", dev, number=1, repeat=repeat,
                               min_repeat_ms=int(min_repeat_ms))
    return float(np.median(timer(*args).results)) * 1e3


__all__ = ["build_kernel", "kernel_for", "schedule_kernel", "time_kernel"]
