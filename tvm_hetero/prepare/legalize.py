"""The legalizations of our own: ``relax.nn.conv2d`` (blocked-layout convolutions to the
computes of :mod:`tvm_hetero.ops`, Winograd where it fits, the others to TVM's own) and
``relax.cumsum``/``relax.cumprod``, which TVM 0.27 does not legalize (the scan kernel of
:mod:`tvm_hetero.ops.scan`)."""

from __future__ import annotations

import re

import tvm
from tvm import relax
from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

from ..errors import ModelError
from ..ops import conv2d_nchwc, grouped_conv1x1, scan, winograd
from .config import PrepareConfig


def conv2d_legalizer(config: PrepareConfig, keeps=None):
    """The ``LegalizeOps`` function for ``relax.nn.conv2d`` under `config`.

    Blocked-layout convolutions (``NCHW[x]c`` data and output, ``OIHW[x]i[y]o`` weight: TVM's
    legalization leaves them as they are) become :func:`tvm_hetero.ops.conv2d_nchwc.conv2d_nchwc`
    (depthwise ones, ``OIHW1i[x]o`` with one group per channel,
    :func:`~tvm_hetero.ops.conv2d_nchwc.depthwise_conv2d_nchwc`),
    or :func:`tvm_hetero.ops.winograd.conv2d_nchwc` with the weights transformed here when the
    weights are float32 constants, the blocks ``config.block_lanes`` wide and the convolution
    fits (``config.winograd_fits``); grouped 1x1 stride-1 NCHW ones
    (``config.grouped_pixels``) become
    :func:`tvm_hetero.ops.grouped_conv1x1.grouped_conv2d_1x1` with the pixels padded to
    ``config.channel_lanes``; other NCHW and NHWC ones go to TVM's legalization; other layouts
    raise :class:`ModelError`. `keeps` (``call -> bool``, optional) names the convolutions that
    keep the model's form (:mod:`.device_forms`): TVM's legalization, whatever `config` says.
    """

    def legalize(bb, call):
        attrs = call.attrs
        data, kernel, out = (str(attrs.data_layout), str(attrs.kernel_layout),
                             str(attrs.out_layout))
        if len(data) == 4 and len(kernel) == 4:
            if config.grouped_pixels and (data, kernel, out) == ("NCHW", "OIHW", "NCHW") \
                    and not (keeps is not None and keeps(call)) \
                    and grouped_conv1x1.fits(call.args[0].ty.shape, call.args[1].ty.shape,
                                             int(attrs.groups), attrs.strides, attrs.padding,
                                             attrs.dilation, (call.args[0].ty.dtype,
                                                              call.args[1].ty.dtype,
                                                              call.ty.dtype)):
                return bb.call_te(grouped_conv1x1.grouped_conv2d_1x1, call.args[0],
                                  call.args[1], int(attrs.groups), config.channel_lanes,
                                  primfunc_name_hint="conv2d")
            return _nn_conv2d(bb, call)
        data_block = re.fullmatch(r"NCHW(\d+)c", data)
        kernel_block = re.fullmatch(r"OIHW(\d+)i(\d+)o", kernel)
        if data_block and kernel_block and out == data and kernel_block.group(1) == "1" \
                and kernel_block.group(2) == data_block.group(1) \
                and int(attrs.groups) == int(call.args[0].ty.shape[1]) * int(
                    data_block.group(1)) == int(call.ty.shape[1]) * int(data_block.group(1)):
            return bb.call_te(conv2d_nchwc.depthwise_conv2d_nchwc, call.args[0], call.args[1],
                              attrs.strides, attrs.padding, attrs.dilation,
                              primfunc_name_hint="conv2d")
        out_block = re.fullmatch(r"NCHW(\d+)c", out)
        if not (data_block and kernel_block and out_block and int(attrs.groups) == 1
                and kernel_block.group(1) == data_block.group(1)
                and kernel_block.group(2) == out_block.group(1)):
            raise ModelError(f"conv2d with layouts {data}/{kernel}/{out} (groups {attrs.groups})"
                             f" is not supported: NCHW, NHWC or NCHW[x]c with OIHW[x]i[y]o "
                             f"(depthwise: OIHW1i[x]o)")
        weight = call.args[1]
        if isinstance(weight, relax.Var):  # the blocked weight, folded and bound to a variable
            weight = bb.lookup_binding(weight)
        if isinstance(weight, tvm.ir.GenericConst) and str(weight.ty.dtype) == "float32":
            in_blocks, _, _, lanes = (int(v) for v in list(call.args[0].ty.shape)[1:])
            out_blocks, out_h, out_w = (int(v) for v in list(call.ty.shape)[1:4])
            # Winograd's kernel is of one image: not for a symbolic batch
            static_batch = isinstance(call.ty.shape[0], tvm.tirx.IntImm)
            batch = int(call.ty.shape[0]) if static_batch else 0
            window = [int(v) for v in weight.ty.shape][2:4]
            if static_batch and lanes == config.block_lanes and config.winograd_fits(
                    batch, in_blocks * lanes, out_blocks * lanes, out_h, out_w, window,
                    [int(v) for v in attrs.strides], [int(v) for v in attrs.padding],
                    [int(v) for v in attrs.dilation], int(attrs.groups)):
                transformed = relax.const(winograd.transform_weight(weight.value.numpy()))
                return bb.call_te(winograd.conv2d_nchwc, call.args[0], transformed,
                                  primfunc_name_hint="conv2d")
        return bb.call_te(conv2d_nchwc.conv2d_nchwc, call.args[0], call.args[1], attrs.strides,
                          attrs.padding, attrs.dilation, primfunc_name_hint="conv2d")

    return legalize


