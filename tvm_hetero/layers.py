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
from typing import Any, NamedTuple

import numpy as np

from ._native import native_log_to_logging
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

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["inputs"] = [{"shape": list(t.shape), "dtype": t.dtype} for t in self.inputs]
        data["outputs"] = [{"shape": list(t.shape), "dtype": t.dtype} for t in self.outputs]
        data["activation_bytes_in"] = self.activation_bytes_in
        data["activation_bytes_out"] = self.activation_bytes_out
        return data


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


def op_name(func_name: str) -> str:
    """``conv2d13`` -> ``conv2d``; ``max_pool2d1`` -> ``max_pool2d``."""
    base = func_name[len("fused_"):] if func_name.startswith("fused_") else func_name
    for name in sorted(_KIND_BY_OP, key=len, reverse=True):
        if re.fullmatch(re.escape(name) + r"\d*", base):
            return name
    return re.sub(r"\d+$", "", base)


# ----------------------------------------------------------------------------------------------
# the layered form of a model


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
    from .prepare import PrepareConfig

    if is_layered(model.mod):
        return model.mod
    return _layer_forms(model, config or PrepareConfig.for_host()).cpu_form()


def _layer_forms(model, config):
    """The model's :class:`~tvm_hetero.prepare.device_forms.LayerForms` for `config`, kept on
    the model (``model._layered``, by config)."""
    from .prepare.device_forms import LayerForms

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
    Its layers have the names of :func:`extract_layers` for any device set; the layout
    transforms between the forms are form kernels that run with the CPU layer they serve.

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
    from .devices import DeviceSet
    from .prepare import PrepareConfig
    from .prepare.device_forms import FormsMismatch

    if is_layered(model.mod):
        return model.mod
    devices = devices if isinstance(devices, DeviceSet) else DeviceSet.parse(devices)
    forms = _layer_forms(model, PrepareConfig.for_devices(devices))
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


# ----------------------------------------------------------------------------------------------
# extraction

# bindings of a layered main that are not layers: structure the VM handles without kernels
_STRUCTURAL_OPS = ("relax.to_vdevice", "relax.hint_on_device", "relax.memory.view",
                   "relax.memory.ensure_zero_offset", "relax.builtin.stop_lift_params")
#: run-time functions that TVM's legalization calls (``call_pure_packed``) for the ops whose
#: output shape depends on input values: they run on the host CPU inside the VM (numpy for
#: nonzero and unique), allocate their output there, and are no layer (no kernel to place)
HOST_BUILTINS = ("relax.run.nonzero", "relax.run.unique", "vm.builtin.tensor_to_shape")
#: those of HOST_BUILTINS that return tensors (allocated on the host CPU: cpu(0))
HOST_ALLOCATING = ("relax.run.nonzero", "relax.run.unique")
#: the ``main`` attribute with the upper bounds of its symbolic dimensions (TVM's own)
UPPER_BOUND_ATTR = "tir_var_upper_bound"


def main_bindings(mod):
    """All bindings of ``main``, in program order."""
    from tvm import relax

    main = mod["main"]
    if not isinstance(main.body, relax.SeqExpr):
        return []
    return [b for block in main.body.blocks for b in block.bindings]


def host_builtin(value) -> str | None:
    """The name of the :data:`HOST_BUILTINS` function a binding's value calls, else None."""
    import tvm
    from tvm import relax

    if (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
            and value.op.name == "relax.call_pure_packed" and value.args
            and isinstance(value.args[0], relax.ExternFunc)
            and str(value.args[0].global_symbol) in HOST_BUILTINS):
        return str(value.args[0].global_symbol)
    return None


def unlowered_calls(mod) -> list[str]:
    """The calls in ``main`` that are neither a ``call_tir``, structural nor a host builtin:
    op names, or the names of (not yet fused into TIR) Relax functions."""
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    found = []
    for binding in main_bindings(mod):
        value = binding.value
        if host_builtin(value):
            continue
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            if not value.op.same_as(call_tir) and value.op.name not in _STRUCTURAL_OPS:
                found.append(value.op.name)
        elif isinstance(value, relax.Call):
            found.append(getattr(value.op, "name_hint", str(value.op)))
    return found


def layer_output_test(mod):
    """A predicate on expressions of ``main``: whether the tensor is a layer's output (a
    ``call_tir`` result, through aliases and tuple fields)."""
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    bound = {b.var: b.value for b in main_bindings(mod)}

    def from_layer(expr) -> bool:
        while isinstance(expr, relax.Var) and isinstance(bound.get(expr), relax.Var):
            expr = bound[expr]  # an alias
        value = bound.get(expr) if isinstance(expr, relax.Var) else expr
        if isinstance(value, relax.TupleGetItem):
            inner = value.tuple_value
            while isinstance(inner, relax.Var) and isinstance(bound.get(inner), relax.Var):
                inner = bound[inner]
            if isinstance(bound.get(inner), relax.Tuple):  # a field of a tuple literal
                return from_layer(bound[inner].fields[value.index])
            return from_layer(inner)
        return isinstance(value, relax.Call) and value.op.same_as(call_tir)

    return from_layer


