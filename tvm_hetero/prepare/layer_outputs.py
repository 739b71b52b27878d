"""CopyOutputsToLayers: every tensor ``main`` returns is a layer's output.

A graph of constants only (ONNX Constant, OptionalHasElement of nothing), an ``If`` whose
branches are constants, or a result that a host builtin computes (NonZero, Unique) leaves
``main`` returning a tensor that no ``call_tir`` computes: such a model has no layer to place.
This pass, the last of the preparation, gives each such output a copy kernel (its own layer,
placed like any other); no constant folding runs after it, so the copy stays.
"""

from __future__ import annotations

import tvm
from tvm import relax, te

from ..relax_ir import (OP_KINDS_ATTR, main_bindings, output_tensors, outputs_without_layer,
                        tuple_fields)


def _copy_func(ty):
    """A PrimFunc copying a tensor of type `ty` (its symbolic dimensions read from the input)."""
    value = te.placeholder(list(ty.shape.values), str(ty.dtype), "value")
    copy = te.compute(value.shape, lambda *i: value(*i), name="copy")
    return te.create_prim_func([value, copy]).with_attrs(
        {"op_pattern": 0, OP_KINDS_ATTR: ["copy"]})


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.CopyOutputsToLayers")
class CopyOutputsToLayers:
    """Give each tensor ``main`` returns that no layer computes a copy kernel."""

    def transform_module(self, mod, _ctx):
        positions = set(outputs_without_layer(mod))
        if not positions:
            return mod
        main = mod["main"]
        builder = relax.BlockBuilder(mod)
        bindings, replaced = [], {}
        for index, expr in enumerate(output_tensors(mod)):
            if index not in positions:
                continue
            source = expr
            if not isinstance(expr, (relax.Var, tvm.ir.GenericConst)):  # a tuple field
                source = relax.Var(f"output_{index}_value", expr.ty)
                bindings.append(relax.VarBinding(source, expr))
            callee = builder.add_func(_copy_func(expr.ty), "copy")
            copied = relax.Var(f"output_{index}", expr.ty)
            bindings.append(relax.VarBinding(copied, relax.call_tir(callee, [source],
                                                                     expr.ty)))
            replaced[index] = copied
        body = main.body if isinstance(main.body, relax.SeqExpr) else relax.SeqExpr([],
                                                                                     main.body)
        result = _rebuild(body.body, body.body.ty, replaced, [0],
                          {b.var: b.value for b in main_bindings(mod)})
        blocks = list(body.blocks) + [relax.BindingBlock(bindings)]
        out = builder.get()
        out["main"] = relax.Function(main.params, relax.SeqExpr(blocks, result),
                                     ret_ty=main.ret_ty, attrs=main.attrs)
        return relax.transform.Normalize()(out)


def _rebuild(expr, ty, replaced: dict, counter: list, bound: dict):
    """`expr` with the tensors at the replaced positions (in ``output_tensors`` order)
    swapped for their copies."""
    if isinstance(ty, relax.TupleType):
        fields = tuple_fields(expr, ty, bound)
        start = counter[0]
        new = [_rebuild(f, fty, replaced, counter, bound) for f, fty in zip(fields, ty.fields)]
        if not any(start <= i < counter[0] for i in replaced):
            return expr
        return relax.Tuple(new)
    if isinstance(ty, relax.TensorType):
        index = counter[0]
        counter[0] += 1
        return replaced.get(index, expr)
    return expr
