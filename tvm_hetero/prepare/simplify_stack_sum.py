"""SimplifyStackSum: ONNX ``Sum`` as additions, broadcasts to a tensor's own shape dropped."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax

from .base import rewrite_functions

_SUM = tvm.ir.Op.get("relax.sum")
_STACK = tvm.ir.Op.get("relax.stack")
_BROADCAST = tvm.ir.Op.get("relax.broadcast_to")


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if call.op.same_as(_BROADCAST):
            src = call.args[0]
            if isinstance(src.ty, relax.TensorType) and src.ty.shape is not None and \
                    tvm_ffi.structural_equal(src.ty.shape, call.ty.shape):
                return src
        if call.op.same_as(_SUM) and not call.attrs.keepdims and \
                call.attrs.axis is not None and [int(a) for a in call.attrs.axis] == [0] and \
                isinstance(call.args[0], relax.Var):
            stacked = self.lookup_binding(call.args[0])
            if isinstance(stacked, relax.Call) and stacked.op.same_as(_STACK) and \
                    int(stacked.attrs.axis) == 0 and isinstance(stacked.args[0], relax.Tuple):
                fields = list(stacked.args[0].fields)
                if all(tvm_ffi.structural_equal(f.ty, call.ty) for f in fields):
                    out = fields[0]
                    for term in fields[1:]:
                        out = self.builder_.emit(relax.op.add(out, term))
                    return out
        return call


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.SimplifyStackSum")
class SimplifyStackSum:
    """ONNX ``Sum`` imports as ``sum(stack(broadcast_to(a), broadcast_to(b)), axis=0)``, which
    FuseOps cannot fuse with the producer of ``a``: it becomes ``a + b``, and broadcasts to the
    shape a tensor already has are dropped."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(mod, _Rewriter(mod))
