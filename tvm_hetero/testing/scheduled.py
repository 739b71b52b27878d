"""What a build scheduled, for the checks that read kernels after the rules ran (the GPU census,
the schedule hashes, the device-forms tests): a pass that keeps every scheduled kernel, the
work a kernel does, and which convolutions are depthwise."""

from __future__ import annotations


class ScheduledOnly(Exception):
    """Raised by :func:`keep_scheduled` with ``stop``: the build ends once its kernels are
    scheduled (``th.build`` then raises a BuildError; what was kept stays)."""


def keep_scheduled(into: dict, stop: bool = False):
    """A pass for ``th.build(..., extra_passes=[...])`` that puts each scheduled kernel in
    `into` (``{name: PrimFunc}``); with `stop` it ends the build there (no lowering, no code
    generation)."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="tvm_hetero.testing.KeepScheduled")
    def keep(mod, _ctx):
        into.update((gv.name_hint, func) for gv, func in mod.functions_items()
                    if isinstance(func, tvm.tirx.PrimFunc))
        if stop:
            raise ScheduledOnly()
        return mod

    return keep


def estimated_flops(func) -> float:
    """The floating-point operations a PrimFunc computes as written
    (``tvm.s_tir.analysis.estimate_tir_flops``, each ``if_then_else`` branch counted over the
    instances that take it: :func:`tvm_hetero.optimize.gpu.work_budget.estimated_flops`):
    compared before and after scheduling, it shows recomputation."""
    from ..optimize.gpu.work_budget import estimated_flops as flops

    return flops(func)


def is_depthwise(func) -> bool:
    """Whether a convolution kernel's weight (its second buffer) has one input channel per
    group and several outputs: a depthwise convolution (OIHW, or the blocked OIHW1i[x]o of the
    CPU forms)."""
    shapes = [param.ty.shape for param in func.params
              if getattr(param.ty, "shape", None) is not None]
    if len(shapes) < 2:
        return False
    weight = [int(d) for d in shapes[1]]
    if len(weight) == 6:  # [C/x, 1, KH, KW, 1, x]
        return weight[1] == 1 and weight[4] == 1 and weight[0] * weight[5] > 1
    return len(weight) == 4 and weight[1] == 1 and weight[0] > 1


def unscheduled_kernels(model, devices, placement) -> dict:
    """The kernels of `model` placed by `placement` as they are before scheduling
    (``{name: PrimFunc}``, the names of :func:`keep_scheduled`'s): each layer's kernel in the
    form of its device (:func:`~tvm_hetero.layers.layered.placed_module`), the ones
    :func:`~tvm_hetero.layers.classify.classify_bindings` calls kernels (form kernels included)."""
    from ..layers.classify import classify_bindings
    from ..layers.layered import placed_module

    mod = placed_module(model, devices, placement)
    kernels = {}
    for binding, info in classify_bindings(mod):
        if info is not None:
            gvar = binding.value.args[0]
            kernels.setdefault(gvar.name_hint, mod[gvar])
    return kernels


def built_cuda_kernels(model, arch: str = "sm_90"):
    """`model` built all on ``cuda@ARCH`` (no GPU needed), with each kernel built for cuda
    before and after scheduling: ``(compiled, {kernel: (unscheduled, scheduled)})`` in the
    placed module's order. Index checks, which run on the host CPU, are not among them.

    Raises
    ------
    ValueError
        When a scheduled cuda kernel has no unscheduled kernel of its name.
    """
    import tvm_hetero as th

    devices = th.DeviceSet.parse([f"cuda@{arch}"])
    placement = th.Placement.all_on(
        th.extract_layers(model, th.PrepareConfig.for_devices(devices)), devices.names[0])
    scheduled: dict = {}
    compiled = th.build(model, placement, devices, extra_passes=[keep_scheduled(scheduled)])
    on_cuda = {name for name, func in scheduled.items()
               if func.attrs is not None and "target" in func.attrs
               and func.attrs["target"].kind.name == "cuda"}
    originals = unscheduled_kernels(model, devices, placement)
    missing = sorted(on_cuda - set(originals))
    if missing:
        raise ValueError(f"no unscheduled kernel named {missing[0]} in the placed module")
    return compiled, {name: (func, scheduled[name]) for name, func in originals.items()
                      if name in on_cuda}


def load_checked_model(spec: str, input_shapes: dict | None = None):
    """The model a GPU check names: a suite model by name, or an ``.onnx`` file (a path) with
    the pins of `input_shapes` (``{input: dims}``) that name its inputs (the others are left
    for other files). Returns ``(name, Model)``: the suite name, or the file's name without
    ``.onnx``.

    Raises
    ------
    ValueError
        When `spec` is neither a suite model nor an existing ``.onnx`` file.
    """
    import os

    import tvm_hetero as th

    from .suite import SUITE

    if spec in SUITE:
        proto, _ = SUITE[spec]()
        return spec, th.load_model(proto, name=spec)
    if not (spec.endswith(".onnx") and os.path.isfile(spec)):
        raise ValueError(f"{spec!r} is neither a suite model nor an .onnx file")
    import onnx

    graph = onnx.load(spec, load_external_data=False).graph
    names = {i.name for i in graph.input} - {i.name for i in graph.initializer}
    pins = {k: tuple(v) for k, v in (input_shapes or {}).items() if k in names}
    name = os.path.basename(spec)[:-len(".onnx")]
    return name, th.load_model(spec, name=name, input_shapes=pins)


__all__ = ["ScheduledOnly", "built_cuda_kernels", "estimated_flops", "is_depthwise",
           "keep_scheduled", "load_checked_model", "unscheduled_kernels"]