def tuple_fields(expr, ty, bound: dict) -> list:
    """The fields of a tuple-typed expression: a tuple literal's own fields (followed through
    `bound`, ``main``'s bindings by variable), else one ``TupleGetItem`` per field."""
    from tvm import relax

    literal = expr
    while isinstance(literal, relax.Var) and isinstance(bound.get(literal),
                                                        (relax.Var, relax.Tuple)):
        literal = bound[literal]
    if isinstance(literal, relax.Tuple):
        return list(literal.fields)
    return [relax.TupleGetItem(expr, i) for i in range(len(ty.fields))]


def output_tensors(mod) -> list:
    """The tensors ``main`` returns, its result flattened through tuples (tuple literals
    followed through their bindings), as expressions of ``main``."""
    from tvm import relax

    main = mod["main"]
    bound = {b.var: b.value for b in main_bindings(mod)}
    result = main.body.body if isinstance(main.body, relax.SeqExpr) else main.body
    found: list = []

    def visit(expr, ty) -> None:
        if isinstance(ty, relax.TupleType):
            for field_expr, field_ty in zip(tuple_fields(expr, ty, bound), ty.fields):
                visit(field_expr, field_ty)
        elif isinstance(ty, relax.TensorType):
            found.append(expr)

    visit(result, result.ty)
    return found


def outputs_without_layer(mod) -> list[int]:
    """Positions in :func:`output_tensors` of the tensors that no layer computes: a constant,
    a model input, an ``If`` whose branches hold constants, a host builtin's result."""
    from tvm import relax

    if not isinstance(mod["main"], relax.Function):
        return []
    from_layer = layer_output_test(mod)
    return [i for i, expr in enumerate(output_tensors(mod)) if not from_layer(expr)]


def is_layered(mod) -> bool:
    """Whether every op call in ``main`` is a ``call_tir`` (or structural, or a host builtin)
    and every tensor it returns is a layer's output: i.e. prepared."""
    return not unlowered_calls(mod) and not outputs_without_layer(mod)


def upper_bounds(mod) -> dict[str, int]:
    """``{symbolic dimension name: upper bound}`` of ``main`` (its ``tir_var_upper_bound``)."""
    main = mod["main"]
    bounds = main.attrs.get(UPPER_BOUND_ATTR) if main.attrs is not None else None
    return {str(name): int(value) for name, value in (bounds or {}).items()}


def _bounded(dim, bounds: dict[str, int]):
    """A symbolic dimension with each variable replaced by its upper bound (1 without one)."""
    import tvm
    from tvm.sym import Analyzer

    analyzer = Analyzer()
    for var in tvm.tirx.analysis.undefined_vars(dim):
        analyzer.bind(var, tvm.tirx.const(bounds.get(var.name, 1), "int64"))  # shape dims
    value = analyzer.simplify(dim)
    if not isinstance(value, tvm.tirx.IntImm):
        raise ModelError(f"a layer has a dimension {dim} of no known bound")
    return max(int(value), 0)


def bounded_kernel(func, bounds: dict[str, int]):
    """A layer's PrimFunc with each symbolic dimension fixed at its upper bound in `bounds` (1
    without one): the kernel a profile times for a layer whose shapes depend on input values;
    ``func`` itself when its shapes are static."""
    import tvm

    while True:  # one parameter at a time: specializing a scalar drops it
        for param in func.params:
            shape = getattr(param.ty, "shape", None)
            if shape is not None:  # a buffer
                if all(isinstance(d, tvm.tirx.IntImm) for d in shape):
                    continue
                dims = [d if isinstance(d, tvm.tirx.IntImm) else _bounded(d, bounds)
                        for d in shape]
                func = func.specialize({param: tvm.tirx.decl_buffer(
                    dims, param.ty.dtype, elem_offset=param.ty.elem_offset)})
                break
            if "int" in str(getattr(param.ty, "dtype", "")):  # a symbolic dimension passed in
                func = func.specialize({param: tvm.tirx.const(bounds.get(param.name, 1),
                                                              str(param.ty.dtype))})
                break
        else:
            return func