def scan_legalizers() -> dict:
    """The ``LegalizeOps`` functions of ``relax.cumsum`` and ``relax.cumprod`` (TVM 0.27 has
    none: their ops are left as they are and the build fails): the scan kernel of
    :func:`tvm_hetero.ops.scan.emit_scan`, along the call's axis, in its dtype, exclusive as
    asked; with no axis over the flattened data, as the op specifies.

    Returns
    -------
    dict
        ``{"relax.cumsum": legalize, "relax.cumprod": legalize}``.
    """

    def legalizer(op: str):
        def legalize(bb, call):
            attrs = call.attrs
            data = call.args[0]
            out_dtype = str(attrs.dtype) if attrs.dtype is not None and str(attrs.dtype) \
                not in ("", "void") else None
            axis = attrs.axis
            if axis is None:  # the flattened data
                extents = getattr(getattr(data.ty, "shape", None), "values", None)
                if extents is None:
                    raise ModelError(f"relax.{op} needs a known input shape")
                size = 1
                for extent in extents:
                    size = size * extent
                data = bb.emit(relax.op.reshape(data, (size,)))
                axis = 0
            try:
                return scan.emit_scan(bb, data, int(axis), op, bool(attrs.exclusive),
                                      out_dtype=out_dtype)
            except ValueError as err:
                raise ModelError(f"relax.{op}: {err}") from err

        return legalize

    return {f"relax.{op}": legalizer(op) for op in scan.SCAN_OPS}


def resize_legalizer(config: PrepareConfig, keeps=None):
    """The ``LegalizeOps`` function for ``relax.image.resize2d`` under `config`: with
    ``config.separable_resize``, bilinear NCHW float32 resizes of static shapes (coordinate
    transformations of :data:`tvm_hetero.ops.resize.MODES`) become
    :func:`tvm_hetero.ops.resize.separable_linear` with their tables as constants; the others,
    and those `keeps` names (``call -> bool``: the layers that keep the model's form,
    :mod:`.device_forms`), go to TVM's legalization."""
    from tvm.relax.transform.legalize_ops.image import _image_resize2d

    from ..ops import resize

    def legalize(bb, call):
        attrs = call.attrs
        data = call.args[0]
        shape = [getattr(d, "value", None) for d in data.ty.shape.values] \
            if data.ty.shape is not None else [None]
        out = [getattr(d, "value", None) for d in call.ty.shape.values] \
            if call.ty.shape is not None else [None]
        if not config.separable_resize or str(attrs.method) != "linear" \
                or str(attrs.layout) != "NCHW" \
                or str(attrs.coordinate_transformation_mode) not in resize.MODES \
                or str(data.ty.dtype) != "float32" or None in shape + out or len(shape) != 4 \
                or (keeps is not None and keeps(call)):
            return _image_resize2d(bb, call)
        tables = [relax.const(t) for axis in (2, 3) for t in resize.linear_tables(
            shape[axis], out[axis], str(attrs.coordinate_transformation_mode))]
        return bb.call_te(resize.separable_linear, data, *tables, primfunc_name_hint="resize2d")

    return legalize
