"""ClipAsMinMax: ``clip(x, lo, hi)`` as ``minimum(maximum(x, lo), hi)``, which TVM's layout
conversion carries into the blocked layout."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .base import rewrite_functions

_CLIP = tvm.ir.Op.get("relax.clip")


def _bound(value):
    """A clip bound (an ``IntImm``/``FloatImm`` argument) as a Python number, else None."""
    from tvm.ir.prim.expr import FloatImm, IntImm

    return value.value if isinstance(value, (IntImm, FloatImm)) else None


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not call.op.same_as(_CLIP) or call.args[0].ty.dtype is None \
                or not str(call.args[0].ty.dtype).startswith("float"):
            return call
        low, high = _bound(call.args[1]), _bound(call.args[2])
        if low is None or high is None:
            return call
        dtype = str(call.args[0].ty.dtype)
        x = relax.op.maximum(call.args[0], relax.const(np.array(low, dtype)))
        return relax.op.minimum(self.builder_.emit(x), relax.const(np.array(high, dtype)))


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.ClipAsMinMax")
class ClipAsMinMax:
    """Float ``clip`` with constant bounds (ReLU6, HardSwish's and HardSigmoid's clip) becomes
    ``minimum(maximum(x, lo), hi)``: the same values (a NaN aside), and binary elementwise ops
    take a blocked input's layout in TVM's layout conversion, where ``clip`` has no layout
    inference and would cost a transform out of and back into the blocked layout."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(mod, _Rewriter(mod))
