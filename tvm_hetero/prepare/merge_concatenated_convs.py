"""MergeConcatenatedConvs: parallel convolutions of one input whose outputs a Concat joins
become one convolution."""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from .base import rewrite_functions

_CONV = tvm.ir.Op.get("relax.nn.conv2d")
_CONCAT = tvm.ir.Op.get("relax.concat")
# Ops applied element by element, whatever the channel: a chain of them after the parallel
# convolutions merges with the convolutions.
ELEMENTWISE_UNARY = ("relax.nn.relu", "relax.sigmoid", "relax.tanh", "relax.clip",
                     "relax.nn.leakyrelu", "relax.nn.silu", "relax.nn.gelu")
PER_CHANNEL_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


def use_counts(func) -> dict:
    """How many times each variable of a Relax function is read (in A-normal form)."""
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


def _per_channel(const, channels: int) -> int | None:
    """The channel axis of a constant broadcast per channel over NCHW, else None."""
    shape = tuple(int(d) for d in const.value.shape)
    if shape == (1, channels, 1, 1):
        return 1
    return 0 if shape == (channels, 1, 1) else None


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.uses = {}
        for func in mod.functions.values():
            if isinstance(func, relax.Function):
                self.uses.update(use_counts(func))

    def _branch(self, var):
        """(conv call, [(op, attrs, other args, constant, constant first)]) of one
        concatenated input, innermost step first, or None."""
        steps = []
        while isinstance(var, relax.Var) and self.uses.get(var) == 1:
            value = self.lookup_binding(var)
            if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
                return None
            if value.op.same_as(_CONV):
                attrs = value.attrs
                if not isinstance(value.args[1], tvm.ir.GenericConst) \
                        or int(attrs.groups) != 1 or str(attrs.data_layout) != "NCHW" \
                        or str(attrs.kernel_layout) != "OIHW":
                    return None
                return value, steps[::-1]
            name = value.op.name
            if name in ELEMENTWISE_UNARY and isinstance(value.args[0], relax.Var) and not any(
                    isinstance(arg, (relax.Var, tvm.ir.GenericConst))
                    for arg in value.args[1:]):
                steps.append((value.op, value.attrs, list(value.args[1:]), None, False))
                var = value.args[0]
            elif name in PER_CHANNEL_BINARY and len(value.args) == 2:
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
        if not call.op.same_as(_CONCAT) or int(call.attrs.axis) != 1 \
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
                axes = {_per_channel(c, n) for c, n in zip(consts, channels)}
                if len(axes) != 1 or None in axes:
                    return call
                merged_consts[index] = relax.const(np.concatenate(
                    [c.value.numpy() for c in consts], axis=axes.pop()))
        out = relax.Call(_CONV, [first_conv.args[0], relax.const(np.concatenate(weights))],
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


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.MergeConcatenatedConvs")
class MergeConcatenatedConvs:
    """``concat([f(conv2d(x, W1)), f(conv2d(x, W2)), ...], axis=1)``, the convolutions
    reading the same input with the same attributes and constant weights, each followed by
    the same chain ``f`` of per-channel constant adds/multiplies (bias, batch norm) and
    element-wise activations, becomes ``f'(conv2d(x, concat(W1, W2, ...)))``: one
    convolution writing the concatenation directly (the zoo ResNet's two 1x1 heads: three
    kernels become one). Only when each branch's values are used by the concatenation
    alone."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(mod, _Rewriter(mod))
