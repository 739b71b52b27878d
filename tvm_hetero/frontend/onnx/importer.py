"""The entry point, :func:`import_onnx`: a model that :mod:`.refusals` refuses raises; any
other runs through a subclass of TVM's ``ONNXGraphImporter`` (over its private methods) whose
converter lookup tries :data:`~.registry.FIXES` first, and every output is made a layer's
output.
"""

from __future__ import annotations

import logging

from ...errors import ModelError
from ...relax_ir import UPPER_BOUND_ATTR
from . import refusals, shape_folding, symbolic_folding
# imported for their registrations: each adds its fixes to FIXES
from . import (attention, elementwise, gather_scatter, recurrent, resize,  # noqa: F401
               sequences, shape_ops)
from . import cumsum, dynamic_quantization  # noqa: F401
from ..shape_ranges import dim_parts
from .registry import FIXES, node_name

logger = logging.getLogger(__name__)


#: ops that compute nothing at inference (their first output is their first input)
PASS_THROUGH_OPS = {"Identity", "Dropout"}
#: ops that pass their input through when given only one
VARIADIC_OPS = {"Sum", "Max", "Min", "Mean"}


def _passed_through(graph) -> set[str]:
    """Names of the graph outputs that are a graph input passed through PASS_THROUGH_OPS (or a
    VARIADIC_OPS of one input)."""
    producers = {node.output[0]: node for node in graph.node if node.output}
    inputs = {value.name for value in graph.input}
    passed = set()
    for value in graph.output:
        name = value.name
        while name in producers and (producers[name].op_type in PASS_THROUGH_OPS or (
                producers[name].op_type in VARIADIC_OPS and len(producers[name].input) == 1)):
            name = producers[name].input[0]
        if name in inputs:
            passed.add(value.name)
    return passed


def _computed(bb, value, inputs: list, passed_through: bool = False):
    """``value``, with a copy kernel for each tensor in it that is a model input returned as is
    (or through Identity and Dropout), so that every output is a layer's output."""
    from tvm import relax, topi

    if isinstance(value, relax.Tuple):
        return relax.Tuple([_computed(bb, field, inputs) for field in value.fields])
    if isinstance(getattr(value, "ty", None), relax.ShapeType):
        value = bb.normalize(relax.op.shape_to_tensor(value))
    if passed_through or any(value.same_as(v) for v in inputs):
        return bb.emit_te(topi.identity, value)
    return value


#: graphs larger than this are not checked for outputs that fold to constants (such graphs
#: are tiny: a shape, a size; checking means legalizing a copy of the module)
FOLD_CHECK_MAX_BINDINGS = 64


def _folded_output_positions(mod) -> list[int]:
    """Positions of the outputs of ``main`` that legalization and constant folding turn into
    constants."""
    import tvm
    from tvm import relax

    try:
        folded = tvm.transform.Sequential([
            relax.transform.CanonicalizeBindings(), relax.transform.LegalizeOps(),
            relax.transform.FoldConstant(), relax.transform.CanonicalizeBindings(),
            relax.transform.DeadCodeElimination()])(mod)
    except Exception as err:  # a check only: the build reports what does not lower
        logger.debug("constant-output check skipped: %s", err)
        return []
    result = folded["main"].body.body
    fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]
    return [i for i, field in enumerate(fields) if isinstance(field, tvm.ir.GenericConst)]


def materialize_constant_outputs(mod):
    """``mod`` with each output that folds to a constant (a shape, a size, a graph that reads
    only its inputs' shapes) computed by a copy kernel that also reads the first model input
    (a data dependence only), so that the output is a layer's output and folding leaves it
    in place. ``mod`` itself when there is none."""
    from tvm import relax, te

    main = mod["main"]
    if (not main.params or not isinstance(main.body, relax.SeqExpr)
            or sum(len(b.bindings) for b in main.body.blocks) > FOLD_CHECK_MAX_BINDINGS):
        return mod
    positions = _folded_output_positions(mod)
    if not positions:
        return mod
    anchor = main.params[0]
    result = main.body.body
    fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]
    builder = relax.BlockBuilder(mod)
    bindings = []
    for index in positions:
        field = fields[index]
        value = te.placeholder(list(field.ty.shape.values), str(field.ty.dtype), "value")
        first = te.placeholder(list(anchor.ty.shape.values), str(anchor.ty.dtype), "anchor")
        global_var = builder.add_func(te.create_prim_func(
            [value, first, _copy_after(value, first)]), f"copy_constant_output_{index}")
        copied = relax.Var(f"output_{index}", field.ty)
        bindings.append(relax.VarBinding(copied, relax.call_tir(global_var, [field, anchor],
                                                               field.ty)))
        fields[index] = copied
    body = relax.Tuple(fields) if isinstance(result, relax.Tuple) else fields[0]
    blocks = list(main.body.blocks) + [relax.BindingBlock(bindings)]
    mod = builder.get()
    mod["main"] = relax.Function(main.params, relax.SeqExpr(blocks, body), ret_ty=main.ret_ty,
                                 attrs=main.attrs)
    return relax.transform.Normalize()(mod)


