"""CumSum: ``relax.cumsum`` (which preparation legalizes to the scan kernel of
:mod:`tvm_hetero.ops.scan`) for every attribute, the axis a constant or known only at run time.

RoBERTa's and MPNet's position ids are a CumSum of the attention mask. TVM's converter refuses
an axis known only at run time and passes an axis outside the input to ``relax.cumsum``
(TVM's multi-line error). Here a constant axis is checked at import; a run-time one is checked
to be in ``[-rank, rank)`` when the model runs (the index check of :mod:`.index_guard`,
negative ones wrapped) and selects among the scans along each axis. ``reverse`` flips the data
along the axis before and after the scan, as TVM's converter does. The result stays Relax ops
(no ``call_tir`` of our own), so that preparation lowers and schedules it as any other op.
"""

from __future__ import annotations

from ...errors import ModelError
from .index_guard import guard_indices, static_dims
from .registry import constant_value, fix, node_name


def _scan(data, axis: int, exclusive: bool, reverse: bool):
    """``relax.cumsum`` of `data` along `axis`, walked from the end where `reverse`."""
    from tvm import relax

    if reverse:
        data = relax.op.flip(data, axis)
    result = relax.op.cumsum(data, axis, exclusive=exclusive)
    return relax.op.flip(result, axis) if reverse else result


@fix("CumSum")
def _cumsum(importer, inputs, attrs, opset):
    import numpy as np
    from tvm import relax

    data, axis = inputs[0], inputs[1]
    name = node_name(attrs)
    where = f" (node {name})" if name else ""
    dims = static_dims(data, f"CumSum{where}")
    rank = len(dims)
    if rank == 0:
        raise ModelError(f"CumSum{where}: a scalar input has no axis to sum along")
    exclusive = bool(attrs.get("exclusive", 0))
    reverse = bool(attrs.get("reverse", 0))
    bb = importer.bb
    value = constant_value(axis)
    if value is not None:
        if value.size != 1:
            raise ModelError(f"CumSum{where}: the axis must be one value, not a tensor of "
                             f"shape {tuple(value.shape)}")
        index = int(value.reshape(()))
        if not -rank <= index < rank:
            raise ModelError(f"CumSum{where}: axis {index} is outside [-{rank}, {rank}) for an "
                             f"input of shape {dims}")
        return _scan(data, index, exclusive, reverse)
    # an axis known only at run time: checked, then the scan along it selected
    axis_dims = static_dims(axis, f"CumSum{where}'s axis")
    if int(np.prod(axis_dims)) != 1 or len(axis_dims) > 1:
        raise ModelError(f"CumSum{where}: the axis must be a scalar or a 1-element tensor, "
                         f"not of shape {axis_dims}")
    checked = guard_indices(bb, axis, [rank], "CumSum", name)
    scans = [bb.emit(_scan(data, index, exclusive, reverse)) for index in range(rank)]
    result = scans[-1]
    axis_dtype = str(axis.ty.dtype)
    for index in reversed(range(rank - 1)):
        chosen = relax.op.equal(checked, relax.const(index, axis_dtype))
        result = bb.emit(relax.op.where(chosen, scans[index], result))
    return result


__all__: list[str] = []
