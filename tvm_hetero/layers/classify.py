"""What the kernels and bindings of a layered module are: the ops a kernel fuses, its layer kind,
and which bindings of ``main`` are layers, with their names.

:func:`classify_bindings` is the one place that decides which bindings are layers and what they
are called (:func:`tvm_hetero.layers.extract.extract_layers`, the
:class:`~tvm_hetero.AnnotateDevice` pass and the per-device forms of
:mod:`tvm_hetero.prepare.device_forms` read it); the layer kinds (``LAYER_KINDS``,
:func:`kernel_kind`) key the optimization rules.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, NamedTuple

from ..relax_ir import OP_KINDS_ATTR, is_form_kernel, layer_pieces, layer_slices, main_bindings

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


def op_name(func_name: str) -> str:
    """``conv2d13`` -> ``conv2d``; ``max_pool2d1`` -> ``max_pool2d``."""
    base = func_name[len("fused_"):] if func_name.startswith("fused_") else func_name
    for name in sorted(_KIND_BY_OP, key=len, reverse=True):
        if re.fullmatch(re.escape(name) + r"\d*", base):
            return name
    return re.sub(r"\d+$", "", base)


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
    that :func:`~tvm_hetero.layers.extract.extract_layers` and the
    :class:`~tvm_hetero.AnnotateDevice` pass agree. A layer is named by its anchor op and that
    op's ordinal (``conv2d_3``). Form
    kernels (the layout transforms of the CPU forms, :mod:`tvm_hetero.prepare.device_forms`,
    and a slice with elementwise ops after one of them: where no transform is between them,
    they fuse into the convolution) are no layer and number nothing, so that a layer has one
    name whatever the forms around it; each goes with the layer it serves, on the blocked side:
    a transform into the blocked layout with its first consumer, one out of it with its
    producer. Layer pieces (:func:`~tvm_hetero.relax_ir.layer_pieces`: part of a model layer
    that a form kernel keeps from fusing with the rest) are form kernels too, each with the layer
    that produces its marked argument.
    """
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    out: list = []
    forms: list[int] = []  # positions in `out` of the form kernels
    anchors: dict[int, str] = {}  # position in `out` of a layer -> its anchor op
    pieces, slices = layer_pieces(mod), layer_slices(mod)
    for binding in main_bindings(mod):
        value = binding.value
        if isinstance(value, relax.Call) and value.op.same_as(call_tir):
            func = mod[value.args[0]]
            kinds = _op_kinds_of(func, value.args[0].name_hint)
            if is_form_kernel(func) or value.args[0].name_hint in pieces \
                    or (kinds[0] == "strided_slice" and value.args[0].name_hint not in slices
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
        _assign_form_kernels(out, forms, pieces)
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


def _assign_form_kernels(out: list, forms: list[int], pieces: dict[str, int]) -> None:
    """Give each form kernel in `out` (:func:`classify_bindings`) the layer it serves: first
    the layer pieces (`pieces`: the layer producing their marked argument), then the rest
    (a transform between two pieces of a layer goes with it)."""
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

    def piece_owner(i):
        binding, _ = out[i]
        arg = pieces.get(binding.value.args[0].name_hint)
        args = binding.value.args[1].fields
        j = position.get(args[arg]) if arg is not None and arg < len(args) else None
        return None if j is None else layer_at(j, {i}) or producer(j, {i, j})

    for i in forms:
        owner = piece_owner(i)
        if owner is not None:
            out[i] = (out[i][0], out[i][1]._replace(index=owner.index, name=owner.name))
    for i in forms:
        binding, info = out[i]
        if info.name:  # (a layer piece)
            continue
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


def layer_kind(func, kinds: list[str]) -> str:
    """The layer kind (one of ``LAYER_KINDS``) of a kernel fusing the ops `kinds`."""
    for kind in kinds:
        if kind in _KIND_BY_OP:
            return _KIND_BY_OP[kind]
    pattern = func.attrs.get("op_pattern") if func.attrs is not None else None
    if pattern is None or int(pattern) <= _INJECTIVE_MAX:
        return "elementwise"
    return "other"


def kernel_kind(func, name: str = "") -> str:
    """The layer kind (one of ``LAYER_KINDS``) of a layer's PrimFunc."""
    return layer_kind(func, _op_kinds_of(func, name))


def op_kinds(func) -> list[str]:
    """The ops fused into a layer's kernel (its ``OP_KINDS_ATTR``), or [] when unknown."""
    kinds = func.attrs.get(OP_KINDS_ATTR) if func.attrs is not None else None
    return [str(k) for k in kinds] if kinds else []
