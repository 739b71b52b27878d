"""DropPaddingTaps: the taps of a convolution window that read only padding are not computed.

A tap (a row or column of the window) whose input row ``out * stride - pad + tap * dilation``
falls in the padding for every output row multiplies zeros. Dilated convolutions on small maps
are made of such taps: DeepLabV3's atrous pyramid runs 3x3 convolutions of dilation 24 and 36
with as much padding on a 16x16 map, where every tap but the centre reads padding, so each is a
1x1 convolution costing nine times its work. The pass slices those taps off the constant weight
and the padding they faced, which keeps the output's size and every value (a dropped tap only
ever added zeros): ``(H + pad_begin + pad_end - dilation * (kernel - 1) - 1) // stride + 1``
loses ``dilation`` from both terms per tap. A window left with one tap along an axis takes
dilation 1 there, so the 1x1 rules reach it.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .base import rewrite_functions

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")


def live_taps(size: int, out_size: int, kernel: int, stride: int, pad_begin: int,
              dilation: int) -> tuple[int, int]:
    """``(first, last)`` taps along one axis that read an input element for some output:
    tap ``t`` reads ``o * stride - pad_begin + t * dilation`` for ``o`` in ``[0, out_size)``.
    Taps between two live ones are kept (the window stays evenly dilated)."""
    live = [t for t in range(kernel)
            if any(0 <= o * stride - pad_begin + t * dilation < size for o in range(out_size))]
    return (live[0], live[-1]) if live else (kernel // 2, kernel // 2)


def _static(shape) -> list[int] | None:
    dims = []
    for dim in shape:
        if not isinstance(dim, tvm.tirx.IntImm):
            return None
        dims.append(int(dim))
    return dims


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.same_as(_CONV2D)):
            return call
        attrs = call.attrs
        data, weight = call.args
        if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW" \
                or not isinstance(weight, tvm.ir.GenericConst):
            return call
        data_shape = _static(data.ty.shape.values)
        out_shape = _static(call.ty.shape.values) if str(attrs.out_layout) == "NCHW" else None
        if data_shape is None or out_shape is None:
            return call
        kernel = weight.value.numpy()
        pad_begin = [int(attrs.padding[0]), int(attrs.padding[1])]
        pad_end = [int(attrs.padding[2]), int(attrs.padding[3])]
        strides = [int(s) for s in attrs.strides]
        dilation = [int(d) for d in attrs.dilation]
        taps, new_begin, new_end, new_dilation = [], [], [], []
        for axis in range(2):
            k = kernel.shape[2 + axis]
            first, last = live_taps(data_shape[2 + axis], out_shape[2 + axis], k, strides[axis],
                                    pad_begin[axis], dilation[axis])
            begin = pad_begin[axis] - first * dilation[axis]
            end = pad_end[axis] - (k - 1 - last) * dilation[axis]
            if begin < 0 or end < 0:  # the window would crop the input: keep every tap
                first, last, begin, end = 0, k - 1, pad_begin[axis], pad_end[axis]
            taps.append((first, last))
            new_begin.append(begin)
            new_end.append(end)
            new_dilation.append(1 if first == last else dilation[axis])
        if all(t == (0, k - 1) for t, k in zip(taps, kernel.shape[2:])):
            return call
        (top, bottom), (left, right) = taps
        sliced = relax.const(kernel[:, :, top:bottom + 1, left:right + 1].copy())
        return relax.op.nn.conv2d(
            data, sliced, strides=strides, padding=[*new_begin, *new_end],
            dilation=new_dilation, groups=int(attrs.groups), data_layout="NCHW",
            kernel_layout="OIHW", out_layout="NCHW",
            out_dtype=attrs.out_dtype if str(attrs.out_dtype) else None)


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.DropPaddingTaps")
class DropPaddingTaps:
    """Convolutions (NCHW, constant OIHW weights) lose the window rows and columns that read
    only padding for every output (:func:`live_taps`): the weight sliced, the padding reduced
    by the same, dilation 1 along an axis left with one tap. Values and shapes unchanged."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(mod, _Rewriter(mod))
