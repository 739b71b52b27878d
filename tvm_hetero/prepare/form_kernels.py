"""Form kernels: the layout transforms that the CPU forms of preparation add
(:mod:`.device_forms`), marked so that they are no layer of their own
(:func:`tvm_hetero.layers.classify.classify_bindings` places each with the layer it serves)."""

from __future__ import annotations

import tvm
from tvm import relax

from ..relax_ir import (FORM_KERNEL_ATTR, LAYER_PIECES_ATTR, LAYER_SLICES_ATTR, OP_KINDS_ATTR,
                        main_bindings)

_TRANSFORM_OPS = ("layout_transform", "te_layout_transform")


def has_layout_transforms(mod) -> bool:
    """Whether ``main`` of a Relax module calls ``relax.layout_transform``."""
    return any(isinstance(b.value, relax.Call) and getattr(b.value.op, "name", "")
               == "relax.layout_transform" for b in main_bindings(mod))


def mark_form_kernels(mod):
    """`mod` with every PrimFunc that only transforms a layout marked a form kernel
    (``FORM_KERNEL_ATTR``). Run on preparations of models whose own graph has no layout
    transform: there, every layout transform is one that the CPU forms added."""
    out = mod
    for gv, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None:
            kinds = func.attrs.get(OP_KINDS_ATTR)
            if kinds and all(str(k) in _TRANSFORM_OPS for k in kinds):
                if out is mod:
                    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs,
                                       global_infos=mod.global_infos)
                out[gv] = func.with_attr(FORM_KERNEL_ATTR, True)
    return out


def _call_roles(mod, groups: list[set[str]], layer_of_tag: dict[str, int]) -> list:
    """``[(binding, role)]`` for each kernel call of `mod` in a model layer: `role` the index
    of the argument through which it reads (past form kernels) the rest of its layer, -1 where
    it reads none (the layer's first kernel). Empty when `groups` does not match the calls.
    See :func:`find_layer_pieces`."""
    from ..layers.classify import classify_bindings

    classified = classify_bindings(mod)
    calls = [(b, info) for b, info in classified if info is not None]
    if len(calls) != len(groups):
        return []
    layer_of_call: dict = {}  # binding var -> model layer index (kernels in one layer only)
    for (binding, info), tags in zip(calls, groups):
        layers = {layer_of_tag[tag] for tag in tags if tag in layer_of_tag}
        if not info.form_kernel and len(layers) == 1:
            layer_of_call[binding.var] = layers.pop()
    kernels = {binding.var for binding, info in calls if not info.form_kernel}
    for (binding, info), tags in zip(calls, groups):
        # a transform back to the model's layout keeps the tag of the operator whose output
        # it restores (layout conversion renames that operator's blocked form)
        layers = {layer_of_tag[tag] for tag in tags if tag in layer_of_tag}
        args = binding.value.args[1].fields
        if info.form_kernel and len(layers) == 1 and args and args[0] in kernels \
                and args[0] not in layer_of_call:
            layer_of_call[args[0]] = layers.pop()
    through = {b.var: b.value for b, info in classified
               if info is None or info.form_kernel}  # structure and form kernels

    def producers(expr, seen) -> set:
        """The kernels of layers that `expr` reads, past structure and form kernels."""
        found = set()
        for var in relax.analysis.free_vars(expr):
            if var in layer_of_call:
                found.add(var)
            elif var in through and var not in seen:
                seen.add(var)
                found |= producers(through[var], seen)
        return found

    roles = []
    for binding, _info in calls:
        if binding.var not in layer_of_call:
            continue
        layer = layer_of_call[binding.var]
        args = binding.value.args[1].fields
        own = [i for i, arg in enumerate(args)
               if any(layer_of_call[p] == layer for p in producers(arg, set()))]
        roles.append((binding, own[0] if own else -1))
    return roles


def find_layer_pieces(mod, groups: list[set[str]], layer_of_tag: dict[str, int]) -> dict:
    """``{PrimFunc name: argument index}``: the *layer pieces* of a lowered CPU form `mod`
    (form kernels marked), kernels holding part of a model layer whose other part a form
    kernel keeps from fusing with them (the SE gate's multiply after the transform of the gate
    into the blocked layout; the LRN's ``expand_dims`` after the transform out of it), each
    with the argument through which it reads (past form kernels) the rest of its layer.

    `groups` are the tags of the operators of each kernel call of `mod`, in program order
    (:func:`~.device_forms.fused_groups`), `layer_of_tag` the model form's layer of each tag.
    A kernel name called both as a piece and otherwise (or with two arguments) is left out
    (:func:`split_shared_pieces` gives such piece calls a kernel of their own first): the
    names then differ from the model form's (:class:`~.device_forms.FormsMismatch`)."""
    roles: dict = {}  # PrimFunc name -> set of argument indices (-1: no piece)
    for binding, role in _call_roles(mod, groups, layer_of_tag):
        roles.setdefault(binding.value.args[0].name_hint, set()).add(role)
    return {name: arg.pop() for name, arg in roles.items() if len(arg) == 1 and -1 not in arg}


def split_shared_pieces(mod, groups: list[set[str]], layer_of_tag: dict[str, int]):
    """`mod` where each kernel that is called both as a layer piece (one argument) and as a
    layer's first kernel has a copy of its own for the piece calls (``NAME_piece``): ConvNeXt's
    transpose back to channels-last, a layer of its own after most blocks and, after a stage's
    last block, part of the layer of its residual add (which the blocked layout keeps apart)."""
    roles: dict = {}  # PrimFunc name -> {role: [bindings]}
    for binding, role in _call_roles(mod, groups, layer_of_tag):
        roles.setdefault(binding.value.args[0].name_hint, {}).setdefault(role, []).append(
            binding)
    pieces = [b for by_role in roles.values() if -1 in by_role and len(by_role) == 2
              for role, bindings in by_role.items() if role != -1 for b in bindings]
    return own_kernels(mod, pieces, "piece")


