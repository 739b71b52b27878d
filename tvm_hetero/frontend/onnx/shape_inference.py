"""ONNX shape inference: the static shape of every value it can fix (fixes whose output shape
depends on run-time values read it through the importer's ``inferred_shape``)."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def static_shapes(model) -> dict[str, tuple[int, ...]]:
    """Static shapes of every value ONNX shape inference can fix, by value name.

    Parameters
    ----------
    model : onnx.ModelProto
        The model (not modified).

    Returns
    -------
    dict of str to tuple of int
        Values whose dimensions are all known; inference that fails gives those the model
        declares.
    """
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as err:  # inference is a help here, not a requirement
        logger.debug("ONNX shape inference failed: %s", err)
        inferred = model
    shapes = {}
    graph = inferred.graph
    for value in [*graph.value_info, *graph.output]:
        dims = value.type.tensor_type.shape.dim
        if value.type.HasField("tensor_type") and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(int(d.dim_value) for d in dims)
    return shapes
