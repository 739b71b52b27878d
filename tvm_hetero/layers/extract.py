"""Operator-level layers: one fused operator group (conv2d+bias+relu) is one layer.

:func:`tvm_hetero.prepare.prepare` lowers a model's Relax module to the *layered* form: every
``call_tir`` binding of ``main`` is one layer (:mod:`tvm_hetero.layers.layered` keeps it per model).
``extract_layers`` reads the layers of a layered module, with their configuration and their
predecessors (the layers form a DAG); which bindings are layers, their names and their kinds
(``LAYER_KINDS``, which key the optimization rules) are :mod:`tvm_hetero.layers.classify`'s.
"""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import ModelError
from ..relax_ir import bounded_dim, bounded_kernel, is_layered, upper_bounds
from .classify import classify_bindings, layer_kind
from .layered import layered_module

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TensorInfo:
    """Shape and dtype of one tensor; for a dynamic one, `shape` at the tuning point of the
    model's shape ranges and `max_shape` at their maximum."""

    shape: tuple[int, ...]
    dtype: str
    max_shape: tuple[int, ...] | None = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * _dtype_bytes(self.dtype)

    @property
    def max_nbytes(self) -> int:
        """Bytes at the maximum of the shape ranges (what a memory cap is checked at)."""
        shape = self.shape if self.max_shape is None else self.max_shape
        return int(np.prod(shape, dtype=np.int64)) * _dtype_bytes(self.dtype)


@dataclass
class Layer:
    """One operator-level layer (a fused operator group).

    Attributes
    ----------
    name : str
        Stable name: the anchor op and its ordinal among layers of that op (``conv2d_3``).
    kind : str
        One of ``LAYER_KINDS``: the key of per-layer-kind optimization rules.
    op_kinds : list of str
        The ops fused into this layer, in order (``["conv2d", "add", "relu"]``).
    func_name : str
        The PrimFunc this layer calls.
    inputs, outputs : list of TensorInfo
        Activation tensors in (weights excluded) and out.
    flops : float
        Floating-point operations of one call (TVM's TIR estimate); for a model with shape
        ranges, at their tuning point (as are the shapes of `inputs` and `outputs`; their
        ``max_shape`` is at the ranges' maximum).
    param_bytes : int
        Bytes of the constants (weights) this layer reads.
    predecessors : list of str
        Names of the layers whose outputs this layer reads.
    model_inputs : list of str
        Names of the model inputs this layer reads.
    index : int
        Position in program order.
    params : dict of str to int
        The constants this layer reads, by a key unique in the model (``c0``, ``c1``, ... in
        program order), with their bytes: layers that read the same constant (an unrolled
        recurrent layer's weights, tied embeddings) name the same key, and one device holds it
        once (`distinct_param_bytes`). Empty for a layer built without keys: its
        `param_bytes` then count as its own.
    """

    name: str
    kind: str
    op_kinds: list[str]
    func_name: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    flops: float
    param_bytes: int
    predecessors: list[str] = field(default_factory=list)
    model_inputs: list[str] = field(default_factory=list)
    index: int = 0
    params: dict[str, int] = field(default_factory=dict)

    @property
    def activation_bytes_in(self) -> int:
        return sum(t.nbytes for t in self.inputs)

    @property
    def activation_bytes_out(self) -> int:
        return sum(t.nbytes for t in self.outputs)

    @property
    def max_activation_bytes(self) -> int:
        """Bytes in and out at the maximum of the model's shape ranges (memory caps)."""
        return sum(t.max_nbytes for t in [*self.inputs, *self.outputs])

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["inputs"] = [_tensor_json(t) for t in self.inputs]
        data["outputs"] = [_tensor_json(t) for t in self.outputs]
        data["activation_bytes_in"] = self.activation_bytes_in
        data["activation_bytes_out"] = self.activation_bytes_out
        return data


def _tensor_json(t: TensorInfo) -> dict[str, Any]:
    out = {"shape": list(t.shape), "dtype": t.dtype}
    if t.max_shape is not None:
        out["max_shape"] = list(t.max_shape)
    return out


def distinct_params(layers) -> dict[str, int]:
    """The constants `layers` read together, each once: key -> bytes (see ``Layer.params``)."""
    out: dict[str, int] = {}
    for layer in layers:
        if layer.params:
            out.update(layer.params)
        elif layer.param_bytes:
            out[f"{layer.name}/params"] = layer.param_bytes
    return out


def distinct_param_bytes(layers) -> int:
    """Bytes of the constants `layers` read, a constant read by several of them once."""
    return sum(distinct_params(layers).values())


