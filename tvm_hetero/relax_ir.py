"""The Relax IR helpers the package shares, and the attribute names it puts on modules.

Reading ``main`` of a Relax module (its bindings, the tensors it returns, the calls not yet
lowered to TIR, :func:`is_layered`), the symbolic dimensions' upper bounds
(:func:`upper_bounds`, :func:`bounded_kernel`), the form-kernel mark
(:func:`is_form_kernel`) and :func:`substitute_vars`. This module imports nothing of
tvm_hetero but its errors, and TVM only inside its functions.
"""

from __future__ import annotations

from .errors import ModelError

#: the PrimFunc attribute with the ops a fused kernel groups (``["conv2d", "add", "relu"]``)
OP_KINDS_ATTR = "tvm_hetero.op_kinds"

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
#: the PrimFunc attribute of a form kernel (a layout transform that a CPU form added)
FORM_KERNEL_ATTR = "tvm_hetero.form_kernel"
#: the ``main`` attribute naming the *layer pieces* of a CPU form: ``{PrimFunc name: argument
#: index}``, kernels that hold part of a model layer whose other part a form kernel (a layout
#: transform) keeps from fusing with them; each goes with the layer that produces that argument
#: (:func:`~tvm_hetero.prepare.form_kernels.layer_pieces`)
LAYER_PIECES_ATTR = "tvm_hetero.layer_pieces"
#: the ``main`` attribute naming the *layer slices* of a CPU form: ``[PrimFunc name]``, slices
#: after a form kernel that are layers of the model's own form, not slices the CPU forms add
#: (:func:`~tvm_hetero.prepare.form_kernels.find_layer_slices`)
LAYER_SLICES_ATTR = "tvm_hetero.layer_slices"


def static_shape(expr) -> list[int] | None:
    """The dimensions of a tensor-typed Relax expression when all are known integers, else
    None (not a tensor, an unknown shape, a symbolic dimension)."""
    import tvm
    from tvm import relax

    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    dims = []
    for dim in ty.shape.values:
        if not isinstance(dim, tvm.tirx.IntImm):
            return None
        dims.append(int(dim))
    return dims


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


def bounded_dim(dim, bounds: dict[str, int]):
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


def has_symbolic_extent(func) -> bool:
    """Whether a buffer parameter of PrimFunc `func` has a symbolic dimension (a shape
    range's, or one the input values decide)."""
    import tvm

    for param in func.params:
        shape = getattr(param.ty, "shape", None)
        if shape is not None and not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
            return True
    return False


def bounded_kernel(func, bounds: dict[str, int]):
    """A layer's PrimFunc with each symbolic dimension fixed at its upper bound in `bounds` (1
    without one): the kernel a profile times for a layer whose shapes depend on input values;
    ``func`` itself when its shapes are static."""
    import tvm

    def expressions_first_last(param):
        # a buffer whose symbolic dimensions are all variables first: specializing it fixes
        # them in the others' shapes (``past + 1``), which specialize cannot take directly
        shape = getattr(param.ty, "shape", None) or ()
        return any(not isinstance(d, (tvm.tirx.IntImm, tvm.tirx.Var)) for d in shape)

    while True:  # one parameter at a time: specializing a scalar drops it
        for param in sorted(func.params, key=expressions_first_last):
            shape = getattr(param.ty, "shape", None)
            if shape is not None:  # a buffer
                if all(isinstance(d, tvm.tirx.IntImm) for d in shape):
                    continue
                # a fixed dimension keeps its type (int64 shapes: int64 loops)
                dims = [d if isinstance(d, tvm.tirx.IntImm)
                        else tvm.tirx.const(bounded_dim(d, bounds), str(d.ty.dtype))
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


def is_form_kernel(func) -> bool:
    """Whether a PrimFunc is a form kernel
    (:func:`~tvm_hetero.prepare.form_kernels.mark_form_kernels`)."""
    return func.attrs is not None and bool(func.attrs.get(FORM_KERNEL_ATTR, False))


def layer_pieces(mod) -> dict[str, int]:
    """``{PrimFunc name: argument index}``: the layer pieces of a layered module (its ``main``'s
    ``LAYER_PIECES_ATTR``), empty when it has none."""
    attrs = mod["main"].attrs
    pieces = attrs.get(LAYER_PIECES_ATTR) if attrs is not None else None
    return {str(name): int(arg) for name, arg in pieces.items()} if pieces else {}


def layer_slices(mod) -> set[str]:
    """The PrimFunc names of the layer slices of a layered module (its ``main``'s
    ``LAYER_SLICES_ATTR``), empty when it has none."""
    attrs = mod["main"].attrs
    names = attrs.get(LAYER_SLICES_ATTR) if attrs is not None else None
    return {str(name) for name in names} if names else set()


def substitute_vars(expr, var_map):
    """`expr` with its variables replaced through `var_map`."""
    global _SUBSTITUTER
    if _SUBSTITUTER is None:
        from tvm import relax

        @relax.expr_functor.mutator
        class Substituter(relax.PyExprMutator):
            def __init__(self, mapping):
                super().__init__()
                self.mapping = mapping

            def visit_var_(self, var):
                return self.mapping.get(var, var)

            def visit_dataflow_var_(self, var):
                return self.mapping.get(var, var)

        _SUBSTITUTER = Substituter
    return _SUBSTITUTER(var_map).visit_expr(expr)


_SUBSTITUTER = None
