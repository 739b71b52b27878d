"""Fixes of ops whose output shape depends on an input's values: Slice (attributes before
opset 10), and Slice, Tile, Squeeze, Unsqueeze and Expand given those inputs at run time (the
output shape from ONNX shape inference, the values checked against it at run time); Compress,
NonZero and Unique (their symbolic dimensions given an upper bound)."""

from __future__ import annotations

import numpy as np

from ...errors import ModelError
from .index_guard import guard_indices, static_dims
from .registry import constant_value, fix, node_name


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
    if all(b is None or constant_value(b) is not None for b in bounds):
        return None
    data = inputs[0]
    dims = static_dims(data, "Slice")
    out_dims = importer.inferred_shape(attrs)
    if out_dims is None and any(isinstance(b, relax.ShapeExpr)
                                for b in bounds):
        return None  # bounds from symbolic dimensions (a shape range): TVM's converter
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
    if constant_value(repeats) is not None:
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

    if len(inputs) < 2 or inputs[1] is None or constant_value(inputs[1]) is not None:
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
# run time: nonzero and unique run on the host CPU, see relax_ir.HOST_BUILTINS); each symbolic
# dimension gets an upper bound here, which the layers' byte estimates and TVM's memory
# planning use (main's tir_var_upper_bound): no more than the elements of the input that
# decides the count (Compress: its condition; NonZero, Unique: the data).
@fix("Compress", "NonZero", "Unique")
def _data_dependent_shape(importer, inputs, attrs, opset):
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend

    op_name = attrs["tvm_custom"]["op_type"]
    if all(inp is None or constant_value(inp) is not None for inp in inputs):
        return None  # constant inputs: TVM's converter folds them
    counted = inputs[1] if op_name == "Compress" else inputs[0]
    bound = int(np.prod(static_dims(counted, op_name), dtype=np.int64))
    result = importer.bb.normalize(onnx_frontend.ONNXGraphImporter._convert_operator(
        importer, op_name, inputs, attrs, opset))
    for var in relax.analysis.tir_vars_in_type(result.ty):
        importer.upper_bounds[var.name] = max(importer.upper_bounds.get(var.name, 0), bound)
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
    target = constant_value(shape)
    if target is not None and target.ndim == 1:
        shape = relax.ShapeExpr([int(t) for t in target])
    if isinstance(shape, relax.ShapeExpr) and _symbolic_dims(data, shape):
        return relax.op.broadcast_to(data, relax.ShapeExpr(_broadcast_symbolic(data, shape)))
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


def _symbolic_dims(data, shape) -> bool:
    """Whether Expand's data or target (a ShapeExpr) has a symbolic dimension (a shape
    range's), the data's shape being known."""
    from tvm import tirx

    data_shape = getattr(getattr(data.ty, "shape", None), "values", None)
    if data_shape is None:
        return False
    return not all(isinstance(d, tirx.IntImm) for d in list(data_shape) + list(shape.values))


def _broadcast_symbolic(data, shape) -> list:
    """Expand's output dimensions where some are symbolic: a 1 on either side takes the
    other side's dimension; otherwise the target's (equal to the data's, or the run-time
    broadcast check fails)."""
    from tvm import tirx

    data_dims = list(data.ty.shape.values)
    target = list(shape.values)
    rank = max(len(data_dims), len(target))
    data_dims = [tirx.IntImm("int64", 1)] * (rank - len(data_dims)) + data_dims
    target = [tirx.IntImm("int64", 1)] * (rank - len(target)) + target

    def is_one(dim):
        return isinstance(dim, tirx.IntImm) and int(dim) == 1

    return [d if is_one(t) else t for d, t in zip(data_dims, target)]


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
