"""BlockedConvLayout: the convolutions of a model with enough convolution work in the blocked
layout NCHW[x]c."""

from __future__ import annotations

import logging

import numpy as np
import tvm
from tvm import relax

from ..errors import error_message
from ..ops import conv2d_nchwc
from ..frontend.shape_ranges import module_ranges, point
from ..relax_ir import bounded_dim, main_bindings
from .clip_as_min_max import ClipAsMinMax
from .config import PrepareConfig
from .constants_at_full_rank import ConstantsAtFullRank
from .fold_constant_layouts import FoldConstantLayouts
from .sink_layout_transforms import SinkLayoutTransforms

logger = logging.getLogger(__name__)


def _sizes(shape, dims: dict[str, int] | None) -> list[int]:
    """`shape` as integers, its symbolic dimensions at `dims` (a shape range's tuning point;
    TypeError where one has none)."""
    from tvm import tirx
    from tvm.tirx.analysis import undefined_vars

    if dims is None or all(isinstance(v, tirx.IntImm) for v in shape):
        return [int(v) for v in shape]
    if any(v.name not in dims for d in shape for v in undefined_vars(d)):
        raise TypeError("a dimension without a size")
    return [int(v) if isinstance(v, tirx.IntImm) else bounded_dim(v, dims) for v in shape]


def conv2d_flops(call, dims: dict[str, int] | None = None) -> float:
    """Multiply-adds x 2 of a Relax NCHW/OIHW ``conv2d`` call, its symbolic dimensions at
    `dims` (0 when a shape is unknown)."""
    out, weight = call.ty, call.args[1].ty
    if out.shape is None or weight.shape is None:
        return 0.0
    try:
        return 2.0 * float(np.prod(_sizes(out.shape, dims))) * float(
            np.prod(_sizes(list(weight.shape)[1:], dims)))
    except TypeError:  # symbolic dimensions
        return 0.0


def runs_as_winograd(call, config: PrepareConfig, dims: dict[str, int] | None = None) -> bool:
    """Whether a Relax NCHW/OIHW ``conv2d`` call would run as Winograd once blocked (its
    symbolic dimensions at `dims`)."""
    attrs, out, weight = call.attrs, call.ty, call.args[1].ty
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW" \
            or str(attrs.out_layout) != "NCHW" or out.shape is None or weight.shape is None \
            or str(weight.dtype) != "float32":
        return False
    try:
        n, k, h, w = _sizes(out.shape, dims)
        _, c, kh, kw = _sizes(weight.shape, dims)
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


def is_blockable_dense(call, lanes: int) -> bool:
    """Whether a Relax ``conv2d`` call is a float32 NCHW convolution (groups 1) whose input and
    output channels are multiples of `lanes`."""
    attrs, weight = call.attrs, call.args[1].ty
    if int(attrs.groups) != 1 or str(attrs.data_layout) != "NCHW" \
            or str(attrs.out_layout) != "NCHW" or weight.shape is None \
            or str(weight.dtype) != "float32":
        return False
    try:
        return not any(int(c) % lanes for c in (weight.shape[0], weight.shape[1]))
    except TypeError:  # symbolic dimensions
        return False


# the epilogue ops a convolution's output passes through on to the next convolution (bias,
# batch norm, ReLU6, HardSwish, SiLU, squeeze-and-excite's scale): they follow its layout
_EPILOGUE_OPS = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide",
                 "relax.maximum", "relax.minimum", "relax.clip", "relax.sigmoid",
                 "relax.nn.relu", "relax.nn.silu")


def depthwise_beside_blocked(mod, lanes: int) -> list:
    """The weights of the blockable depthwise convolutions (:func:`is_blockable_depthwise`)
    of `mod`'s ``main`` whose input comes from, or whose output goes to, a blockable dense
    convolution through epilogue ops only: blocked, they take the place of a layout transform
    that is there anyway. The others (MobileNetV2's 144 channels between 24-channel
    convolutions) would cost a transform in and one out, about what the blocked depthwise
    convolution saves."""
    bindings = main_bindings(mod)
    value_of = {b.var: b.value for b in bindings}
    users: dict = {}
    for b in bindings:
        if isinstance(b.value, relax.Call):
            for arg in b.value.args:
                if isinstance(arg, relax.Var):
                    users.setdefault(arg, []).append(b)

    def is_conv(value) -> bool:
        return isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.nn.conv2d"

    def from_dense(expr) -> bool:
        while isinstance(expr, relax.Var) and isinstance(value_of.get(expr), relax.Call):
            value = value_of[expr]
            if is_conv(value):
                return is_blockable_dense(value, lanes)
            if getattr(value.op, "name", "") not in _EPILOGUE_OPS:
                return False
            expr = value.args[0]
        return False

    def to_dense(var, depth: int = 0) -> bool:
        for b in users.get(var, []):
            if is_conv(b.value) and b.value.args[0].same_as(var):
                if is_blockable_dense(b.value, lanes):
                    return True
            elif getattr(b.value.op, "name", "") in _EPILOGUE_OPS and depth < 16 \
                    and to_dense(b.var, depth + 1):
                return True
        return False

    return [b.value.args[1] for b in bindings if is_conv(b.value)
            and is_blockable_depthwise(b.value, lanes)
            and (from_dense(b.value.args[0]) or to_dense(b.var))]


