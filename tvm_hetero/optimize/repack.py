"""Weight repacking: kernels the ``packed-weights`` rule scheduled read their weight as
``[F / lanes, ..., lanes]`` (``packed-matmul``'s ``[K, N]`` weights: ``[N / lanes, K, lanes]``,
the lanes taken from axis 1); :func:`repack_weight_arguments` gives them their weight in that
layout (a constant repacked at build time, a lifted weight once when the model loads, any
other argument through a packing kernel on the same device)."""

from __future__ import annotations

from ..build.annotate import WEIGHTS_FUNC
from ..relax_ir import main_bindings, substitute_vars
from .cpu import PACKED_WEIGHTS_ATTR, ParallelLoops


def pack_weight(array, lanes: int, axis: int = 0, blocks: int = 0):
    """``[F, ...] -> [F / lanes, ..., lanes]``: the layout of ``PACKED_WEIGHTS_ATTR`` kernels,
    with F the array's `axis` (moved first: ``[K, N]`` with axis 1 -> ``[N / lanes, K, lanes]``);
    packed-matmul's ragged columns are zero-padded to whole vectors, or to `blocks` vectors."""
    import numpy as np

    array = np.moveaxis(array, axis, 0)
    rows = max(blocks, -(-array.shape[0] // lanes)) * lanes
    if rows > array.shape[0]:
        widths = [(0, rows - array.shape[0])] + [(0, 0)] * (array.ndim - 1)
        array = np.pad(array, widths)
    packed = array.reshape(array.shape[0] // lanes, lanes, *array.shape[1:])
    return np.ascontiguousarray(np.moveaxis(packed, 1, -1))


def _packed_shape(shape, lanes: int, axis: int, blocks: int = 0) -> list[int]:
    rest = [d for i, d in enumerate(shape) if i != axis]
    return [max(blocks, -(-shape[axis] // lanes)), *rest, lanes]


def _pack_weight_func(shape, dtype: str, lanes: int, axis: int, blocks: int, target):
    """A kernel computing :func:`pack_weight` (for a weight that is not a constant)."""
    from tvm import te, tirx

    def element(block, *rest):
        index = list(rest[:-1])
        column = block * lanes + rest[-1]
        index.insert(axis, tirx.min(column, shape[axis] - 1))
        return tirx.if_then_else(column < shape[axis], weight[tuple(index)],
                                 tirx.const(0, dtype))

    weight = te.placeholder(shape, dtype, name="weight")
    packed = te.compute(_packed_shape(shape, lanes, axis, blocks), element, name="packed")
    func = te.create_prim_func([weight, packed])
    return (ParallelLoops().apply(func, target) or func).with_attr("target", target)


def _layout(attr) -> tuple[int, int, int]:
    """``(lanes, packed axis, vector blocks or 0)`` of a ``PACKED_WEIGHTS_ATTR``
    (``[index, lanes]``, ``[index, lanes, axis]`` or ``[index, lanes, axis, blocks]``)."""
    values = [int(v) for v in attr] + [0, 0]
    return values[1], values[2], values[3]


def repack_weight_arguments(mod):
    """Give every kernel scheduled with a packed weight (``PACKED_WEIGHTS_ATTR``) its weight
    in that layout: a constant argument is repacked here, at build time (once per constant);
    any other argument through a packing kernel on the same device, each call."""
    import tvm
    from tvm import relax, tirx

    packed = {gv: (int(func.attrs[PACKED_WEIGHTS_ATTR][0]),
                   _layout(func.attrs[PACKED_WEIGHTS_ATTR]), func.attrs["target"])
              for gv, func in mod.functions_items()
              if isinstance(func, tirx.PrimFunc) and func.attrs is not None
              and PACKED_WEIGHTS_ATTR in func.attrs}
    if not packed:
        return mod
    call_tir = tvm.ir.Op.get("relax.call_tir")
    mod, prepacked = _pack_lifted_weights(mod, packed)
    kernels = {gv: mod[gv] for gv in packed}
    mod = tvm.IRModule({gv: func for gv, func in mod.functions_items() if gv not in packed},
                       attrs=mod.attrs, global_infos=mod.global_infos)
    renamed: dict = {}

    @relax.expr_functor.mutator
    class Repack(relax.PyExprMutator):
        def __init__(self):
            super().__init__(mod)
            # the kernels' signatures changed: added again, their GlobalVars get the new types
            for gv, func in kernels.items():
                renamed[gv] = self.builder_.add_func(func, gv.name_hint)
            self.constants: list = []  # (original, lanes, packed)
            self.pack_funcs: dict = {}

        def visit_global_var_(self, gv):
            return renamed.get(gv, gv)

        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            if not call.op.same_as(call_tir):
                return call
            callee = next((gv for gv, new in renamed.items() if new.same_as(call.args[0])), None)
            if callee is None:
                return call
            index, layout, target = packed[callee]
            fields = list(call.args[1].fields)
            fields[index] = self._packed(fields[index], layout, target)
            return relax.Call(call.op, [call.args[0], relax.Tuple(fields), *call.args[2:]],
                              call.attrs, call.ty_args)

        def _packed(self, arg, layout, target):
            if any(arg.same_as(var) for var in prepacked):
                return arg
            lanes, axis, blocks = layout
            ty = arg.ty
            shape = [int(d) for d in ty.shape]
            packed_shape = _packed_shape(shape, lanes, axis, blocks)
            new_ty = relax.TensorType(packed_shape, ty.dtype, ty.vdevice)
            if isinstance(arg, tvm.ir.GenericConst):
                for original, known_layout, done in self.constants:
                    if original.same_as(arg) and known_layout == layout:
                        return done
                data = tvm.runtime.tensor(pack_weight(arg.value.numpy(), lanes, axis, blocks))
                done = tvm.ir.GenericConst(data, new_ty)
                self.constants.append((arg, layout, done))
                return done
            key = (tuple(shape), str(ty.dtype), layout, str(target))
            if key not in self.pack_funcs:
                self.pack_funcs[key] = self.builder_.add_func(
                    _pack_weight_func(shape, str(ty.dtype), lanes, axis, blocks, target),
                    "pack_weight")
            return self.builder_.emit(relax.call_tir(self.pack_funcs[key], [arg], new_ty))

    rewriter = Repack()
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get()


def _pack_lifted_weights(mod, packed):
    """Pack, in ``hetero_weights()``, the lifted weights (weights read on a device other than
    the first: parameters of ``main``) that only packed kernels read, each in one layout: once
    when the model loads instead of at each call. Returns the module and ``main``'s packed
    parameters."""
    import tvm
    from tvm import relax

    names = {gv.name_hint for gv, _ in mod.functions_items()}
    main = mod["main"] if "main" in names else None
    if WEIGHTS_FUNC not in names or main is None or main.attrs is None \
            or "num_input" not in main.attrs:
        return mod, []
    lifted = list(main.params[int(main.attrs["num_input"]):])
    call_tir = tvm.ir.Op.get("relax.call_tir")
    layouts: dict[int, set] = {}  # lifted index -> layout of each use (None: unpacked)
    for binding in main_bindings(mod):
        value = binding.value
        is_call_tir = isinstance(value, relax.Call) and value.op.same_as(call_tir)
        spec = packed.get(value.args[0]) if is_call_tir else None
        args = list(value.args[1].fields) if is_call_tir else \
            list(relax.analysis.free_vars(value))
        for position, arg in enumerate(args):
            for index, param in enumerate(lifted):
                if arg.same_as(param):
                    layouts.setdefault(index, set()).add(
                        spec[1] if spec is not None and position == spec[0] else None)
    layout_of = {index: next(iter(uses)) for index, uses in layouts.items()
                if len(uses) == 1 and None not in uses}
    if not layout_of:
        return mod, []

    weights = mod[WEIGHTS_FUNC]
    copies = {binding.var: binding.value for block in weights.body.blocks
              for binding in block.bindings}
    builder = relax.BlockBuilder()
    with builder.function(WEIGHTS_FUNC, [], attrs={"global_symbol": WEIGHTS_FUNC}):
        outputs = []
        for index, field in enumerate(weights.body.body.fields):
            copy = copies[field]  # to_vdevice(constant, its device)
            constant = copy.args[0]
            if index in layout_of:
                data = pack_weight(constant.value.numpy(), *layout_of[index])
                constant = tvm.ir.GenericConst(tvm.runtime.tensor(data), relax.TensorType(
                    list(data.shape), str(data.dtype)))
            outputs.append(builder.emit(relax.op.to_vdevice(constant, copy.attrs.dst_vdevice)))
        builder.emit_func_output(relax.Tuple(outputs))
    params, renamed = list(main.params), {}
    for index, layout in layout_of.items():
        old = lifted[index]
        shape = [int(d) for d in old.ty.shape]
        new = relax.Var(old.name, relax.TensorType(
            _packed_shape(shape, *layout), old.ty.dtype, old.ty.vdevice))
        params[params.index(old)] = renamed[old] = new
    functions = dict(mod.functions_items())
    for gv in functions:
        if gv.name_hint == WEIGHTS_FUNC:
            functions[gv] = builder.get()[WEIGHTS_FUNC]
        elif gv.name_hint == "main":
            functions[gv] = relax.Function(params, substitute_vars(main.body, renamed), None,
                                           main.is_pure, main.attrs)
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos), \
        list(renamed.values())


__all__ = ["pack_weight", "repack_weight_arguments"]