def _copy_after(tensor, anchor):
    """A copy of ``tensor`` that reads one element of ``anchor`` (a data dependence only)."""
    from tvm import te, tirx

    first = anchor(*([0] * len(anchor.shape))) if all(int(d) > 0 for d in anchor.shape) \
        else None
    if first is None:
        return te.compute(tensor.shape, lambda *i: tensor(*i), name="copy")
    return te.compute(tensor.shape,
                      lambda *i: tirx.Select(first == first, tensor(*i), tensor(*i)),
                      name="copy")


def _opset(model) -> int:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return int(opset.version)
    return 1


def _symbolic_shapes(shape_dict: dict[str, list]) -> tuple[dict[str, list], dict]:
    """Each input's shape for TVM's importer: sizes, and the dimensions' variables (one per
    name) where named; and those variables by name."""
    from tvm import tirx

    variables: dict[str, object] = {}
    out = {}
    for name, shape in shape_dict.items():
        dims = []
        for dim in shape:
            if isinstance(dim, str):
                base, offset = dim_parts(dim)
                var = variables.setdefault(base, tirx.Var(base, "int64"))
                dims.append(var + offset if offset else var)
            else:
                dims.append(dim)
        out[name] = dims
    return out, variables


def import_onnx(model, shape_dict: dict[str, list], dtype_dict: dict[str, str],
                ranges: dict[str, tuple[int, int]] | None = None):
    """Import an ONNX model with TVM's importer and our fixes (weights bound as constants).

    Parameters
    ----------
    model : onnx.ModelProto
        The model (not modified).
    shape_dict, dtype_dict : dict
        Shape and dtype of each graph input; a dimension of a shape is a size or the name of
        a dynamic dimension.
    ranges : dict of str to (int, int), optional
        ``(min, max)`` of each dynamic dimension, where the shape arithmetic over it is
        evaluated (:mod:`.symbolic_folding`).

    Returns
    -------
    tvm.IRModule

    Raises
    ------
    ModelError
        For an op we refuse (training-only ops, string tensors), naming it.
    Exception
        Whatever TVM's importer raises for what it cannot convert.
    """
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend

    refusal = refusals.refusal(model)
    if refusal is not None:
        raise ModelError(refusal)
    model_copy = type(model)()
    model_copy.CopyFrom(model)
    seen = set()
    for index, node in enumerate(model_copy.graph.node):  # unique names: shapes by node
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{index}"
        seen.add(node.name)
    shape_folding.pin_input_shapes(model_copy, shape_dict)
    symbolic_folding.fold_symbolic_shape_arithmetic(model_copy, shape_dict, ranges or {})
    static_shapes = shape_folding.fold_shape_arithmetic(model_copy)
    output_shapes = {node.name: static_shapes.get(node.output[0])
                     for node in model_copy.graph.node if node.output}

    class _FixedImporter(onnx_frontend.ONNXGraphImporter):
        def inferred_shape(self, attrs) -> tuple[int, ...] | None:
            """The static shape ONNX shape inference gives the node's first output."""
            return output_shapes.get(node_name(attrs))

        def _check_for_unsupported_ops(self, graph):
            known = set(onnx_frontend._get_convert_map()) | set(FIXES) | {"If", "Constant"}
            missing = sorted({node.op_type for node in graph.node} - known)
            if missing:
                raise onnx_frontend.tvm.error.OpNotImplemented(
                    "The following operators are not supported for frontend ONNX: "
                    + ", ".join(missing))

        def _construct_nodes(self, graph):
            super()._construct_nodes(graph)
            inputs = [var for var in self._inputs.values() if isinstance(var, relax.Var)]
            passed = _passed_through(graph)
            for value in graph.output:
                self._nodes[value.name] = _computed(self.bb, self._nodes[value.name], inputs,
                                                    value.name in passed)

        def _convert_operator(self, op_name, inputs, attrs, opset):
            attrs.setdefault("tvm_custom", {})["op_type"] = op_name
            converter = FIXES.get(op_name)
            result = None if converter is None else converter(self, inputs, attrs, opset)
            if result is None:
                return super()._convert_operator(op_name, inputs, attrs, opset)
            return self.bb.normalize(result) if isinstance(result, relax.Expr) else result

    # a named dynamic dimension is one symbolic variable, shared by every input that has it
    # (``seq``) or a dimension it fixes (``past+1``)
    shapes, dimension_vars = _symbolic_shapes(shape_dict)
    importer = _FixedImporter(shapes, dtype_dict, keep_params_in_input=False)
    importer.dimension_vars = dimension_vars  # what folded symbolic values are written over
    importer.upper_bounds = {}  # symbolic dimension name -> upper bound
    mod = importer.from_onnx(model_copy.graph, _opset(model_copy))
    if importer.upper_bounds:
        mod["main"] = mod["main"].with_attr(UPPER_BOUND_ATTR, importer.upper_bounds)
    return materialize_constant_outputs(mod)
