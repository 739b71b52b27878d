"""The layered form of a model (:mod:`tvm_hetero.prepare`: every ``call_tir`` binding of
``main`` one layer), made once per model and preparation config and kept on the model:
:func:`layered_module` (every layer in the CPU forms) and :func:`placed_module` (each layer in
the form of the device a placement puts it on).
"""

from __future__ import annotations

import logging

from .._native import native_log_to_logging
from ..relax_ir import is_layered

logger = logging.getLogger(__name__)


@native_log_to_logging()
def layered_module(model, config=None):
    """The layered form of a :class:`~tvm_hetero.Model`'s module, every layer in the CPU forms
    of `config`, computed once per model and preparation config.

    Parameters
    ----------
    model : Model
    config : PrepareConfig, optional
        The preparation options (by default the host CPU's: ``PrepareConfig.for_host()``);
        flows that know their device set pass ``PrepareConfig.for_devices(devices)``, so that
        their layers are those a build for that set has. The layer names are the same for
        every config (:func:`placed_module`).
    """
    from ..prepare import PrepareConfig

    if is_layered(model.mod):
        return model.mod
    return layer_forms(model, config or PrepareConfig.for_host()).cpu_form()


def layer_forms(model, config):
    """The model's :class:`~tvm_hetero.prepare.device_forms.LayerForms` for `config`, kept on
    the model (``model._layered``, by config)."""
    from ..prepare.device_forms import LayerForms

    cached = model._layered if isinstance(model._layered, dict) else {}
    if config not in cached:
        cached[config] = LayerForms(model.mod, config)
        model._layered = cached
    return cached[config]


@native_log_to_logging()
def placed_module(model, devices, placement):
    """The layered form of a model in which each layer has the form of the device `placement`
    puts it on: on a CPU the forms of ``PrepareConfig.for_devices(devices)`` (the set's widest
    CPU: channel padding, the blocked layout, Winograd), elsewhere (a GPU) the model's own form.
    Its layers have the names of :func:`~tvm_hetero.layers.extract.extract_layers` for any device
    set; the layout transforms between the forms are form kernels that run with the CPU layer
    they serve.

    Where the forms cannot be mixed with the names kept (a model whose own graph has layout
    transforms, or one whose fusion the forms change), every layer takes the CPU forms, with
    one warning.

    Parameters
    ----------
    model : Model
    devices : DeviceSet
        The whole device set (the CPU forms follow it, not only the devices used).
    placement : Placement
    """
    from ..devices import DeviceSet
    from ..prepare import PrepareConfig
    from ..prepare.device_forms import FormsMismatch

    if is_layered(model.mod):
        return model.mod
    devices = devices if isinstance(devices, DeviceSet) else DeviceSet.parse(devices)
    forms = layer_forms(model, PrepareConfig.for_devices(devices))
    off_cpu = {name for name, device in placement.assignment.items()
               if device in devices.names and devices[device].family != "cpu"}
    try:
        return forms.placed(off_cpu)
    except FormsMismatch as err:
        log = logger.debug if forms.warned else logger.warning
        forms.warned = True
        log("%s: every layer runs the CPU forms (their layers do not match the "
                       "model's own form: %s)", model.name, err)
        return forms.cpu_form()


def cpu_only_layers(mod) -> set[str]:
    """Names of the layers of a layered module that only a CPU can run: the frontend's
    run-time index checks (an ``assert`` per index, raised as the VM call's error: a GPU
    kernel has no such error path, and the check written for the host would read device
    memory from the host)."""
    from ..frontend.onnx.index_guard import BOUNDS_PARAM_ATTR
    from .classify import classify_bindings

    names = set()
    for binding, info in classify_bindings(mod):
        if info is None:
            continue
        attrs = mod[binding.value.args[0]].attrs
        if attrs is not None and BOUNDS_PARAM_ATTR in attrs:
            names.add(info.name)
    return names


def host_cpu(devices):
    """The device index checks run on for a :class:`~tvm_hetero.DeviceSet`: its first CPU, or
    when it has none the host CPU (``cpu``, or ``host`` where a device of the set is called
    ``cpu``), which every CUDA executable has anyway."""
    from ..devices import parse_device

    found = next((device for device in devices if device.family == "cpu"), None)
    if found is not None:
        return found
    host = parse_device("cpu")
    if host.name in devices.names:
        host = parse_device("host=cpu")
    return host


def cpu_only_on_a_cpu(placement, mod, devices):
    """`placement` with the layers of `mod` that only a CPU can run (:func:`cpu_only_layers`)
    moved from any other device to :func:`host_cpu`, and the device set extended with it
    where it was not in it: ``(placement, devices)``, both unchanged when none moves."""
    from ..devices import DeviceSet
    from ..placement import Placement

    moved = sorted(name for name in cpu_only_layers(mod)
                   if devices[placement[name]].family != "cpu")
    if not moved:
        return placement, devices
    cpu = host_cpu(devices)
    if cpu.name not in devices.names:
        devices = DeviceSet([*devices, cpu])
    logger.info("%d index-check layer(s) placed off the CPU run on %s: %s", len(moved),
                cpu.name, ", ".join(moved))
    return (Placement({**placement.assignment, **{name: cpu.name for name in moved}},
                      placement.model, dict(placement.meta)), devices)
