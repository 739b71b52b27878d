"""BlockedConvLayout: the convolutions of a model with enough convolution work in the blocked
layout NCHW[x]c."""

from __future__ import annotations

import logging

import numpy as np
import tvm
from tvm import relax

from ..errors import error_message
from ..layers import main_bindings
from ..ops import conv2d_nchwc
from .clip_as_min_max import ClipAsMinMax
from .config import PrepareConfig
from .fold_constant_layouts import FoldConstantLayouts

logger = logging.getLogger(__name__)


def conv2d_flops(call) -> float:
    """Multiply-adds x 2 of a Relax NCHW/OIHW ``conv2d`` call (0 when a shape is unknown)."""
    out, weight = call.ty, call.args[1].ty
    if out.shape is None or weight.shape is None:
        return 0.0
    try:
        return 2.0 * float(np.prod([int(v) for v in out.shape])) * float(
            np.prod([int(v) for v in list(weight.shape)[1:]]))
    except TypeError:  # symbolic dimensions
        return 0.0


def runs_as_winograd(call, config: PrepareConfig) -> bool:
    """Whether a Relax NCHW/OIHW ``conv2d`` call would run as Winograd once blocked."""
    attrs, out, weight = call.attrs, call.ty, call.args[1].ty
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW" \
            or str(attrs.out_layout) != "NCHW" or out.shape is None or weight.shape is None \
            or str(weight.dtype) != "float32":
        return False
    try:
        n, k, h, w = (int(v) for v in out.shape)
        _, c, kh, kw = (int(v) for v in weight.shape)
    except TypeError:  # symbolic dimensions
        return False
    return config.winograd_fits(n, c, k, h, w, (kh, kw), [int(v) for v in attrs.strides],
                                [int(v) for v in attrs.padding],
                                [int(v) for v in attrs.dilation], int(attrs.groups))


def is_blockable_depthwise(call, lanes: int) -> bool:
    """Whether a Relax ``conv2d`` call is a float32 NCHW/OIHW depthwise convolution (one input
    channel per output channel, groups = channels) of a multiple of `lanes` channels."""
    attrs, data, weight = call.attrs, call.args[0].ty, call.args[1].ty
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW" \
            or str(attrs.out_layout) != "NCHW" or weight.shape is None or data.shape is None \
            or str(weight.dtype) != "float32":
        return False
    try:
        channels, per_group = int(data.shape[1]), int(weight.shape[1])
        out_channels = int(weight.shape[0])
    except TypeError:  # symbolic dimensions
        return False
    return per_group == 1 and int(attrs.groups) == channels == out_channels \
        and channels % lanes == 0


def _conv_calls(mod) -> list:
    return [binding.value for binding in main_bindings(mod)
            if isinstance(binding.value, relax.Call)
            and getattr(binding.value.op, "name", "") == "relax.nn.conv2d"]


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.BlockedConvLayout")
class BlockedConvLayout:
    """In a model whose convolutions add up to at least ``config.blocked_min_model_flops``
    FLOPs, or one of which runs as Winograd, every float32 convolution (NCHW, groups 1) whose
    input and output channels are multiples of ``config.block_lanes`` goes to the blocked
    layout ``NCHW[lanes]c`` (``[N, C/lanes, H, W, lanes]``, weights ``OIHW[lanes]i[lanes]o``),
    and so does every depthwise one of such channels (weights ``OIHW1i[lanes]o``: between
    blocked 1x1 convolutions, MobileNet's, it would otherwise cost a transform in and out):
    every output pixel is one contiguous vector, and chains of convolutions pass activations on
    without re-layout (onnxruntime's NCHWc). A layout transform goes where the layout changes,
    one per tensor; those of constants are folded (:class:`FoldConstantLayouts`); clips become
    ``maximum``/``minimum`` first (:class:`ClipAsMinMax`: they follow the layout). Nothing
    changes when ``config.blocked_layout`` is off or TVM's layout conversion fails.

    Parameters
    ----------
    config : PrepareConfig
    """

    def __init__(self, config: PrepareConfig):
        self.config = config

    def _layout_of(self, call):
        # the others keep their layout explicitly: inferred from a blocked input, TVM fails
        if call.op.name != "relax.nn.conv2d":
            return {}
        attrs, weight, lanes = call.attrs, call.args[1].ty, self.config.block_lanes
        if self.config.blocked_depthwise and is_blockable_depthwise(call, lanes):
            return {"relax.nn.conv2d": list(conv2d_nchwc.depthwise_layouts(lanes))}
        if int(attrs.groups) != 1 or str(attrs.data_layout) != "NCHW" \
                or str(attrs.out_layout) != "NCHW" or weight.shape is None \
                or str(weight.dtype) != "float32" or any(
                    int(c) % lanes for c in (weight.shape[0], weight.shape[1])):
            return {"relax.nn.conv2d": [str(attrs.data_layout), str(attrs.kernel_layout)]}
        return {"relax.nn.conv2d": list(conv2d_nchwc.layouts(lanes))}

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        config = self.config
        if not config.blocked_layout:
            return mod
        convs = _conv_calls(mod)
        flops = sum(conv2d_flops(call) for call in convs)
        if flops == 0:
            return mod
        winograd = any(runs_as_winograd(call, config) for call in convs
                       if isinstance(call.args[1], tvm.ir.GenericConst))
        if flops < config.blocked_min_model_flops and not winograd:
            logger.info("convolutions stay NCHW: %.0f MFLOP of them, the blocked layout pays "
                        "from %.0f", flops / 1e6, config.blocked_min_model_flops / 1e6)
            return mod
        try:
            converted = relax.transform.ConvertLayout({}, self._layout_of)(ClipAsMinMax()(mod))
        except tvm.error.InternalError as err:  # TVM's layout inference fails on some graphs
            logger.info("convolutions stay NCHW: layout conversion failed (%s)",
                        error_message(err))
            return mod
        # one transform per tensor: ConvertLayout gives each blocked consumer its own
        converted = relax.transform.EliminateCommonSubexpr()(converted)
        return FoldConstantLayouts()(converted)
