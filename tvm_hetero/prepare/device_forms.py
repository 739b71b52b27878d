"""Each layer in the form of its device: preparation for a placement.

A layer is a point of the model (a fused group of the model's operators), named once; the form it
runs in follows the device it is placed on. On a CPU: the forms of the
:class:`~tvm_hetero.prepare.PrepareConfig` (output channels padded to whole vectors, the blocked
layout ``NCHW[x]c``, Winograd); on any other device (a GPU): the model's own form, which its
rules (dlight's ``Matmul``: implicit GEMM) schedule without recomputation.

How (see also docs/design.md, "Per-device layer forms"):

- the model phase of preparation runs once per model (:class:`LayerForms`) and its bindings are
  *tagged* (unique variable names), so that the model's own form (every layer canonical: its
  names are the layer names) tells which operators of that graph each layer fuses
  (:func:`op_layers`, read from ``FuseOps``' groups);
- for a placement, the convolutions of layers on a device that is no CPU keep the model's form
  (:class:`Keeps`, by their weight constants, which preparation never copies), and a
  *boundary* (an identity call that TVM's layout conversion cannot see through,
  :func:`insert_boundaries`) goes where a CPU operator's output enters such a layer, so that
  the blocked layout stops there; the boundaries are removed before lowering;
- the layout transforms the CPU forms add are *form kernels* (:mod:`.form_kernels`), not
  layers: :func:`tvm_hetero.layers.classify.classify_bindings` leaves them out of the layer names
  and places each with the layer it serves, the blocked side of the boundary. So a layer's name
  does not depend on the forms of the layers around it.
"""

from __future__ import annotations

import logging

import tvm
from tvm import relax

from ..layers.classify import classify_bindings
from ..relax_ir import main_bindings, substitute_vars
from .config import PrepareConfig
from .form_kernels import (find_layer_pieces, find_layer_slices, has_layout_transforms,
                           slices_a_map, split_shared_pieces, with_layer_pieces,
                           with_layer_slices)

logger = logging.getLogger(__name__)

#: the packed function name of a form boundary (never called: removed before lowering)
BOUNDARY = "tvm_hetero.form_boundary"
_TAG = "hx"
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_CALL_PURE_PACKED = tvm.ir.Op.get("relax.call_pure_packed")


# ----------------------------------------------------------------------------------------------
# the operators of each layer


def _rebuild_main(mod, emit):
    """`mod` with ``main``'s bindings re-emitted: ``emit(binding, value, var_map, out)`` appends
    the new bindings for one binding to the list `out` and returns its new variable."""
    main = mod["main"]
    var_map: dict = {}
    blocks = []
    for block in main.body.blocks:
        new: list = []
        for binding in block.bindings:
            var_map[binding.var] = emit(binding, substitute_vars(binding.value, var_map),
                                        var_map, new)
        blocks.append(relax.DataflowBlock(new) if isinstance(block, relax.DataflowBlock)
                      else relax.BindingBlock(new))
    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs,
                       global_infos=mod.global_infos)
    out["main"] = relax.Function(main.params, relax.SeqExpr(
        blocks, substitute_vars(main.body.body, var_map)), main.ret_ty, main.is_pure,
        main.attrs)
    return out


def _like(var, name: str):
    cls = relax.DataflowVar if isinstance(var, relax.DataflowVar) else relax.Var
    return cls(name, var.ty)


def tag_bindings(mod):
    """`mod` with the variables of ``main``'s bindings named ``hx0``, ``hx1``, ... (program
    order): tags that legalization and ``FuseOps`` keep on the operators they group."""
    counter = iter(range(1 << 30))

    def emit(binding, value, _var_map, out):
        var = _like(binding.var, f"{_TAG}{next(counter)}")
        out.append(relax.MatchCast(var, value, binding.ty) if isinstance(binding, relax.MatchCast)
                   else relax.VarBinding(var, value))
        return var

    return _rebuild_main(mod, emit)


