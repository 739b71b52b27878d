"""The ``row-chains`` GPU rule: kernels made of a chain of reductions and elementwise steps over
the rows of their output (softmax, means and global pools, a matrix-vector product on a 1 x 1
map with a squeeze-and-excite multiply after it), a thread block per row.

Every step of the chain runs in the row's thread block: a reduction over the row (its threads
accumulate strided parts, then reduce across the block), an elementwise step along the row (a
thread per element), or a step on the row's scalars (the reduction's result, its bias and
activation: computed once a row, in registers). What a step writes stays in the block's shared
memory (a row) or registers (a scalar) for the steps after it. The threads of a block are
chosen from the row lengths, so that the padding of the rows to the thread count is small.

dlight's ``GeneralReduction`` inlines every elementwise step into its consumers: a softmax's
``exp`` is computed twice (for the sum and for the output), the bias and activation of a
squeeze-and-excite convolution once per pixel of the map it scales; its rows are padded to
256 threads (a row of 128: twice its work; ``estimate_tir_flops`` counts 2.5x a BERT
softmax's). dlight's ``Reduction`` and ``GEMV`` split a short reduction (a mean over 14 x 14
pixels, a 10-channel squeeze) into 128 or 32 lanes and reduce the lanes again (2-5x).
"""

from __future__ import annotations

import logging
import math

from ...layers.classify import LAYER_KINDS
from ...relax_ir import has_symbolic_extent
from ..rule import Rule

logger = logging.getLogger(__name__)

# Threads of a row's block at most (the target's max_num_threads caps it): dlight's thread
# count for its reductions; longer rows loop.
PREFERRED_THREADS = 256
# Padded work over the chain's a thread count may add: the census goal is 1.3x per kernel; the
# estimate of a step's operations here is close to, not the same as, estimate_tir_flops'.
MAX_WASTE = 1.2


def _ops(expr) -> int:
    """Arithmetic operations of one evaluation of `expr` (as ``estimate_tir_flops`` counts
    them, near enough: binary arithmetic, min/max and calls of math functions)."""
    import tvm_ffi
    from tvm import ir, tirx

    arith = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.FloorDiv, tirx.FloorMod, tirx.Mod,
             tirx.Max, tirx.Min, ir.Call)
    count = [0]

    def visit(node):
        if isinstance(node, arith) and not _is_index(node):
            count[0] += 1

    tvm_ffi.structural_walk(expr, (ir.Expr, visit), order="post")
    return count[0]


def _is_index(node) -> bool:
    return "int" in str(node.ty.dtype) if hasattr(node, "ty") else False


def _extent(dom) -> int | None:
    value = getattr(dom, "value", dom)
    return int(value) if isinstance(value, int) else None


def _size(info) -> int | None:
    extents = [_extent(i.dom) for i in info.iters]
    return None if None in extents else math.prod(extents)


