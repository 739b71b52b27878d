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
    (``tvm.s_tir.analysis.estimate_tir_flops``): compared before and after scheduling, it
    shows recomputation."""
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    return float(estimate_tir_flops(tvm.IRModule({"main": func})))


def is_depthwise(func) -> bool:
    """Whether a convolution kernel's weight (its second buffer) has one input channel per
    group and several outputs: a depthwise convolution."""
    shapes = [param.ty.shape for param in func.params
              if getattr(param.ty, "shape", None) is not None]
    return len(shapes) > 1 and len(shapes[1]) == 4 and int(shapes[1][1]) == 1 \
        and int(shapes[1][0]) > 1


def unscheduled_kernels(model, devices, placement) -> dict:
    """The kernels of `model` placed by `placement` as they are before scheduling
    (``{name: PrimFunc}``, the names of :func:`keep_scheduled`'s): each layer's kernel in the
    form of its device (:func:`~tvm_hetero.layered.placed_module`), the ones
    :func:`~tvm_hetero.classify.classify_bindings` calls kernels (form kernels included)."""
    from ..classify import classify_bindings
    from ..layered import placed_module

    mod = placed_module(model, devices, placement)
    kernels = {}
    for binding, info in classify_bindings(mod):
        if info is not None:
            gvar = binding.value.args[0]
            kernels.setdefault(gvar.name_hint, mod[gvar])
    return kernels


__all__ = ["ScheduledOnly", "estimated_flops", "is_depthwise", "keep_scheduled",
           "unscheduled_kernels"]
