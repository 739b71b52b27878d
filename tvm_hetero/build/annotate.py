"""The AnnotateDevice pass: give every layer of a layered Relax module its device.

Runs on a *layered* module (see :func:`tvm_hetero.prepare`): every ``call_tir`` binding of
``main`` is a layer. For a placement ``{layer: device}`` it

- registers one ``VDevice`` per device the placement uses (global info ``"vdevice"``, in the
  device set's order: the VM's device order);
- gives each layer's output type the layer's vdevice and its PrimFunc the device's target
  (a PrimFunc shared by layers on two devices is duplicated, one copy per target);
- gives each model input the vdevice of its first consumer;
- inserts ``to_vdevice`` where a layer reads a tensor that lives on another device, once per
  (tensor, device): the only copies the placed module makes;
- constants (weights) are loaded by the VM onto the first device; a constant read on another
  device is copied there with ``to_vdevice`` (``lift_weights=False``, self-contained module), or
  lifted out of ``main`` into a ``hetero_weights()`` function that the caller runs once
  (``lift_weights=True``, what :func:`tvm_hetero.build` does: no per-inference weight copy).

``RealizeVDevice`` then propagates the vdevices to the remaining bindings. The input module is
never modified; an all-on-one-device placement inserts no copy.
"""

from __future__ import annotations

import logging
import re

import tvm

from ..errors import PlacementError
from ..layers.classify import classify_bindings
from ..relax_ir import HOST_ALLOCATING, host_builtin, is_layered, substitute_vars

logger = logging.getLogger(__name__)

WEIGHTS_FUNC = "hetero_weights"


def _import_tvm():
    import tvm
    from tvm import relax

    return tvm, relax