def stem_channels(call, lanes: int) -> int | None:
    """The input channels of a float32 NCHW convolution (groups 1) with fewer input channels
    than `lanes` (an image's 3) and output channels a multiple of `lanes`, else None: such a
    convolution reads its input as one block of all its channels (``NCHW[C]c``, a cheap
    transform of a small input) and writes the blocked layout, instead of writing NCHW for a
    transform of its larger output."""
    attrs, data, weight = call.attrs, call.args[0].ty, call.args[1].ty
    if int(attrs.groups) != 1 or str(attrs.data_layout) != "NCHW" \
            or str(attrs.kernel_layout) != "OIHW" or str(attrs.out_layout) != "NCHW" \
            or data.shape is None or weight.shape is None or str(weight.dtype) != "float32" \
            or str(data.dtype) != "float32":
        return None
    try:
        out_channels, in_channels = int(weight.shape[0]), int(weight.shape[1])
    except TypeError:  # symbolic dimensions
        return None
    return in_channels if in_channels < lanes and out_channels % lanes == 0 else None


def _conv_calls(mod) -> list:
    return [binding.value for binding in main_bindings(mod)
            if isinstance(binding.value, relax.Call)
            and getattr(binding.value.op, "name", "") == "relax.nn.conv2d"]


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.BlockedConvLayout")
class BlockedConvLayout:
    """In a model whose convolutions add up to at least ``config.blocked_min_model_flops``
    FLOPs, or one of which runs as Winograd, or with depthwise convolutions to block (below:
    small MobileNetV3 and EfficientNet blocks too), every float32 convolution (NCHW, groups 1) whose
    input and output channels are multiples of ``config.block_lanes`` goes to the blocked
    layout ``NCHW[lanes]c`` (``[N, C/lanes, H, W, lanes]``, weights ``OIHW[lanes]i[lanes]o``),
    and so does every depthwise one of such channels next to such a convolution (weights
    ``OIHW1i[lanes]o``, :func:`depthwise_beside_blocked`: between blocked 1x1 convolutions,
    MobileNet's, it would otherwise cost a transform in and out):
    every output pixel is one contiguous vector, and chains of convolutions pass activations on
    without re-layout (onnxruntime's NCHWc). A layout transform goes where the layout changes,
    one per tensor; those of constants are folded (:class:`FoldConstantLayouts`); clips become
    ``maximum``/``minimum`` first (:class:`ClipAsMinMax`: they follow the layout), and the
    constants of binary ops get the op's rank (:class:`ConstantsAtFullRank`: so do they). Nothing
    changes when ``config.blocked_layout`` is off or TVM's layout conversion fails.

    Parameters
    ----------
    config : PrepareConfig
    keeps : callable, optional
        ``call -> bool``: the convolutions that keep the model's layout (those of layers on a
        device that is no CPU, :mod:`.device_forms`); they neither go blocked nor count
        towards the thresholds above.
    """

    def __init__(self, config: PrepareConfig, keeps=None):
        self.config = config
        self.keeps = keeps or (lambda call: False)
        self._depthwise: list = []  # the weights of the depthwise convolutions to block

    def _layout_of(self, call):
        # the others keep their layout explicitly: inferred from a blocked input, TVM fails
        if call.op.name != "relax.nn.conv2d":
            return {}
        attrs, lanes = call.attrs, self.config.block_lanes
        if self.keeps(call):
            return {"relax.nn.conv2d": [str(attrs.data_layout), str(attrs.kernel_layout)]}
        if any(call.args[1].same_as(weight) for weight in self._depthwise):
            return {"relax.nn.conv2d": list(conv2d_nchwc.depthwise_layouts(lanes))}
        stem = stem_channels(call, lanes)
        if stem is not None:  # the input's few channels one block, the output blocked
            return {"relax.nn.conv2d": list(conv2d_nchwc.stem_layouts(stem, lanes))}
        if not is_blockable_dense(call, lanes):
            return {"relax.nn.conv2d": [str(attrs.data_layout), str(attrs.kernel_layout)]}
        return {"relax.nn.conv2d": list(conv2d_nchwc.layouts(lanes))}

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        config = self.config
        if not config.blocked_layout:
            return mod
        convs = [call for call in _conv_calls(mod) if not self.keeps(call)]
        dims = point(module_ranges(mod), "opt")  # a shape range's sizes to tune at
        flops = sum(conv2d_flops(call, dims) for call in convs)
        if flops == 0:
            return mod
        winograd = any(runs_as_winograd(call, config, dims) for call in convs
                       if isinstance(call.args[1], tvm.ir.GenericConst))
        clipped = ConstantsAtFullRank()(ClipAsMinMax()(mod))
        kept = {call.args[1] for call in _conv_calls(mod) if self.keeps(call)}
        self._depthwise = [weight for weight in depthwise_beside_blocked(
            clipped, config.block_lanes) if weight not in kept] \
            if config.blocked_depthwise else []
        if flops < config.blocked_min_model_flops and not winograd and not self._depthwise:
            logger.info("convolutions stay NCHW: %.0f MFLOP of them, the blocked layout pays "
                        "from %.0f (or with depthwise convolutions to block)", flops / 1e6,
                        config.blocked_min_model_flops / 1e6)
            return mod
        try:
            converted = relax.transform.ConvertLayout({}, self._layout_of)(clipped)
        except (tvm.error.InternalError, ValueError) as err:
            # TVM's layout inference fails on some graphs: an internal check, or a type error
            # of an op it carried blocked (a broadcast_to of a blocked slice, seed 578 of the
            # graph generator)
            logger.info("convolutions stay NCHW: layout conversion failed (%s)",
                        error_message(err))
            return mod  # as it came, clips too
        # one transform per tensor: ConvertLayout gives each blocked consumer its own
        converted = relax.transform.EliminateCommonSubexpr()(converted)
        # the layout carried through the resizes, pools and concatenations it stopped at
        converted = SinkLayoutTransforms()(converted)
        return FoldConstantLayouts()(converted)