def choose_threads(steps: list[tuple[int, int]], max_threads: int, warp: int = 32) -> int:
    """The threads of a row's block for a chain whose steps are ``(row length, operations per
    element)`` pairs (a row length of 1: a step on the row's scalars, run once).

    Candidates: the multiples of the warp up to ``min(max_threads, PREFERRED_THREADS)`` and the
    divisors of the row lengths below it (a row that a thread count divides is not padded).
    Of those whose padded work is within :data:`MAX_WASTE` of the chain's: the one of the
    fewest operations a thread does in turn (a row's latency), then a multiple of the warp
    (TVM reduces across whole warps with shuffles, across others through shared memory), then
    the least padded, then the fewest threads. When none is within it: the least padded.
    """
    cap = max(1, min(max_threads, PREFERRED_THREADS))
    rows = [length for length, _ in steps if length > 1]
    candidates = set(range(warp, cap + 1, warp))
    for length in rows:
        candidates.update(d for d in range(1, min(length, cap) + 1) if length % d == 0)
    work = sum(length * ops for length, ops in steps)

    def waste(threads: int) -> float:
        padded = sum(-(-length // threads) * threads * ops if length > 1 else ops
                     for length, ops in steps)
        return padded / max(work, 1)

    scored = [(t, waste(t)) for t in sorted(candidates)]
    fitting = [(t, w) for t, w in scored if w <= MAX_WASTE]
    if not fitting:
        return min(scored, key=lambda tw: (tw[1], -tw[0]))[0]
    def serial(threads: int) -> int:
        return sum(-(-length // threads) * ops for length, ops in steps)

    return min(fitting, key=lambda tw: (serial(tw[0]), tw[0] % warp != 0, tw[1], tw[0]))[0]


class RowChains(Rule):
    """The ``row-chains`` rule: a thread block per row of the output, the chain's reductions
    and elementwise steps along the row in it, nothing recomputed (see the module's text)."""

    name = "row-chains"
    description = ("softmax, means, squeeze-and-excite products: a block per row, every "
                   "step once, intermediates in shared memory, threads fitted to the row")
    kinds = LAYER_KINDS
    families = ("cuda",)

    def apply(self, func, target):
        """Schedule `func` a block per row; None for a kernel that is not a chain of
        reductions and elementwise steps over the same rows."""
        from tvm import s_tir, tirx

        if target.kind.name != "cuda" or not isinstance(func, tirx.PrimFunc):
            return None
        if has_symbolic_extent(func):
            return None  # rows of a symbolic length or count: dlight's rules take them
        try:
            return _schedule(func, target)
        except (s_tir.ScheduleError, AssertionError, _NotMine) as err:
            logger.debug("row-chains declines the kernel: %s", str(err).splitlines()[0][:200])
            return None


class _NotMine(Exception):
    """The kernel is not a chain over rows (its reason in the message)."""


def _schedule(func, target):
    """The kernel scheduled a block per row (:class:`_NotMine` where it is not a chain)."""
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if infos is None or len(infos) < 2:
        raise _NotMine("not a chain of blocks")
    infos = _inline(sch, infos)
    main = next((i for i in infos if not i.is_injective()), None)
    if main is None or not main.is_reduction():
        raise _NotMine("no reduction")
    kinds = main.dom_kind()
    leading = len(kinds) - len(kinds.lstrip("S"))
    if "S" in kinds[leading:] or leading == 0:
        raise _NotMine(f"reduction iterators {kinds}: not spatial then reduction")
    rows = math.prod(_extent(i.dom) or 0 for i in main.iters[:leading])
    if rows < 1:
        raise _NotMine("symbolic rows")
    if not _contiguous(sch.get(main.block_rv), main):
        raise _NotMine("the reduction does not walk its inputs' innermost dimension")
    steps = []
    for info in infos:
        size = _size(info)
        if size is None or size % rows:
            raise _NotMine(f"a block of {size} iterations over {rows} rows")
        if not info.is_injective() and not info.is_reduction():
            raise _NotMine("a block neither elementwise nor a reduction")
        store = sch.get(info.block_rv).body
        steps.append((size // rows, max(1, _ops(store.value))))
    last = infos[-1]
    if not last.is_injective():
        raise _NotMine("the last block is a reduction")
    warp = int(target.attrs.get("thread_warp_size", 32))
    threads = choose_threads(steps, int(target.attrs.get("max_num_threads", 1024)), warp)
    _check_shared(sch, infos, rows, target)
    # what the last block reads per row: the reductions' results and the steps on them
    scalars = [info for info, (length, _) in zip(infos[:-1], steps)
               if length == 1 or not info.is_injective()]
    bx = _schedule_last(sch, last, scalars, rows, threads)
    for info in reversed(infos[:-1]):
        _schedule_step(sch, info, bx, threads)
    logger.debug("row-chains: %d rows, steps %s, %d threads", rows, steps, threads)
    return sch.mod["main"]


def _contiguous(block, info) -> bool:
    """Whether every input the reduction walks is walked along its innermost (non-unit)
    dimension by the innermost (non-unit) reduction iterator: the threads of a row then read
    neighbouring elements. A reduction over a column ([K, N] weights) is not."""
    import tvm_ffi
    from tvm import tirx

    reduce_vars = [iv.var for iv, it in zip(block.iter_vars, info.iters)
                   if it.kind == "R" and _extent(it.dom) != 1]
    if not reduce_vars:
        return False
    inner = reduce_vars[-1]

    def uses(expr, var) -> bool:
        found = []
        tvm_ffi.structural_walk(expr, (tirx.Var, lambda v: found.append(v.same_as(var))),
                                order="post")
        return any(found)

    for read in block.reads:
        dims = [i for i, extent in enumerate(read.source.shape) if _extent(extent) != 1]
        if not any(uses(rng.min, v) for rng in read.region for v in reduce_vars):
            continue  # read once a row (a bias)
        if not dims or not uses(read.region[dims[-1]].min, inner):
            return False
    return True


def _inline(sch, infos):
    """Inline the elementwise blocks whose inlining recomputes nothing: copies (no arithmetic),
    and blocks read by one consumer that runs no more iterations than they do."""
    from tvm import s_tir

    kept = []
    for index, info in enumerate(infos):
        if index == len(infos) - 1 or not info.is_injective():
            kept.append(info)
            continue
        block = info.block_rv
        consumers = sch.get_consumers(block)
        copy = _ops(sch.get(block).body.value) == 0
        single = len(consumers) == 1 and _block_size(sch, consumers[0]) <= _size(info)
        if copy or single:
            try:
                sch.compute_inline(block)
                continue
            except s_tir.ScheduleError:  # not inlinable: the chain keeps it as a step
                pass
        kept.append(info)
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    return normalize_prim_func(sch) if len(kept) != len(infos) else infos


def _block_size(sch, block) -> int:
    extents = [_extent(iv.dom.extent) for iv in sch.get(block).iter_vars]
    return math.prod(e if e is not None else 1 << 30 for e in extents)


def _check_shared(sch, infos, rows, target):
    limit = int(target.attrs.get("max_shared_memory_per_block", 48 << 10))
    used = 0
    for info in infos[:-1]:
        per_row = _size(info) // rows if info.is_injective() else 1  # a reduction: its result
        for write in sch.get(info.block_rv).writes:
            dtype = write.source.dtype
            used += per_row * ((dtype.bits * dtype.lanes + 7) // 8)
    if used > limit:
        raise _NotMine(f"a row's intermediates take {used} B of shared memory > {limit}")


def _schedule_last(sch, last, scalars, rows, threads):
    """Bind the last block: its loops that index the rows' scalars (the `scalars` steps'
    outputs) to blockIdx.x, the rest (its elements along a row) split over the threads.
    Returns the block loop."""
    import tvm_ffi
    from tvm import tirx

    reduced = [w.source for info in scalars for w in sch.get(info.block_rv).writes]
    block = sch.get(last.block_rv)
    loops = sch.get_loops(last.block_rv)
    var_loop = {iv.var: sch.get(loop).loop_var for iv, loop in zip(block.iter_vars, loops)}
    row_vars = set()

    def visit(var):
        if var in var_loop:
            row_vars.add(var_loop[var])

    for read in block.reads:
        if any(read.source.same_as(b) for b in reduced):
            for rng in read.region:
                tvm_ffi.structural_walk(rng.min, (tirx.Var, visit), order="post")
    if row_vars:
        row_loops = [lp for lp in loops if sch.get(lp).loop_var in row_vars
                     or _extent(sch.get(lp).extent) == 1]
    else:
        # it reads no scalar of a row, only row-long steps (a masked softmax's isnan and
        # where after the division): its leading loops, as many as make the rows
        row_loops = _leading(sch, loops, rows)
    other = [lp for lp in loops if lp not in row_loops]
    if math.prod(_extent(sch.get(lp).extent) or 0 for lp in row_loops) != rows:
        raise _NotMine("the last block's loops over the rows are not the reduction's rows")
    if row_loops:
        sch.reorder(*row_loops, *other)
        bx = sch.fuse(*row_loops)
    else:  # one row (a decode step's RMS norm): its unit loops were normalized away
        bx = sch.add_unit_loop(loops[0])
    sch.bind(bx, "blockIdx.x")
    if other:
        _split_bind(sch, sch.fuse(*other), threads)
    return bx


def _leading(sch, loops, rows: int) -> list:
    """The first of `loops` whose extents multiply to `rows` (none where no prefix does)."""
    taken, product = [], 1
    for loop in loops:
        if product == rows and _extent(sch.get(loop).extent) != 1:
            break
        taken.append(loop)
        product *= _extent(sch.get(loop).extent) or 0
        if product > rows:
            return []
    return taken if product == rows else []


def _schedule_step(sch, info, bx, threads):
    """Put a step of the chain in the row's block: its row-long loops over the threads, its
    output in shared memory (a row, or a reduction's result, which every thread reads) or in
    registers (a step on the row's scalars, which every thread computes)."""
    block = info.block_rv
    sch.compute_at(block, bx, preserve_unit_loops=True)
    loops = sch.get_loops(block)[1:]  # under the row's block loop
    along_row = any(_extent(sch.get(lp).extent) != 1 for lp in loops)
    if along_row:
        _split_bind(sch, sch.fuse(*loops), threads)
    scope = "local" if info.is_injective() and not along_row else "shared"
    for index, _ in enumerate(sch.get(block).writes):
        sch.set_scope(block, buffer_index=index, storage_scope=scope)


def _split_bind(sch, loop, threads):
    outer, tx = sch.split(loop, [None, threads])
    sch.reorder(tx, outer)
    sch.bind(tx, "threadIdx.x")
    sch.annotate(outer, ann_key="pragma_auto_unroll_max_step", ann_val=256)
    sch.annotate(outer, ann_key="pragma_unroll_explicit", ann_val=1)


__all__ = ["MAX_WASTE", "PREFERRED_THREADS", "RowChains", "choose_threads"]
