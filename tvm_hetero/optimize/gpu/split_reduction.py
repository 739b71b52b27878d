"""A reduction split across thread blocks (split-K), for ``matmul-tiles`` where no tile of a
kernel launches a block per SM (few outputs over a long reduction: a dense layer of 8 rows
into 512 outputs over 2048 inputs has 4096 outputs, 128 blocks of one warp each at the
least).

The kernel's outermost reduction loop is split in `splits` parts and factored out
(``rfactor``): a first stage computes each part's partial sums into a global
``[splits, ...outputs]`` buffer as a batched matmul, scheduled by `schedule_partials` (dlight's
``Matmul`` with its tile: the parts are its batch, each part's blocks its own); a second stage
sums the parts and applies the kernel's epilogue (bias, activation, residual), one thread an
output. Both stages stay in one PrimFunc (two kernel launches; TVM allocates the partial sums
as a workspace).

dlight's ``Matmul`` takes kernels of one reduction block only, so the stages are scheduled as
two PrimFuncs that share the partial-sum buffer and are joined again under one root block.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


class CannotSplit(Exception):
    """The kernel's reduction cannot be split as this module does (see the message)."""


def outer_reduction_extent(func) -> int | None:
    """The extent of the outermost reduction loop of `func`'s one reduction block (the loop a
    split divides), None when the kernel has not one reduction block of constant extents."""
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import get_root_block
    from tvm.s_tir.dlight.gpu.matmul import get_reduction_blocks, get_sblock_info

    sch = s_tir.Schedule(func)
    blocks = get_reduction_blocks(sch, sch.get_child_blocks(get_root_block(sch)))
    if blocks is None:
        return None
    reduce = [it.dom for it in get_sblock_info(sch, blocks[0]).iters if it.kind == "R"]
    return reduce[0] if reduce and isinstance(reduce[0], int) else None


def split_reduction(func, splits: int, schedule_partials, threads: int):
    """`func` with its reduction split in `splits` parts across blocks (see the module's text).

    Parameters
    ----------
    func : tvm.tirx.PrimFunc
        An unscheduled kernel of one reduction block (a matmul or convolution) and elementwise
        blocks before and after it.
    splits : int
        Parts of the outermost reduction loop (a divisor of its extent, at least 2).
    schedule_partials : callable
        ``PrimFunc -> PrimFunc``: schedules the first stage (a kernel of one reduction block,
        its outputs the partial sums), or returns None when it cannot.
    threads : int
        Threads a block of the second stage (one an output).

    Returns
    -------
    tvm.tirx.PrimFunc
        The scheduled kernel: the partial sums' launch, then the sums' and epilogue's.

    Raises
    ------
    CannotSplit
        Where the reduction loop is not divisible by `splits`, `schedule_partials` returns
        None, or the epilogue is not a chain of elementwise blocks ending in one output.
    tvm.s_tir.ScheduleError
        Where a schedule step fails on the kernel.
    """
    from tvm import s_tir, tirx
    from tvm.s_tir.dlight.analysis import get_root_block
    from tvm.s_tir.dlight.gpu.matmul import get_reduction_blocks, get_sblock_info

    sch = s_tir.Schedule(func)
    blocks = get_reduction_blocks(sch, sch.get_child_blocks(get_root_block(sch)))
    if blocks is None:
        raise CannotSplit("not one reduction block")
    iters = get_sblock_info(sch, blocks[0]).iters
    first = next((n for n, it in enumerate(iters) if it.kind == "R"), None)
    if first is None or splits < 2 or not isinstance(iters[first].dom, int) \
            or iters[first].dom % splits:
        raise CannotSplit(f"no reduction loop divisible by {splits}")
    outer, _ = sch.split(iters[first].loop_rv, [splits, None])
    sch.reorder(outer, *[it.loop_rv for it in iters[:first]])
    partial_block = sch.rfactor(outer, 0)
    partial = sch.get(partial_block).writes[0].source
    split = sch.mod["main"]
    root = split.body.block
    nests = list(root.body.seq) if isinstance(root.body, tirx.SeqStmt) else [root.body]
    cut = 1 + next(n for n, nest in enumerate(nests)
                   if any(w.same_as(partial) for w in _written(nest)))
    first_stage = [w for nest in nests[:cut] for w in _written(nest)]
    others = [b for b in root.alloc_buffers if not b.same_as(partial)]
    if any(_in(b, first_stage) for nest in nests[cut:] for b in _read(nest) if _in(b, others)):
        raise CannotSplit("the epilogue reads what a block before the reduction computes")
    params = list(split.params) + [partial]
    partials = schedule_partials(tirx.PrimFunc(
        params, _root(nests[:cut], [b for b in others if _in(b, first_stage)]),
        attrs=split.attrs))
    if partials is None:
        raise CannotSplit("the partial sums' stage was not scheduled")
    sums = _schedule_sums(tirx.PrimFunc(
        params, _root(nests[cut:], [b for b in others if not _in(b, first_stage)]),
        attrs=split.attrs), threads)
    one, two = partials.body.block, sums.body.block
    joined = tirx.PrimFunc(list(func.params), _root(
        [one.body, two.body], list(one.alloc_buffers) + list(two.alloc_buffers) + [partial]),
        attrs=func.attrs)
    s_tir.Schedule(joined)  # the joined function is a well-formed s_tir function
    return joined


