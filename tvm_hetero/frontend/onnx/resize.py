"""Resize with ``coordinate_transformation_mode = align_corners`` onto a spatial extent of 1.

ONNX maps an output coordinate to ``x * (in - 1) / (out - 1)``, and onnxruntime samples index 0
where ``out`` is 1; TVM's resize divides by ``out - 1`` and fails to build ("Divide by zero",
found by the graph fuzzer). Where every spatial output extent is 1, ``asymmetric`` (``x /
scale``) samples index 0 as well and is exact: the fix hands TVM's converter that mode. Where
only some are 1, no single mode of TVM's matches: a clear refusal.
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError
from .registry import constant_value, fix, node_name

MODE = "coordinate_transformation_mode"


def _mode(attrs) -> str:
    mode = attrs.get(MODE, b"half_pixel")
    return mode.decode() if isinstance(mode, bytes) else str(mode)


def _output_extents(inputs, opset: int) -> list[int] | None:
    """The output shape of a Resize whose input shape and sizes/scales are static."""
    shape = getattr(inputs[0].ty, "shape", None)
    values = getattr(shape, "values", None)
    if values is None or not all(hasattr(d, "value") for d in values):
        return None
    in_shape = [int(d.value) for d in values]
    scales_at, sizes_at = (1, 2) if opset < 11 else (2, 3)
    args = list(inputs) + [None] * 4
    sizes = None if args[sizes_at] is None else constant_value(args[sizes_at])
    if sizes is not None and sizes.size == len(in_shape):
        return [int(s) for s in sizes]
    scales = None if args[scales_at] is None else constant_value(args[scales_at])
    if scales is not None and scales.size == len(in_shape):
        return [int(np.floor(n * s)) for n, s in zip(in_shape, scales)]
    return None


@fix("Resize")
def _align_corners_onto_one(importer, inputs, attrs, opset):
    if _mode(attrs) != "align_corners":
        return None
    out = _output_extents(inputs, opset)
    if out is None or len(out) < 3:
        return None
    spatial = out[2:]
    if 1 not in spatial:
        return None
    if any(extent != 1 for extent in spatial):
        where = f" (node {node_name(attrs)})" if node_name(attrs) else ""
        raise ModelError(f"Resize{where}: align_corners onto a spatial extent of 1 beside "
                         f"others ({spatial}) has no TVM equivalent; use another "
                         f"coordinate_transformation_mode")
    attrs[MODE] = b"asymmetric"  # TVM's converter reads the node's attributes from here
    return None


__all__ = []
