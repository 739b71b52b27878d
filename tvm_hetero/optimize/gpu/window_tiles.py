"""The ``window-tiles`` GPU rule: windowed reductions, where each output reduces its own window
of one input (depthwise and grouped convolutions, max and average pools, local response
normalization's window across channels), through shared-memory tiles.

A thread block computes an output tile (a group of channels times a block of rows and columns
of one image); the tile's input window, padding included, is fetched once into shared memory by
all the block's threads; each thread computes a few outputs of one column, accumulating in
registers with the window unrolled; the epilogue (bias, activation, batch norm, residual, the
average's divisor) is computed in the thread's registers and written once. In the CPU forms'
blocked layout NCHW[x]c (what a GPU gets where every layer runs the CPU forms) the block's
lanes are the innermost threads, all of them in every tile.

dlight has no such rule: its ``GeneralReduction`` takes these kernels with a thread block per
output element, the window spread over 256 threads (a 3x3 window: 9 of them work) and the
epilogue over 256 more (1 works); ``estimate_tir_flops`` counts every thread, 61 times the
layer's work for MobileNetV2's 3x3 depthwise layers. Its ``Fallback`` takes them with one thread
per output, the window serial and every input element read from global memory as many times as
windows cover it.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from ...errors import error_message
from ...target import arch_multiprocessors
from ..rule import Rule

logger = logging.getLogger(__name__)

# Threads a block's tile aims at (8 warps; the target's max_num_threads caps it): enough for a
# cooperative fetch of the tile and for several blocks per SM, small enough that a layer of
# a few MFLOP still launches a block per SM.
PREFERRED_THREADS = 256
# Output rows per thread at most (a divisor of the height): consecutive rows
# share all but one row of a stride-1 window, read once from shared memory for all of them.
ROWS_PER_THREAD = 4
# Bytes of a global memory transaction (an L2 sector on NVIDIA GPUs): a tile's fetch costs the
# sectors its input rows span.
SECTOR_BYTES = 32
# Window loops up to this extent are unrolled (a grouped convolution's channel loop of 48 is
# not; 7x7 windows are).
MAX_UNROLLED_WINDOW = 7


class Window(NamedTuple):
    """What `window_reduction` found in a kernel's reduction block."""

    spatial: int  # spatial loops (the output's dimensions, in order)
    channel_axis: int  # the output dimension grouped per block (NCHW: 1)
    channel_group: int  # outputs per group of a grouped convolution's channel index (1: none)
    data_read: int  # the position of the windowed input in the block's reads
    data_shape_of: object  # callable: tile extents -> the input tile's extents
    dtype_bytes: int
    inner: int = 0  # trailing output dimensions after the columns (NCHW[x]c's lanes: 1)

    @property
    def rows_axis(self) -> int:
        return self.spatial - 2 - self.inner

    @property
    def columns_axis(self) -> int:
        return self.spatial - 1 - self.inner


class Tile(NamedTuple):
    """A block's tile: `channels` x (`rows` x `rows_per_thread`) x `columns` x `lanes` outputs,
    a thread per (channel, row block, column, lane); `lanes` is the whole inner dimension of a
    blocked layout (NCHW[x]c), 1 elsewhere."""

    channels: int
    rows: int
    rows_per_thread: int
    columns: int
    lanes: int = 1

    @property
    def threads(self) -> int:
        return self.channels * self.rows * self.columns * self.lanes


def _divisors(extent: int) -> list[int]:
    return [d for d in range(1, extent + 1) if extent % d == 0]


def _uses(expr, var) -> bool:
    from tvm.tirx.analysis import undefined_vars

    return any(v.same_as(var) for v in undefined_vars(expr))


