"""The gathers and scatters (Gather, GatherElements, GatherND, Scatter, ScatterElements,
ScatterND): their indices are checked at run time
(:func:`~tvm_hetero.frontend.onnx.index_guard.guard_indices`), constant ones at import, then the
node goes on to TVM's converter. An index out of range raises instead of reading or writing
outside a buffer."""

from __future__ import annotations

import numpy as np

from ...errors import ModelError
from .index_guard import guard_indices, known_dims, static_bounds
from .registry import FIXES, constant_value, node_name


# --- gathers and scatters: indices checked at run time ---------------------------------------
def _axis(attrs, rank: int, default: int = 0) -> int:
    axis = attrs.get("axis", default)
    return axis + rank if axis < 0 else axis


def _checked(importer, indices, bounds, op_name, attrs):
    if constant_value(indices) is not None and static_bounds(bounds) is not None:
        bounds = static_bounds(bounds)
        values = constant_value(indices).reshape(-1, len(bounds)) if indices.ty.ndim else \
            constant_value(indices).reshape(-1, 1)
        limits = np.array(bounds)
        if ((values < -limits) | (values >= limits)).any():
            raise ModelError(f"{op_name} (node {node_name(attrs)}) has a constant index "
                             f"outside [-n, n) for n = {list(bounds)}")
        return indices
    return guard_indices(importer.bb, indices, bounds, op_name, node_name(attrs))


def _tvm_converter(op_name):
    from tvm.relax.frontend.onnx import onnx_frontend

    return onnx_frontend._get_convert_map()[op_name]


def _with_checked_indices(op_name: str, bounds_of):
    """A fix that checks input 1 (the indices) and hands the node on to TVM's converter."""
    def convert(importer, inputs, attrs, opset):
        from tvm import relax

        data, indices = inputs[0], inputs[1]
        if not isinstance(data.ty, relax.TensorType):  # a shape: TVM's converter folds it
            return None
        dims = known_dims(data, op_name)
        checked = _checked(importer, indices, bounds_of(dims, indices, attrs), op_name, attrs)
        inputs = list(inputs)
        inputs[1] = checked
        converter = _tvm_converter(op_name).get_converter(opset)
        return converter(importer.bb, inputs, attrs, [importer._nodes, importer._params])
    return convert


def _axis_bound(dims, indices, attrs):
    return [dims[_axis(attrs, len(dims))]]


def _coordinate_bounds(dims, indices, attrs):
    batch = attrs.get("batch_dims", 0)
    count = int(indices.ty.shape.values[-1])
    return list(dims[batch:batch + count])


for _op in ("Gather", "GatherElements", "ScatterElements", "Scatter"):
    FIXES[_op] = _with_checked_indices(_op, _axis_bound)
for _op in ("GatherND", "ScatterND"):
    FIXES[_op] = _with_checked_indices(_op, _coordinate_bounds)
