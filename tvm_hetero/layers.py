"""Operator-level layers: one fused operator group (conv2d+bias+relu) is one layer.

``prepare`` lowers a model's Relax module to the *layered* form: high-level ops legalized to TIR,
fused (FuseOps + FuseTIR), so that every ``call_tir`` binding of ``main`` is one layer.
``extract_layers`` reads the layers of a layered module, with their configuration and their
predecessors (the layers form a DAG).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .errors import ModelError

logger = logging.getLogger(__name__)

OP_KINDS_ATTR = "tvm_hetero.op_kinds"

# op name (legalized PrimFunc name without its numeric suffix) -> layer kind
_KIND_BY_OP = {
    **dict.fromkeys(["conv1d", "conv2d", "conv3d", "conv1d_transpose", "conv2d_transpose",
                     "conv3d_transpose"], "conv2d"),
    **dict.fromkeys(["matmul", "dense", "linear", "batch_matmul", "einsum"], "matmul"),
    **dict.fromkeys(["max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d",
                     "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
                     "adaptive_avg_pool3d", "adaptive_max_pool2d", "lrn"], "pooling"),
    **dict.fromkeys(["sum", "mean", "max", "min", "prod", "variance", "std", "argmax", "argmin",
                     "cumsum", "cumprod"], "reduction"),
    **dict.fromkeys(["softmax", "log_softmax", "layer_norm", "batch_norm", "group_norm",
                     "instance_norm", "rms_norm"], "normalization"),
    # injective, though TVM marks the legalized layout transform opaque
    **dict.fromkeys(["layout_transform", "te_layout_transform"], "elementwise"),
}
LAYER_KINDS = ("conv2d", "matmul", "pooling", "reduction", "normalization", "elementwise",
               "other")
# TVM's op patterns (relay/op_attr_types): <= 2 elementwise/broadcast/injective, 3 reduction,
# 4 out-elementwise-fusable (conv, matmul), 8 opaque
_INJECTIVE_MAX = 2


@dataclass(frozen=True)
class TensorInfo:
    """Shape and dtype of one tensor."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * _dtype_bytes(self.dtype)


@dataclass
class Layer:
    """One operator-level layer (a fused operator group).

    Attributes
    ----------
    name : str
        Stable name: the anchor op and its ordinal among layers of that op (``conv2d_3``).
    kind : str
        One of ``LAYER_KINDS``: the key of per-layer-kind optimization rules.
    op_kinds : list of str
        The ops fused into this layer, in order (``["conv2d", "add", "relu"]``).
    func_name : str
        The PrimFunc this layer calls.
    inputs, outputs : list of TensorInfo
        Activation tensors in (weights excluded) and out.
    flops : float
        Floating-point operations of one call (TVM's TIR estimate).
    param_bytes : int
        Bytes of the constants (weights) this layer reads.
    predecessors : list of str
        Names of the layers whose outputs this layer reads.
    model_inputs : list of str
        Names of the model inputs this layer reads.
    index : int
        Position in program order.
    """

    name: str
    kind: str
    op_kinds: list[str]
    func_name: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    flops: float
    param_bytes: int
    predecessors: list[str] = field(default_factory=list)
    model_inputs: list[str] = field(default_factory=list)
    index: int = 0

    @property
    def activation_bytes_in(self) -> int:
        return sum(t.nbytes for t in self.inputs)

    @property
    def activation_bytes_out(self) -> int:
        return sum(t.nbytes for t in self.outputs)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["inputs"] = [{"shape": list(t.shape), "dtype": t.dtype} for t in self.inputs]
        data["outputs"] = [{"shape": list(t.shape), "dtype": t.dtype} for t in self.outputs]
        data["activation_bytes_in"] = self.activation_bytes_in
        data["activation_bytes_out"] = self.activation_bytes_out
        return data


def _dtype_bytes(dtype: str) -> int:
    if dtype == "bool":
        return 1
    match = re.search(r"(\d+)(?:x(\d+))?$", dtype)
    bits = int(match.group(1)) * int(match.group(2) or 1) if match else 32
    return max(1, bits // 8)


def _op_name(func_name: str) -> str:
    """``conv2d13`` -> ``conv2d``; ``max_pool2d1`` -> ``max_pool2d``."""
    base = func_name[len("fused_"):] if func_name.startswith("fused_") else func_name
    for name in sorted(_KIND_BY_OP, key=len, reverse=True):
        if re.fullmatch(re.escape(name) + r"\d*", base):
            return name
    return re.sub(r"\d+$", "", base)


# ----------------------------------------------------------------------------------------------
# preparation passes



def _rewrite_pass(rewriter_class, name: str):
    """A module pass running a Relax ``PyExprMutator`` class over every Relax function."""
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name=name)
    def rewrite(mod, _ctx):
        rewriter = rewriter_class(mod)
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
        return rewriter.builder_.get()

    return rewrite