def _group_of(exprs, var) -> int:
    """The divisor `g` of every ``var // g`` in `exprs` (1 where there is none; 0 where two
    differ): a grouped convolution's output channels per group."""
    import tvm_ffi
    from tvm import tirx

    found = set()

    def visit(node):
        if isinstance(node, tirx.FloorDiv) and _uses(node.a, var) \
                and isinstance(node.b, tirx.IntImm):
            found.add(int(node.b.value))
        return node

    for expr in exprs:
        tvm_ffi.structural_map(expr, visit)
    if len(found) > 1:
        return 0
    return found.pop() if found else 1


def window_reduction(sch, block_rv) -> Window | None:
    """The window of `block_rv` when it is a windowed reduction: spatial iterators (at least
    four: outer dimensions, rows, columns) then reduction iterators, all static; one output
    written at the spatial iterators; one windowed input read at indices using every spatial
    iterator of extent over one (no output shares its input with another dimension's: not a
    GEMM) and every reduction iterator, the rows and the columns each with a reduction
    iterator; at most one other input (a depthwise convolution's weights), indexed by neither
    the rows nor the columns. The rows and columns are the last two spatial iterators, or the
    two before a last one that the input reads as it is (the lanes of the blocked layout
    NCHW[x]c, which a CPU form gives a depthwise convolution). Else None."""
    from tvm import tirx

    block = sch.get(block_rv)
    iters = list(block.iter_vars)
    kinds = [iv.iter_type == tirx.IterVar.CommReduce for iv in iters]
    spatial = kinds.index(True) if True in kinds else len(kinds)
    if spatial < 4 or kinds != [False] * spatial + [True] * (len(kinds) - spatial):
        return None
    if not all(isinstance(iv.dom.extent, tirx.IntImm) for iv in iters):
        return None
    extents = [int(iv.dom.extent) for iv in iters]
    variables = [iv.var for iv in iters]
    out_vars, red_vars = variables[:spatial], variables[spatial:]
    if len(block.writes) != 1:
        return None
    out = block.writes[0]
    if len(out.region) != spatial or not all(
            r.min.same_as(v) and isinstance(r.extent, tirx.IntImm) and int(r.extent) == 1
            for r, v in zip(out.region, out_vars)):
        return None
    reads = [r for r in block.reads if not r.source.same_as(out.source)]
    if not 1 <= len(reads) <= 2 or len(reads) != len(block.reads):
        return None
    for inner in (0, 1):
        if spatial - inner < 4:
            break
        window = _window(reads, spatial, extents, out_vars, red_vars, inner)
        if window is not None:
            return window
    return None


