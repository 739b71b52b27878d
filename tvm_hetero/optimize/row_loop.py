"""Kernels over a symbolic number of rows: a loop over chunks of rows, each chunk run by the
static kernel the rules schedule for that chunk size.

A kernel of a model imported with a shape range has a symbolic outer extent (the batch of a
convolution, the tokens of a linear layer) and static inner ones. The rules tile static loops;
rather than teach each rule remainders, the kernel becomes a loop over chunks: the largest
chunk size first, then smaller chunks for what is left, down to single rows. Each
chunk size's kernel is the original kernel specialized to that many rows and scheduled by the
rules as any static kernel (packing, vector tiles, threads), and it reads and writes its rows
through buffer views at the chunk's first row.

This is right only where a chunk's outputs depend on its own rows alone: every block that
touches a buffer with the symbolic axis has one spatial iteration over exactly those rows and
uses it only as that axis's index (:func:`rows_independent`). A softmax or a matmul over the
sequence (attention scores against all keys) does not qualify and keeps TVM's default loops.

Alternative rejected: padding to a bucket of static shapes computes padded rows and needs
copies in and out; the chunk loop computes only real rows and copies nothing.
"""

from __future__ import annotations

import math

# A chunk is as large as it needs to be for the kernel's fixed costs (a thread-pool launch,
# packing the tile loops' edges) to be small against its work, and for each weight element
# loaded to be used on enough rows ...
MIN_CHUNK_FLOPS = 1 << 18
MIN_WEIGHT_REUSE = 64
# ... and no larger (the fewer rows in a chunk, the fewer left over for the smaller kernels).
MAX_CHUNK = 64
# Each chunk size after the first is this many times smaller.
LEVEL_STEP = 4
# A kernel whose row uses each weight element fewer than MIN_WEIGHT_REUSE times (a linear
# layer: once) reads all its weights once per chunk, whatever the chunk's size: its loop starts
# at this many rows and halves, so that a row count takes at most one chunk of each smaller
# size (16 rows: one chunk of 16, as the static kernel; 384: 256 and 128). Against chunks of
# 32, then 8, 2 and 1, BERT-base over a sequence range ran 1.27 / 1.19 / 1.32x its static
# builds at 16 / 128 / 384 tokens, and 1.05 / 1.04 / 1.23x with these (the rest is attention);
# its build took 1.5x as long.
WEIGHT_CHUNK = 256


def _symbolic(dim) -> bool:
    from tvm import tirx

    return not isinstance(dim, tirx.IntImm)


def _row_run(shape, rows=None):
    """The first axis of `shape`'s symbolic dimensions when they are a run of bare variables
    after only unit axes (and the run is `rows`, when given), with the run; else None."""
    from tvm import tirx

    symbolic = [axis for axis, dim in enumerate(shape) if _symbolic(dim)]
    if not symbolic:
        return None
    first = symbolic[0]
    run = tuple(shape[first:first + len(symbolic)])
    if symbolic != list(range(first, first + len(symbolic))) \
            or not all(isinstance(d, tirx.Var) for d in run) \
            or any(int(d) != 1 for d in shape[:first]) \
            or len({d.name for d in run}) != len(run):
        return None
    if rows is not None and (len(run) != len(rows)
                             or not all(a.same_as(b) for a, b in zip(run, rows))):
        return None
    return first, run


def row_axes(func):
    """``(row variables, {param index: first row axis})`` of a kernel whose symbolic buffer
    parameters all have the same symbolic dimensions as a run of bare axes after only unit
    axes (``[n, 768]``, ``[1, seq, 768]``, ``[batch, seq, 32]``, ``[n, 3, 224, 224]``): its rows
    are those dimensions' product. None for other kernels (``[2 * n]``, ``[768, n]``, a
    scalar parameter, parameters with different symbolic dimensions)."""
    rows, axes = None, {}
    for index, param in enumerate(func.params):
        shape = getattr(param.ty, "shape", None)
        if shape is None:
            return None  # a scalar parameter (a dimension passed in)
        if not any(_symbolic(d) for d in shape):
            continue
        found = _row_run(shape, rows)
        if found is None:
            return None
        axes[index], rows = found
    return (rows, axes) if rows is not None else None


