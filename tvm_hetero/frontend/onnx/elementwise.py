"""Fixes of elementwise ops: PRelu's slope, BitShift's out-of-range amounts, Clip with
constant bounds."""

from __future__ import annotations

import numpy as np

from ...errors import ModelError
from .index_guard import static_dims
from .registry import constant_value, fix, node_name


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
            all(constant_value(v) is not None for v in (data, amount)):
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
            value = None if bound is None else constant_value(bound)
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
