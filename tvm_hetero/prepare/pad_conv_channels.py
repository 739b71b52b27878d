"""PadConvChannels: output channels of convolutions padded up to whole vectors."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .base import rewrite_functions

_CONV = tvm.ir.Op.get("relax.nn.conv2d")


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod, lanes: int, max_waste: float, keeps=None):
        super().__init__(mod)
        self.lanes = lanes
        self.max_waste = max_waste
        self.keeps = keeps

    def visit_call_(self, call):
        kept = self.keeps is not None and call.op.same_as(_CONV) and self.keeps(call)
        call = super().visit_call_(call)
        if kept or not call.op.same_as(_CONV) \
                or not isinstance(call.args[1], tvm.ir.GenericConst):
            return call
        attrs = call.attrs
        if int(attrs.groups) != 1 or str(attrs.data_layout) != "NCHW" \
                or str(attrs.kernel_layout) != "OIHW" or str(attrs.out_layout) != "NCHW":
            return call
        weight = call.args[1].value.numpy()
        channels = weight.shape[0]
        padded = -(-channels // self.lanes) * self.lanes
        if padded == channels or (padded - channels) > self.max_waste * channels:
            return call
        filters = np.zeros((padded - channels,) + weight.shape[1:], weight.dtype)
        conv = self.builder_.emit(relax.Call(call.op, [call.args[0], relax.const(
            np.concatenate([weight, filters]))], attrs))
        return relax.op.strided_slice(conv, axes=[1], begin=[0], end=[channels])


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.PadConvChannels")
class PadConvChannels:
    """``conv2d(x, W)`` (NCHW, OIHW, groups 1) with a constant ``W`` of ``F`` output channels,
    ``F`` not a multiple of `lanes`, becomes ``strided_slice(conv2d(x, W padded with zero
    filters), F)`` where the padding adds at most `max_waste` of the work, so that the
    convolution's kernel keeps whole vectors of channels (SqueezeNet's 1000-class 1x1
    convolution); the slice fuses into it.

    Parameters
    ----------
    lanes : int
        The multiple to pad to (the target's fp32 vector lanes).
    max_waste : float
        The most padding, as a fraction of the channels.
    keeps : callable, optional
        ``call -> bool``: the convolutions that keep the model's form (padded nothing: their
        layers run on a device that is no CPU, :mod:`.device_forms`).
    """

    def __init__(self, lanes: int, max_waste: float, keeps=None):
        self.lanes = int(lanes)
        self.max_waste = float(max_waste)
        self.keeps = keeps

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(mod, _Rewriter(mod, self.lanes, self.max_waste, self.keeps))