def _blocks(func) -> list:
    import tvm_ffi
    from tvm import s_tir

    found = []
    tvm_ffi.structural_walk(func.body, (s_tir.SBlock, found.append), order="pre")
    return [block for block in found if block.name_hint != "root"]


def _buffers(func) -> list:
    """`func`'s buffers: its parameters and its allocations."""
    buffers = [p for p in func.params if getattr(p.ty, "shape", None) is not None]
    for block in [func.body.block] + _blocks(func):
        buffers.extend(block.alloc_buffers)
    return buffers


def rows_independent(func, rows) -> bool:
    """Whether each of `func`'s outputs at a row of `rows` (its symbolic dimensions) depends
    only on the inputs at that row: every buffer with a symbolic shape has `rows` as a run of
    axes; every block touching one has one spatial iteration per row dimension, of that
    extent; such buffers' row axes are indexed by exactly those iterations and nothing else
    (no other index, no value) uses them; no other block iterates over a symbolic extent."""
    import tvm_ffi
    from tvm import ir, tirx
    from tvm.tirx.analysis import undefined_vars

    row_axis = {}
    for buf in _buffers(func):
        if any(_symbolic(d) for d in buf.ty.shape):
            found = _row_run(buf.ty.shape, rows)
            if found is None:
                return False
            row_axis[buf] = found[0]

    def uses(expr, names) -> bool:
        return any(u.same_as(v) for u in undefined_vars(expr) for v in names)

    def strip(node):  # the row indices of row buffers as 0
        load = isinstance(node, ir.expr.TensorLoad)
        buffer = node.source if load else getattr(node, "buffer", None)
        if buffer is None or buffer not in row_axis:
            return node
        indices = list(node.indices)
        for i in range(len(rows)):
            indices[row_axis[buffer] + i] = tirx.const(0, "int64")
        if load:
            return tirx.BufferLoad(buffer, indices)
        return tirx.BufferStore(buffer, node.value, indices)

    for block in _blocks(func):
        regions = list(block.reads) + list(block.writes)
        iters = [iv for iv in block.iter_vars if _symbolic(iv.dom.extent)]
        if not any(r.source in row_axis for r in regions):
            if iters:
                return False
            continue
        if len(iters) != len(rows) or any(
                not iv.dom.extent.same_as(var) or iv.iter_type != tirx.IterVar.DataPar
                for iv, var in zip(iters, rows)):
            return False
        names = [iv.var for iv in iters]
        for region in regions:
            first = row_axis.get(region.source)
            for axis, rng in enumerate(region.region):
                if first is not None and first <= axis < first + len(rows):
                    row = names[axis - first]
                    if not (isinstance(rng.min, tirx.Var) and rng.min.same_as(row)
                            and int(rng.extent) == 1):
                        return False
                elif uses(rng.min, names) or uses(rng.extent, names):
                    return False
        for stmt in (block.body, block.init):
            if stmt is not None and uses(tvm_ffi.structural_map(stmt, strip), names):
                return False
    return True


def _weight_elements(func, axes: dict[int, int]) -> int:
    return sum(math.prod(int(d) for d in param.ty.shape)
               for index, param in enumerate(func.params) if index not in axes)


