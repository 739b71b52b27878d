"""ConstantsAtFullRank: the constant operand of a binary elementwise op reshaped to the op's
rank (leading unit axes), which TVM's layout conversion carries into the blocked layout."""

from __future__ import annotations

import tvm
from tvm import relax

from .base import rewrite_functions

BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
          "relax.minimum", "relax.power")


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in BINARY \
                or len(call.args) != 2 or not isinstance(call.ty, relax.TensorType) \
                or call.ty.ndim < 1:
            return call
        rank = int(call.ty.ndim)
        args = []
        for arg in call.args:
            if isinstance(arg, tvm.ir.GenericConst) and 0 < arg.value.ndim < rank:
                value = arg.value.numpy()
                arg = relax.const(value.reshape((1,) * (rank - value.ndim) + value.shape))
            args.append(arg)
        if all(new.same_as(old) for new, old in zip(args, call.args)):
            return call
        return relax.Call(call.op, args, call.attrs, call.ty_args)


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.ConstantsAtFullRank")
class ConstantsAtFullRank:
    """A constant operand of lower rank than its binary elementwise op (``add``, ``multiply``,
    ...) gets the op's rank by leading unit axes: the same broadcast, and TVM's layout
    conversion carries the op into the blocked layout, where a rank-3 ``(C, 1, 1)`` constant
    (the per-channel scale and shift of DenseNet-121's and Inception v2's light graphs) made it
    fall back to NCHW between two layout transforms."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(mod, _Rewriter(mod))
