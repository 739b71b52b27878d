"""ONNX shape inference on a copy without the weights' data: the type of every value, whose
static shapes :mod:`.shape_folding` folds shape arithmetic with (fixes whose output shape
depends on run-time values read them through the importer's ``inferred_shape``)."""

from __future__ import annotations

import logging
import math

logger = logging.getLogger(__name__)

#: initializers with more elements than this go to inference as typed inputs, their data
#: left out (weights: no shape is computed from their values)
LIGHT_MAX_ELEMENTS = 1 << 16


def inferred_types(model) -> dict:
    """The tensor type ONNX shape inference gives every value (the graph's inputs, its
    inferred values and its outputs), by value name.

    Parameters
    ----------
    model : onnx.ModelProto
        The model (not modified).

    Returns
    -------
    dict of str to onnx.TypeProto
        Tensor types only; inference that fails gives those the model declares.
    """
    import onnx

    light = _without_large_weights(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, data_prop=True)
    except Exception as err:  # inference is a help here, not a requirement
        logger.debug("ONNX shape inference failed: %s", err)
        inferred = light
    graph = inferred.graph
    return {value.name: value.type for value in [*graph.input, *graph.value_info, *graph.output]
            if value.type.HasField("tensor_type")}


def static_dims(tensor_type) -> tuple[int, ...] | None:
    """The dimensions of an ``onnx.TypeProto`` of a tensor when all are known, else None.

    Parameters
    ----------
    tensor_type : onnx.TypeProto

    Returns
    -------
    tuple of int or None
    """
    if not tensor_type.HasField("tensor_type") or \
            not tensor_type.tensor_type.HasField("shape"):
        return None
    dims = tensor_type.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        return None
    return tuple(int(d.dim_value) for d in dims)


def _without_large_weights(model):
    """A copy of ``model`` whose large initializers are typed graph inputs without data
    (inference then does not copy and hash the weights)."""
    import onnx
    from onnx import helper

    graph = model.graph
    if all(math.prod(init.dims) <= LIGHT_MAX_ELEMENTS for init in graph.initializer):
        return model
    light_graph = onnx.GraphProto(name=graph.name)
    light_graph.node.extend(graph.node)
    light_graph.input.extend(graph.input)
    light_graph.output.extend(graph.output)
    light_graph.value_info.extend(graph.value_info)
    light_graph.sparse_initializer.extend(graph.sparse_initializer)
    declared = {value.name for value in graph.input}
    for init in graph.initializer:
        if math.prod(init.dims) <= LIGHT_MAX_ELEMENTS:
            light_graph.initializer.append(init)
        elif init.name not in declared:
            light_graph.input.append(helper.make_tensor_value_info(
                init.name, init.data_type, list(init.dims)))
    light = onnx.ModelProto(ir_version=model.ir_version, graph=light_graph)
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    return light