class _Rewrite:
    """Rebuilds ``main`` of a layered module for a placement (one instance per run)."""

    def __init__(self, mod, placement, devices, lift_weights: bool):
        tvm, relax = _import_tvm()
        self.tvm, self.relax = tvm, relax
        self.mod = mod
        self.lift_weights = lift_weights
        self.classified = classify_bindings(mod)
        names = list(dict.fromkeys(info.name for _, info in self.classified
                                   if info is not None))
        placement.validate(names, devices)
        self.devices = devices = used_devices(placement, devices)
        self.vdevices = [relax.VDevice(dev.tvm_target(), dev.device_id, "global")
                         for dev in devices]
        # a form kernel (a layout transform of a CPU form) runs where the layer it serves does
        self.layer_device = {info.name: devices.index(placement[info.name])
                             for _, info in self.classified if info is not None}
        # the callees' types come from the builder's module, which starts as a copy of `mod`
        self.bb = relax.BlockBuilder(tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs))
        self.func_copies: dict[tuple[str, int], object] = {}
        self.var_map: dict = {}
        self.dev_of: dict = {}  # new var -> device index
        self.tuple_fields: dict = {}  # new var bound to a Tuple literal -> its new fields
        self.copies: dict = {}  # (new var, device) -> copied var
        self.lifted: list = []  # (constant, device) lifted into hetero_weights
        self.lifted_params: dict = {}

    # -- helpers ---------------------------------------------------------------------------
    def _callee_for(self, gv, device: int):
        """The PrimFunc global var to call for a layer on `device` (target attached)."""
        key = (gv.name_hint, device)
        if key in self.func_copies:
            return self.func_copies[key]
        func = self.mod[gv]
        target = self.vdevices[device].target
        func = func.with_attr("target", target)
        if not any(name == gv.name_hint for name, _ in self.func_copies):
            self.bb.update_func(gv, func)
            new_gv = gv
        else:  # the same kernel on a second device: one copy per target
            safe = re.sub(r"[^A-Za-z0-9_]", "_", self.devices[device].name)
            new_gv = self.bb.add_func(func, f"{gv.name_hint}_{safe}")
        self.func_copies[key] = new_gv
        return new_gv

    def _with_vdevice(self, ty, device: int):
        relax = self.relax
        if isinstance(ty, relax.TensorType):
            return relax.TensorType(ty.shape, ty.dtype, self.vdevices[device])
        if isinstance(ty, relax.TupleType):
            return relax.TupleType([self._with_vdevice(f, device) for f in ty.fields])
        return ty

    def _device_of_expr(self, expr):
        """Device index of a (new) expression, or None when unknown or mixed."""
        relax = self.relax
        if isinstance(expr, relax.Var):
            return self.dev_of.get(expr)
        if isinstance(expr, relax.TupleGetItem) and expr.tuple_value in self.tuple_fields:
            return self._device_of_expr(self.tuple_fields[expr.tuple_value][expr.index])
        if isinstance(expr, relax.Call) and host_builtin(expr) in HOST_ALLOCATING:
            return None
        found = {self.dev_of.get(v) for v in relax.analysis.free_vars(expr)}
        return found.pop() if len(found) == 1 else None

    def _value_device(self, value, name: str):
        """Device index of a bound (new) value that is no layer; None when unknown."""
        builtin = host_builtin(value)
        if builtin in HOST_ALLOCATING:
            # numpy inside the VM: the result is allocated on the host CPU whatever the
            # devices, so each layer reading it gets its own copy (device unknown: None)
            logger.info("%s (%s) runs on the host CPU inside the VM; its output is copied to "
                        "the device of each layer that reads it", name, builtin)
            return None
        return self._device_of_expr(value)

    def _on_device(self, bb, expr, device: int):
        """`expr` (already remapped) as a value on `device`, copying at most once."""
        tvm, relax = self.tvm, self.relax
        if isinstance(expr, tvm.ir.GenericConst):
            if device == 0:
                return expr  # the VM loads constants onto the first device
            if self.lift_weights:
                return self.lifted_params[(expr, device)]
            key = (expr, device)
        elif isinstance(expr, relax.Var) and isinstance(expr.ty, (relax.TensorType,
                                                                  relax.TupleType)):
            if self.dev_of.get(expr) == device:
                return expr
            key = (expr, device)
        else:
            return expr  # shapes and prim values (symbolic dimensions) need no device
        if key not in self.copies:
            self.copies[key] = bb.emit(relax.op.to_vdevice(expr, self.vdevices[device]))
            if isinstance(expr, relax.Var):
                self.dev_of[self.copies[key]] = device
        return self.copies[key]

    # -- the rewrite -----------------------------------------------------------------------
    def _first_consumer_devices(self):
        """Input var -> device of its first consuming layer; (constant, device) pairs read
        on devices other than the first."""
        relax, tvm = self.relax, self.tvm
        params = set(self.mod["main"].params)
        first: dict = {}
        consts: list = []
        for binding, info in self.classified:
            if info is None:
                continue
            device = self.layer_device[info.name]
            for arg in binding.value.args[1].fields:
                if isinstance(arg, relax.Var) and arg in params and arg not in first:
                    first[arg] = device
                if isinstance(arg, tvm.ir.GenericConst) and device != 0 and \
                        not any(c.same_as(arg) and d == device for c, d in consts):
                    consts.append((arg, device))
        return first, consts

    def run(self):
        tvm, relax = self.tvm, self.relax
        main_gv = self.mod.get_global_var("main")
        main = self.mod["main"]
        first, consts = self._first_consumer_devices()
        bb = self.bb
        new_params = []
        for param in main.params:
            device = first.get(param, 0)
            new = relax.Var(param.name, self._with_vdevice(param.ty, device))
            self.var_map[param] = new
            self.dev_of[new] = device
            new_params.append(new)
        if self.lift_weights:
            for index, (const, device) in enumerate(consts):
                var = relax.Var(f"w{index}_{device}", self._with_vdevice(const.ty, device))
                self.lifted.append((const, device))
                self.lifted_params[(const, device)] = var
                self.dev_of[var] = device
                new_params.append(var)
        attrs = dict(main.attrs) if main.attrs is not None else {}
        attrs["num_input"] = len(main.params)
        with bb.function("__hetero_main", new_params, attrs=attrs):
            infos = iter(info for _, info in self.classified)  # program order, as the blocks
            for block in main.body.blocks:
                if isinstance(block, relax.DataflowBlock):
                    with bb.dataflow():
                        for binding in block.bindings:
                            self._emit(bb, binding, next(infos))
                else:
                    for binding in block.bindings:
                        self._emit(bb, binding, next(infos))
            ret = substitute_vars(main.body.body, self.var_map)
            bb.emit_func_output(ret)
        if self.lift_weights:
            self._emit_weights_function()
        built = bb.get()
        functions = {gv: func for gv, func in built.functions_items()
                     if gv.name_hint not in ("main", "__hetero_main")}
        functions[main_gv] = built["__hetero_main"].with_attr("global_symbol", "main")
        out = tvm.IRModule(functions, attrs=self.mod.attrs)
        out.update_global_info("vdevice", self.vdevices)
        return out

    def _emit(self, bb, binding, info):
        relax = self.relax
        is_output = not isinstance(binding.var, relax.DataflowVar)
        emit = bb.emit_output if (is_output and bb.current_block_is_dataflow()) else bb.emit
        if isinstance(binding, relax.MatchCast):
            value = substitute_vars(binding.value, self.var_map)
            new = bb.match_cast(value, binding.ty, binding.var.name)
            if is_output and bb.current_block_is_dataflow():
                new = bb.emit_output(new, name_hint=binding.var.name)
            self.var_map[binding.var] = new
            self.dev_of[new] = self._value_device(value, binding.var.name)
            return new
        if info is None:
            value = substitute_vars(binding.value, self.var_map)
            new = emit(value, name_hint=binding.var.name)
            self.var_map[binding.var] = new
            if isinstance(value, relax.Tuple):
                self.tuple_fields[new] = list(value.fields)
            self.dev_of[new] = self._value_device(value, binding.var.name)
            return new
        device = self.layer_device[info.name]
        call = binding.value
        args = [self._on_device(bb, substitute_vars(arg, self.var_map), device)
                for arg in call.args[1].fields]
        out_ty = self._with_vdevice(call.ty_args[0] if len(call.ty_args) else call.ty, device)
        if isinstance(out_ty, relax.TupleType):
            out_ty = list(out_ty.fields)
        callee = self._callee_for(call.args[0], device)
        new_call = relax.call_tir(callee, args, out_ty)
        if len(call.args) > 2:  # the symbolic dimensions the kernel takes (tir_vars)
            new_call = relax.Call(new_call.op, [*new_call.args, call.args[2]], new_call.attrs,
                                  new_call.ty_args)
        new = emit(new_call, name_hint=binding.var.name)
        self.var_map[binding.var] = new
        self.dev_of[new] = device
        return new

    def _emit_weights_function(self):
        relax, bb = self.relax, self.bb
        with bb.function(WEIGHTS_FUNC, [], attrs={"global_symbol": WEIGHTS_FUNC}):
            copies = [bb.emit(relax.op.to_vdevice(const, self.vdevices[device]))
                      for const, device in self.lifted]
            bb.emit_func_output(relax.Tuple(copies))


