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

Where taps read the map for some outputs and padding for others, and that padding is most of
the work (rate 12 on the same 16x16 map: 75 % of the tap-pixels read zeros), the output is cut
into bands along each axis within which every output reads the same taps, all of them inside
the map (:func:`tap_bands`); each region (a row band by a column band) is a convolution of its
own live taps over the input it reads, without padding, and the regions are concatenated back.
Below `MIN_BANDED_WASTE` a convolution is left whole: an ordinary 3x3 convolution with a
one-pixel border wastes 7 % at 56x56, which a convolution cut in nine would not win back.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax

from ..relax_ir import static_shape
from .base import rewrite_functions

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")


# The least share of a convolution's tap-pixels reading padding for which it is cut into bands.
MIN_BANDED_WASTE = 0.5


def tap_bands(size: int, out_size: int, kernel: int, stride: int, pad_begin: int,
              dilation: int) -> list[tuple[int, int, int, int]]:
    """The outputs along one axis cut into bands ``(first output, end, first tap, last tap)``:
    within a band every output reads the taps ``first..last`` inside the map and no others
    (``last < first`` where every tap reads padding)."""
    bands = []
    for out in range(out_size):
        start = out * stride - pad_begin
        first = -(start // dilation) if start < 0 else 0
        last = min(kernel - 1, (size - 1 - start) // dilation)
        if last < first:
            first, last = 0, -1
        if bands and bands[-1][2:] == (first, last):
            bands[-1] = (bands[-1][0], out + 1, first, last)
        else:
            bands.append((out, out + 1, first, last))
    return bands


def live_taps(size: int, out_size: int, kernel: int, stride: int, pad_begin: int,
              dilation: int) -> tuple[int, int]:
    """``(first, last)`` taps along one axis that read an input element for some output
    (the span of :func:`tap_bands`' taps); taps between two live ones are kept (the window
    stays evenly dilated); the centre tap where none is live."""
    return _span(tap_bands(size, out_size, kernel, stride, pad_begin, dilation), kernel)


def _span(bands, kernel: int) -> tuple[int, int]:
    """The first and last tap any of `bands` reads; the centre tap where none reads one."""
    spans = [(first, last) for _, _, first, last in bands if first <= last]
    if not spans:
        return kernel // 2, kernel // 2
    return min(first for first, _ in spans), max(last for _, last in spans)


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
        data_shape = static_shape(data)
        out_shape = static_shape(call) if str(attrs.out_layout) == "NCHW" else None
        if data_shape is None or out_shape is None:
            return call
        kernel = weight.value.numpy()
        geometry = [(data_shape[2 + axis], out_shape[2 + axis], kernel.shape[2 + axis],
                     int(attrs.strides[axis]), int(attrs.padding[axis]),
                     int(attrs.dilation[axis])) for axis in range(2)]
        bands = [tap_bands(*g) for g in geometry]
        computed = sum((r1 - r0) * (c1 - c0) * (rb - ra + 1) * (cb - ca + 1)
                       for r0, r1, ra, rb in bands[0] for c0, c1, ca, cb in bands[1])
        # the work of the window without its padding-only taps, which slicing alone drops
        live = [_span(b, g[2]) for b, g in zip(bands, geometry)]
        work = out_shape[2] * out_shape[3] * math.prod(last - first + 1 for first, last in live)
        if 1 - computed / work >= MIN_BANDED_WASTE:
            return self._banded(call, data, kernel, geometry, bands, out_shape)
        return self._live_window(call, data, kernel, geometry, live)

    def _live_window(self, call, data, kernel, geometry, live):
        """The convolution without the window rows and columns that read only padding (`live`:
        the first and last live tap along each axis)."""
        attrs = call.attrs
        taps, begins, ends, dilation = [], [], [], []
        for axis, (_, _, k, _, pad_begin, dil) in enumerate(geometry):
            first, last = live[axis]
            begin = pad_begin - first * dil
            end = int(attrs.padding[2 + axis]) - (k - 1 - last) * dil
            if begin < 0 or end < 0:  # the window would crop the input: keep every tap
                first, last, begin, end = 0, k - 1, pad_begin, int(attrs.padding[2 + axis])
            taps.append((first, last))
            begins.append(begin)
            ends.append(end)
            dilation.append(1 if first == last else dil)
        if all(t == (0, g[2] - 1) for t, g in zip(taps, geometry)):
            return call
        (top, bottom), (left, right) = taps
        return self._conv(call, data, kernel[:, :, top:bottom + 1, left:right + 1],
                          [*begins, *ends], dilation)

    def _banded(self, call, data, kernel, geometry, bands, out_shape):
        """The convolution as one region per row band x column band, each of its live taps
        over the input it reads, no padding; the regions concatenated back."""
        several = len(bands[0]) * len(bands[1]) > 1
        rows = []
        for r0, r1, ra, rb in bands[0]:
            regions = []
            for c0, c1, ca, cb in bands[1]:
                if rb < ra or cb < ca:  # every tap reads padding: the product is zero
                    regions.append(relax.op.zeros(
                        [out_shape[0], out_shape[1], r1 - r0, c1 - c0], call.ty.dtype))
                    if several:
                        regions[-1] = self.builder_.emit(regions[-1])
                    continue
                crop, dilation = data, []
                for axis, (o0, o1, first, last) in enumerate(((r0, r1, ra, rb),
                                                               (c0, c1, ca, cb))):
                    size, _, _, stride, pad_begin, dil = geometry[axis]
                    begin = o0 * stride - pad_begin + first * dil
                    end = (o1 - 1) * stride - pad_begin + last * dil + 1
                    if (begin, end) != (0, size):
                        crop = relax.op.strided_slice(crop, [2 + axis], [begin], [end])
                    dilation.append(1 if first == last else dil)
                if crop is not data:
                    crop = self.builder_.emit(crop)
                regions.append(self._conv(call, crop, kernel[:, :, ra:rb + 1, ca:cb + 1],
                                          [0, 0, 0, 0], dilation))
                if several:
                    regions[-1] = self.builder_.emit(regions[-1])
            rows.append(self._concat(regions, axis=3, emit=len(bands[0]) > 1))
        return self._concat(rows, axis=2, emit=False)

    def _concat(self, parts, axis, emit=True):
        if len(parts) == 1:
            return parts[0]
        joined = relax.op.concat(parts, axis=axis)
        return self.builder_.emit(joined) if emit else joined

    @staticmethod
    def _conv(call, data, kernel, padding, dilation):
        attrs = call.attrs
        return relax.op.nn.conv2d(
            data, relax.const(kernel.copy()), strides=[int(s) for s in attrs.strides],
            padding=padding, dilation=dilation, groups=int(attrs.groups), data_layout="NCHW",
            kernel_layout="OIHW", out_layout="NCHW",
            out_dtype=attrs.out_dtype if str(attrs.out_dtype) else None)


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.DropPaddingTaps")
class DropPaddingTaps:
    """Convolutions (NCHW, constant OIHW weights) lose the window rows and columns that read
    only padding for every output (:func:`live_taps`): the weight sliced, the padding reduced
    by the same, dilation 1 along an axis left with one tap. Where most of the tap-pixels read
    padding (`MIN_BANDED_WASTE`), the output is computed by bands of outputs that read the
    same taps (:func:`tap_bands`). Values and shapes unchanged."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(mod, _Rewriter(mod))