def _dtype_bytes(dtype: str) -> int:
    if dtype == "bool":
        return 1
    match = re.search(r"(\d+)(?:x(\d+))?$", dtype)
    bits = int(match.group(1)) * int(match.group(2) or 1) if match else 32
    return max(1, bits // 8)



def _tensor_infos(ty, bounds: dict[str, int] | None = None,
                  max_bounds: dict[str, int] | None = None) -> list[TensorInfo]:
    """Shapes and dtypes of a type's tensors; a symbolic dimension counts as its value in
    `bounds` (a range's tuning point, an output shape's upper bound), or 1 where it has none,
    and in ``max_shape`` as its value in `max_bounds` (when given)."""
    import tvm
    from tvm import relax

    if isinstance(ty, relax.TensorType):
        if ty.shape is None:
            raise ModelError("a layer has a tensor of unknown rank; tvm_hetero needs known "
                             "shapes")
        dims, max_dims = [], []
        for dim in ty.shape.values:
            if isinstance(dim, tvm.tirx.IntImm):
                dims.append(int(dim))
                max_dims.append(int(dim))
            else:
                dims.append(int(bounded_dim(dim, bounds or {})))
                max_dims.append(int(bounded_dim(dim, max_bounds or bounds or {})))
        max_shape = tuple(max_dims) if max_dims != dims else None
        return [TensorInfo(tuple(dims), str(ty.dtype), max_shape)]
    if isinstance(ty, relax.TupleType):
        return [info for field_ty in ty.fields
                for info in _tensor_infos(field_ty, bounds, max_bounds)]
    return []



def extract_layers(mod, config=None) -> list[Layer]:
    """The operator-level layers of a model, in program order.

    Parameters
    ----------
    mod : tvm.IRModule or Model
        A Relax module (prepared with :func:`~tvm_hetero.prepare.prepare` or not; unprepared
        ones are prepared first, without modifying the input) or a loaded
        :class:`~tvm_hetero.Model`.
    config : PrepareConfig, optional
        How an unprepared module or a model is prepared (by default for the host CPU): pass
        ``PrepareConfig.for_devices(devices)`` to get the layers a build for `devices` has.

    Returns
    -------
    list of Layer
        One per fused operator group, with shapes, FLOPs, parameter bytes and predecessors.
    """
    import tvm
    from tvm import relax
    from tvm.s_tir.analysis import estimate_tir_flops

    from ..prepare import prepare

    mod = layered_module(mod, config) if hasattr(mod, "mod") else mod
    if not is_layered(mod):
        mod = prepare(mod, config)
    producers: dict[Any, list[str]] = {}  # var -> layers whose outputs it holds
    carried: dict[Any, list[str]] = {}  # var of a structural binding -> model inputs it reads
    params = {p: p.name for p in mod["main"].params}
    flops_cache: dict[str, float] = {}
    layers: list[Layer] = []
    from ..frontend.shape_ranges import module_ranges, point

    # a range's dimensions at its tuning point (FLOPs, bytes) and at its maximum (memory caps)
    ranges = module_ranges(mod)
    max_bounds = {**upper_bounds(mod), **point(ranges, "max")}
    bounds = {**upper_bounds(mod), **point(ranges, "opt")}
    constant_keys: dict[Any, str] = {}  # constant -> its key, in program order

    def sources(expr) -> tuple[list[str], list[str]]:
        """(producing layers, model inputs) of the vars an expression reads."""
        preds, inputs = [], []
        for var in relax.analysis.free_vars(expr):
            if var in params:
                inputs.append(params[var])
            inputs.extend(carried.get(var, []))  # through a host builtin, a tuple, a cast
            preds.extend(producers.get(var, []))
        return list(dict.fromkeys(preds)), list(dict.fromkeys(inputs))

    for binding, info in classify_bindings(mod):
        if info is None or info.form_kernel:  # structure, or a form's layout transform
            producers[binding.var], carried[binding.var] = sources(binding.value)
            continue
        index, name, kinds = info.index, info.name, info.op_kinds
        call = binding.value
        gv = call.args[0]
        func = mod[gv]
        act_inputs, constants = [], {}
        for arg in call.args[1].fields:
            if isinstance(arg, tvm.ir.GenericConst):
                key = constant_keys.setdefault(arg, f"c{len(constant_keys)}")
                constants[key] = sum(t.nbytes for t in _tensor_infos(arg.ty))
            else:
                act_inputs.extend(_tensor_infos(arg.ty, bounds, max_bounds))
        if gv.name_hint not in flops_cache:
            try:
                flops_cache[gv.name_hint] = float(estimate_tir_flops(tvm.IRModule(
                    {gv: bounded_kernel(func, bounds)})))
            except Exception as err:  # the estimator rejects some loop forms
                logger.debug("no FLOP estimate for %s: %s", gv.name_hint, err)
                flops_cache[gv.name_hint] = 0.0
        preds, model_inputs = sources(call.args[1])
        layers.append(Layer(
            name=name, kind=layer_kind(func, kinds), op_kinds=kinds, func_name=gv.name_hint,
            inputs=act_inputs, outputs=_tensor_infos(binding.var.ty, bounds, max_bounds),
            flops=flops_cache[gv.name_hint], param_bytes=sum(constants.values()),
            predecessors=preds, model_inputs=model_inputs, index=index, params=constants,
        ))
        producers[binding.var] = [name]
    if not layers:
        raise ModelError("the model has no layers (no operator in 'main')")
    return layers