def used_devices(placement, devices):
    """The devices a placement uses, in device-set order: the module's vdevices and the VM's
    device list (a device no layer uses is not part of the executable)."""
    from ..devices import DeviceSet

    used = set(placement.assignment.values())
    return DeviceSet([dev for dev in devices if dev.name in used])


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.AnnotateDevice")
class AnnotateDevice:
    """The pass that annotates every layer with its device; it returns a new module.

    Parameters
    ----------
    placement : Placement
        ``{layer name: device name}`` for every layer (names as :func:`extract_layers` gives).
    devices : DeviceSet
        The devices; their order is the VM's device order.
    lift_weights : bool
        Lift weights read on devices other than the first into ``hetero_weights()``, which
        returns them on their devices; ``main`` then takes them after the model inputs.

    Raises
    ------
    PlacementError
        When run on a module that is not layered, or whose layers or devices the placement
        does not match.
    """

    def __init__(self, placement, devices, lift_weights: bool = False):
        self.placement = placement
        self.devices = devices
        self.lift_weights = lift_weights

    def transform_module(self, mod, _ctx):
        if not is_layered(mod):
            raise PlacementError("AnnotateDevice needs a layered module (every op of 'main' a "
                                 "call_tir): run tvm_hetero.prepare(mod) first")
        return _Rewrite(mod, self.placement, self.devices, self.lift_weights).run()