def _simplify_stack_sum_pass():
    import tvm
    import tvm_ffi
    from tvm import relax

    op_sum = tvm.ir.Op.get("relax.sum")
    op_stack = tvm.ir.Op.get("relax.stack")
    op_broadcast = tvm.ir.Op.get("relax.broadcast_to")

    @relax.expr_functor.mutator
    class _Rewriter(relax.PyExprMutator):
        """ONNX ``Sum`` imports as sum(stack(broadcast_to(a), broadcast_to(b)), axis=0), which
        FuseOps cannot fuse with the producer of ``a``; rewrite it to ``a + b`` and drop
        broadcasts to the shape a tensor already has."""

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op.same_as(op_broadcast):
                src = call.args[0]
                if isinstance(src.ty, relax.TensorType) and src.ty.shape is not None and \
                        tvm_ffi.structural_equal(src.ty.shape, call.ty.shape):
                    return src
            if call.op.same_as(op_sum) and not call.attrs.keepdims and \
                    call.attrs.axis is not None and [int(a) for a in call.attrs.axis] == [0] and \
                    isinstance(call.args[0], relax.Var):
                stacked = self.lookup_binding(call.args[0])
                if isinstance(stacked, relax.Call) and stacked.op.same_as(op_stack) and \
                        int(stacked.attrs.axis) == 0 and isinstance(stacked.args[0], relax.Tuple):
                    fields = list(stacked.args[0].fields)
                    if all(tvm_ffi.structural_equal(f.ty, call.ty) for f in fields):
                        out = fields[0]
                        for term in fields[1:]:
                            out = self.builder_.emit(relax.op.add(out, term))
                        return out
            return call

    return _rewrite_pass(_Rewriter, "tvm_hetero.SimplifyStackSum")


def _drop_dropout_pass():
    import tvm
    from tvm import relax

    op_dropout = tvm.ir.Op.get("relax.nn.dropout")

    @relax.expr_functor.mutator
    class _Rewriter(relax.PyExprMutator):
        """``dropout(x)[0]`` is ``x`` at inference (ONNX Dropout without training mode): the
        copy goes, and so does the tuple that TVM's layout conversion fails on."""

        def visit_tuple_getitem_(self, op):
            op = super().visit_tuple_getitem_(op)
            source = op.tuple_value
            if isinstance(source, relax.Var):
                source = self.lookup_binding(source)
            if op.index == 0 and isinstance(source, relax.Call) and source.op.same_as(op_dropout):
                return source.args[0]
            return op

    return _rewrite_pass(_Rewriter, "tvm_hetero.DropDropout")


# Ops applied element by element, whatever the channel: a chain of them after parallel
# convolutions merges with the convolutions (_merge_concatenated_convs_pass).
_ELEMENTWISE_UNARY = ("relax.nn.relu", "relax.sigmoid", "relax.tanh", "relax.clip",
                      "relax.nn.leakyrelu", "relax.nn.silu", "relax.nn.gelu")
_PER_CHANNEL_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


def _use_counts(func) -> dict:
    """How many times each variable of a Relax function is read (in A-normal form)."""
    from tvm import relax

    counts: dict = {}

    def read(expr):
        if isinstance(expr, relax.Var):
            counts[expr] = counts.get(expr, 0) + 1
        elif isinstance(expr, relax.Tuple):
            for field_expr in expr.fields:
                read(field_expr)
        elif isinstance(expr, relax.Call):
            for arg in expr.args:
                read(arg)
        elif isinstance(expr, relax.TupleGetItem):
            read(expr.tuple_value)

    body = func.body
    for block in body.blocks:
        for binding in block.bindings:
            read(binding.value)
    read(body.body)
    return counts


def _merge_concatenated_convs_pass():
    import tvm
    import tvm_ffi
    from tvm import relax

    op_conv = tvm.ir.Op.get("relax.nn.conv2d")
    op_concat = tvm.ir.Op.get("relax.concat")

    def per_channel(const, channels: int) -> int | None:
        """The channel axis of a constant broadcast per channel over NCHW, else None."""
        shape = tuple(int(d) for d in const.value.shape)
        if shape == (1, channels, 1, 1):
            return 1
        return 0 if shape == (channels, 1, 1) else None

    @relax.expr_functor.mutator
    class _Rewriter(relax.PyExprMutator):
        """``concat([f(conv2d(x, W1)), f(conv2d(x, W2)), ...], axis=1)``, the convolutions
        reading the same input with the same attributes and constant weights, each followed by
        the same chain ``f`` of per-channel constant adds/multiplies (bias, batch norm) and
        element-wise activations, becomes ``f'(conv2d(x, concat(W1, W2, ...)))``: one
        convolution writing the concatenation directly (the zoo ResNet's two 1x1 heads: three
        kernels become one). Only when each branch's values are used by the concatenation
        alone."""

        def __init__(self, mod):
            super().__init__(mod)
            self.uses = {}
            for func in mod.functions.values():
                if isinstance(func, relax.Function):
                    self.uses.update(_use_counts(func))

        def _branch(self, var):
            """(conv call, [(op, attrs, other args, constant, constant first)]) of one
            concatenated input, innermost step first, or None."""
            steps = []
            while isinstance(var, relax.Var) and self.uses.get(var) == 1:
                value = self.lookup_binding(var)
                if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
                    return None
                if value.op.same_as(op_conv):
                    attrs = value.attrs
                    if not isinstance(value.args[1], tvm.ir.GenericConst) \
                            or int(attrs.groups) != 1 or str(attrs.data_layout) != "NCHW" \
                            or str(attrs.kernel_layout) != "OIHW":
                        return None
                    return value, steps[::-1]
                name = value.op.name
                if name in _ELEMENTWISE_UNARY and isinstance(value.args[0], relax.Var) and not any(
                        isinstance(arg, (relax.Var, tvm.ir.GenericConst))
                        for arg in value.args[1:]):
                    steps.append((value.op, value.attrs, list(value.args[1:]), None, False))
                    var = value.args[0]
                elif name in _PER_CHANNEL_BINARY and len(value.args) == 2:
                    first_const = isinstance(value.args[0], tvm.ir.GenericConst)
                    const, var = value.args if first_const else value.args[::-1]
                    if not isinstance(const, tvm.ir.GenericConst):
                        return None
                    steps.append((value.op, value.attrs, [], const, first_const))
                else:
                    return None
            return None

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(op_concat) or int(call.attrs.axis) != 1 \
                    or not isinstance(call.args[0], relax.Tuple) or len(call.args[0].fields) < 2:
                return call
            branches = [self._branch(field_expr) for field_expr in call.args[0].fields]
            if any(branch is None for branch in branches):
                return call
            first_conv, first_steps = branches[0]
            for conv, steps in branches[1:]:
                if not conv.args[0].same_as(first_conv.args[0]) \
                        or not tvm_ffi.structural_equal(conv.attrs, first_conv.attrs) \
                        or len(steps) != len(first_steps):
                    return call
                for (op, attrs, rest, const, side), (op0, attrs0, rest0, const0, side0) in zip(
                        steps, first_steps):
                    if not op.same_as(op0) or side != side0 or (const is None) != (
                            const0 is None) or not tvm_ffi.structural_equal(attrs, attrs0) \
                            or not tvm_ffi.structural_equal(rest, rest0):
                        return call
            weights = [conv.args[1].value.numpy() for conv, _ in branches]
            if len({w.dtype for w in weights}) != 1:
                return call
            channels = [w.shape[0] for w in weights]
            merged_consts = {}  # step index -> the branches' constants, concatenated
            for index, step in enumerate(first_steps):
                if step[3] is not None:
                    consts = [steps[index][3] for _, steps in branches]
                    axes = {per_channel(c, n) for c, n in zip(consts, channels)}
                    if len(axes) != 1 or None in axes:
                        return call
                    merged_consts[index] = relax.const(np.concatenate(
                        [c.value.numpy() for c in consts], axis=axes.pop()))
            out = relax.Call(op_conv, [first_conv.args[0], relax.const(np.concatenate(weights))],
                             first_conv.attrs)
            if not first_steps:
                return out
            out = self.builder_.emit(out)
            for index, (op, attrs, rest, _, const_first) in enumerate(first_steps):
                if index in merged_consts:
                    merged = merged_consts[index]
                    args = [merged, out] if const_first else [out, merged]
                else:
                    args = [out] + rest
                step = relax.Call(op, args, attrs)
                out = step if index == len(first_steps) - 1 else self.builder_.emit(step)
            return out

    return _rewrite_pass(_Rewriter, "tvm_hetero.MergeConcatenatedConvs")


