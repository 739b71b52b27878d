"""FlattenMatmulRows: a product of a batched activation by a 2-D weight is one 2-D product.

``matmul(x[B..., M, K], w[K, N])`` computes the same rows whatever the batch dimensions: the
B x M rows all meet the same weight. Exporters emit such products for every linear layer over
a sequence or a feature map: ViT's attention projection over ``[197, 1, 768]`` (torch's
multi-head attention moves the sequence first), ConvNeXt's and Swin's MLPs over
``[1, H, W, C]`` maps, a batch of sequences. A kernel that keeps the batch dimensions is a
batch of small products to the matmul rules (ViT's ``[197, 1, 768] x [768, 2304]`` a batch of
197 one-row products); as ``[B * M, K] x [K, N]`` it is one product that a register tile of
rows x vectors covers.

The pass reshapes `x` to ``[B * M, K]`` (a view), takes the product in 2-D, and carries the
elementwise epilogue that follows (bias, GELU's arithmetic, a residual of the same shape,
scales broadcast along the columns or the rows) in 2-D too, so that ``FuseOps`` still fuses it
into the product's kernel; the value is reshaped back (a view) only where something else reads
it. Products whose batch dimensions are all 1 are left alone (they are 2-D products already).

The rejected alternative: fusing the batch loops inside the matmul rule (``transform_block_
layout``) leaves row indices that are divisions of the fused row, which the padding of rows to
whole tiles (``pad_einsum``) and the epilogue's placement cannot follow.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax

from ..relax_ir import static_shape
from .base import rewrite_functions

_MATMUL = tvm.ir.Op.get("relax.matmul")
# ops applied element by element to their (broadcast) operands: the epilogue carried in 2-D
ELEMENTWISE_OPS = frozenset(f"relax.{name}" for name in (
    "add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "floor_divide",
    "erf", "tanh", "sigmoid", "exp", "sqrt", "rsqrt", "negative", "abs", "square", "log",
    "clip", "astype", "nn.relu", "nn.gelu", "nn.gelu_tanh", "nn.silu", "nn.leakyrelu",
))


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        # a value of the rewritten function -> its 2-D form ([rows, columns]) already emitted
        self.flat: dict = {}

    def _emit(self, var, value):
        output = not isinstance(var, relax.DataflowVar) \
            and self.builder_.current_block_is_dataflow()
        emit = self.builder_.emit_output if output else self.builder_.emit
        new = emit(value, name_hint=var.name)
        self.set_var_remap(var, new)
        return new

    def _flat_product(self, call):
        """The 2-D product of a batched `x` by a 2-D weight, or None."""
        x, w = call.args
        x_shape, w_shape = static_shape(x), static_shape(w)
        if x_shape is None or w_shape is None or len(w_shape) != 2 or len(x_shape) < 3 \
                or math.prod(x_shape[:-2]) == 1:
            return None
        rows = math.prod(x_shape[:-1])
        flat_x = self.flat.get(x)
        if flat_x is None or static_shape(flat_x) != [rows, x_shape[-1]]:
            flat_x = self.builder_.emit(relax.op.reshape(x, [rows, x_shape[-1]]))
        return relax.op.matmul(flat_x, w, out_dtype=call.attrs.out_dtype)

    def _flat_operand(self, arg, full: list[int]):
        """`arg` as an operand of the 2-D form of a value of shape `full`, or None."""
        if arg in self.flat:
            return self.flat[arg]
        shape = static_shape(arg)
        if shape is None or len(shape) > len(full):
            return None
        if len(shape) <= 1:
            return arg  # a scalar or a vector along the columns broadcasts alike in 2-D
        aligned = [1] * (len(full) - len(shape)) + shape
        leading, last = aligned[:-1], aligned[-1]
        if last not in (1, full[-1]):
            return None
        if leading == full[:-1]:
            rows = math.prod(full[:-1])
        elif all(d == 1 for d in leading):
            rows = 1
        else:
            return None  # broadcast along some of the batch dimensions only
        return self.builder_.emit(relax.op.reshape(arg, [rows, last]))

    def _flat_elementwise(self, call, full: list[int]):
        flat_args = [arg for arg in call.args if arg in self.flat]
        if not flat_args or any(static_shape(arg) != full for arg in flat_args):
            return None  # nothing 2-D read, or a 2-D value broadcast up
        operands = []
        for arg in call.args:
            if not isinstance(arg, relax.Expr) or isinstance(arg, relax.Tuple):
                return None
            operand = self._flat_operand(arg, full)
            if operand is None:
                return None
            operands.append(operand)
        return relax.Call(call.op, operands, call.attrs, call.ty_args)

    def visit_var_binding_(self, binding):
        value = self.visit_expr(binding.value)
        full = static_shape(binding.var)
        flat = None
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and full:
            if value.op.same_as(_MATMUL):
                flat = self._flat_product(value)
            elif value.op.name in ELEMENTWISE_OPS:
                flat = self._flat_elementwise(value, full)
        if flat is None:
            self._emit(binding.var, value)
            return
        flat_var = self.builder_.emit(flat)
        if static_shape(flat_var) != [math.prod(full[:-1]), full[-1]]:
            raise RuntimeError(f"FlattenMatmulRows: {value.op.name} gave "
                               f"{static_shape(flat_var)} for {full}")  # cannot happen
        # the value in its own shape, for whatever else reads it (dead code when nothing does)
        new = self._emit(binding.var, relax.op.reshape(flat_var, full))
        self.flat[new] = flat_var


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.FlattenMatmulRows")
class FlattenMatmulRows:
    """``matmul(x[B..., M, K], w[K, N])`` with batch dimensions (not all 1) becomes
    ``matmul(reshape(x, [B * M, K]), w)``, its elementwise epilogue carried in 2-D and the
    result reshaped back where something else reads it: one product of B x M rows for the
    matmul rules instead of a batch of products."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        mod = rewrite_functions(mod, _Rewriter(mod))
        return relax.transform.DeadCodeElimination()(mod)
