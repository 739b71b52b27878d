"""DropDropout: ``dropout(x)[0]`` is ``x`` at inference."""

from __future__ import annotations

import tvm
from tvm import relax

from .base import rewrite_functions

_DROPOUT = tvm.ir.Op.get("relax.nn.dropout")


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def visit_tuple_getitem_(self, op):
        op = super().visit_tuple_getitem_(op)
        source = op.tuple_value
        if isinstance(source, relax.Var):
            source = self.lookup_binding(source)
        if op.index == 0 and isinstance(source, relax.Call) and source.op.same_as(_DROPOUT):
            return source.args[0]
        return op


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.DropDropout")
class DropDropout:
    """``dropout(x)[0]`` becomes ``x`` (ONNX Dropout without training mode imports so): the
    copy goes, and so does the tuple that TVM's layout conversion fails on."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(mod, _Rewriter(mod))
