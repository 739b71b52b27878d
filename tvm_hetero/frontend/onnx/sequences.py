"""Fixes of the sequence ops: SequenceLength, SplitToSequence, SequenceInsert."""

from __future__ import annotations

from ...errors import ModelError
from .index_guard import static_dims
from .registry import constant_value, fix, node_name


# --- sequences ----------------------------------------------------------------------------
# test_sequence_model6: SequenceLength of a SplitToSequence (a Relax call, not a Tuple).
@fix("SequenceLength")
def _sequence_length(importer, inputs, attrs, opset):
    from tvm import relax

    sequence = inputs[0]
    fields = getattr(sequence.ty, "fields", None)
    if fields is None:
        raise ModelError(f"SequenceLength (node {node_name(attrs)}): the sequence has no "
                         "static length")
    return relax.const(len(fields), "int64")


# test_sequence_model8: SplitToSequence with its split sizes as a model input. The sizes are
# known at run time only; with static shapes that works when the split axis is empty (every
# piece is empty) and is refused otherwise.
@fix("SplitToSequence")
def _split_to_sequence(importer, inputs, attrs, opset):
    from tvm import relax

    if len(inputs) < 2 or inputs[1] is None or constant_value(inputs[1]) is not None:
        return None
    data, split = inputs[0], inputs[1]
    dims = static_dims(data, "SplitToSequence")
    axis = attrs.get("axis", 0)
    axis = axis + len(dims) if axis < 0 else axis
    split_dims = static_dims(split, "SplitToSequence's split")
    if dims[axis] == 0 and len(split_dims) == 1:
        return relax.Tuple([data] * split_dims[0])
    raise ModelError(f"SplitToSequence (node {node_name(attrs)}) takes its split sizes at run "
                     "time; tvm_hetero needs static shapes: make 'split' a constant")


# test_sequence_model3: SequenceInsert at an explicit negative position p inserts at
# len + p (ONNX); TVM's converter treats every negative position as "append".
@fix("SequenceInsert")
def _sequence_insert(importer, inputs, attrs, opset):
    from tvm import relax

    if len(inputs) < 3 or inputs[2] is None:
        return None
    position = constant_value(inputs[2])
    if position is None:
        return None
    items = list(inputs[0])
    position = int(position)
    if position < 0:
        position += len(items)
    if not 0 <= position <= len(items):
        raise ModelError(f"SequenceInsert (node {node_name(attrs)}): position "
                         f"{int(constant_value(inputs[2]))} is outside the sequence of "
                         f"{len(items)}")
    items.insert(position, inputs[1])
    return relax.Tuple(items)
