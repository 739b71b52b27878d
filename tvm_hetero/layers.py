"""Operator-level layers: one fused operator group (conv2d+bias+relu) is one layer.

:func:`tvm_hetero.prepare.prepare` lowers a model's Relax module to the *layered* form: every
``call_tir`` binding of ``main`` is one layer. ``extract_layers`` reads the layers of a layered
module, with their configuration and their predecessors (the layers form a DAG); the layer kinds
(``LAYER_KINDS``) key the optimization rules.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .errors import ModelError

logger = logging.getLogger(__name__)

OP_KINDS_ATTR = "tvm_hetero.op_kinds"

# op name (legalized PrimFunc name without its numeric suffix) -> layer kind
_KIND_BY_OP = {
    **dict.fromkeys(["conv1d", "conv2d", "conv3d", "conv1d_transpose", "conv2d_transpose",
                     "conv3d_transpose"], "conv2d"),
    **dict.fromkeys(["matmul", "dense", "linear", "batch_matmul", "einsum"], "matmul"),
    **dict.fromkeys(["max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d",
                     "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
                     "adaptive_avg_pool3d", "adaptive_max_pool2d", "lrn"], "pooling"),
    **dict.fromkeys(["sum", "mean", "max", "min", "prod", "variance", "std", "argmax", "argmin",
                     "cumsum", "cumprod"], "reduction"),
    **dict.fromkeys(["softmax", "log_softmax", "layer_norm", "batch_norm", "group_norm",
                     "instance_norm", "rms_norm"], "normalization"),
    # injective, though TVM marks the legalized layout transform opaque
    **dict.fromkeys(["layout_transform", "te_layout_transform"], "elementwise"),
}
LAYER_KINDS = ("conv2d", "matmul", "pooling", "reduction", "normalization", "elementwise",
               "other")
# TVM's op patterns (relay/op_attr_types): <= 2 elementwise/broadcast/injective, 3 reduction,
# 4 out-elementwise-fusable (conv, matmul), 8 opaque
_INJECTIVE_MAX = 2


@dataclass(frozen=True)
class TensorInfo:
    """Shape and dtype of one tensor."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * _dtype_bytes(self.dtype)


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
        Floating-point operations of one call (TVM's TIR estimate).
    param_bytes : int
        Bytes of the constants (weights) this layer reads.
    predecessors : list of str
        Names of the layers whose outputs this layer reads.
    model_inputs : list of str
        Names of the model inputs this layer reads.
    index : int
        Position in program order.
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

    @property
    def activation_bytes_in(self) -> int:
        return sum(t.nbytes for t in self.inputs)

    @property
    def activation_bytes_out(self) -> int:
        return sum(t.nbytes for t in self.outputs)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["inputs"] = [{"shape": list(t.shape), "dtype": t.dtype} for t in self.inputs]
        data["outputs"] = [{"shape": list(t.shape), "dtype": t.dtype} for t in self.outputs]
        data["activation_bytes_in"] = self.activation_bytes_in
        data["activation_bytes_out"] = self.activation_bytes_out
        return data


def _dtype_bytes(dtype: str) -> int:
    if dtype == "bool":
        return 1
    match = re.search(r"(\d+)(?:x(\d+))?$", dtype)
    bits = int(match.group(1)) * int(match.group(2) or 1) if match else 32
    return max(1, bits // 8)


def op_name(func_name: str) -> str:
    """``conv2d13`` -> ``conv2d``; ``max_pool2d1`` -> ``max_pool2d``."""
    base = func_name[len("fused_"):] if func_name.startswith("fused_") else func_name
    for name in sorted(_KIND_BY_OP, key=len, reverse=True):
        if re.fullmatch(re.escape(name) + r"\d*", base):
            return name
    return re.sub(r"\d+$", "", base)


# ----------------------------------------------------------------------------------------------
# the layered form of a model


def layered_module(model, config=None):
    """The layered form of a :class:`~tvm_hetero.Model`'s module, computed once per model and
    preparation config.

    Parameters
    ----------
    model : Model
    config : PrepareConfig, optional
        The preparation options (by default the host CPU's: ``PrepareConfig.for_host()``);
        flows that know their device set pass ``PrepareConfig.for_devices(devices)``, so that
        their layers are those a build for that set has.
    """
    from .prepare import PrepareConfig, prepare

    if is_layered(model.mod):
        return model.mod
    config = config or PrepareConfig.for_host()
    cached = model._layered if isinstance(model._layered, dict) else {}
    if config not in cached:
        cached[config] = prepare(model.mod, config)
        model._layered = cached
    return cached[config]


# ----------------------------------------------------------------------------------------------
# extraction

# bindings of a layered main that are not layers: structure the VM handles without kernels
_STRUCTURAL_OPS = ("relax.to_vdevice", "relax.hint_on_device", "relax.memory.view",
                   "relax.memory.ensure_zero_offset", "relax.builtin.stop_lift_params")


def main_bindings(mod):
    """All bindings of ``main``, in program order."""
    from tvm import relax

    main = mod["main"]
    if not isinstance(main.body, relax.SeqExpr):
        return []
    return [b for block in main.body.blocks for b in block.bindings]


def unlowered_calls(mod) -> list[str]:
    """The calls in ``main`` that are neither a ``call_tir`` nor structural: op names, or the
    names of (not yet fused into TIR) Relax functions."""
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    found = []
    for binding in main_bindings(mod):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            if not value.op.same_as(call_tir) and value.op.name not in _STRUCTURAL_OPS:
                found.append(value.op.name)
        elif isinstance(value, relax.Call):
            found.append(getattr(value.op, "name_hint", str(value.op)))
    return found


def is_layered(mod) -> bool:
    """Whether every op call in ``main`` is a ``call_tir`` (or structural): i.e. prepared."""
    return not unlowered_calls(mod)


def _tensor_infos(ty) -> list[TensorInfo]:
    from tvm import relax

    if isinstance(ty, relax.TensorType):
        if ty.shape is None:
            raise ModelError("a layer has a tensor of unknown shape; tvm_hetero needs static "
                             "shapes")
        return [TensorInfo(tuple(int(d) for d in ty.shape.values), str(ty.dtype))]
    if isinstance(ty, relax.TupleType):
        return [info for field_ty in ty.fields for info in _tensor_infos(field_ty)]
    return []


def classify_bindings(mod) -> list[tuple[Any, tuple[int, str, list[str]] | None]]:
    """Each binding of ``main`` in program order, with ``(index, layer name, op kinds)`` when it
    is a layer and ``None`` when it is structure (tuples, aliases, copies).

    This is the one place that decides which bindings are layers and what they are called, so
    that :func:`extract_layers` and the :class:`~tvm_hetero.AnnotateDevice` pass agree.
    """
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    counts: Counter = Counter()
    out = []
    for binding in main_bindings(mod):
        value = binding.value
        if isinstance(value, relax.Call) and value.op.same_as(call_tir):
            func = mod[value.args[0]]
            kinds = _op_kinds_of(func, value.args[0].name_hint)
            anchor = _anchor_op(func, kinds)
            index = sum(1 for _, info in out if info is not None)
            out.append((binding, (index, f"{anchor}_{counts[anchor]}", kinds)))
            counts[anchor] += 1
        else:
            out.append((binding, None))
    return out


def _op_kinds_of(func, gv_name: str) -> list[str]:
    kinds = func.attrs.get(OP_KINDS_ATTR) if func.attrs is not None else None
    return [str(k) for k in kinds] if kinds else [op_name(gv_name)]


def _anchor_op(func, kinds: list[str]) -> str:
    """The op that names a layer: its first conv/matmul/pool/reduction/norm, else its first."""
    for kind in kinds:
        if kind in _KIND_BY_OP:
            return kind
    return kinds[0]


def _layer_kind(func, kinds: list[str]) -> str:
    for kind in kinds:
        if kind in _KIND_BY_OP:
            return _KIND_BY_OP[kind]
    pattern = func.attrs.get("op_pattern") if func.attrs is not None else None
    if pattern is None or int(pattern) <= _INJECTIVE_MAX:
        return "elementwise"
    return "other"


def kernel_kind(func, name: str = "") -> str:
    """The layer kind (one of ``LAYER_KINDS``) of a layer's PrimFunc."""
    return _layer_kind(func, _op_kinds_of(func, name))


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

    from .prepare import prepare

    mod = layered_module(mod, config) if hasattr(mod, "mod") else mod
    if not is_layered(mod):
        mod = prepare(mod, config)
    producers: dict[Any, list[str]] = {}  # var -> layers whose outputs it holds
    params = {p: p.name for p in mod["main"].params}
    flops_cache: dict[str, float] = {}
    layers: list[Layer] = []

    def sources(expr) -> tuple[list[str], list[str]]:
        """(producing layers, model inputs) of the vars an expression reads."""
        preds, inputs = [], []
        for var in relax.analysis.free_vars(expr):
            if var in params:
                inputs.append(params[var])
            preds.extend(producers.get(var, []))
        return list(dict.fromkeys(preds)), list(dict.fromkeys(inputs))

    for binding, info in classify_bindings(mod):
        if info is None:
            preds, _ = sources(binding.value)
            producers[binding.var] = preds
            continue
        index, name, kinds = info
        call = binding.value
        gv = call.args[0]
        func = mod[gv]
        act_inputs, param_bytes = [], 0
        for arg in call.args[1].fields:
            if isinstance(arg, tvm.ir.GenericConst):
                param_bytes += sum(t.nbytes for t in _tensor_infos(arg.ty))
            else:
                act_inputs.extend(_tensor_infos(arg.ty))
        if gv.name_hint not in flops_cache:
            try:
                flops_cache[gv.name_hint] = float(estimate_tir_flops(tvm.IRModule({gv: func})))
            except Exception as err:  # the estimator rejects some loop forms
                logger.debug("no FLOP estimate for %s: %s", gv.name_hint, err)
                flops_cache[gv.name_hint] = 0.0
        preds, model_inputs = sources(call.args[1])
        layers.append(Layer(
            name=name, kind=_layer_kind(func, kinds), op_kinds=kinds, func_name=gv.name_hint,
            inputs=act_inputs, outputs=_tensor_infos(binding.var.ty),
            flops=flops_cache[gv.name_hint], param_bytes=param_bytes, predecessors=preds,
            model_inputs=model_inputs, index=index,
        ))
        producers[binding.var] = [name]
    if not layers:
        raise ModelError("the model has no layers (no operator in 'main')")
    return layers


def layers_table(layers: list[Layer]) -> str:
    """A fixed-width text table of layers, for the CLI and logs."""
    rows = [("#", "layer", "kind", "ops", "output", "MFLOP", "params KiB", "act in/out KiB",
             "predecessors")]
    for layer in layers:
        out = ",".join("x".join(map(str, t.shape)) for t in layer.outputs)
        rows.append((str(layer.index), layer.name, layer.kind, "+".join(layer.op_kinds), out,
                     f"{layer.flops / 1e6:.2f}", f"{layer.param_bytes / 1024:.1f}",
                     f"{layer.activation_bytes_in / 1024:.1f}/"
                     f"{layer.activation_bytes_out / 1024:.1f}",
                     ",".join(layer.predecessors + layer.model_inputs) or "-"))
    widths = [min(max(len(r[i]) for r in rows), 40) for i in range(len(rows[0]))]

    def fmt(row):
        return "  ".join(cell[:40].ljust(w) for cell, w in zip(row, widths)).rstrip()

    total_flops = sum(layer.flops for layer in layers)
    total_params = sum(layer.param_bytes for layer in layers)
    return "\n".join([fmt(rows[0])] + [fmt(r) for r in rows[1:]] + [
        f"{len(layers)} layers, {total_flops / 1e6:.1f} MFLOP, "
        f"{total_params / 2**20:.2f} MiB of parameters"])