def _kernel_per_call(mod):
    """`mod` with each ``call_tir`` of ``main`` calling a kernel of its own (a copy marked with
    its position): FuseOps then makes one grouped function per group, where it would share one
    between groups of the same structure (two identical residual blocks) and keep the tags of
    one of them only."""
    builder = relax.BlockBuilder()
    counter = iter(range(1 << 30))

    def emit(binding, value, _var_map, out):
        if isinstance(value, relax.Call) and value.op.same_as(_CALL_TIR):
            callee = builder.add_func(mod[value.args[0]].with_attr(
                "tvm_hetero.call_site", next(counter)), value.args[0].name_hint)
            value = relax.Call(value.op, [callee, *value.args[1:]], value.attrs, value.ty_args)
        var = _like(binding.var, binding.var.name)
        out.append(relax.MatchCast(var, value, binding.ty) if isinstance(binding, relax.MatchCast)
                   else relax.VarBinding(var, value))
        return var

    main = _rebuild_main(mod, emit)["main"]
    builder.add_func(main, "main")
    return relax.transform.Normalize()(builder.get())


def fused_groups(fused) -> list[set[str]]:
    """The tags of the operators in each layer of a module after ``FuseOps`` (before FuseTIR;
    each kernel called once, :func:`_kernel_per_call`), in program order: a grouped function's
    inner bindings (its output is renamed: see :func:`op_layers`), or an unfused
    ``call_tir``'s own variable."""
    groups = []
    for binding in main_bindings(fused):
        value = binding.value
        if not isinstance(value, relax.Call):
            continue
        if value.op.same_as(_CALL_TIR):
            groups.append({binding.var.name})
        elif isinstance(value.op, tvm.ir.GlobalVar):
            func = fused[value.op]
            if isinstance(func, relax.Function) and func.attrs is not None \
                    and "Primitive" in func.attrs:
                groups.append({b.var.name for block in func.body.blocks
                               for b in block.bindings})
    return groups


def op_layers(graph, groups: list[set[str]]) -> dict:
    """``{binding variable of graph's main: layer index}``: the layer each operator of the
    tagged model graph belongs to, from `groups` (:func:`fused_groups` of its lowering). An
    operator inside a group is found by its tag; a group's output (renamed by FuseOps) by the
    group its arguments are inside of; what is left (tuples, folded constants) takes the layer
    of its first consumer."""
    inner = {tag: index for index, group in enumerate(groups) if len(group) > 1
             for tag in group}
    single = {tag: index for index, group in enumerate(groups) if len(group) == 1
              for tag in group}
    bindings = main_bindings(graph)
    reads = {b.var: list(relax.analysis.free_vars(b.value)) for b in bindings}
    users: dict = {}
    for binding in bindings:
        for var in reads[binding.var]:
            users.setdefault(var, []).append(binding.var)
    layer: dict = {}
    for binding in bindings:
        name = binding.var.name
        if name in inner or name in single:
            layer[binding.var] = inner.get(name, single.get(name))
            continue
        for var in reads[binding.var]:
            if var.name in inner:
                layer[binding.var] = inner[var.name]
                break
    for binding in reversed(bindings):  # the rest: their first consumer's layer
        if binding.var not in layer:
            known = [user for user in users.get(binding.var, []) if user in layer]
            if known:
                layer[binding.var] = layer[known[0]]
    return layer


# ----------------------------------------------------------------------------------------------
# the forms of a placement


class Keeps:
    """``call -> bool`` over convolutions: whether one keeps the model's form. Convolutions
    are known by their weight constants (preparation passes them on as they are, where
    layouts and padding make new calls); one whose weights are computed keeps the model's
    form whenever any layer does (it cannot be told apart)."""

    def __init__(self, weights, calls):
        self.weights = set(weights)
        self.calls = set(calls)

    def __call__(self, call) -> bool:
        weight = call.args[1] if len(call.args) > 1 else None
        if isinstance(weight, tvm.ir.GenericConst):
            return weight in self.weights
        return call in self.calls or bool(self.weights or self.calls)


def insert_boundaries(graph, kept: set):
    """`graph` with a boundary (an identity ``call_pure_packed`` of ``BOUNDARY``: TVM's layout
    conversion gives its input the model's layout) wherever an operator in `kept` (binding
    variables of layers that keep the model's form) reads the output of one that is not: the
    blocked layout of CPU layers stops there."""
    bound = {b.var for b in main_bindings(graph)}

    def emit(binding, value, var_map, out):
        if binding.var in kept:
            crossing = {}
            for old in relax.analysis.free_vars(binding.value):
                if old in bound and old not in kept:
                    new = var_map[old]
                    boundary = _like(new, f"{new.name}_boundary")
                    out.append(relax.VarBinding(boundary, relax.Call(
                        _CALL_PURE_PACKED, [relax.ExternFunc(BOUNDARY), new], None,
                        [new.ty])))
                    crossing[new] = boundary
            if crossing:
                value = substitute_vars(value, crossing)
        var = _like(binding.var, binding.var.name)
        out.append(relax.MatchCast(var, value, binding.ty) if isinstance(binding, relax.MatchCast)
                   else relax.VarBinding(var, value))
        return var

    return _rebuild_main(graph, emit)


