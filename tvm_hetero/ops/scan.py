"""Cumulative sums and products along one axis (scans): the kernel that preparation legalizes
``relax.cumsum`` and ``relax.cumprod`` to (ONNX CumSum imports as ``relax.cumsum``); the
``scan-lines`` CPU rule schedules it, and on a GPU dlight's fallback gives each line a thread.

TVM 0.27 registers no legalization for ``relax.cumsum``/``relax.cumprod`` (its
``topi.cumsum`` is a ``te.extern`` whose block declares no reads or writes, which no schedule
rule can take). Here a scan is one block per *line* (a position on every axis but the scanned
one): its iterations are independent, spatial and declared with the whole line they read and
write, and the line's steps are a serial loop inside the block,
``out[k] = out[k - 1] (+ or *) data[k]`` (``data[k - 1]`` when exclusive, walked from the end
when reversed). Accumulating in the output itself keeps the block free of local buffers, so
that the lines can be vectorized (TVM widened a local accumulator wrongly).
"""

from __future__ import annotations

import math

#: op name -> (binary operation, identity): the scans this kernel computes. The op name is
#: also the kernel's and its block's name (:data:`SCAN_BLOCKS`).
SCAN_OPS = {"cumsum": ("add", 0), "cumprod": ("multiply", 1)}
#: the names of the scan kernels' blocks, which the ``scan-lines`` rule recognizes
SCAN_BLOCKS = tuple(SCAN_OPS)


def scan_func(shape, axis: int, dtype: str, out_dtype: str | None = None, op: str = "cumsum",
              exclusive: bool = False, reverse: bool = False):
    """The PrimFunc ``(data, out)`` of a scan along `axis` of a static `shape`.

    Parameters
    ----------
    shape : sequence of int
        The static shape of the data and the output (rank 1 or more, no empty axis).
    axis : int
        The scanned axis; negative counts from the end.
    dtype, out_dtype : str
        The data's dtype and the output's, in which it accumulates (default: `dtype`).
    op : str
        ``"cumsum"`` or ``"cumprod"`` (:data:`SCAN_OPS`).
    exclusive : bool
        Each output leaves out its own element (the first output is the identity).
    reverse : bool
        Scan from the end of the axis to its start.

    Returns
    -------
    tvm.tirx.PrimFunc
    """
    from tvm import tirx
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    shape = tuple(int(d) for d in shape)
    rank = len(shape)
    if rank == 0 or not -rank <= axis < rank:
        raise ValueError(f"{op}: axis {axis} is outside a tensor of rank {rank}")
    if math.prod(shape) == 0:
        raise ValueError(f"{op}: an empty shape {shape} has nothing to scan")
    axis = axis % rank
    out_dtype = out_dtype or dtype
    combine, identity = SCAN_OPS[op]
    steps = shape[axis]
    # the line's extents; a rank-1 scan is one line (a unit axis the block iterates over)
    lines = [d for i, d in enumerate(shape) if i != axis] or [1]

    def cast(value):
        return value if dtype == out_dtype else tirx.Cast(out_dtype, value)

    def apply(a, b):
        return a + b if combine == "add" else a * b

    with IRBuilder() as builder:
        with T.prim_func(is_private=True, s_tir=True):
            T.func_name(op)
            data = T.arg("data", T.buffer(shape, dtype))
            out = T.arg("out", T.buffer(shape, out_dtype))
            T.func_attr({"tir.noalias": True})
            with T.grid(*lines) as loops:
                loops = [loops] if isinstance(loops, tirx.Var) else list(loops)
                with T.sblock(op):
                    coords = [T.axis.spatial(extent, loop) for extent, loop in zip(lines, loops)]
                    if rank == 1:
                        coords = []

                    def at(step):
                        return tuple(coords[:axis]) + (step,) + tuple(coords[axis:])

                    line = tuple(coords[:axis]) + (slice(0, steps),) + tuple(coords[axis:])
                    T.reads(data[line])
                    T.writes(out[line])
                    first = steps - 1 if reverse else 0
                    T.buffer_store(out, tirx.const(identity, out_dtype) if exclusive
                                   else cast(data[at(first)]), list(at(first)))
                    if steps > 1:
                        with T.serial(steps - 1) as k:
                            here = (steps - 2 - k) if reverse else (k + 1)
                            before = (here + 1) if reverse else (here - 1)
                            value = cast(data[at(before if exclusive else here)])
                            T.buffer_store(out, apply(out[at(before)], value), list(at(here)))
    return builder.get()


def emit_scan(bb, data, axis: int, op: str = "cumsum", exclusive: bool = False,
              reverse: bool = False, out_dtype: str | None = None):
    """Emit the scan kernel of :func:`scan_func` on a Relax tensor of static shape.

    Parameters
    ----------
    bb : relax.BlockBuilder
        The legalization's builder.
    data : relax.Expr
        The tensor; its shape must be static.
    axis, op, exclusive, reverse, out_dtype
        As in :func:`scan_func`.

    Returns
    -------
    relax.Expr
        The ``call_tir`` of the kernel (the data itself, cast, where it is empty).

    Raises
    ------
    ValueError
        A shape that is not static, or an axis outside it.
    """
    from tvm import relax, tirx

    ty = data.ty
    values = getattr(getattr(ty, "shape", None), "values", None)
    if values is None or not all(isinstance(d, tirx.IntImm) for d in values):
        raise ValueError(f"{op} needs a static input shape; give static input shapes")
    shape = tuple(int(d) for d in values)
    dtype = str(ty.dtype)
    out_dtype = out_dtype or dtype
    if math.prod(shape) == 0:
        return data if out_dtype == dtype else relax.op.astype(data, out_dtype)
    func = scan_func(shape, axis, dtype, out_dtype, op, exclusive, reverse)
    global_var = bb.add_func(func, op)
    return relax.call_tir(global_var, [data], relax.TensorType(shape, out_dtype))


__all__ = ["SCAN_BLOCKS", "SCAN_OPS", "emit_scan", "scan_func"]