def _tensor_infos(ty, bounds: dict[str, int] | None = None) -> list[TensorInfo]:
    """Shapes and dtypes of a type's tensors; a symbolic dimension (an output shape that
    depends on input values) counts as its upper bound in `bounds`, or 1 where it has none."""
    import tvm
    from tvm import relax

    if isinstance(ty, relax.TensorType):
        if ty.shape is None:
            raise ModelError("a layer has a tensor of unknown rank; tvm_hetero needs known "
                             "shapes")
        dims = []
        for dim in ty.shape.values:
            if not isinstance(dim, tvm.tirx.IntImm):
                dim = _bounded(dim, bounds or {})
            dims.append(int(dim))
        return [TensorInfo(tuple(dims), str(ty.dtype))]
    if isinstance(ty, relax.TupleType):
        return [info for field_ty in ty.fields for info in _tensor_infos(field_ty, bounds)]
    return []


class LayerBinding(NamedTuple):
    """What :func:`classify_bindings` says of a binding that calls a kernel."""

    index: int  # the layer's position in program order
    name: str  # the layer's name
    op_kinds: list[str]
    # a form kernel: a layout transform that a CPU form added (no layer of its own); `name`
    # and `index` are those of the layer it serves, whose device runs it
    form_kernel: bool = False


def classify_bindings(mod) -> list[tuple[Any, LayerBinding | None]]:
    """Each binding of ``main`` in program order, with its :class:`LayerBinding` when it calls
    a kernel and ``None`` when it is structure (tuples, aliases, copies).

    This is the one place that decides which bindings are layers and what they are called, so
    that :func:`extract_layers` and the :class:`~tvm_hetero.AnnotateDevice` pass agree. A layer
    is named by its anchor op and that op's ordinal (``conv2d_3``). Form kernels (the layout
    transforms of the CPU forms, :mod:`tvm_hetero.prepare.device_forms`, and a slice with
    elementwise ops after one of them: where no transform is between them, they fuse into
    the convolution) are
    no layer and number nothing, so that a layer has one name whatever the forms around it; each goes with
    the layer it serves, on the blocked side: a transform into the blocked layout with its
    first consumer, one out of it with its producer.
    """
    import tvm
    from tvm import relax

    from .prepare.device_forms import is_form_kernel

    call_tir = tvm.ir.Op.get("relax.call_tir")
    out: list = []
    forms: list[int] = []  # positions in `out` of the form kernels
    anchors: dict[int, str] = {}  # position in `out` of a layer -> its anchor op
    for binding in main_bindings(mod):
        value = binding.value
        if isinstance(value, relax.Call) and value.op.same_as(call_tir):
            func = mod[value.args[0]]
            kinds = _op_kinds_of(func, value.args[0].name_hint)
            if is_form_kernel(func) or (kinds[0] == "strided_slice"
                                        and not any(k in _KIND_BY_OP for k in kinds)
                                        and _reads_form_kernel(value, out, forms)):
                # (a slice after a transform out of the blocked layout, with the elementwise
                # ops after it: the slice of padded channels and the convolution's epilogue,
                # or the model's own slice, which fuse into the convolution when no
                # transform is between them)
                forms.append(len(out))
                out.append((binding, LayerBinding(-1, "", kinds, True)))
                continue
            index = len(anchors)
            anchors[len(out)] = _anchor_op(func, kinds)
            out.append((binding, LayerBinding(index, "", kinds)))
        else:
            out.append((binding, None))
    counts: Counter = Counter()
    for i in _dataflow_order(mod, out, anchors):
        anchor = anchors[i]
        out[i] = (out[i][0], out[i][1]._replace(name=f"{anchor}_{counts[anchor]}"))
        counts[anchor] += 1
    if forms:
        _assign_form_kernels(out, forms)
    return out


def _reads_form_kernel(call, out: list, forms: list[int]) -> bool:
    """Whether a ``call_tir``'s first argument is the output of a form kernel in `out`."""
    args = call.args[1].fields
    return bool(args) and any(out[i][0].var.same_as(args[0]) for i in forms)


