"""FuseTIRKeepingOpKinds: TVM's FuseTIR, with the ops of each fused group kept on its
PrimFunc (``tvm_hetero.op_kinds``: what layers and rules are classified by)."""

from __future__ import annotations

import tvm
from tvm import relax

from ..layers.classify import op_name
from ..relax_ir import OP_KINDS_ATTR

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def called_op_names(func) -> list[str]:
    """The op names (:func:`tvm_hetero.layers.classify.op_name`) of the ``call_tir`` calls of a
    Relax function, in order."""
    names: list[str] = []

    @relax.expr_functor.visitor
    class _Collect(relax.PyExprVisitor):
        def visit_call_(self, call):
            if call.op.same_as(_CALL_TIR):
                names.append(op_name(call.args[0].name_hint))
            super().visit_call_(call)

    _Collect().visit_expr(func)
    return names


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.FuseTIRKeepingOpKinds")
class FuseTIRKeepingOpKinds:
    """``relax.transform.FuseTIR``, then every PrimFunc gets the attribute ``OP_KINDS_ATTR``:
    the ops its fused group called (``["conv2d", "add", "relu"]``), or for an unfused one the
    op its name says. Runs after FuseOps."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        op_kinds = {gv.name_hint: called_op_names(func) for gv, func in mod.functions_items()
                    if isinstance(func, relax.Function) and func.attrs is not None
                    and "Primitive" in func.attrs}
        mod = relax.transform.FuseTIR()(mod)
        for gv, func in list(mod.functions_items()):
            if isinstance(func, tvm.tirx.PrimFunc):
                kinds = op_kinds.get(gv.name_hint) or [op_name(gv.name_hint)]
                mod[gv] = func.with_attr(OP_KINDS_ATTR, kinds)
        return mod
