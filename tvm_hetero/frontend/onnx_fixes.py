"""Our fixes to TVM's ONNX importer, and the ops we refuse with one clear line.

TVM's ``from_onnx`` takes no converter map of its own, so :func:`import_onnx` runs a subclass
of its ``ONNXGraphImporter`` whose converter lookup tries :data:`FIXES` first. A fix is a
function ``fix(importer, inputs, attrs, opset)`` returning the Relax expression, or ``None``
where TVM's own converter is right for that node. Each fix names the onnx backend-test case
that needed it (``tests/test_onnx_fixes.py`` runs them).

The gathers and scatters also get their indices checked at run time
(:func:`~tvm_hetero.frontend.index_guard.guard_indices`): an index out of range raises
instead of reading or writing outside a buffer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ..errors import ModelError
from ..layers import UPPER_BOUND_ATTR
from .index_guard import guard_indices, static_dims

logger = logging.getLogger(__name__)

#: op type -> fix(importer, inputs, attrs, opset) -> Relax expression, or None for TVM's own
FIXES: dict[str, Callable] = {}

#: op type -> why we refuse it (checked before import, named in the error)
REFUSED_OPS = {
    "Gradient": "a training-only op (ai.onnx.preview.training); tvm_hetero compiles inference "
                "graphs",
}


def fix(*op_types: str):
    """Register a converter fix for the given ONNX op types."""
    def register(func):
        for op_type in op_types:
            FIXES[op_type] = func
        return func
    return register


def _constant(expr):
    """The numpy value of a Relax constant, else None."""
    import tvm

    if isinstance(expr, tvm.ir.GenericConst):
        return expr.value.numpy()
    return None


def node_name(attrs) -> str:
    """The ONNX node's name, from the attributes TVM's importer gives a converter."""
    return attrs.get("tvm_custom", {}).get("name", "") or ""


# --- PReLU ------------------------------------------------------------------------------
# test_PReLU_{1,2,3}d_multiparam (opset 6): a per-channel slope of shape (C,) for an input
# (N, C, ...). Before opset 7 a 1-D slope is per channel (axis 1); TVM's converter puts it
# on the last axis (an AssertionError when the sizes differ). A slope of more dimensions
# broadcasts the ONNX way (TVM's converter handles neither).
@fix("PRelu")
def _prelu(importer, inputs, attrs, opset):
    from tvm import relax

    x, slope = inputs[0], inputs[1]
    dims = static_dims(x, "PRelu")
    slope_dims = static_dims(slope, "PRelu's slope")
    if all(d == 1 for d in slope_dims):
        return None
    if len(slope_dims) == 1 and len(dims) >= 2 and (opset < 7 or slope_dims[0] != dims[-1]):
        if slope_dims[0] != dims[1]:
            raise ModelError(f"PRelu (node {node_name(attrs)}): a slope of {slope_dims[0]} "
                             f"fits neither the channels nor the last axis of {dims}")
        slope = relax.op.reshape(slope, (dims[1],) + (1,) * (len(dims) - 2))
    elif len(slope_dims) == 1:
        return None
    zero = relax.const(0, str(x.ty.dtype))
    return relax.op.where(relax.op.less(x, zero), relax.op.multiply(x, slope), x)


# --- Slice before opset 10 ----------------------------------------------------------------
# test_operator_index (PyTorch's x[0] exports Slice-1 + Squeeze): starts, ends and axes are
# attributes before opset 10; TVM's converter reads them as inputs.
@fix("Slice")
def _slice_v1(importer, inputs, attrs, opset):
    from tvm import relax

    if opset >= 10:
        return _slice_runtime_bounds(importer, inputs, attrs)
    data = inputs[0]
    dims = static_dims(data, "Slice")
    starts, ends = list(attrs["starts"]), list(attrs["ends"])
    axes = list(attrs.get("axes", range(len(starts))))
    axes = [a + len(dims) if a < 0 else a for a in axes]
    # ONNX clamps; strided_slice clamps too, but not ends past int64 range
    ends = [min(e, dims[a]) for e, a in zip(ends, axes)]
    return relax.op.strided_slice(data, axes=axes, begin=starts, end=ends)


# node tests test_slice*: starts, ends, axes and steps as model inputs (known at run time
# only). With static shapes the output shape comes from ONNX shape inference; every axis is
# gathered with indices computed at run time (start + i * step), the indices are checked,
# and so is the length the given bounds give each axis against the static one.
def _slice_runtime_bounds(importer, inputs, attrs):
    from tvm import relax

    bounds = [inputs[i] if len(inputs) > i else None for i in range(1, 5)]
    if all(b is None or _constant(b) is not None for b in bounds):
        return None
    data = inputs[0]
    dims = static_dims(data, "Slice")
    out_dims = importer.inferred_shape(attrs)
    if out_dims is None or len(out_dims) != len(dims):
        raise ModelError(f"Slice (node {node_name(attrs)}) takes its bounds at run time and "
                         "ONNX shape inference cannot fix the output shape; tvm_hetero needs "
                         "static shapes: make starts/ends/axes/steps constants")
    bb, rank, i64 = importer.bb, len(dims), "int64"

    def const(values):
        return relax.const(np.array(values, dtype=i64), i64)

    def vec(expr):
        return bb.normalize(relax.op.astype(expr, i64))

    starts, ends = vec(bounds[0]), vec(bounds[1])
    count = static_dims(starts, "Slice's starts")[0]
    axes = vec(bounds[2]) if bounds[2] is not None else const(list(range(count)))
    steps = vec(bounds[3]) if bounds[3] is not None else const([1] * count)
    axes = relax.op.where(relax.op.less(axes, const(0)), relax.op.add(axes, const(rank)), axes)
    # match[j, a]: axes[j] == a; per-axis start, end, step (the whole axis where not sliced)
    match = bb.normalize(relax.op.astype(relax.op.equal(
        relax.op.expand_dims(axes, 1), relax.op.expand_dims(const(list(range(rank))), 0)), i64))
    touched = relax.op.sum(match, axis=0)

    def per_axis(values, default):
        picked = relax.op.sum(relax.op.multiply(match, relax.op.expand_dims(values, 1)), axis=0)
        return bb.normalize(relax.op.add(picked, relax.op.multiply(
            relax.op.subtract(const(1), touched), const(default))))

    extent = const(list(dims))
    start, end, step = per_axis(starts, [0] * rank), per_axis(ends, list(dims)), \
        per_axis(steps, [1] * rank)
    forward = relax.op.greater(step, const(0))
    start = relax.op.where(relax.op.less(start, const(0)), relax.op.add(start, extent), start)
    start = bb.normalize(relax.op.minimum(relax.op.maximum(start, const(0)), relax.op.where(
        forward, extent, relax.op.subtract(extent, const(1)))))
    end = relax.op.where(relax.op.less(end, const(0)), relax.op.add(end, extent), end)
    end = relax.op.maximum(end, relax.op.where(forward, const(0), const(-1)))
    end = bb.normalize(relax.op.minimum(end, relax.op.where(
        forward, extent, relax.op.subtract(extent, const(1)))))
    safe_step = relax.op.where(relax.op.equal(step, const(0)), const(1), step)
    span = relax.op.where(forward, relax.op.subtract(end, start), relax.op.subtract(start, end))
    size = relax.op.abs(safe_step)
    length = relax.op.maximum(const(0), relax.op.floor_divide(
        relax.op.add(span, relax.op.subtract(size, const(1))), size))
    fits = relax.op.logical_and(relax.op.equal(length, const(list(out_dims))),
                                relax.op.not_equal(step, const(0)))
    offsets = bb.normalize(relax.op.where(fits, const(0), const(1 << 40)))
    checked = guard_indices(bb, offsets, [1], "Slice (its bounds give another shape)",
                            node_name(attrs))
    passed = relax.op.equal(relax.op.sum(checked), const(0))
    result = bb.normalize(relax.op.where(passed, data, data))
    for axis, (size_in, size_out) in enumerate(zip(dims, out_dims)):
        first = relax.op.take(start, relax.const(axis, i64), axis=0)
        stride = relax.op.take(step, relax.const(axis, i64), axis=0)
        positions = relax.op.arange(0, size_out, 1, i64)
        index = bb.normalize(relax.op.add(first, relax.op.multiply(positions, stride)))
        index = guard_indices(bb, index, [size_in], "Slice", node_name(attrs))
        result = bb.normalize(relax.op.take(result, index, axis=axis, mode="fast"))
    return result


# node tests test_tile*: Tile's repeats as a model input. The output shape comes from ONNX
# shape inference; the repeats given at run time are checked against it.
@fix("Tile")
def _tile(importer, inputs, attrs, opset):
    from tvm import relax

    data, repeats = inputs[0], inputs[1]
    if _constant(repeats) is not None:
        return None
    dims = static_dims(data, "Tile")
    out_dims = importer.inferred_shape(attrs)
    if (out_dims is None or len(out_dims) != len(dims)
            or any(d == 0 or o % d for d, o in zip(dims, out_dims))):
        raise ModelError(f"Tile (node {node_name(attrs)}) takes its repeats at run time and "
                         "ONNX shape inference cannot fix the output shape; tvm_hetero needs "
                         "static shapes: make 'repeats' a constant")
    static = [o // d for d, o in zip(dims, out_dims)]
    fits = relax.op.equal(relax.op.astype(repeats, "int64"),
                          relax.const(np.array(static, dtype="int64"), "int64"))
    offsets = importer.bb.normalize(relax.op.where(
        fits, relax.const(0, "int64"), relax.const(1 << 40, "int64")))
    checked = guard_indices(importer.bb, offsets, [1], "Tile (its repeats give another shape)",
                            node_name(attrs))
    passed = relax.op.equal(relax.op.sum(checked), relax.const(0, "int64"))
    return relax.op.tile(relax.op.where(passed, data, data), static)


# node tests test_squeeze*, test_unsqueeze*: the axes as a model input (opset 13). The data
# is only reshaped; the output shape comes from ONNX shape inference, and the axes given at
# run time are checked to give that shape.
@fix("Squeeze", "Unsqueeze")
def _squeeze_runtime_axes(importer, inputs, attrs, opset):
    from tvm import relax

    if len(inputs) < 2 or inputs[1] is None or _constant(inputs[1]) is not None:
        return None
    data, axes = inputs[0], inputs[1]
    dims = static_dims(data, "Squeeze")
    out_dims = importer.inferred_shape(attrs)
    squeeze = len(out_dims or ()) < len(dims)
    op_name = "Squeeze" if squeeze else "Unsqueeze"
    if out_dims is None:
        raise ModelError(f"{op_name} (node {node_name(attrs)}) takes its axes at run time "
                         "and ONNX shape inference cannot fix the output shape; tvm_hetero "
                         "needs static shapes: make 'axes' a constant")
    bb, i64 = importer.bb, "int64"

    def const(values):
        return relax.const(np.array(values, dtype=i64), i64)

    # the longer of the two shapes has one entry per axis; `marked` flags the axes named
    long_dims, short_dims = (dims, out_dims) if squeeze else (out_dims, dims)
    rank, short_rank = len(long_dims), len(short_dims)
    named = relax.op.astype(axes, i64)
    named = relax.op.where(relax.op.less(named, const(0)), relax.op.add(named, const(rank)),
                           named)
    marked = bb.normalize(relax.op.sum(relax.op.astype(relax.op.equal(
        relax.op.expand_dims(named, 1), relax.op.expand_dims(const(list(range(rank))), 0)),
        i64), axis=0))
    # position of each unmarked axis in the short shape: its index less the marks before it
    before = relax.op.matmul(const(np.tril(np.ones((rank, rank)), -1).tolist()),
                             relax.op.expand_dims(marked, 1))
    position = relax.op.subtract(const(list(range(rank))), relax.op.squeeze(before, [1]))
    position = relax.op.clip(position, 0, max(short_rank - 1, 0))
    short_at = relax.op.take(const(list(short_dims) or [1]), position, axis=0, mode="clip")
    kept_fits = relax.op.logical_and(relax.op.equal(marked, const(0)),
                                     relax.op.equal(short_at, const(list(long_dims))))
    marked_fits = relax.op.logical_and(relax.op.equal(marked, const(1)),
                                       relax.op.equal(const(list(long_dims)), const(1)))
    count_fits = relax.op.equal(relax.op.sum(marked), const(rank - short_rank))
    fits = relax.op.logical_and(relax.op.logical_or(kept_fits, marked_fits), count_fits)
    offsets = bb.normalize(relax.op.where(fits, const(0), const(1 << 40)))
    checked = guard_indices(bb, offsets, [1], f"{op_name} (its axes give another shape)",
                            node_name(attrs))
    passed = relax.op.equal(relax.op.sum(checked), const(0))
    return relax.op.reshape(relax.op.where(passed, data, data), list(out_dims))


# node tests test_compress*, test_nonzero*, test_unique*: the output shape depends on the
# input values. TVM's converters give symbolic dimensions (the VM allocates the outputs at
# run time: nonzero and unique run on the host CPU, see layers.HOST_BUILTINS); each symbolic
# dimension gets an upper bound here, which the layers' byte estimates and TVM's memory
# planning use (main's tir_var_upper_bound): no more than the elements of the input that
# decides the count (Compress: its condition; NonZero, Unique: the data).
@fix("Compress", "NonZero", "Unique")
def _data_dependent_shape(importer, inputs, attrs, opset):
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend

    op_name = attrs["tvm_custom"]["op_type"]
    if all(inp is None or _constant(inp) is not None for inp in inputs):
        return None  # constant inputs: TVM's converter folds them
    counted = inputs[1] if op_name == "Compress" else inputs[0]
    bound = int(np.prod(static_dims(counted, op_name), dtype=np.int64))
    result = importer.bb.normalize(onnx_frontend.ONNXGraphImporter._convert_operator(
        importer, op_name, inputs, attrs, opset))
    for var in relax.analysis.tir_vars_in_type(result.ty):
        importer.upper_bounds[var.name] = max(importer.upper_bounds.get(var.name, 0), bound)
    return result


# --- BitShift -------------------------------------------------------------------------------
# test_bitshift_left_int8_negative_shift: a shift by a negative amount or by the bit width or
# more gives 0 in ONNX (RIGHT of a negative signed value: -1). TVM's converter emits the bare
# shift, which LLVM leaves undefined there: a vectorized kernel (cpu-generic) returned the
# input unchanged. The amounts out of range are replaced by 0 and their results by ONNX's.
@fix("BitShift")
def _bit_shift(importer, inputs, attrs, opset):
    from tvm import relax

    data, amount = inputs
    if not all(isinstance(v.ty, relax.TensorType) for v in (data, amount)) or \
            all(_constant(v) is not None for v in (data, amount)):
        return None  # constants and shapes: TVM's converter folds them
    dtype = str(data.ty.dtype)
    bits = np.iinfo(np.dtype(dtype)).bits
    zero = relax.const(0, str(amount.ty.dtype))
    valid = relax.op.logical_and(
        relax.op.greater_equal(amount, zero),
        relax.op.less(amount, relax.const(bits, str(amount.ty.dtype))))
    safe = relax.op.where(valid, amount, zero)
    direction = attrs.get("direction", b"LEFT")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction == "RIGHT":
        shifted = relax.op.right_shift(data, safe)
        fill = relax.const(0, dtype)
        if np.issubdtype(np.dtype(dtype), np.signedinteger):
            fill = relax.op.where(relax.op.less(data, relax.const(0, dtype)),
                                  relax.const(-1, dtype), relax.const(0, dtype))
    else:
        shifted = relax.op.left_shift(data, safe)
        fill = relax.const(0, dtype)
    return relax.op.where(valid, shifted, fill)


# --- Clip with constant bounds ------------------------------------------------------------
# TVM's converter writes Clip as TE kernels (``emit_te(topi.maximum)``), which TVM's layout
# conversion cannot see into: MobileNetV2's ReLU6 between blocked (NCHW16c) convolutions cost
# a layout transform out and back in. Constant bounds give the Relax ops instead (the same
# kernels once legalized), which take their input's layout.
@fix("Clip")
def _clip_constant_bounds(importer, inputs, attrs, opset):
    from tvm import relax

    x = inputs[0]
    dtype = str(x.ty.dtype)
    if not dtype.startswith("float"):
        return None
    if opset < 11:
        bounds = [attrs.get("min"), attrs.get("max")]
    else:
        bounds = []
        for bound in (list(inputs) + [None, None])[1:3]:
            value = None if bound is None else _constant(bound)
            if bound is not None and (value is None or value.size != 1):
                return None  # a bound computed at run time: TVM's converter
            bounds.append(None if value is None else float(value.reshape(())))
    low, high = (None if b is None or np.isnan(b) else float(b) for b in bounds)
    result = x
    if low is not None:
        result = relax.op.maximum(result, relax.const(low, dtype))
    if high is not None:
        result = relax.op.minimum(result, relax.const(high, dtype))
    return result


# --- Expand -------------------------------------------------------------------------------
# test_expand_shape_model{1..4}: the target shape is a model input (its values are known at
# run time only) and may have fewer dimensions than the data. tvm_hetero compiles static
# shapes: the output shape comes from ONNX shape inference (the model's declared output
# shape), and a run-time check raises when the given shape would broadcast to another one.
@fix("Expand")
def _expand(importer, inputs, attrs, opset):
    from tvm import relax

    data, shape = inputs[0], inputs[1]
    target = _constant(shape)
    data_dims = static_dims(data, "Expand")
    if target is None and isinstance(shape, relax.ShapeExpr):
        if not all(hasattr(d, "value") for d in shape.values):
            return None
        target = np.array([int(d.value) for d in shape.values])
    if target is not None:
        out_dims = tuple(np.broadcast_shapes(data_dims, tuple(int(t) for t in target)))
        return relax.op.broadcast_to(data, relax.ShapeExpr(out_dims))
    out_dims = importer.inferred_shape(attrs)
    if out_dims is None:
        raise ModelError(f"Expand (node {node_name(attrs)}) takes its target shape at run "
                         "time and ONNX shape inference cannot fix the output shape; "
                         "tvm_hetero needs static shapes: make the shape a constant")
    shape_dims = static_dims(shape, "Expand's shape")
    if len(shape_dims) != 1 or len(out_dims) != max(len(data_dims), shape_dims[0]):
        raise ModelError(f"Expand (node {node_name(attrs)}): the inferred output shape "
                         f"{out_dims} does not fit its inputs")
    # the given shape must broadcast with the data to exactly out_dims: entry i of `shape`
    # (right-aligned) is out_dims[j], or 1 where the data already has out_dims[j]
    checked = _check_expand_shape(importer.bb, shape, data_dims, out_dims, node_name(attrs))
    # the data passes through a `where` on the check's result, so the check runs first
    passed = relax.op.equal(relax.op.sum(checked), relax.const(0, "int64"))
    data = relax.op.where(passed, data, data)
    return relax.op.broadcast_to(data, relax.ShapeExpr(out_dims))


def _check_expand_shape(bb, shape, data_dims, out_dims, node_name):
    """A run-time check of Expand's shape input against the static output shape."""
    from tvm import relax

    rank = len(out_dims)
    padded = (1,) * (rank - len(data_dims)) + tuple(data_dims)
    count = int(static_dims(shape, "Expand's shape")[0])
    aligned = out_dims[rank - count:]
    data_aligned = padded[rank - count:]
    # entry i may be out[i], or 1 where the data has out[i]: shift by out[i] - 1 when allowed
    wanted = np.array(aligned, dtype="int64")
    alternative = np.array([1 if d == o else o for d, o in zip(data_aligned, aligned)],
                           dtype="int64")
    shape64 = relax.op.astype(shape, "int64")
    matches = relax.op.logical_or(relax.op.equal(shape64, relax.const(wanted)),
                                  relax.op.equal(shape64, relax.const(alternative)))
    # 0 where an entry matches, else 1 << 40 (out of any range): checked as an index
    offsets = relax.op.where(matches, relax.const(0, "int64"), relax.const(1 << 40, "int64"))
    return guard_indices(bb, bb.normalize(offsets), [1], "Expand (the shape input)",
                         node_name)


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

    if len(inputs) < 2 or inputs[1] is None or _constant(inputs[1]) is not None:
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
    position = _constant(inputs[2])
    if position is None:
        return None
    items = list(inputs[0])
    position = int(position)
    if position < 0:
        position += len(items)
    if not 0 <= position <= len(items):
        raise ModelError(f"SequenceInsert (node {node_name(attrs)}): position "
                         f"{int(_constant(inputs[2]))} is outside the sequence of "
                         f"{len(items)}")
    items.insert(position, inputs[1])
    return relax.Tuple(items)


