"""Conv1dAsConv2d: 1-D convolutions as 2-D ones of height 1, with the elementwise ops between
them lifted to 4-D, so that the convolution rules and the blocked layout reach them."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .base import rewrite_functions
from .constants_at_full_rank import BINARY
from .merge_concatenated_convs import ELEMENTWISE_UNARY

_CONV1D = tvm.ir.Op.get("relax.nn.conv1d")
# the unit axis a 3-D NCW tensor takes: NCW -> NC1W
_AXIS = 2


def _ndim(expr) -> int:
    ty = expr.ty
    return int(ty.ndim) if isinstance(ty, relax.TensorType) else -1


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.lifted: dict = {}  # a 3-D value's var -> its 4-D (height 1) var

    def _lifted(self, expr):
        """The 4-D twin of a 3-D var, following aliases; None when it has none."""
        while isinstance(expr, relax.Var):
            if expr in self.lifted:
                return self.lifted[expr]
            expr = self.builder_.lookup_binding(expr)
        return None

    def _emit_lifted(self, value4d):
        """Emit a 4-D value and the 3-D squeeze of it the model's other users read (dead code
        when none does); returns the squeeze's var."""
        var4d = self.builder_.emit(value4d)
        var3d = self.builder_.emit(relax.op.squeeze(var4d, [_AXIS]))
        self.lifted[var3d] = var4d
        return var3d

    def _conv(self, call):
        attrs = call.attrs
        if str(attrs.data_layout) != "NCW" or str(attrs.kernel_layout) != "OIW" \
                or str(attrs.out_layout) != "NCW" or _ndim(call.args[1]) != 3:
            return call
        data = self._lifted(call.args[0])
        if data is None:
            data = relax.op.expand_dims(call.args[0], _AXIS)
        weight = call.args[1]
        if isinstance(weight, tvm.ir.GenericConst):
            weight = relax.const(np.expand_dims(weight.value.numpy(), _AXIS))
        else:
            weight = relax.op.expand_dims(weight, _AXIS)
        left, right = (int(v) for v in attrs.padding)
        conv = relax.op.nn.conv2d(
            data, weight, strides=[1, int(attrs.strides[0])], padding=[0, left, 0, right],
            dilation=[1, int(attrs.dilation[0])], groups=int(attrs.groups),
            data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW",
            out_dtype=attrs.out_dtype if str(attrs.out_dtype) else None)
        return self._emit_lifted(conv)

    def _elementwise(self, call):
        """An elementwise op over lifted values as a 4-D op; the call itself when none of its
        tensor operands is lifted or one cannot follow."""
        if _ndim(call) != 3:
            return call
        args, any_lifted = [], False
        for arg in call.args:
            twin = self._lifted(arg)
            if twin is not None:
                args.append(twin)
                any_lifted = True
            elif isinstance(arg, tvm.ir.GenericConst):
                value = arg.value.numpy()
                # broadcast from the right: a unit axis goes before the last one
                args.append(relax.const(np.expand_dims(value, value.ndim - 1))
                            if value.ndim >= 2 else arg)
            elif _ndim(arg) == 3:
                args.append(relax.op.expand_dims(arg, _AXIS))
            elif _ndim(arg) == 0 or not isinstance(arg, (relax.Var, relax.Call, relax.Tuple)):
                args.append(arg)  # a scalar, or a scalar attribute argument (clip's bounds)
            else:
                return call
        if not any_lifted:
            return call
        return self._emit_lifted(relax.Call(call.op, args, call.attrs, call.ty_args))

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op):
            return call
        if call.op.same_as(_CONV1D):
            return self._conv(call)
        if call.op.name in ELEMENTWISE_UNARY or (call.op.name in BINARY
                                                 and len(call.args) == 2):
            return self._elementwise(call)
        return call


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.Conv1dAsConv2d")
class Conv1dAsConv2d:
    """``conv1d(x, W)`` (NCW, OIW) becomes ``squeeze(conv2d(expand_dims(x, 2), W[:, :, None]),
    2)`` (NCHW of height 1, the same strides, padding, dilation and groups along the width),
    and the elementwise ops (bias, ReLU, residual adds, ...) whose operands come from such
    convolutions follow in 4-D, so that a chain of 1-D convolutions (a temporal conv net) runs
    as one of 2-D ones: padded, blocked and scheduled by the 2-D convolution rules, which the
    1-D convolution has none of. Only the ends of a chain keep an ``expand_dims`` or a
    ``squeeze``; those the model no longer reads go with dead-code elimination.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        if not any(isinstance(func, relax.Function) and _uses_conv1d(func)
                   for func in mod.functions.values()):
            return mod
        return rewrite_functions(mod, _Rewriter(mod))


def _uses_conv1d(func) -> bool:
    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) \
                and expr.op.same_as(_CONV1D):
            found.append(expr)

    relax.analysis.post_order_visit(func, visit)
    return bool(found)