def _dataflow_order(mod, out: list, anchors: dict[int, str]) -> list[int]:
    """The positions of the layers in `out` in the order that names them: depth first from
    ``main``'s result, each call's arguments in order, a layer after the layers it reads
    (post-order); layers nothing returned reads, after, in program order. Fusion emits a
    fused group where its last op was, so program order can differ between the forms of one
    model (a residual block's shortcut before or after its second convolution); this order
    is the dataflow's own."""
    import tvm
    from tvm import relax

    position = {binding.var: i for i, (binding, _) in enumerate(out)}
    main = mod["main"]
    result = main.body.body if isinstance(main.body, relax.SeqExpr) else main.body
    order: list[int] = []
    done: set[int] = set()

    def reads(expr) -> list:
        """The expressions `expr` reads, in order."""
        if isinstance(expr, relax.Var):
            i = position.get(expr)
            return [] if i is None else [out[i][0].value]
        if isinstance(expr, relax.Tuple):
            return list(expr.fields)
        if isinstance(expr, relax.TupleGetItem):
            return [expr.tuple_value]
        if isinstance(expr, relax.Call):
            return list(expr.args)
        if isinstance(expr, relax.SeqExpr):
            return [expr.body]
        if isinstance(expr, relax.If):
            return [expr.cond, expr.true_branch, expr.false_branch]
        return []

    # iterative post-order over bindings (a model may have thousands of layers)
    stack: list = [(result, False)]
    while stack:
        expr, expanded = stack.pop()
        i = position.get(expr) if isinstance(expr, relax.Var) else None
        if i is not None:
            if i in done:
                continue
            if expanded:
                done.add(i)
                if i in anchors:
                    order.append(i)
                continue
            stack.append((expr, True))
            stack.extend((e, False) for e in reversed(reads(out[i][0].value)))
        elif not isinstance(expr, (tvm.ir.GenericConst, relax.ExternFunc)):
            stack.extend((e, False) for e in reversed(reads(expr)))
    order += [i for i in sorted(anchors) if i not in done]
    return order


def _assign_form_kernels(out: list, forms: list[int]) -> None:
    """Give each form kernel in `out` (:func:`classify_bindings`) the layer it serves."""
    from tvm import relax

    position = {binding.var: i for i, (binding, _) in enumerate(out)}
    users: dict = {}
    for i, (binding, _) in enumerate(out):
        for var in relax.analysis.free_vars(binding.value):
            users.setdefault(var, []).append(i)

    def layer_at(i, seen) -> LayerBinding | None:
        """The layer of the binding at `i`, following form kernels and structure."""
        if i in seen:
            return None
        seen.add(i)
        binding, info = out[i]
        if info is not None and not info.form_kernel:
            return info
        if info is not None and info.name:  # a form kernel already assigned
            return info
        return None

    def producer(i, seen):
        binding, _ = out[i]
        for var in relax.analysis.free_vars(binding.value):
            j = position.get(var)
            if j is None:
                continue
            found = layer_at(j, seen) or producer(j, seen)
            if found is not None:
                return found
        return None

    def consumer(i, seen):
        for j in users.get(out[i][0].var, []):
            found = layer_at(j, seen) or consumer(j, seen)
            if found is not None:
                return found
        return None

    def rank(ty) -> int:
        return len(ty.shape) if isinstance(ty, relax.TensorType) and ty.shape is not None \
            else 0

    for i in forms:
        binding, info = out[i]
        args = binding.value.args[1].fields
        blocking = bool(args) and rank(binding.var.ty) > rank(args[0].ty)
        sides = (consumer, producer) if blocking else (producer, consumer)
        owner = sides[0](i, set()) or sides[1](i, set())
        if owner is None:  # a model of nothing but a transform: its first layer, if any
            owner = next((o for _, o in out if o is not None and not o.form_kernel), None)
        if owner is not None:
            out[i] = (binding, info._replace(index=owner.index, name=owner.name))


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
    carried: dict[Any, list[str]] = {}  # var of a structural binding -> model inputs it reads
    params = {p: p.name for p in mod["main"].params}
    flops_cache: dict[str, float] = {}
    layers: list[Layer] = []
    bounds = upper_bounds(mod)
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
                act_inputs.extend(_tensor_infos(arg.ty, bounds))
        if gv.name_hint not in flops_cache:
            try:
                flops_cache[gv.name_hint] = float(estimate_tir_flops(tvm.IRModule(
                    {gv: bounded_kernel(func, bounds)})))
            except Exception as err:  # the estimator rejects some loop forms
                logger.debug("no FLOP estimate for %s: %s", gv.name_hint, err)
                flops_cache[gv.name_hint] = 0.0
        preds, model_inputs = sources(call.args[1])
        layers.append(Layer(
            name=name, kind=_layer_kind(func, kinds), op_kinds=kinds, func_name=gv.name_hint,
            inputs=act_inputs, outputs=_tensor_infos(binding.var.ty, bounds),
            flops=flops_cache[gv.name_hint], param_bytes=sum(constants.values()),
            predecessors=preds, model_inputs=model_inputs, index=index, params=constants,
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
    total_params = distinct_param_bytes(layers)
    return "\n".join([fmt(rows[0])] + [fmt(r) for r in rows[1:]] + [
        f"{len(layers)} layers, {total_flops / 1e6:.1f} MFLOP, "
        f"{total_params / 2**20:.2f} MiB of parameters"])