def chunk_levels(flops_per_row: float, weight_elements: int) -> list[int]:
    """The chunk sizes of a row loop, largest first, the last 1. A kernel whose row does fewer
    than `MIN_WEIGHT_REUSE` flops per weight element: `WEIGHT_CHUNK`, then each half the one
    before. Others: first the least power of two (up to `MAX_CHUNK`) of at least
    `MIN_CHUNK_FLOPS`, each next one `LEVEL_STEP` times smaller."""
    if flops_per_row < MIN_WEIGHT_REUSE * weight_elements:
        levels = [WEIGHT_CHUNK]
        while levels[-1] > 1:
            levels.append(levels[-1] // 2)
        return levels
    chunk = 1
    while chunk < MAX_CHUNK and chunk * flops_per_row < MIN_CHUNK_FLOPS:
        chunk *= 2
    levels = [chunk]
    while levels[-1] > 1:
        levels.append(max(1, levels[-1] // LEVEL_STEP))
    return levels


def row_loop_kernel(func, rows, axes: dict[int, int], levels: list[tuple[int, object]],
                    tail=None):
    """`func` as a loop over chunks of its rows (the product of the dimensions `rows`, a run
    of axes from ``axes[param index]`` in each row buffer): ``levels`` are ``(chunk size, that
    size's scheduled static kernel)``, largest first. Every static kernel has `func`'s
    parameters in order, its row buffers with the row axes ``1, ..., 1, size`` and the other
    parameters (its weights, perhaps packed) as the first level's, which the result takes.
    Rows fewer than the last size (when it is not 1) run once through `tail`, a copy of the
    last kernel (its own buffers and variables), on zero-padded copies of the rows."""
    import tvm
    from tvm import s_tir, tirx

    dtype = str(rows[0].ty.dtype)
    first = levels[0][1]
    params = [param if index in axes else first.params[index]
              for index, param in enumerate(func.params)]
    total = rows[0]
    for dim in rows[1:]:
        total = total * dim

    def at(row, index):  # the index of a flat row in a row buffer
        point = [tirx.const(0, dtype)] * len(params[index].ty.shape)
        for offset in reversed(range(len(rows))):
            point[axes[index] + offset] = row if offset == 0 else tirx.floormod(row, rows[offset])
            row = tirx.floordiv(row, rows[offset]) if offset else row
        return point

    def weight_views(kernel):
        return [tirx.DeclBuffer(inner, data=outer.data)
                for index, (outer, inner) in enumerate(zip(params, kernel.params))
                if index not in axes and not inner.same_as(outer)]

    stmts, start = [], tirx.const(0, dtype)
    for size, kernel in levels:
        size_expr = tirx.const(size, dtype)
        count = tirx.floordiv(total - start, size_expr)
        chunk = tirx.Var(f"chunk{size}", dtype)
        row = start + chunk * size_expr
        views = [tirx.DeclBuffer(kernel.params[index], data=params[index].ptr_to(at(row, index)))
                 for index in axes] + weight_views(kernel)
        stmts.append(tirx.For(chunk, tirx.const(0, dtype), count, tirx.ForKind.SERIAL,
                              tirx.SeqStmt([*views, kernel.body])))
        start = start + count * size_expr
    if levels[-1][0] > 1:
        stmts.append(_padded_tail(func, tail, params, axes, len(rows), total - start,
                                  lambda index: at(start, index), weight_views(tail)))
    loops = stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)  # no SeqStmt of one
    # the passes after scheduling want a root block
    root = s_tir.SBlockRealize([], True, s_tir.SBlock([], [], [], "root", loops))
    attrs = {k: v for k, v in first.attrs.items()} if first.attrs is not None else {}
    out = tirx.PrimFunc(params, root, ret_type=func.ret_type)
    out = out.with_attrs(attrs) if attrs else out
    # the kernels' bodies were specialized from one function: each loop its own variable
    return tvm.tirx.transform.ConvertSSA()(tvm.IRModule({"main": out}))["main"]


def _padded_tail(func, kernel, params, axes, row_dims: int, left, first_row, weight_views):
    """The last `left` rows (fewer than `kernel`'s) through `kernel` on copies: its row buffers
    allocated, the inputs' rows copied in and zero-padded, the outputs' rows copied out."""
    from tvm import s_tir, tirx

    dtype = str(left.ty.dtype)
    written = {region.source for block in _blocks(func) for region in block.writes}
    copies_in, copies_out = [], []
    for index in axes:
        outer, inner = params[index], kernel.params[index]
        axis = axes[index]
        row_elements = math.prod(int(d) for d in inner.ty.shape[axis + row_dims:])
        capacity = math.prod(int(d) for d in inner.ty.shape)
        flat_outer = tirx.decl_buffer([capacity], outer.ty.dtype, f"{outer.name}_rows")
        flat_inner = tirx.decl_buffer([capacity], inner.ty.dtype, f"{inner.name}_flat")
        real = left * tirx.const(row_elements, dtype)
        element = tirx.Var("e", dtype)
        decls = [tirx.DeclBuffer(flat_outer, data=outer.ptr_to(first_row(index))),
                 tirx.DeclBuffer(flat_inner, data=inner.data)]
        if outer in written:
            store = tirx.BufferStore(flat_outer, tirx.BufferLoad(flat_inner, [element]),
                                     [element])
            copies_out.append(tirx.SeqStmt([*decls, tirx.For(
                element, tirx.const(0, dtype), real, tirx.ForKind.SERIAL, store)]))
        else:
            value = tirx.if_then_else(element < real, tirx.BufferLoad(flat_outer, [element]),
                                      tirx.const(0, str(inner.ty.dtype)))
            store = tirx.BufferStore(flat_inner, value, [element])
            copies_in.append(tirx.SeqStmt([*decls, tirx.For(
                element, tirx.const(0, dtype), tirx.const(capacity, dtype),
                tirx.ForKind.SERIAL, store)]))
    body = tirx.SeqStmt([*copies_in, *weight_views, kernel.body, *copies_out])
    block = s_tir.SBlock([], [], [], "padded_tail", body,
                         alloc_buffers=[kernel.params[index] for index in axes])
    return tirx.IfThenElse(left > 0, s_tir.SBlockRealize([], True, block), None)


def _packing(kernel):
    from .cpu.packed_weights import PACKED_WEIGHTS_ATTR

    attr = kernel.attrs.get(PACKED_WEIGHTS_ATTR) if kernel.attrs is not None else None
    return None if attr is None else [int(v) for v in attr]


def schedule_rows(func, schedule):
    """`func` (symbolic rows, each independent of the others) as a row loop of kernels scheduled by
    ``schedule(static kernel, first rule name or None) -> (scheduled, rule name) or None``;
    ``(kernel, rule name of the largest chunk)``, or None where `func` is not such a kernel,
    a chunk size no rule schedules, or the chunk sizes' kernels want their weights in different
    layouts."""
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    from ..relax_ir import bounded_kernel

    found = row_axes(func)
    if found is None:
        return None
    rows, axes = found
    if not rows_independent(func, rows):
        return None

    def chunk_of(size):  # the kernel of `size` rows: [1, ..., 1, size] row axes
        return bounded_kernel(func, {**{v.name: 1 for v in rows[:-1]}, rows[-1].name: size})

    one_row = chunk_of(1)
    flops = float(estimate_tir_flops(tvm.IRModule({"main": one_row})))
    levels, first_rule = [], None
    for size in chunk_levels(flops, _weight_elements(one_row, axes)):
        scheduled = schedule(one_row if size == 1 else chunk_of(size), first_rule)
        if scheduled is None:
            break
        kernel, rule = scheduled
        if first_rule is None:
            first_rule = rule
        elif rule != first_rule or _packing(kernel) != _packing(levels[0][1]) or any(
                [int(d) for d in kernel.params[i].ty.shape]
                != [int(d) for d in levels[0][1].params[i].ty.shape]
                for i in range(len(func.params)) if i not in axes):
            break  # another rule from here down: the last size takes the rest, padded
        levels.append((size, kernel))
    if not levels:
        return None
    tail = None
    if levels[-1][0] > 1:  # the same kernel again, for the rows left over
        tail = schedule(chunk_of(levels[-1][0]), first_rule)[0]
    return row_loop_kernel(func, rows, axes, levels, tail), first_rule


__all__ = ["MAX_CHUNK", "MIN_CHUNK_FLOPS", "MIN_WEIGHT_REUSE", "WEIGHT_CHUNK", "chunk_levels",
           "row_axes", "row_loop_kernel", "rows_independent", "schedule_rows"]