def find_layer_slices(mod, groups: list[set[str]], layer_of_tag: dict[str, int]) -> list:
    """The calls of a lowered CPU form `mod` that
    :func:`~tvm_hetero.layers.classify.classify_bindings` takes for the slices the CPU forms add
    (a ``strided_slice`` after a form kernel) but that
    cut a map (:func:`slices_a_map`) and are the only kernel of a model layer: the model's own
    slices of a map that several layers read (DeepLabV3's bands of an atrous convolution's
    input, which DropPaddingTaps cuts), read through the transform out of the blocked layout.
    Their tags (`groups`, program order) are in a model layer (`layer_of_tag`) that no layer of
    `mod` holds."""
    from ..layers.classify import classify_bindings

    calls = [(b, info) for b, info in classify_bindings(mod) if info is not None]
    if len(calls) != len(groups):
        return []
    held, slices = set(), []
    for (binding, info), tags in zip(calls, groups):
        layers = {layer_of_tag[tag] for tag in tags if tag in layer_of_tag}
        if not info.form_kernel:
            held |= layers
        elif slices_a_map(binding, info) and len(layers) == 1:
            slices.append((binding, layers.pop()))
    return [binding for binding, layer in slices if layer not in held]


def slices_a_map(binding, info) -> bool:
    """Whether a call classified a form kernel (`info`) is a slice that cuts an axis other than
    the channels (1): the CPU forms only slice padded channels, so it may be the model's own
    slice (a layer)."""
    if not (info.form_kernel and info.op_kinds and info.op_kinds[0] == "strided_slice"):
        return False
    args = binding.value.args[1].fields
    shapes = [getattr(getattr(v, "ty", None), "shape", None) for v in (args[0], binding.var)] \
        if args else []
    if len(shapes) != 2 or any(s is None for s in shapes) or len(shapes[0]) != len(shapes[1]):
        return False
    return any(i != 1 and str(a) != str(b) for i, (a, b) in enumerate(zip(*shapes)))


def with_layer_slices(mod, slices: list):
    """`mod` with ``main`` naming the kernels of `slices` (bindings, :func:`find_layer_slices`)
    layers (``LAYER_SLICES_ATTR``), each with a kernel of its own (``NAME_layer``) where the
    kernel is also called as a form kernel."""
    if not slices:
        return mod
    chosen = {b.var for b in slices}
    calls: dict = {}  # PrimFunc name -> whether called elsewhere too
    for binding in main_bindings(mod):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) \
                and value.op.name == "relax.call_tir":
            name = value.args[0].name_hint
            calls[name] = calls.get(name, False) or binding.var not in chosen
    shared = [b for b in slices if calls[b.value.args[0].name_hint]]
    out = own_kernels(mod, shared, "layer")
    names = {b.value.args[0].name_hint for b in main_bindings(out) if b.var in chosen}
    out = tvm.IRModule(dict(out.functions_items()), attrs=out.attrs,
                       global_infos=out.global_infos)
    out["main"] = out["main"].with_attr(LAYER_SLICES_ATTR, sorted(names))
    return out


def own_kernels(mod, calls: list, suffix: str):
    """`mod` where the ``call_tir`` bindings `calls` call a copy of their kernel
    (``NAME_SUFFIX``; one copy per kernel) instead of the kernel others call too."""
    if not calls:
        return mod
    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs,
                       global_infos=mod.global_infos)
    copies: dict = {}  # PrimFunc name -> its copy's GlobalVar
    callee: dict = {}  # binding var -> the GlobalVar it calls
    for binding in calls:
        gvar = binding.value.args[0]
        if gvar.name_hint not in copies:
            copy = tvm.ir.GlobalVar(_fresh_name(out, f"{gvar.name_hint}_{suffix}"))
            relax.expr._update_type(copy, gvar.ty)  # (call_tir checks its callee's type)
            out[copy] = mod[gvar]
            copies[gvar.name_hint] = copy
        callee[binding.var] = copies[gvar.name_hint]
    main = mod["main"]
    blocks = []
    for block in main.body.blocks:
        bindings = []
        for binding in block.bindings:
            if binding.var in callee:
                call = binding.value
                call = relax.Call(call.op, [callee[binding.var], *call.args[1:]], call.attrs,
                                  call.ty_args)
                binding = relax.MatchCast(binding.var, call, binding.ty) \
                    if isinstance(binding, relax.MatchCast) else \
                    relax.VarBinding(binding.var, call)
            bindings.append(binding)
        blocks.append(relax.DataflowBlock(bindings) if isinstance(block, relax.DataflowBlock)
                      else relax.BindingBlock(bindings))
    out["main"] = relax.Function(main.params, relax.SeqExpr(blocks, main.body.body),
                                 main.ret_ty, main.is_pure, main.attrs)
    return out


def _fresh_name(mod, name: str) -> str:
    names = {gv.name_hint for gv in mod.get_global_vars()}
    fresh, n = name, 1
    while fresh in names:
        fresh, n = f"{name}{n}", n + 1
    return fresh


def with_layer_pieces(mod, pieces: dict):
    """`mod` with ``main`` naming its layer pieces (``LAYER_PIECES_ATTR``)."""
    if not pieces:
        return mod
    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs,
                       global_infos=mod.global_infos)
    out["main"] = mod["main"].with_attr(LAYER_PIECES_ATTR, pieces)
    return out