# --- gathers and scatters: indices checked at run time (issue 18 item 5) ------------------
def _axis(attrs, rank: int, default: int = 0) -> int:
    axis = attrs.get("axis", default)
    return axis + rank if axis < 0 else axis


def _checked(importer, indices, bounds, op_name, attrs):
    if _constant(indices) is not None:
        values = _constant(indices).reshape(-1, len(bounds)) if indices.ty.ndim else \
            _constant(indices).reshape(-1, 1)
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
        dims = static_dims(data, op_name)
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


# --- the importer -------------------------------------------------------------------------
def _narrow_type_name(elem_type: int) -> str | None:
    """The ONNX name of an 8-bit float or a sub-byte type (FLOAT8E4M3FN, INT4, ...), else
    None."""
    from onnx import TensorProto

    name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() \
        else ""
    return name if name.startswith(("FLOAT8", "FLOAT4", "INT4", "UINT4", "INT2", "UINT2")) \
        else None


def _narrow_types(model) -> str | None:
    """Why a model that converts to 8-bit floats or sub-byte types is refused, or None.
    TVM 0.27 converts to 8-bit floats without ONNX's rounding and saturation (every such onnx
    node test is wrong under plain TVM) and reads them wrongly too, but for E8M0; it cannot run
    sub-byte tensors: out of scope rather than a wrong answer."""
    why = "8-bit float and sub-byte types are out of scope (TVM 0.27 neither rounds nor "\
          "saturates 8-bit floats as ONNX specifies, nor runs sub-byte tensors)"
    for node in model.graph.node:
        for attr in node.attribute:
            name = _narrow_type_name(attr.i) if node.op_type == "Cast" and attr.name == "to" \
                else None
            if name:
                return f"op Cast (node {node.name or node.output[0]}) converts to {name}: {why}"
    for value in model.graph.output:  # CastLike's (its type comes from an input)
        name = _narrow_type_name(value.type.tensor_type.elem_type)
        if name:
            return f"output {value.name} is {name}: {why}"
    for value in [*model.graph.input, *model.graph.initializer]:
        elem_type = getattr(value, "data_type", 0) or value.type.tensor_type.elem_type
        name = _narrow_type_name(elem_type)
        if name and name != "FLOAT8E8M0":  # TVM reads E8M0 right, the others wrong
            return f"input {value.name} is {name}: {why}"
    return None