# Output channels of a convolution are padded up to a multiple of this (the widest CPU vector,
# 16 fp32 lanes) when that adds at most CHANNEL_PAD_WASTE of the work: kernels schedule
# channels in whole vectors (SqueezeNet's 1000-class 1x1 convolution).
CHANNEL_LANES = 16
CHANNEL_PAD_WASTE = 0.05


def _pad_conv_channels_pass():
    import tvm
    from tvm import relax

    op_conv = tvm.ir.Op.get("relax.nn.conv2d")

    @relax.expr_functor.mutator
    class _Rewriter(relax.PyExprMutator):
        """conv2d(x, W) with a constant W of F output channels, F not a multiple of
        CHANNEL_LANES, becomes strided_slice(conv2d(x, W padded with zero filters), F), so the
        convolution's kernel can keep whole vectors of channels; the slice fuses into it."""

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(op_conv) or not isinstance(call.args[1], tvm.ir.GenericConst):
                return call
            attrs = call.attrs
            if int(attrs.groups) != 1 or str(attrs.data_layout) != "NCHW" \
                    or str(attrs.kernel_layout) != "OIHW" or str(attrs.out_layout) != "NCHW":
                return call
            weight = call.args[1].value.numpy()
            channels = weight.shape[0]
            padded = -(-channels // CHANNEL_LANES) * CHANNEL_LANES
            if padded == channels or (padded - channels) > CHANNEL_PAD_WASTE * channels:
                return call
            filters = np.zeros((padded - channels,) + weight.shape[1:], weight.dtype)
            conv = self.builder_.emit(relax.Call(call.op, [call.args[0], relax.const(
                np.concatenate([weight, filters]))], attrs))
            return relax.op.strided_slice(conv, axes=[1], begin=[0], end=[channels])

    return _rewrite_pass(_Rewriter, "tvm_hetero.PadConvChannels")


# In a model whose convolutions add up to at least this many FLOPs, every convolution whose
# input and output channels are multiples of CHANNEL_LANES runs in the blocked layout NCHW16c
# (``[N, C/16, H, W, 16]``, weights ``OIHW16i16o``): every output pixel is one contiguous
# vector, and chains of convolutions pass activations on without re-layout (onnxruntime's
# NCHWc). ResNet-50: 41.3 -> 38.9 ms; SqueezeNet 1.1 4.31 -> 3.93 ms. The zoo models (3-28
# MFLOP of convolutions) ran 1-4 % slower blocked: the transforms in and out cost what their
# small kernels saved.
NCHWC_MIN_MODEL_FLOPS = 200e6
NCHWC_LAYOUT = (f"NCHW{CHANNEL_LANES}c", f"OIHW{CHANNEL_LANES}i{CHANNEL_LANES}o")


def _conv2d_flops(call) -> float:
    """Multiply-adds x 2 of a Relax NCHW/OIHW ``conv2d`` call (0 when a shape is unknown)."""
    out, weight = call.ty, call.args[1].ty
    if out.shape is None or weight.shape is None:
        return 0.0
    try:
        return 2.0 * float(np.prod([int(v) for v in out.shape])) * float(
            np.prod([int(v) for v in list(weight.shape)[1:]]))
    except TypeError:  # symbolic dimensions
        return 0.0


def _blocked_conv_layout_pass():
    import tvm
    from tvm import relax

    def layout_of(call):
        # the others keep their layout explicitly: inferred from a blocked input, TVM fails
        if call.op.name != "relax.nn.conv2d":
            return {}
        attrs, weight = call.attrs, call.args[1].ty
        if int(attrs.groups) != 1 or str(attrs.data_layout) != "NCHW" \
                or str(attrs.out_layout) != "NCHW" or weight.shape is None \
                or str(weight.dtype) != "float32" or any(
                    int(c) % CHANNEL_LANES for c in (weight.shape[0], weight.shape[1])):
            return {"relax.nn.conv2d": [str(attrs.data_layout), str(attrs.kernel_layout)]}
        return {"relax.nn.conv2d": list(NCHWC_LAYOUT)}

    @tvm.transform.module_pass(opt_level=0, name="tvm_hetero.BlockedConvLayout")
    def convert(mod, _ctx):
        flops = sum(_conv2d_flops(binding.value) for binding in main_bindings(mod)
                    if isinstance(binding.value, relax.Call)
                    and getattr(binding.value.op, "name", "") == "relax.nn.conv2d")
        if flops == 0:
            return mod
        winograd = any(_winograd_nchw_call(binding.value) for binding in main_bindings(mod)
                       if isinstance(binding.value, relax.Call)
                       and getattr(binding.value.op, "name", "") == "relax.nn.conv2d"
                       and isinstance(binding.value.args[1], tvm.ir.GenericConst))
        if flops < NCHWC_MIN_MODEL_FLOPS and not winograd:
            logger.info("convolutions stay NCHW: %.0f MFLOP of them, the blocked layout pays "
                        "from %.0f", flops / 1e6, NCHWC_MIN_MODEL_FLOPS / 1e6)
            return mod
        try:
            converted = relax.transform.ConvertLayout({}, layout_of)(mod)
        except tvm.error.InternalError as err:  # TVM's layout inference fails on some graphs
            logger.info("convolutions stay NCHW: layout conversion failed (%s)",
                        str(err).strip().splitlines()[-1])
            return mod
        # one transform per tensor: ConvertLayout gives each blocked consumer its own
        converted = relax.transform.EliminateCommonSubexpr()(converted)
        return _fold_constant_layouts_pass()(converted)

    return convert


def _blocked_by_numpy(array: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray | None:
    """NCHW -> NCHW[x]c (4-D to 5-D) or OIHW -> OIHW[x]i[y]o (4-D to 6-D) by reshape and
    transpose; None for other shapes."""
    if array.ndim != 4:
        return None
    if len(out_shape) == 5:
        n, c, h, w = array.shape
        lanes = out_shape[4]
        return array.reshape(n, c // lanes, lanes, h, w).transpose(0, 1, 3, 4, 2)
    if len(out_shape) == 6:
        o, i, h, w = array.shape
        in_lanes, out_lanes = out_shape[4], out_shape[5]
        return array.reshape(o // out_lanes, out_lanes, i // in_lanes, in_lanes, h, w) \
            .transpose(0, 2, 4, 5, 3, 1)
    return None


def _fold_constant_layouts_pass():
    import tvm
    from tvm import relax

    op_layout = tvm.ir.Op.get("relax.layout_transform")

    @relax.expr_functor.mutator
    class _Rewriter(relax.PyExprMutator):
        """layout_transform of a constant (the weights and biases of blocked convolutions)
        becomes the transformed constant, by numpy, checked against the index map on sample
        elements (through FoldConstant, which compiles a kernel per constant, the layouts took
        9 s of ResNet-50's preparation; ``IndexMap.map_tensor`` 50 s). Other transforms stay
        for FoldConstant."""

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(op_layout) or not isinstance(call.args[0], tvm.ir.GenericConst) \
                    or call.attrs.pad_value is not None or call.ty.shape is None:
                return call
            source = call.args[0].value.numpy()
            out_shape = tuple(int(v) for v in call.ty.shape)
            blocked = _blocked_by_numpy(source, out_shape)
            if blocked is None or blocked.shape != out_shape:
                return call
            index_map = call.attrs.index_map
            rng = np.random.default_rng(0)
            for _ in range(8):
                index = [int(rng.integers(extent)) for extent in source.shape]
                mapped = [int(v) for v in index_map.map_indices(index)]
                if blocked[tuple(mapped)] != source[tuple(index)]:
                    return call
            return relax.const(np.ascontiguousarray(blocked))

    return _rewrite_pass(_Rewriter, "tvm_hetero.FoldConstantLayouts")


# Winograd F(4x4, 3x3) (Lavin and Gray, 2016): a 3x3 stride-1 convolution computes each 4x4
# output tile from a 6x6 input tile with 36 products per channel pair instead of 144; the
# weights are transformed once, at preparation, the data and the output per call (work that
# grows with the channels, the products' with their square). Only in the blocked layout (each
# transform a contiguous channel vector) and with constant weights. Where the output has fewer
# tiles than WINOGRAD_MIN_TILES, or the transformed weights (36 x C x K floats, 4x the
# original) exceed WINOGRAD_MAX_WEIGHT_BYTES, reading them (once per row of tiles) costs more
# than the products save: ResNet-50's 28x28 layers (2.4 MB) made it 5 % faster, its 14x14 ones
# (9.4 MB, 16 tiles) about 7 % slower; its 7x7 ones ran 4x slower alone.
WINOGRAD_TILE = 4
WINOGRAD_MIN_TILES = 16
WINOGRAD_MAX_WEIGHT_BYTES = 4 << 20


def _winograd_matrices(tile: int):
    """``(A^T, B^T, G)`` of Winograd F(tile, 3), from TVM's Cook-Toom construction (its
    interpolation points 0, -1, 1, 1/2, -2, ...)."""
    from tvm.topi.nn import winograd_util

    a, b, g = winograd_util._cook_toom_convolution(
        winograd_util._interpolation_points(tile + 1), tile, 3)
    return a.T.astype(np.float64), b.T.astype(np.float64), g.astype(np.float64)


def _winograd_fits(batch, in_channels, out_channels, out_h, out_w, window, strides, padding,
                   dilation, groups) -> bool:
    """Whether a float32 convolution (any layout) runs as Winograd F(4x4, 3x3)."""
    tile = WINOGRAD_TILE
    tiles = -(-out_h // tile) * -(-out_w // tile)
    return (batch == 1 and groups == 1 and tuple(window) == (3, 3) and tuple(strides) == (1, 1)
            and tuple(dilation) == (1, 1) and tuple(padding) == (1, 1, 1, 1)
            and in_channels % CHANNEL_LANES == 0 and out_channels % CHANNEL_LANES == 0
            and tiles >= WINOGRAD_MIN_TILES
            and (tile + 2) ** 2 * in_channels * out_channels * 4 <= WINOGRAD_MAX_WEIGHT_BYTES)


def _winograd_nchw_call(call) -> bool:
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
    return _winograd_fits(n, c, k, h, w, (kh, kw), [int(v) for v in attrs.strides],
                          [int(v) for v in attrs.padding], [int(v) for v in attrs.dilation],
                          int(attrs.groups))


def _winograd_weight(weight: np.ndarray, tile: int = WINOGRAD_TILE) -> np.ndarray:
    """``OIHW[x]i[y]o`` 3x3 weights -> ``U[alpha, alpha, C, K] = G w G^T`` (float64 inside)."""
    out_blocks, in_blocks, kh, kw, in_lanes, out_lanes = weight.shape
    oihw = weight.transpose(0, 5, 1, 4, 2, 3).reshape(out_blocks * out_lanes,
                                                      in_blocks * in_lanes, kh, kw)
    _, _, g = _winograd_matrices(tile)
    return np.ascontiguousarray(
        np.einsum("ea,kcab,nb->enck", g, oihw.astype(np.float64), g).astype(np.float32))


def _linear_combination(coefficients, terms):
    """``sum(c * t)`` over the nonzero coefficients, without multiplying by 1 or -1."""
    from tvm import tirx

    total = None
    for coefficient, term in zip(coefficients, terms):
        if coefficient == 0:
            continue
        value = term if coefficient == 1 else (-term if coefficient == -1 else
                                               term * tirx.const(float(coefficient), "float32"))
        total = value if total is None else total + value
    return tirx.const(0.0, "float32") if total is None else total


def _matrix_row(matrix, index, terms):
    """``sum(matrix[index, j] * terms[j])`` for a constant matrix: one linear combination per
    row, chosen by `index` (a loop unrolled by the schedule folds the choice away)."""
    from tvm import tirx

    rows = [_linear_combination(row, terms) for row in matrix]
    chosen = rows[-1]
    for value in range(len(rows) - 2, -1, -1):
        chosen = tirx.Select(index == value, rows[value], chosen)
    return chosen


def _conv2d_winograd_blocked(data, transformed, tile: int = WINOGRAD_TILE):
    """TE compute of a 3x3 stride-1 padding-1 convolution of NCHW[x]c data (batch 1) by
    Winograd F(tile, 3) with pre-transformed weights ``transformed[alpha, alpha, C, K]``
    (:func:`_winograd_weight`). Per output tile row ``r`` and column ``t``: the padded input
    (``winograd_pad[y, x, c]``), its rows then columns transformed (``winograd_rows``,
    ``winograd_data``), the 36 channel products (``winograd_gemm``), the inverse transform
    (``winograd_inverse_rows``, ``winograd_inverse``) and the tiles written back as NCHW[x]c
    (``winograd_out``). The transforms are written out per row of the constant matrices, so
    the schedule's unrolling leaves only their nonzero terms."""
    from tvm import te, tirx

    _, _, height, width, lanes = (int(v) for v in data.shape)
    alpha, _, channels, out_channels = (int(v) for v in transformed.shape)
    a_t, b_t, _ = _winograd_matrices(tile)
    rows, cols = -(-height // tile), -(-width // tile)
    zero = tirx.const(0.0, "float32")
    padded = te.compute(
        (rows * tile + 2, cols * tile + 2, channels),
        lambda y, x, c: tirx.if_then_else(
            tirx.all(y >= 1, y <= height, x >= 1, x <= width),
            data[0, c // lanes, y - 1, x - 1, c % lanes], zero),
        name="winograd_pad")
    by_rows = te.compute(
        (rows, cols, alpha, alpha, channels),
        lambda r, t, e, b, c: _matrix_row(
            b_t, e, [padded[r * tile + a, t * tile + b, c] for a in range(alpha)]),
        name="winograd_rows")
    transformed_data = te.compute(
        (rows, cols, alpha, alpha, channels),
        lambda r, t, e, n, c: _matrix_row(b_t, n, [by_rows[r, t, e, b, c]
                                                    for b in range(alpha)]),
        name="winograd_data")
    rc = te.reduce_axis((0, channels), "rc")
    products = te.compute(
        (rows, cols, alpha, alpha, out_channels),
        lambda r, t, e, n, k: te.sum(transformed_data[r, t, e, n, rc] * transformed[e, n, rc, k],
                                     axis=[rc]),
        name="winograd_gemm")
    inverse_rows = te.compute(
        (rows, cols, tile, alpha, out_channels),
        lambda r, t, i, n, k: _matrix_row(a_t, i, [products[r, t, e, n, k]
                                                    for e in range(alpha)]),
        name="winograd_inverse_rows")
    inverse = te.compute(
        (rows, cols, tile, tile, out_channels),
        lambda r, t, i, j, k: _matrix_row(a_t, j, [inverse_rows[r, t, i, n, k]
                                                    for n in range(alpha)]),
        name="winograd_inverse")
    return te.compute(
        (1, out_channels // lanes, height, width, lanes),
        lambda b, f, y, x, lane: inverse[y // tile, x // tile, y % tile, x % tile,
                                         f * lanes + lane],
        name="winograd_out")


def _conv2d_blocked(data, weight, strides, padding, dilation):
    """TE compute of a convolution in NCHW[x]c with an OIHW[x]i[y]o weight, its reduction over
    input channel blocks, window rows, columns, then lanes (TOPI's ``conv2d_NCHWc`` fuses the
    input channels into one axis read through a division, which schedules worse)."""
    from tvm import te, topi

    batch, in_blocks, height, width, _ = (int(v) for v in data.shape)
    out_blocks, _, window_h, window_w, in_lanes, out_lanes = (int(v) for v in weight.shape)
    stride_h, stride_w = (int(v) for v in strides)
    dilation_h, dilation_w = (int(v) for v in dilation)
    top, left, bottom, right = (int(v) for v in padding)
    out_h = (height + top + bottom - (window_h - 1) * dilation_h - 1) // stride_h + 1
    out_w = (width + left + right - (window_w - 1) * dilation_w - 1) // stride_w + 1
    if top or left or bottom or right:
        data = topi.nn.pad(data, (0, 0, top, left, 0), (0, 0, bottom, right, 0), name="pad")
    rc = te.reduce_axis((0, in_blocks), "rc")
    ry = te.reduce_axis((0, window_h), "ry")
    rx = te.reduce_axis((0, window_w), "rx")
    rl = te.reduce_axis((0, in_lanes), "rl")
    return te.compute(
        (batch, out_blocks, out_h, out_w, out_lanes),
        lambda n, f, y, x, lane: te.sum(
            data[n, rc, y * stride_h + ry * dilation_h, x * stride_w + rx * dilation_w, rl]
            * weight[f, rc, ry, rx, rl, lane], axis=[rc, ry, rx, rl]),
        name="conv2d_NCHWc")


def _legalize_conv2d(bb, call):
    """Blocked-layout convolutions (``NCHW[x]c`` data and output, ``OIHW[x]i[y]o`` weight: TVM's
    legalization leaves them as they are) to :func:`_conv2d_blocked`; the others to TVM's
    own."""
    import tvm
    from tvm import relax
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

    attrs = call.attrs
    data, kernel, out = (str(attrs.data_layout), str(attrs.kernel_layout),
                         str(attrs.out_layout))
    if len(data) == 4 and len(kernel) == 4:
        return _nn_conv2d(bb, call)
    data_block = re.fullmatch(r"NCHW(\d+)c", data)
    kernel_block = re.fullmatch(r"OIHW(\d+)i(\d+)o", kernel)
    if not (data_block and kernel_block and out == data and int(attrs.groups) == 1
            and kernel_block.group(1) == data_block.group(1)):
        raise ModelError(f"conv2d with layouts {data}/{kernel}/{out} (groups {attrs.groups}) "
                         f"is not supported: NCHW, NHWC or NCHW[x]c with OIHW[x]i[y]o")
    weight = call.args[1]
    if isinstance(weight, relax.Var):  # the blocked weight, folded and bound to a variable
        weight = bb.lookup_binding(weight)
    if isinstance(weight, tvm.ir.GenericConst) and str(weight.ty.dtype) == "float32":
        _, in_blocks, _, _, lanes = (int(v) for v in call.args[0].ty.shape)
        batch, out_blocks, out_h, out_w, _ = (int(v) for v in call.ty.shape)
        window = [int(v) for v in weight.ty.shape][2:4]
        if lanes == CHANNEL_LANES and _winograd_fits(
                batch, in_blocks * lanes, out_blocks * lanes, out_h, out_w, window,
                [int(v) for v in attrs.strides], [int(v) for v in attrs.padding],
                [int(v) for v in attrs.dilation], int(attrs.groups)):
            transformed = relax.const(_winograd_weight(weight.value.numpy()))
            return bb.call_te(_conv2d_winograd_blocked, call.args[0], transformed,
                              primfunc_name_hint="conv2d")
    return bb.call_te(_conv2d_blocked, call.args[0], call.args[1], attrs.strides, attrs.padding,
                      attrs.dilation, primfunc_name_hint="conv2d")


def prepare(mod, target=None):
    """Lower a model's Relax module to its layered form.

    Decomposes inference-only ops (and drops inference dropout), folds constants, merges
    convolutions of one input whose outputs a Concat joins into one convolution, pads the
    output channels of convolutions with constant weights up to whole vectors where that costs
    at most 5 % more work (a ``strided_slice`` after the convolution keeps the model's output),
    converts the convolutions of models with enough convolution work to the blocked layout
    NCHW16c (``NCHWC_MIN_MODEL_FLOPS``; a layout transform where the model's layout changes),
    legalizes every op to TIR and fuses (FuseOps + FuseTIR), so that each ``call_tir`` binding
    of ``main`` is one layer. The ops of each fused group are kept in the PrimFunc attribute
    ``tvm_hetero.op_kinds``.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module whose ``main`` has weights bound as constants.
    target : tvm.target.Target, optional
        The target in whose context ops are legalized (the host CPU by default). Legalization
        and fusion come out the same for LLVM and CUDA targets.

    Returns
    -------
    tvm.IRModule
        A new module; the input is not modified.
    """
    import tvm
    from tvm import relax

    from .devices import host_target_dict

    target = target or tvm.target.Target(host_target_dict())
    cleanup = tvm.transform.Sequential([
        relax.transform.DecomposeOpsForInference(),
        relax.transform.CanonicalizeBindings(),
        _drop_dropout_pass(),
        _simplify_stack_sum_pass(),
        relax.transform.CanonicalizeBindings(),  # aliases left by the rewrite block fusion
        relax.transform.FoldConstant(),
        _merge_concatenated_convs_pass(),
        _pad_conv_channels_pass(),
        relax.transform.DeadCodeElimination(),
        _blocked_conv_layout_pass(),
    ])
    mod = cleanup(mod)
    with target:
        mod = tvm.transform.Sequential([
            relax.transform.LegalizeOps({"relax.nn.conv2d": _legalize_conv2d}),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
        ])(mod)
        op_kinds = {gv.name_hint: _called_op_names(func) for gv, func in mod.functions_items()
                    if isinstance(func, relax.Function) and func.attrs is not None
                    and "Primitive" in func.attrs}
        mod = relax.transform.FuseTIR()(mod)
        mod = relax.transform.DeadCodeElimination()(mod)
    left = _unlowered_calls(mod)
    if left:  # TVM legalized nothing for them (a layout it has no lowering for, say)
        raise ModelError(f"cannot lower {', '.join(sorted(set(left)))} to TIR kernels with "
                         "TVM's legalization (unsupported attributes or layout)")
    for gv, func in list(mod.functions_items()):
        if isinstance(func, tvm.tirx.PrimFunc):
            kinds = op_kinds.get(gv.name_hint) or [_op_name(gv.name_hint)]
            mod[gv] = func.with_attr(OP_KINDS_ATTR, kinds)
    return mod


def layered_module(model):
    """The layered form of a :class:`~tvm_hetero.Model`'s module, computed once per model."""
    cached = getattr(model, "_layered", None)
    if cached is None:
        cached = model.mod if is_layered(model.mod) else prepare(model.mod)
        model._layered = cached
    return cached


def _called_op_names(func) -> list[str]:
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    names: list[str] = []

    @relax.expr_functor.visitor
    class _Collect(relax.PyExprVisitor):
        def visit_call_(self, call):
            if call.op.same_as(call_tir):
                names.append(_op_name(call.args[0].name_hint))
            super().visit_call_(call)

    _Collect().visit_expr(func)
    return names


# ----------------------------------------------------------------------------------------------
# extraction

# bindings of a layered main that are not layers: structure the VM handles without kernels
_STRUCTURAL_OPS = ("relax.to_vdevice", "relax.hint_on_device", "relax.memory.view",
                   "relax.memory.ensure_zero_offset", "relax.builtin.stop_lift_params")


def main_bindings(mod):
    """All bindings of ``main``, in program order."""
    from tvm import relax

    main = mod["main"]
    if not isinstance(main.body, relax.SeqExpr):
        return []
    return [b for block in main.body.blocks for b in block.bindings]


def _unlowered_calls(mod) -> list[str]:
    """The calls in ``main`` that are neither a ``call_tir`` nor structural: op names, or the
    names of (not yet fused into TIR) Relax functions."""
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    found = []
    for binding in main_bindings(mod):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            if not value.op.same_as(call_tir) and value.op.name not in _STRUCTURAL_OPS:
                found.append(value.op.name)
        elif isinstance(value, relax.Call):
            found.append(getattr(value.op, "name_hint", str(value.op)))
    return found


def is_layered(mod) -> bool:
    """Whether every op call in ``main`` is a ``call_tir`` (or structural): i.e. prepared."""
    return not _unlowered_calls(mod)


def _tensor_infos(ty) -> list[TensorInfo]:
    from tvm import relax

    if isinstance(ty, relax.TensorType):
        if ty.shape is None:
            raise ModelError("a layer has a tensor of unknown shape; tvm_hetero needs static "
                             "shapes")
        return [TensorInfo(tuple(int(d) for d in ty.shape.values), str(ty.dtype))]
    if isinstance(ty, relax.TupleType):
        return [info for field_ty in ty.fields for info in _tensor_infos(field_ty)]
    return []


def classify_bindings(mod) -> list[tuple[Any, tuple[int, str, list[str]] | None]]:
    """Each binding of ``main`` in program order, with ``(index, layer name, op kinds)`` when it
    is a layer and ``None`` when it is structure (tuples, aliases, copies).

    This is the one place that decides which bindings are layers and what they are called, so
    that :func:`extract_layers` and the :class:`~tvm_hetero.AnnotateDevice` pass agree.
    """
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    counts: Counter = Counter()
    out = []
    for binding in main_bindings(mod):
        value = binding.value
        if isinstance(value, relax.Call) and value.op.same_as(call_tir):
            func = mod[value.args[0]]
            kinds = _op_kinds_of(func, value.args[0].name_hint)
            anchor = _anchor_op(func, kinds)
            index = sum(1 for _, info in out if info is not None)
            out.append((binding, (index, f"{anchor}_{counts[anchor]}", kinds)))
            counts[anchor] += 1
        else:
            out.append((binding, None))
    return out


def _op_kinds_of(func, gv_name: str) -> list[str]:
    kinds = func.attrs.get(OP_KINDS_ATTR) if func.attrs is not None else None
    return [str(k) for k in kinds] if kinds else [_op_name(gv_name)]


def _anchor_op(func, kinds: list[str]) -> str:
    """The op that names a layer: its first conv/matmul/pool/reduction/norm, else its first."""
    for kind in kinds:
        if kind in _KIND_BY_OP:
            return kind
    return kinds[0]


def _layer_kind(func, kinds: list[str]) -> str:
    for kind in kinds:
        if kind in _KIND_BY_OP:
            return _KIND_BY_OP[kind]
    pattern = func.attrs.get("op_pattern") if func.attrs is not None else None
    if pattern is None or int(pattern) <= _INJECTIVE_MAX:
        return "elementwise"
    return "other"


def kernel_kind(func, name: str = "") -> str:
    """The layer kind (one of ``LAYER_KINDS``) of a layer's PrimFunc."""
    return _layer_kind(func, _op_kinds_of(func, name))


def extract_layers(mod) -> list[Layer]:
    """The operator-level layers of a model, in program order.

    Parameters
    ----------
    mod : tvm.IRModule or Model
        A Relax module (prepared with :func:`prepare` or not; unprepared ones are prepared
        first, without modifying the input) or a loaded :class:`~tvm_hetero.Model`.

    Returns
    -------
    list of Layer
        One per fused operator group, with shapes, FLOPs, parameter bytes and predecessors.
    """
    import tvm
    from tvm import relax
    from tvm.s_tir.analysis import estimate_tir_flops

    mod = layered_module(mod) if hasattr(mod, "mod") else mod
    if not is_layered(mod):
        mod = prepare(mod)
    producers: dict[Any, list[str]] = {}  # var -> layers whose outputs it holds
    params = {p: p.name for p in mod["main"].params}
    flops_cache: dict[str, float] = {}
    layers: list[Layer] = []

    def sources(expr) -> tuple[list[str], list[str]]:
        """(producing layers, model inputs) of the vars an expression reads."""
        preds, inputs = [], []
        for var in relax.analysis.free_vars(expr):
            if var in params:
                inputs.append(params[var])
            preds.extend(producers.get(var, []))
        return list(dict.fromkeys(preds)), list(dict.fromkeys(inputs))

    for binding, info in classify_bindings(mod):
        if info is None:
            preds, _ = sources(binding.value)
            producers[binding.var] = preds
            continue
        index, name, kinds = info
        call = binding.value
        gv = call.args[0]
        func = mod[gv]
        act_inputs, param_bytes = [], 0
        for arg in call.args[1].fields:
            if isinstance(arg, tvm.ir.GenericConst):
                param_bytes += sum(t.nbytes for t in _tensor_infos(arg.ty))
            else:
                act_inputs.extend(_tensor_infos(arg.ty))
        if gv.name_hint not in flops_cache:
            try:
                flops_cache[gv.name_hint] = float(estimate_tir_flops(tvm.IRModule({gv: func})))
            except Exception as err:  # the estimator rejects some loop forms
                logger.debug("no FLOP estimate for %s: %s", gv.name_hint, err)
                flops_cache[gv.name_hint] = 0.0
        preds, model_inputs = sources(call.args[1])
        layers.append(Layer(
            name=name, kind=_layer_kind(func, kinds), op_kinds=kinds, func_name=gv.name_hint,
            inputs=act_inputs, outputs=_tensor_infos(binding.var.ty),
            flops=flops_cache[gv.name_hint], param_bytes=param_bytes, predecessors=preds,
            model_inputs=model_inputs, index=index,
        ))
        producers[binding.var] = [name]
    if not layers:
        raise ModelError("the model has no layers (no operator in 'main')")
    return layers


def layers_table(layers: list[Layer]) -> str:
    """A fixed-width text table of layers, for the CLI and logs."""
    rows = [("#", "layer", "kind", "ops", "output", "MFLOP", "params KiB", "act in/out KiB",
             "predecessors")]
    for layer in layers:
        out = ",".join("x".join(map(str, t.shape)) for t in layer.outputs)
        rows.append((str(layer.index), layer.name, layer.kind, "+".join(layer.op_kinds), out,
                     f"{layer.flops / 1e6:.2f}", f"{layer.param_bytes / 1024:.1f}",
                     f"{layer.activation_bytes_in / 1024:.1f}/"
                     f"{layer.activation_bytes_out / 1024:.1f}",
                     ",".join(layer.predecessors + layer.model_inputs) or "-"))
    widths = [min(max(len(r[i]) for r in rows), 40) for i in range(len(rows[0]))]

    def fmt(row):
        return "  ".join(cell[:40].ljust(w) for cell, w in zip(row, widths)).rstrip()

    total_flops = sum(layer.flops for layer in layers)
    total_params = sum(layer.param_bytes for layer in layers)
    return "\n".join([fmt(rows[0])] + [fmt(r) for r in rows[1:]] + [
        f"{len(layers)} layers, {total_flops / 1e6:.1f} MFLOP, "
        f"{total_params / 2**20:.2f} MiB of parameters"])