def _window(reads, spatial, extents, out_vars, red_vars, inner):
    """:func:`window_reduction`'s window with `inner` trailing dimensions after the columns,
    each read by the input as it is; None when the block has no such window."""
    from tvm import sym

    rows_axis, columns_axis = spatial - 2 - inner, spatial - 1 - inner
    rows, columns = out_vars[rows_axis], out_vars[columns_axis]

    def windowed(region) -> bool:
        mins = [r.min for r in region.region]
        every_output = all(extents[i] == 1 or any(_uses(m, v) for m in mins)
                           for i, v in enumerate(out_vars))
        every_reduction = all(any(_uses(m, v) for m in mins) for v in red_vars)
        # the rows and the columns each slide a window (a 1 x 1 plane: a global pool's)
        rows_window = extents[rows_axis] == 1 or any(
            _uses(m, rows) and any(_uses(m, r) for r in red_vars) for m in mins)
        cols_window = extents[columns_axis] == 1 or any(
            _uses(m, columns) and any(_uses(m, r) for r in red_vars) for m in mins)
        # the inner dimensions: read at the output's index, with no window
        plain = all(extents[i] > 1 and any(m.same_as(out_vars[i]) for m in mins)
                    for i in range(columns_axis + 1, spatial))
        return every_output and every_reduction and rows_window and cols_window and plain

    data = [i for i, r in enumerate(reads) if windowed(r)]
    if len(data) != 1:
        return None
    for i, region in enumerate(reads):
        if i != data[0] and any(_uses(r.min, rows) or _uses(r.min, columns)
                                for r in region.region):
            return None  # a second input that varies with the pixels
    outer = [i for i in range(rows_axis) if extents[i] > 1]
    channel_axis = outer[-1] if outer else rows_axis - 1
    data_mins = [r.min for r in reads[data[0]].region]
    group = _group_of(data_mins, out_vars[channel_axis])
    if group == 0:
        return None

    def data_shape_of(tile: Tile) -> list[int]:
        """The extents of the input one tile reads (the tile at index 0: a grouped
        convolution's tiles keep within a group, so every tile reads as much)."""
        analyzer = sym.Analyzer()
        span = {channel_axis: tile.channels, rows_axis: tile.rows * tile.rows_per_thread,
                columns_axis: tile.columns}
        span.update({i: extents[i] for i in range(columns_axis + 1, spatial)})
        dom = {var: sym.IntervalSet(0, span.get(i, 1) - 1) for i, var in enumerate(out_vars)}
        dom.update({var: sym.IntervalSet(0, e - 1)
                    for var, e in zip(red_vars, extents[spatial:])})
        shape = []
        for expr in data_mins:
            bound = analyzer.int_set(expr, dom)
            shape.append(int(bound.max_value) - int(bound.min_value) + 1)
        return shape

    dtype = reads[data[0]].source.dtype
    # reads is block.reads (the block reads no buffer it writes): positions are the same
    return Window(spatial, channel_axis, group, data[0], data_shape_of,
                  (dtype.bits * dtype.lanes + 7) // 8, inner)


def _limits(target) -> tuple[int, int, int, int | None]:
    """``(warp, threads, shared bytes, SMs or None)`` of a GPU target: its attributes, and the
    SM count of its arch (:func:`tvm_hetero.target.arch_multiprocessors`; None elsewhere)."""
    attrs = target.attrs
    warp = int(attrs.get("thread_warp_size", 32))
    threads = int(attrs.get("max_num_threads", PREFERRED_THREADS))
    # without the attribute: 48 KiB, what every CUDA GPU since sm_20 gives a block statically
    shared = int(attrs.get("max_shared_memory_per_block", 48 << 10))
    arch = str(attrs.get("arch", ""))
    sms = arch_multiprocessors(arch) if target.kind.name == "cuda" and arch else None
    return warp, threads, shared, sms


def choose_tile(window: Window, extents: list[int], target) -> Tile | None:
    """A block's tile for a windowed reduction of output `extents` on `target`.

    The candidates: every split by divisors (channels that keep a grouped convolution's
    groups whole, rows per thread up to `ROWS_PER_THREAD`, columns up to a warp) of at most
    `PREFERRED_THREADS` threads (and the target's ``max_num_threads``) and at least a warp
    where the layer has the outputs, whose input fits the target's shared memory per block
    (``max_shared_memory_per_block``). Of those: the most blocks up to the GPU's SM count (a
    block per SM where the layer has the outputs), then at least half the preferred threads,
    then the fewest memory sectors fetched per output (the windows' overlap between tiles,
    short rows), then the most threads, the widest rows (coalesced loads) and the most rows
    per thread. None when not even one output's window fits the shared memory.
    """
    warp, max_threads, shared_bytes, sms = _limits(target)
    goal = min(PREFERRED_THREADS, max_threads)
    height, width = extents[window.rows_axis], extents[window.columns_axis]
    channels = extents[window.channel_axis]
    lanes = 1
    for extent in extents[window.columns_axis + 1:window.spatial]:
        lanes *= extent
    blocks_outer = 1
    for i in range(window.rows_axis):
        if i != window.channel_axis:
            blocks_outer *= extents[i]
    group = window.channel_group
    candidates = [
        Tile(c, r, p, x, lanes)
        for c in _divisors(channels) if group % c == 0 or c % group == 0
        for p in _divisors(height) if p <= ROWS_PER_THREAD
        for r in _divisors(height // p)
        for x in _divisors(width) if x <= warp and c * r * x * lanes <= goal]
    if not candidates:
        return None
    floor = min(warp, max(t.threads for t in candidates))
    shapes = {}  # (channels, rows, columns) of a tile -> extents of the input it fetches

    def shape(t: Tile) -> list[int]:
        span = (t.channels, t.rows * t.rows_per_thread, t.columns)
        if span not in shapes:
            shapes[span] = window.data_shape_of(t)
        return shapes[span]

    def shared(t: Tile) -> int:
        size = window.dtype_bytes
        for extent in shape(t):
            size *= extent
        return size

    def sectors(t: Tile) -> int:
        """Memory sectors the tile's fetch reads: its rows, each a run of the last dimension
        (one sector more for a run that does not start at a sector's start)."""
        *outer, last = shape(t)
        count = -(-last * window.dtype_bytes // SECTOR_BYTES) + 1
        for extent in outer:
            count *= extent
        return count

    def preference(t: Tile):
        outputs = t.channels * t.rows * t.rows_per_thread * t.columns
        blocks = blocks_outer * channels * height * width // outputs
        return (t.threads >= floor, min(blocks, sms or 1), min(t.threads, goal // 2),
                -sectors(t) / outputs, t.threads, t.columns, t.rows_per_thread)

    fitting = [t for t in candidates if shared(t) <= shared_bytes]
    return max(fitting, key=preference) if fitting else None


class WindowTiles(Rule):
    """The ``window-tiles`` rule: depthwise and grouped convolutions, pools and channel windows
    (LRN) on GPUs: a thread block per output tile, its input fetched into shared memory, a few
    outputs per thread in registers, the epilogue inlined into the write."""

    name = "window-tiles"
    description = ("depthwise/grouped convolutions and pools: a block per output tile, its "
                   "input window in shared memory, outputs in registers, epilogue inlined")
    kinds = ("conv2d", "pooling")
    families = ("cuda", "other")

    def apply(self, func, target):
        """Schedule a windowed reduction (see `window_reduction`) for a GPU, or return None.

        Loops: ``blockIdx.x`` over (outer dimensions, channel groups, row blocks, column
        blocks), ``threadIdx.x`` over (channels, rows, columns) of the tile (`choose_tile`),
        then the window (unrolled up to `MAX_UNROLLED_WINDOW`) and the thread's rows
        (unrolled). The input, with the kernel's padding (any blocks before the reduction)
        inlined into the fetch, goes to shared memory per block; the accumulators to local
        memory (registers); the blocks after the reduction are inlined into one write per
        thread. Declined: ordinary convolutions (dlight's ``Matmul`` takes those as implicit
        GEMMs) and global pools (a 1 x 1 output plane) whose windows are too large for a
        warp's in shared memory.
        """
        from tvm import s_tir

        from ...layers.classify import kernel_kind
        from ..cpu.analysis import one_reduction

        if kernel_kind(func) not in self.kinds:
            return None
        sch = s_tir.Schedule(func)
        found = one_reduction(sch)
        if found is None:
            return None
        blocks, main_index = found
        main = blocks[main_index]
        window = window_reduction(sch, main)
        if window is None:
            return None
        extents = [int(iv.dom.extent) for iv in sch.get(main).iter_vars]
        tile = choose_tile(window, extents, target)
        if tile is None:
            logger.debug("window-tiles declines a kernel: one window exceeds the shared memory")
            return None
        warp = _limits(target)[0]
        if extents[window.rows_axis] * extents[window.columns_axis] == 1 \
                and tile.threads < warp:
            # a global pool whose windows are too large for a warp of them in shared memory:
            # dlight's reduction rule splits each window over threads instead
            return None
        try:
            scheduled = _schedule(sch, blocks, main_index, window, tile)
        except s_tir.ScheduleError as err:
            # a prologue or epilogue that cannot be inlined (reads its input elsewhere than
            # at the output's index): not a kernel this rule knows
            logger.debug("window-tiles declines a kernel: %s", error_message(err))
            return None
        limit, used = _limits(target)[2], shared_bytes_per_block(scheduled)
        if used > limit:  # the tile's estimate was wrong: a bug of this rule, not the kernel's
            logger.warning("window-tiles declines a kernel: its %s tile takes %d bytes of "
                           "shared memory, over the target's %d", tile, used, limit)
            return None
        return scheduled


def shared_bytes_per_block(func) -> int:
    """The shared memory a thread block of a scheduled kernel allocates: its shared buffers
    placed under the loops that use them and compacted to what one block reads, as TVM's GPU
    lowering does."""
    import tvm
    import tvm_ffi

    mod = tvm.transform.Sequential([
        tvm.s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        tvm.s_tir.transform.ConvertBlocksToOpaque(),
        tvm.s_tir.transform.CompactBufferAllocation()])(tvm.IRModule({"main": func}))
    sizes = []

    def visit(node):
        for buf in getattr(node, "alloc_buffers", None) or []:
            if str(buf.scope()).startswith("shared"):
                size = (buf.dtype.bits * buf.dtype.lanes + 7) // 8
                for extent in buf.shape:
                    size *= int(extent)
                sizes.append(size)
        return node

    tvm_ffi.structural_map(mod["main"].body, visit)
    return sum(sizes)


def _schedule(sch, blocks, main_index, window: Window, tile: Tile):
    main = blocks[main_index]
    shared = sch.cache_read(main, window.data_read, "shared")
    for block_rv in reversed(blocks[:main_index]):  # padding: into the fetch
        sch.compute_inline(block_rv)
    tail = [sch.cache_write(main, 0, "local")] + list(blocks[main_index + 1:])
    for block_rv in tail[:-1]:
        sch.compute_inline(block_rv)
    loops = sch.get_loops(main)
    spatial, window_loops = loops[:window.spatial], loops[window.spatial:]
    outer = [spatial[i] for i in range(window.rows_axis) if i != window.channel_axis]
    lanes = spatial[window.columns_axis + 1:]
    groups = []
    if 1 < window.channel_group and window.channel_group % tile.channels == 0:
        # several blocks a group: the group on blockIdx.y, so that the fetch's channel range
        # (f // group * inputs + rc) is seen to stay within one group (in a fused index the
        # buffer compaction cannot prove it and allocates several groups' channels)
        c_g, c_o, c_i = sch.split(spatial[window.channel_axis],
                                  [None, window.channel_group // tile.channels, tile.channels])
        groups = [c_g]
    else:
        c_o, c_i = sch.split(spatial[window.channel_axis], [None, tile.channels])
    y_o, y_t, y_r = sch.split(spatial[window.rows_axis],
                              [None, tile.rows, tile.rows_per_thread])
    x_o, x_t = sch.split(spatial[window.columns_axis], [None, tile.columns])
    sch.reorder(*groups, *outer, c_o, y_o, x_o, c_i, y_t, x_t, *lanes, *window_loops, y_r)
    block_loop = sch.fuse(*outer, c_o, y_o, x_o)
    if groups:
        sch.bind(groups[0], "blockIdx.y")
    thread_loop = sch.fuse(c_i, y_t, x_t, *lanes)
    sch.bind(block_loop, "blockIdx.x")
    sch.bind(thread_loop, "threadIdx.x")
    sch.compute_at(shared, block_loop)
    fetch = sch.fuse(*sch.get_loops(shared)[len(groups) + 1:])  # the loops under the block's
    _, fetch_thread = sch.split(fetch, [None, tile.threads])
    sch.bind(fetch_thread, "threadIdx.x")
    sch.reverse_compute_at(tail[-1], thread_loop)
    sch.decompose_reduction(main, window_loops[0])
    for loop in window_loops:
        extent = sch.get(loop).extent
        if int(extent) <= MAX_UNROLLED_WINDOW:
            sch.unroll(loop)
    sch.unroll(y_r)
    return sch.mod["main"]


__all__ = ["WindowTiles", "choose_tile", "shared_bytes_per_block", "window_reduction"]
