"""Kernels that check index tensors at run time, so that no compiled gather or scatter reads
or writes outside its buffers.

TVM's gathers and scatters (``take`` in fast mode, ``gather_nd``, ``scatter_elements``, ...)
index memory with the values they are given: an index past the end reads or writes outside
the buffer. :func:`guard_indices` puts a small kernel in front of them that raises (the VM
call fails with :data:`OUT_OF_RANGE`'s message) when an index is outside ``[-n, n)`` and
wraps a negative index once, as ONNX specifies (``-1`` is the last entry).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...errors import ModelError

#: The start of the message of every failed index check (see CompiledModel.run).
OUT_OF_RANGE = "out-of-range index"

#: The attribute that marks a check kernel; its value is the position of the bounds parameter.
BOUNDS_PARAM_ATTR = "tvm_hetero.index_bounds_param"


def _check_loops(src, limit, dst, rows, cols, dtype: str, message: str):
    """The check's loop nest over ``[rows, cols]`` views of the indices, as a TVMScript macro
    both guard kernels expand: one serial loop (the check raises from inside it, so it must
    stay out of parallel loops: tir.is_scheduled keeps the schedule rules away); bound j
    checks column j."""
    from tvm.script import tirx as T

    @T.macro
    def check():
        with T.sblock("root"):
            for i, j in T.grid(rows, cols):
                with T.sblock("index_guard"):
                    vi = T.axis.spatial(rows, i)
                    vj = T.axis.spatial(cols, j)
                    T.reads(src[vi, vj], limit[vj])
                    T.writes(dst[vi, vj])
                    index = src[vi, vj]
                    extent = T.Cast(dtype, limit[vj])
                    assert index >= -extent and index < extent, message
                    dst[vi, vj] = T.if_then_else(index < 0, index + extent, index)

    return check


def _guard_func(shape: tuple[int, ...], dtype: str, bounds: tuple[int, ...], message: str):
    """The check over indices of a static `shape`, viewed as ``[rows, len(bounds)]``."""
    from tvm.script import tirx as T

    rows = math.prod(shape[:-1]) if len(bounds) > 1 else math.prod(shape)
    cols = len(bounds)

    @T.prim_func(private=True, check_well_formed=False)
    def guard(idx_in: T.handle, bounds_in: T.handle, idx_out: T.handle):
        T.func_attr({"tir.noalias": True, "tir.is_scheduled": True})
        src = T.match_buffer(idx_in, shape, dtype)
        limit = T.match_buffer(bounds_in, (cols,), "int32")
        dst = T.match_buffer(idx_out, shape, dtype)
        src_flat = T.decl_buffer((rows, cols), dtype, data=src.data)
        dst_flat = T.decl_buffer((rows, cols), dtype, data=dst.data)
        _check_loops(src_flat, limit, dst_flat, rows, cols, dtype, message)()

    return guard.with_attr(BOUNDS_PARAM_ATTR, 1)  # bounds_in


def _guard_func_rows(cols: int, dtype: str, message: str):
    """The check over ``[n, cols]`` indices, ``n`` known at run time (a shape range's rows)."""
    from tvm.script import tirx as T

    @T.prim_func(private=True, check_well_formed=False)
    def guard(idx_in: T.handle, bounds_in: T.handle, idx_out: T.handle):
        T.func_attr({"tir.noalias": True, "tir.is_scheduled": True})
        rows = T.int64()
        src = T.match_buffer(idx_in, (rows, cols), dtype)
        limit = T.match_buffer(bounds_in, (cols,), "int32")
        dst = T.match_buffer(idx_out, (rows, cols), dtype)
        _check_loops(src, limit, dst, rows, cols, dtype, message)()

    return guard.with_attr(BOUNDS_PARAM_ATTR, 1)  # bounds_in


def known_dims(expr, what: str) -> list:
    """The dimensions of a Relax tensor expression of known shape: ints, and PrimExprs where
    symbolic (a shape range's); a ModelError naming ``what`` for an unknown shape."""
    import tvm

    values = getattr(getattr(expr.ty, "shape", None), "values", None)
    if values is None:
        return list(static_dims(expr, what))
    return [int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in values]


def static_bounds(bounds) -> tuple[int, ...] | None:
    """`bounds` as ints where every one is known at build time; None where one is symbolic."""
    import tvm

    if all(isinstance(b, (int, np.integer, tvm.tirx.IntImm)) for b in bounds):
        return tuple(int(b) for b in bounds)
    return None


def static_dims(expr, what: str) -> tuple[int, ...]:
    """The static shape of a Relax tensor expression, or a ModelError naming ``what``.

    Parameters
    ----------
    expr : relax.Expr
        A tensor expression.
    what : str
        Named in the error.

    Returns
    -------
    tuple of int

    Raises
    ------
    ModelError
        If the shape is unknown or has a symbolic dimension.
    """
    import tvm

    shape = getattr(expr.ty, "shape", None)
    values = getattr(shape, "values", None)
    if values is None or not all(isinstance(d, tvm.tirx.IntImm) for d in values):
        raise ModelError(f"{what} needs a static shape; give static input shapes")
    return tuple(int(d) for d in values)


def guard_indices(bb, indices, bounds: Sequence[int], op_name: str, node_name: str = ""):
    """Emit the check of ``indices`` and return the checked indices, negatives wrapped.

    Parameters
    ----------
    bb : relax.BlockBuilder
        The importer's block builder.
    indices : relax.Expr
        An integer tensor; with one bound every entry is checked against it, with ``k``
        bounds the last axis has ``k`` entries and entry ``j`` is checked against bound ``j``
        (GatherND/ScatterND coordinates).
    bounds : sequence of int
        The extent of the data axis each index addresses.
    op_name, node_name : str
        Named in the error message.

    Returns
    -------
    relax.Expr
        The checked indices: same shape and dtype, every entry in ``[0, bound)``.
    """
    from tvm import relax

    dtype = str(indices.ty.dtype)
    dims = known_dims(indices, f"{op_name}'s indices")
    static = static_bounds(bounds)
    if static is None or not all(isinstance(d, int) for d in dims):
        return _guard_rows(bb, indices, dims, dtype, bounds, op_name, node_name)
    bounds, shape = static, tuple(dims)
    if len(bounds) > 1 and (not shape or shape[-1] != len(bounds)):
        raise ModelError(f"{op_name}: indices of shape {shape} do not end in {len(bounds)}")
    if math.prod(shape) == 0:
        return indices
    where = f" (node {node_name})" if node_name else ""
    extents = bounds[0] if len(bounds) == 1 else list(bounds)
    message = (f"{OUT_OF_RANGE}: an index given to {op_name}{where} is outside "
               f"[-n, n) for the data extent n = {extents}")
    func = _guard_func(shape, dtype, bounds, message)
    global_var = bb.add_func(func, f"index_guard_{op_name.lower()}")
    limits = relax.const(np.array(bounds, dtype="int32"))
    return bb.emit(relax.call_tir(global_var, [indices, limits], relax.TensorType(shape, dtype)))


def _guard_rows(bb, indices, shape, dtype: str, bounds: tuple[int, ...], op_name: str,
                node_name: str):
    """:func:`guard_indices` for indices of a symbolic shape: checked as ``[rows, cols]``."""
    from tvm import relax

    cols = len(bounds)
    if cols > 1 and (not shape or shape[-1] != cols):
        raise ModelError(f"{op_name}: indices of shape {shape} do not end in {cols}")
    rows = math.prod(shape[:-1] if cols > 1 else shape)
    where = f" (node {node_name})" if node_name else ""
    extents = bounds[0] if cols == 1 else list(bounds)
    message = (f"{OUT_OF_RANGE}: an index given to {op_name}{where} is outside "
               f"[-n, n) for the data extent n = {extents}")
    global_var = bb.add_func(_guard_func_rows(cols, dtype, message),
                             f"index_guard_{op_name.lower()}")
    flat = bb.normalize(relax.op.reshape(indices, relax.ShapeExpr([rows, cols])))
    if static_bounds(bounds) is not None:
        limits = relax.const(np.array(static_bounds(bounds), dtype="int32"))
    else:  # an extent known at run time (a shape range's dimension)
        limits = bb.normalize(relax.op.astype(
            relax.op.shape_to_tensor(relax.ShapeExpr(list(bounds))), "int32"))
    checked = bb.emit(relax.call_tir(global_var, [flat, limits],
                                     relax.TensorType([rows, cols], dtype)))
    return bb.normalize(relax.op.reshape(checked, relax.ShapeExpr(shape)))