def _refusal(model) -> str | None:
    """Why the model cannot be imported (an out-of-scope op or string tensors), or None."""
    from onnx import TensorProto

    for node in model.graph.node:
        if node.op_type in REFUSED_OPS:
            return f"op {node.op_type} is {REFUSED_OPS[node.op_type]}"
    narrow = _narrow_types(model)
    if narrow:
        return narrow
    strings = {v.name for v in [*model.graph.input, *model.graph.output,
                                *model.graph.value_info]
               if v.type.tensor_type.elem_type == TensorProto.STRING}
    strings |= {t.name for t in model.graph.initializer if t.data_type == TensorProto.STRING}
    for node in model.graph.node:
        if strings & {*node.input, *node.output}:
            return (f"op {node.op_type} (node {node.name or node.output[0]}) works on string "
                    "tensors, which TVM does not support")
    return None


def _static_shapes(model) -> dict[str, tuple[int, ...]]:
    """Static shapes of every value ONNX shape inference can fix, by value name."""
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


def import_onnx(model, shape_dict: dict[str, list], dtype_dict: dict[str, str]):
    """Import an ONNX model with TVM's importer and our fixes (weights bound as constants).

    Parameters
    ----------
    model : onnx.ModelProto
        The model (not modified).
    shape_dict, dtype_dict : dict
        Static shape and dtype of each graph input.

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

    refusal = _refusal(model)
    if refusal is not None:
        raise ModelError(refusal)
    model_copy = type(model)()
    model_copy.CopyFrom(model)
    seen = set()
    for index, node in enumerate(model_copy.graph.node):  # unique names: shapes by node
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{index}"
        seen.add(node.name)
    static_shapes = _static_shapes(model_copy)
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

    importer = _FixedImporter(shape_dict, dtype_dict, keep_params_in_input=False)
    importer.upper_bounds = {}  # symbolic dimension name -> upper bound
    mod = importer.from_onnx(model_copy.graph, _opset(model_copy))
    if importer.upper_bounds:
        mod["main"] = mod["main"].with_attr(UPPER_BOUND_ATTR, importer.upper_bounds)
    return materialize_constant_outputs(mod)


from . import recurrent  # noqa: E402,F401 (registers the LSTM, GRU and RNN converters)


from . import attention  # noqa: E402,F401 (registers ONNX's Attention converter)
