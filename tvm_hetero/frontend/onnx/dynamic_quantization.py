"""The ops of onnxruntime's dynamic quantization (``quantize_dynamic``): DynamicQuantizeLinear,
MatMulInteger and ConvInteger, exact to the bit.

``quantize_dynamic`` writes each MatMul and Conv as DynamicQuantizeLinear of the activation (a
scale and a zero point computed from its range at run time), MatMulInteger or ConvInteger on
the 8-bit values (int32 products), then Cast, Mul by the two scales and Add of the bias.

- DynamicQuantizeLinear: TVM's converter divides by a scale of 0 where the input is all zeros
  (onnxruntime takes a scale of 1 there). Here it is onnxruntime's arithmetic: the range
  widened to include 0, ``scale = (max - min) / 255`` (1 where max == min), ``zero point =
  clip(round(-min / scale), 0, 255)`` and ``y = clip(round(x / scale) + zero point, 0, 255)``,
  rounding half to even, a true division.
- MatMulInteger: TVM's converter makes a 1-D input 2-D with a one-element zero point. Here the
  zero points broadcast the ONNX way: a scalar or one element per tensor, ``[M]`` per row of A,
  ``[N]`` per column of B, N-D ones as they are.
- ConvInteger: not converted by TVM 0.27. Here it is a convolution of the int32 differences
  ``x - x_zero_point`` and ``w - w_zero_point`` (per output channel where it is a vector), by
  TVM's Conv converter (pads, strides, dilations, group, auto_pad; 1-D to 3-D): zero padding
  of the differences is padding with the zero point, as onnxruntime pads.

The products are int32 as in onnxruntime (wrapping alike where they overflow).
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError
from .index_guard import static_dims
from .registry import fix, node_name

EIGHT_BIT = ("int8", "uint8")


def _where(attrs) -> str:
    name = node_name(attrs)
    return f" (node {name})" if name else ""


def _eight_bit(expr, op: str, what: str, attrs) -> str:
    dtype = str(expr.ty.dtype)
    if dtype not in EIGHT_BIT:
        raise ModelError(f"{op}{_where(attrs)}: {what} is {dtype}; ONNX allows int8 and uint8")
    return dtype


def _given(inputs, index: int):
    """The optional input at `index`, or None (absent or empty)."""
    return inputs[index] if len(inputs) > index and inputs[index] is not None else None


def _difference(value, zero_point, zero_point_shape=None):
    """``int32(value) - int32(zero_point)`` (the zero point reshaped to `zero_point_shape`
    first where given), or ``int32(value)`` without a zero point."""
    from tvm import relax

    wide = relax.op.astype(value, "int32")
    if zero_point is None:
        return wide
    point = relax.op.astype(zero_point, "int32")
    if zero_point_shape is not None:
        point = relax.op.reshape(point, zero_point_shape)
    return relax.op.subtract(wide, point)


# --- DynamicQuantizeLinear ------------------------------------------------------------------
@fix("DynamicQuantizeLinear")
def _dynamic_quantize_linear(importer, inputs, attrs, opset):
    from tvm import relax

    x = inputs[0]
    dtype = str(x.ty.dtype)
    if dtype != "float32":
        raise ModelError(f"DynamicQuantizeLinear{_where(attrs)}: the input is {dtype}; ONNX "
                         f"allows float32")
    dims = static_dims(x, f"DynamicQuantizeLinear{_where(attrs)}")
    if int(np.prod(dims)) == 0:
        raise ModelError(f"DynamicQuantizeLinear{_where(attrs)}: an empty input of shape "
                         f"{dims} has no range to quantize")

    def const(value):
        return relax.const(value, "float32")

    low = relax.op.minimum(relax.op.min(x), const(0.0))
    high = relax.op.maximum(relax.op.max(x), const(0.0))
    scale = relax.op.where(relax.op.equal(high, low), const(1.0),
                           relax.op.divide(relax.op.subtract(high, low), const(255.0)))
    scale = importer.bb.emit(scale)
    zero_point = relax.op.round(relax.op.clip(
        relax.op.negative(relax.op.divide(low, scale)), 0, 255))
    zero_point = importer.bb.emit(zero_point)
    quantized = relax.op.clip(relax.op.add(relax.op.round(relax.op.divide(x, scale)),
                                           zero_point), 0, 255)
    return relax.Tuple([relax.op.astype(quantized, "uint8"), scale,
                        relax.op.astype(zero_point, "uint8")])


# --- MatMulInteger --------------------------------------------------------------------------
def _matmul_zero_point_shape(point_dims, data_dims, per: str, op: str, attrs):
    """The shape a MatMulInteger zero point takes to broadcast over its input: ``()`` for one
    value, ``[M, 1]`` for a vector per row of A, ``[N]`` for a vector per column of B, an N-D
    one as it is (it must broadcast)."""
    size = int(np.prod(point_dims))
    if size == 1:
        return ()
    if len(point_dims) == 1:
        index = -2 if per == "row" else -1
        extent = data_dims[index] if len(data_dims) >= 2 else None
        if extent != point_dims[0]:
            side = "A's rows" if per == "row" else "B's columns"
            raise ModelError(f"{op}{_where(attrs)}: a zero point of {point_dims[0]} values does "
                             f"not match {side} (input shape {data_dims})")
        return (extent, 1) if per == "row" else (extent,)
    if len(point_dims) != len(data_dims) or any(
            p not in (1, d) for p, d in zip(point_dims, data_dims)):
        raise ModelError(f"{op}{_where(attrs)}: a zero point of shape {point_dims} does not "
                         f"broadcast over an input of shape {data_dims}")
    return None


@fix("MatMulInteger")
def _matmul_integer(importer, inputs, attrs, opset):
    from tvm import relax

    a, b = inputs[0], inputs[1]
    a_point, b_point = _given(inputs, 2), _given(inputs, 3)
    for value, what in ((a, "A"), (b, "B"), (a_point, "A's zero point"),
                        (b_point, "B's zero point")):
        if value is not None:
            _eight_bit(value, "MatMulInteger", what, attrs)
    a_dims = static_dims(a, f"MatMulInteger{_where(attrs)}")
    b_dims = static_dims(b, f"MatMulInteger{_where(attrs)}")
    a_shape = None if a_point is None else _matmul_zero_point_shape(
        static_dims(a_point, "MatMulInteger's zero point"), a_dims, "row", "MatMulInteger", attrs)
    b_shape = None if b_point is None else _matmul_zero_point_shape(
        static_dims(b_point, "MatMulInteger's zero point"), b_dims, "column", "MatMulInteger",
        attrs)
    return relax.op.matmul(_difference(a, a_point, a_shape), _difference(b, b_point, b_shape),
                           out_dtype="int32")


# --- ConvInteger ----------------------------------------------------------------------------
@fix("ConvInteger")
def _conv_integer(importer, inputs, attrs, opset):
    from tvm.relax.frontend.onnx import onnx_frontend

    x, w = inputs[0], inputs[1]
    x_point, w_point = _given(inputs, 2), _given(inputs, 3)
    for value, what in ((x, "x"), (w, "w"), (x_point, "x's zero point"),
                        (w_point, "w's zero point")):
        if value is not None:
            _eight_bit(value, "ConvInteger", what, attrs)
    x_dims = static_dims(x, f"ConvInteger{_where(attrs)}")
    w_dims = static_dims(w, f"ConvInteger{_where(attrs)}")
    if len(x_dims) not in (3, 4, 5) or len(w_dims) != len(x_dims):
        raise ModelError(f"ConvInteger{_where(attrs)}: inputs of shapes {x_dims} and {w_dims} "
                         f"are not a 1-D, 2-D or 3-D convolution (NCW, NCHW, NCDHW)")
    x_shape = w_shape = None
    if x_point is not None:
        if int(np.prod(static_dims(x_point, "ConvInteger's zero point"))) != 1:
            raise ModelError(f"ConvInteger{_where(attrs)}: x's zero point must be one value "
                             f"(ONNX: per tensor)")
        x_shape = ()
    if w_point is not None:
        size = int(np.prod(static_dims(w_point, "ConvInteger's zero point")))
        if size not in (1, w_dims[0]):
            raise ModelError(f"ConvInteger{_where(attrs)}: w's zero point has {size} values; "
                             f"ONNX allows one or one per output channel ({w_dims[0]})")
        w_shape = () if size == 1 else (w_dims[0],) + (1,) * (len(w_dims) - 1)
    conv_attrs = {k: v for k, v in attrs.items() if k != "tvm_custom"}
    bb = importer.bb
    data = bb.normalize(_difference(x, x_point, x_shape))
    weight = bb.normalize(_difference(w, w_point, w_shape))
    return onnx_frontend.Conv._impl_v11(bb, [data, weight, None], conv_attrs, {})


__all__: list[str] = []
