"""Shape arithmetic folded to constants before the import.

Exporters compute shapes inside the graph: ``Shape -> Gather -> Div -> Slice`` (TorchScript's
``chunk``), ``Shape -> Gather -> Range`` (position ids), ``Shape -> Concat -> Reshape``. With
static input shapes (the model's own, or those given to ``load_model``) all of it has one
value, but TVM's converters need the values where they take them (Slice's bounds, Range's
limits, Reshape's target) and see only run-time tensors. :func:`fold_shape_arithmetic` pins
the input shapes in the graph, lets ONNX shape inference give the static shape of every value
(:mod:`.shape_inference`), evaluates the shape ops whose inputs are then known (``Shape`` and
``Size`` from those shapes, the rest with ``onnx.reference``) and puts each value a remaining
node reads in an initializer, the folded nodes removed. A node that stays is inferred again
alone once its inputs are known (a Reshape whose target folded has a static output, whose
Shape then folds); the whole graph is inferred again until nothing more folds.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ...errors import ModelError, error_message
from . import shape_inference

logger = logging.getLogger(__name__)

#: values with more elements than this stay computed (shape tensors have a few; a mask over
#: a long sequence is data, which TVM folds itself when its inputs are constants)
FOLD_MAX_ELEMENTS = 1 << 16

#: ops evaluated once their inputs are constants (default domain): the shape arithmetic of
#: exporters, and the index and mask ops built on it
FOLDABLE_OPS = frozenset({
    "Abs", "Add", "And", "Cast", "CastLike", "Ceil", "Clip", "Concat", "Constant",
    "ConstantOfShape", "CumSum", "Div", "Equal", "Expand", "Flatten", "Floor", "Gather",
    "GatherElements", "GatherND", "Greater", "GreaterOrEqual", "Identity", "IsInf", "IsNaN",
    "Less", "LessOrEqual", "Max", "Min", "Mod", "Mul", "Neg", "Not", "OneHot", "Or", "Pow",
    "Range", "Reciprocal", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSum", "Reshape",
    "Round", "ScatterElements", "ScatterND", "Sign", "Slice", "Split", "Sqrt", "Squeeze", "Sub",
    "Sum", "Tile", "Transpose", "Trilu", "Unsqueeze", "Where", "Xor",
})

#: dtypes the evaluation takes (others, e.g. bfloat16 or 8-bit floats, stay computed)
_NUMERIC_KINDS = "biuf"


def pin_input_shapes(model, shape_dict: dict[str, list]) -> None:
    """Write static input shapes into ``model``'s graph inputs, in place.

    Parameters
    ----------
    model : onnx.ModelProto
        The model (a copy the caller owns).
    shape_dict : dict of str to list of int or str
        The shape of each graph input, by name: a size, or the name of a dynamic dimension
        (written as the dimension's ``dim_param``; inputs that share a name share a size).

    Notes
    -----
    ``value_info`` and output entries with a symbolic or unknown dimension describe the
    model for any input size; they are cleared so that inference gives the sizes the pinned
    shapes make.
    """
    graph = model.graph
    for value in graph.input:
        if value.name not in shape_dict or not value.type.HasField("tensor_type"):
            continue
        shape = value.type.tensor_type.shape
        shape.ClearField("dim")
        for size in shape_dict[value.name]:
            if isinstance(size, str):
                shape.dim.add().dim_param = size
            else:
                shape.dim.add().dim_value = int(size)
    kept = [v for v in graph.value_info if _is_static(v)]
    graph.ClearField("value_info")
    graph.value_info.extend(kept)
    for value in graph.output:
        if value.type.HasField("tensor_type") and not _is_static(value):
            value.type.tensor_type.ClearField("shape")


def _is_static(value) -> bool:
    if not value.type.HasField("tensor_type"):
        return False
    tensor_type = value.type.tensor_type
    return tensor_type.HasField("shape") and all(
        d.HasField("dim_value") for d in tensor_type.shape.dim)


def fold_shape_arithmetic(model, values: dict | None = None) -> dict[str, tuple[int, ...]]:
    """Replace the shape arithmetic of ``model`` that static shapes fix by initializers.

    Parameters
    ----------
    model : onnx.ModelProto
        The model, its input shapes pinned (:func:`pin_input_shapes`); changed in place.
    values : dict, optional
        Filled with the value of every tensor that folded (and of the small initializers),
        by name.

    Returns
    -------
    dict of str to tuple of int
        The static shape of every value of the folded model that ONNX shape inference
        fixes (:func:`.shape_inference.inferred_types`), by name.

    Raises
    ------
    ModelError
        When a node fails on the constant values its inputs have (e.g. a Reshape to a shape
        the pinned input shapes do not fit), naming the node.
    """
    graph = model.graph
    opsets = list(model.opset_import)
    known = _initial_constants(graph)
    outputs = {value.name for value in graph.output}
    too_large: set[tuple] = set()  # nodes (by outputs) whose values are not folded
    folded_total, passes = 0, 0
    while True:
        types = shape_inference.inferred_types(model)
        shapes = {name: dims for name, dims in
                  ((name, shape_inference.static_dims(t)) for name, t in types.items())
                  if dims is not None}
        removed = _fold_pass(graph, opsets, known, types, shapes, outputs, too_large)
        if not removed:
            break
        folded_total, passes = folded_total + removed, passes + 1
    if folded_total:
        logger.debug("folded %d nodes to constants in %d passes", folded_total, passes)
    if values is not None:
        values.update(known)
    return shapes


def _initial_constants(graph) -> dict[str, np.ndarray]:
    """The small initializers' values, by name."""
    from onnx import numpy_helper

    known = {}
    for init in graph.initializer:
        if math.prod(init.dims) <= FOLD_MAX_ELEMENTS and init.data_location != 1:
            value = numpy_helper.to_array(init)
            if value.dtype.kind in _NUMERIC_KINDS:
                known[init.name] = value
    return known


def _fold_pass(graph, opsets, known: dict, types: dict, shapes: dict, outputs: set[str],
               too_large: set[tuple]) -> int:
    """Evaluate every node whose inputs are known, in graph order; remove those whose outputs
    no graph output names, their values given as initializers to the nodes that stay. A node
    that stays has its output types inferred again from its inputs' (``types`` and ``shapes``
    updated), so that a Shape after it folds in the same pass. The number of nodes removed."""
    from onnx import numpy_helper

    kept, removed = [], []
    for node in graph.node:
        values = None if not node.output or tuple(node.output) in too_large else \
            _evaluate(node, opsets, known, shapes, too_large)
        if values is None:
            kept.append(node)
            _infer_outputs(node, opsets, known, types, shapes)
            continue
        known.update(values)
        if outputs.intersection(node.output):
            kept.append(node)  # a graph output stays the output of its node
        else:
            removed.append(node)
    if not removed:
        return 0
    needed = set(outputs)
    for node in kept:
        needed.update(node.input)
        needed.update(_outer_names(node))
    present = {init.name for init in graph.initializer}
    for node in removed:
        for name in node.output:
            if name and name in needed and name not in present:
                graph.initializer.append(numpy_helper.from_array(known[name], name))
    graph.ClearField("node")
    graph.node.extend(kept)
    return len(removed)


def _infer_outputs(node, opsets, known: dict, types: dict, shapes: dict) -> None:
    """ONNX's shape inference of ``node`` alone, its inputs' values given where known: the
    static output shapes it gives join ``shapes``."""
    import onnx
    from onnx import helper, numpy_helper

    if all(name in shapes for name in node.output if name) or any(
            attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for attr in node.attribute):
        return
    input_types, input_data = {}, {}
    for name in node.input:
        if not name:
            continue
        if name in known:
            value = known[name]
            input_types[name] = helper.make_tensor_type_proto(
                helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
            input_data[name] = numpy_helper.from_array(value, name)
        elif name in types:
            input_types[name] = types[name]
        else:
            return
    version = next((o.version for o in opsets if o.domain == node.domain
                    or {o.domain, node.domain} <= {"", "ai.onnx"}), None)
    try:
        schema = onnx.defs.get_schema(node.op_type, version, node.domain)
        inferred = onnx.shape_inference.infer_node_outputs(
            schema, node, input_types, input_data, opset_imports=opsets)
    except Exception as err:  # inference is a help here, not a requirement
        logger.debug("shape inference of %s (node %s) failed: %s", node.op_type, node.name,
                     error_message(err))
        return
    for name, tensor_type in inferred.items():
        dims = shape_inference.static_dims(tensor_type)
        if dims is not None:
            types[name], shapes[name] = tensor_type, dims


def _outer_names(node) -> set[str]:
    """Names the subgraphs in ``node``'s attributes read (from the scopes around them)."""
    names = set()
    for attr in node.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            for inner in sub.node:
                names.update(inner.input)
                names.update(_outer_names(inner))
    return names


def _evaluate(node, opsets, known: dict, shapes: dict, too_large: set[tuple]) -> dict | None:
    """The values of ``node``'s outputs, by name, when they fold; else None (a node whose
    values are too large joins ``too_large``)."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type in ("Shape", "Size"):
        dims = _shape_of(node.input[0], known, shapes)
        if dims is None:
            return None
        if node.op_type == "Size":
            return {node.output[0]: np.array(math.prod(dims), dtype=np.int64)}
        start, end = _attr(node, "start", 0), _attr(node, "end", None)
        return {node.output[0]: np.array(dims[start:end], dtype=np.int64)}
    if node.op_type not in FOLDABLE_OPS:
        return None
    inputs = [name for name in node.input if name]
    if any(name not in known for name in inputs):
        return None
    if _expands_past_limit(node, known):
        too_large.add(tuple(node.output))
        return None
    try:
        with np.errstate(all="ignore"):
            results = _run_reference(node, opsets, known)
    except Exception as err:  # the reference raises what the node does wrong
        raise ModelError(f"{node.op_type} (node {node.name}) fails on the constant values "
                         f"the input shapes give its inputs: {error_message(err)}") from None
    values = {}
    for name, value in zip(node.output, results):
        if not name:
            continue
        value = np.asarray(value)
        if value.size > FOLD_MAX_ELEMENTS or value.dtype.kind not in _NUMERIC_KINDS:
            too_large.add(tuple(node.output))  # or of a type not folded: not evaluated again
            return None
        values[name] = value
    return values


def _shape_of(name: str, known: dict, shapes: dict) -> tuple[int, ...] | None:
    if name in known:
        return tuple(known[name].shape)
    return shapes.get(name)


def _attr(node, name: str, default):
    from onnx import helper

    for attr in node.attribute:
        if attr.name == name:
            return helper.get_attribute_value(attr)
    return default


def _expands_past_limit(node, known: dict) -> bool:
    """Whether ``node`` makes a tensor of more than FOLD_MAX_ELEMENTS from small inputs (told
    before it is evaluated)."""
    if node.op_type == "Constant":
        tensor = _attr(node, "value", None)
        return tensor is not None and math.prod(tensor.dims) > FOLD_MAX_ELEMENTS
    values = [known.get(name) for name in node.input]
    if node.op_type == "ConstantOfShape":
        return math.prod(int(d) for d in values[0].reshape(-1)) > FOLD_MAX_ELEMENTS
    if node.op_type == "Expand":
        target = [int(d) for d in values[1].reshape(-1)]
        try:
            out = np.broadcast_shapes(values[0].shape, tuple(target))
        except ValueError:
            return False  # the evaluation reports it
        return math.prod(out) > FOLD_MAX_ELEMENTS
    if node.op_type == "Tile":
        return values[0].size * math.prod(int(r) for r in values[1].reshape(-1)) \
            > FOLD_MAX_ELEMENTS
    if node.op_type == "Range":
        start, limit, delta = (float(v) for v in values[:3])
        return delta != 0 and math.ceil((limit - start) / delta) > FOLD_MAX_ELEMENTS
    return False


def _gather_elements(node, data, indices):
    axis = _attr(node, "axis", 0)
    axis = axis + data.ndim if axis < 0 else axis
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    return [np.take_along_axis(data, indices, axis=axis)]


# ops numpy computes where onnx.reference is wrong: onnx 1.23's GatherElements fails on
# BERT's token type ids ([1, 512] gathered by [1, 128] position ids along axis 1: "cannot
# reshape array of size 1 into shape (1,128)")
_NUMPY_OPS = {"GatherElements": _gather_elements}


def _run_reference(node, opsets, known: dict) -> list:
    """``node`` run by ``onnx.reference`` (numpy for the ops of `_NUMPY_OPS`) on the known
    values of its inputs."""
    from onnx import TypeProto, helper
    from onnx.reference import ReferenceEvaluator

    if node.op_type in _NUMPY_OPS:
        return _NUMPY_OPS[node.op_type](node, *(known[name] for name in node.input))

    names = list(dict.fromkeys(name for name in node.input if name))
    graph = helper.make_graph(
        [node], "fold", [helper.make_value_info(name, TypeProto()) for name in names],
        [helper.make_value_info(name, TypeProto()) for name in node.output if name])
    model = helper.make_model(graph, opset_imports=opsets)
    results = ReferenceEvaluator(model).run(None, {name: known[name] for name in names})
    # the evaluator returns the named outputs; an empty name means an output not asked for
    by_name = dict(zip([name for name in node.output if name], results))
    return [by_name.get(name) for name in node.output]