@relax.expr_functor.mutator
class _DropBoundaries(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if call.op.same_as(_CALL_PURE_PACKED) and isinstance(call.args[0], relax.ExternFunc) \
                and str(call.args[0].global_symbol) == BOUNDARY:
            return call.args[1]
        return call


def remove_boundaries(mod):
    """`mod` without the boundaries of :func:`insert_boundaries`."""
    from .base import rewrite_functions

    return relax.transform.CanonicalizeBindings()(rewrite_functions(mod, _DropBoundaries(mod)))


def model_form_config(config: PrepareConfig) -> PrepareConfig:
    """`config` with every CPU form off: the model's own form."""
    return PrepareConfig.model_form(conv1d_as_conv2d=config.conv1d_as_conv2d)


def _reads_a_form_kernel(mod) -> bool:
    """Whether a kernel of a lowered module without an anchor op (elementwise or other)
    reads a form kernel's output, or a form kernel slices a map (:func:`.slices_a_map`): a
    model layer the CPU forms may have cut in two or taken for theirs."""
    from ..layers.classify import kernel_kind

    forms = set()
    for binding, info in classify_bindings(mod):
        if info is None:
            continue
        if info.form_kernel:
            if slices_a_map(binding, info):
                return True
            forms.add(binding.var)
            continue
        gv = binding.value.args[0]
        if kernel_kind(mod[gv], gv.name_hint) in ("elementwise", "other") \
                and any(arg in forms for arg in binding.value.args[1].fields):
            return True
    return False


class FormsMismatch(Exception):
    """A placement's forms do not give the layers the names of the model's form."""


class LayerForms:
    """The forms of one model's layers under one CPU configuration.

    Parameters
    ----------
    mod : tvm.IRModule
        The model's Relax module.
    config : PrepareConfig
        The CPU forms (``PrepareConfig.for_devices(devices)``: those of the set's widest CPU).
    target : tvm.target.Target, optional
        The legalization target (the host CPU by default).
    """

    def __init__(self, mod, config: PrepareConfig, target=None):
        from ..devices import host_target_dict
        from .pipeline import model_phase

        self.config = config
        self.target = target or tvm.target.Target(host_target_dict())
        self.graph = tag_bindings(model_phase(config)(mod))
        self.layouts_in_model = has_layout_transforms(self.graph)
        self._model = None  # (layered module, names, {graph var: layer index})
        self._forms: dict = {}
        self.warned = False  # (placed_module warns once per model of a mismatch)

    def _lower(self, graph, config: PrepareConfig, keeps=None):
        """`graph` lowered in the CPU forms of `config` (`keeps`: see
        :func:`.pipeline.form_phase`), its layer pieces named (:meth:`_with_pieces`)."""
        return self._with_pieces(self._lowered(graph, config, keeps), graph, config, keeps)

    def _lowered(self, graph, config: PrepareConfig, keeps=None, groups_out=None):
        from .op_kinds import FuseTIRKeepingOpKinds
        from .pipeline import finish, form_phase, fusing_passes

        mod = form_phase(config, keeps)(graph)
        if keeps is not None:
            mod = remove_boundaries(mod)
        with self.target:
            *legalize, fuse = fusing_passes(config, keeps)
            mod = tvm.transform.Sequential(legalize)(mod)
            if groups_out is not None:  # FuseOps' groups, each kernel its own (see fused_groups)
                groups_out.extend(fused_groups(fuse(_kernel_per_call(mod))))
            mod = tvm.transform.Sequential([fuse, FuseTIRKeepingOpKinds(),
                                            relax.transform.DeadCodeElimination()])(mod)
        return finish(mod, self.layouts_in_model)

    def _with_pieces(self, mod, graph, config, keeps):
        """A CPU form `mod` with its layer pieces (:func:`.form_kernels.find_layer_pieces`)
        named, so that its layers are the model form's: where a kernel without an anchor op
        reads a form kernel (a layout transform the CPU forms added cut a model layer in two).
        Known from the model form's layers and the tags of the operators of each kernel, which
        are lowered again to read them (only for such models: CPU-only builds of others pay
        nothing)."""
        if self.layouts_in_model or not _reads_a_form_kernel(mod):
            return mod
        self.model_form()
        layer_of = self._model[2]
        if not layer_of:
            return mod
        groups: list = []
        again = self._lowered(graph, config, keeps, groups)
        tags = {var.name: index for var, index in layer_of.items()}
        again = with_layer_slices(again, find_layer_slices(again, groups, tags))
        again = split_shared_pieces(again, groups, tags)
        return with_layer_pieces(again, find_layer_pieces(again, groups, tags))

    def model_form(self):
        """The layered module with every layer in the model's own form."""
        if self._model is None:
            groups: list = []
            mod = self._lowered(self.graph, model_form_config(self.config), groups_out=groups)
            names = [info.name for _, info in classify_bindings(mod)
                     if info is not None and not info.form_kernel]
            layer_of = op_layers(self.graph, groups) if len(groups) <= len(names) else {}
            self._model = (mod, names, layer_of)
        return self._model[0]

    def cpu_form(self):
        """The layered module with every layer in the CPU forms (today's single form)."""
        if "cpu" not in self._forms:
            self._forms["cpu"] = self._lower(self.graph, self.config)
        return self._forms["cpu"]

    def placed(self, off_cpu: set[str]):
        """The layered module where the layers named in `off_cpu` (placed on a device that is
        no CPU) have the model's form and the others the CPU forms.

        Raises
        ------
        FormsMismatch
            When the layers of the mixed forms do not carry the model form's names (then the
            caller falls back to one form).
        """
        if not off_cpu:  # (without lowering the model's form: CPU-only builds pay nothing)
            return self.cpu_form()
        self.model_form()
        _, names, layer_of = self._model
        off_cpu = frozenset(off_cpu) & frozenset(names)
        if not off_cpu:
            return self.cpu_form()
        cpu_names = [info.name for _, info in classify_bindings(self.cpu_form())
                     if info is not None and not info.form_kernel]
        if sorted(cpu_names) != sorted(names):
            raise FormsMismatch("the CPU forms group the model's operators into other layers")
        if off_cpu == frozenset(names):
            return self.model_form()
        if off_cpu not in self._forms:
            self._forms[off_cpu] = self._mixed(off_cpu, names, layer_of)
        return self._forms[off_cpu]

    def _mixed(self, off_cpu, names, layer_of):
        if not layer_of:
            raise FormsMismatch("the operators of the layers are not known")
        if self.layouts_in_model:
            raise FormsMismatch("the model's own graph has layout transforms")
        kept = {var for var, index in layer_of.items() if names[index] in off_cpu}
        weights, calls = [], []
        for binding in main_bindings(self.graph):
            value = binding.value
            if binding.var in kept and isinstance(value, relax.Call) \
                    and getattr(value.op, "name", "") == "relax.nn.conv2d":
                calls.append(value)
                if isinstance(value.args[1], tvm.ir.GenericConst):
                    weights.append(value.args[1])
        mod = self._lower(insert_boundaries(self.graph, kept), self.config,
                          Keeps(weights, calls))
        # the names must be those of the model's form, and each kept convolution in its layer
        found = [info.name for _, info in classify_bindings(mod)
                 if info is not None and not info.form_kernel]
        if sorted(found) != sorted(names):
            raise FormsMismatch(f"{len(found)} layers where the model's form has {len(names)}")
        owner = {b.value.args[1]: names[layer_of[b.var]] for b in main_bindings(self.graph)
                 if isinstance(b.value, relax.Call) and b.value in calls
                 and isinstance(b.value.args[1], tvm.ir.GenericConst)}
        for binding, info in classify_bindings(mod):
            if info is None or info.form_kernel:
                continue
            for arg in binding.value.args[1].fields:
                if arg in owner and owner[arg] != info.name:
                    raise FormsMismatch(f"layer {info.name} reads the weights of "
                                        f"{owner[arg]}")
        return mod

