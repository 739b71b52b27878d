"""FoldConstantLayouts: layout transforms of constants (blocked weights) computed by numpy."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .base import rewrite_functions

_LAYOUT_TRANSFORM = tvm.ir.Op.get("relax.layout_transform")


def blocked_by_numpy(array: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray | None:
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


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not call.op.same_as(_LAYOUT_TRANSFORM) \
                or not isinstance(call.args[0], tvm.ir.GenericConst) \
                or call.attrs.pad_value is not None or call.ty.shape is None:
            return call
        source = call.args[0].value.numpy()
        out_shape = tuple(int(v) for v in call.ty.shape)
        blocked = blocked_by_numpy(source, out_shape)
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


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.FoldConstantLayouts")
class FoldConstantLayouts:
    """``layout_transform`` of a constant (the weights and biases of blocked convolutions)
    becomes the transformed constant, by numpy, checked against the index map on sample
    elements (through FoldConstant, which compiles a kernel per constant, the layouts took 9 s
    of ResNet-50's preparation; ``IndexMap.map_tensor`` 50 s). Other transforms stay for
    FoldConstant."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(mod, _Rewriter(mod))