def _schedule_sums(func, threads: int):
    """The second stage: the sum of the parts (the rfactor's write-back block) computed per
    output in registers, the elementwise blocks after it inlined into the one that writes the
    kernel's output, one thread an output."""
    from tvm import s_tir, tirx
    from tvm.s_tir.dlight.analysis import get_root_block

    sch = s_tir.Schedule(func)
    total, *epilogue = sch.get_child_blocks(get_root_block(sch))
    for block in epilogue[:-1]:
        if any(_in(w.source, func.params) for w in sch.get(block).writes):
            raise CannotSplit("an output written before the last block of the epilogue")
        sch.compute_inline(block)
    loops = sch.get_loops(total)
    spatial = [iv.iter_type == tirx.IterVar.DataPar for iv in sch.get(total).iter_vars]
    sch.reorder(*[lp for lp, s in zip(loops, spatial) if s],
                *[lp for lp, s in zip(loops, spatial) if not s])
    loops = [lp for lp, s in zip(loops, spatial) if s]
    if not loops:
        raise CannotSplit("the sum of the parts has no output loop")
    inner = sch.get(loops[-1]).extent
    if isinstance(inner, tirx.IntImm) and int(inner) % threads == 0:
        # the outputs' rows whole per block (fused and split, the indices come back as
        # (b * t + x) // t - b, on which TVM's FlattenBuffer fails unsimplified)
        outer, tx = sch.split(loops[-1], [None, threads])
        bx = sch.fuse(*loops[:-1], outer)
    else:
        bx, tx = sch.split(sch.fuse(*loops), [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    if epilogue:
        sch.reverse_compute_at(epilogue[-1], tx)
        sch.set_scope(total, 0, "local")
    return sch.mod["main"]


def _written(stmt) -> list:
    """The buffers the blocks under `stmt` write."""
    import tvm_ffi
    from tvm import s_tir

    found: list = []
    tvm_ffi.structural_walk(stmt, (s_tir.SBlock, lambda block: found.extend(
        w.source for w in block.writes)))
    return found


def _read(stmt) -> list:
    """The buffers the blocks under `stmt` read."""
    import tvm_ffi
    from tvm import s_tir

    found: list = []
    tvm_ffi.structural_walk(stmt, (s_tir.SBlock, lambda block: found.extend(
        r.source for r in block.reads)))
    return found


def _in(buffer, buffers) -> bool:
    return any(buffer.same_as(other) for other in buffers)


def _root(stmts: list, alloc_buffers: list):
    from tvm import s_tir, tirx

    body = stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)
    return s_tir.SBlockRealize([], True, s_tir.SBlock([], [], [], "root", body,
                                                      alloc_buffers=alloc_buffers))


__all__ = ["CannotSplit", "outer_reduction_extent", "split_reduction"]
