"""Schedule steps the CPU rules share: the thresholds for parallel loops, the register tile's
size and its last steps (unrolled, vectorized, parallel, the initialization split out), the
start of the blocked-layout convolution rules, identity copies inlined, padding per task,
epilogues per tile. What the rules read off a kernel is :mod:`.analysis`'s; what they know of the
target (vector lanes, vector registers, data cache sizes: :func:`~tvm_hetero.target.cpu_traits`)
is :mod:`tvm_hetero.target`'s."""

from __future__ import annotations

from ...target import cpu_traits, vector_lanes
from ..choices import choose
from .analysis import indexes_registers, iterations, loop_extent, loops_under, one_reduction

MIN_PARALLEL_EXTENT = 2
# below this many loop iterations a block runs faster on one core than through the thread pool
MIN_PARALLEL_WORK = 1 << 15


# Register tile of the channel-vector rules (packed-weights, blocked-nchwc, pixel-lanes-1x1,
# winograd): at most this many vector accumulators (of 32 AVX-512 registers, or of 16 AVX2
# ones), the operands they need within the registers too (`tile_registers`). AVX-512: on
# ResNet-50's convolutions 14-16 accumulators ran at the same speed, 28 at half of it. AVX2:
# 14, so that a prime width gets one column per accumulator (13 wide, 1 x 13: 90 GF/s per core
# against 54 for 4 x 1); the former 6 gave 2 x 2 tiles on every width of the form 7 * 2^k (VGG,
# ResNet), whose 4 accumulators cannot cover the latency of two FMA pipes: 55-57 GF/s per
# core on VGG's and ResNet's 3x3 layers, 2 x 4 tiles 91-102 (Zen 4 running haswell code;
# AVX-512 4 x 4 tiles 111-114).
PACKED_ACCUMULATORS = {32: 16, 16: 14}
# Fewer accumulators than this cannot cover the latency of two FMA pipes (4 cycles each): a
# tile reaches it where the extents allow before it saves loads. AVX2 on 14-wide rows took
# 2 x 2 (1.0 load per multiply-add) over 1 x 14 (1.07): EfficientNet's and MobileNetV3's
# 80- and 112-channel 1x1 layers at 14 x 14 ran 0.62-0.72x the time with 1 x 14, kernels
# alone (Zen 4 running haswell code); AVX-512's few changed tiles (3 x 2 -> 1 x 14, 2 x 3 ->
# 1 x 9) 0.93-1.01x.
MIN_ACCUMULATORS = 8


def tile_registers(outer: int, inner: int) -> int:
    """Vector registers a register tile of `outer` x `inner` accumulators holds at once (its
    loops unrolled, `inner` innermost): the accumulators, the `inner` operands (vectors or
    broadcasts), which LLVM keeps for the next `outer` step once there is one, and the outer
    operand. Measured on AVX2's 16 (Zen 4, blocked 3x3 convolutions, weight vectors outer,
    broadcast columns inner): 4 x 3 (16 registers) 101-109 GF/s per core, 2 x 7 (22) and 2 x 6
    (19) 47-52, 1 x 14 (16) 94-99; packed-matmul's 3 x 4 (17) spilled."""
    return outer * inner + (inner if outer > 1 else 1) + 1


def packed_tile(channel_blocks: int, width: int, accumulators: int, registers: int,
                vectors_inner: bool = False) -> tuple[int, int]:
    """``(channel vectors, output columns)`` per register tile: at least `MIN_ACCUMULATORS`
    where the extents allow, then the fewest loads per multiply-add (a tile of c vectors x w
    columns loads c weight vectors and broadcasts w inputs for c * w multiply-adds), then the
    largest tile; both divide their extents. At most `accumulators`, within the target's
    `registers` (`tile_registers`, the columns innermost, or the vectors with
    `vectors_inner`)."""
    def fits(c, w):
        return (tile_registers(w, c) if vectors_inner else tile_registers(c, w)) <= registers

    options = [(c, w) for c in range(1, min(channel_blocks, 4) + 1) if channel_blocks % c == 0
               for w in range(1, min(width, accumulators) + 1) if width % w == 0
               and c * w <= accumulators and fits(c, w)]
    return choose("register-tile", sorted(
        options, key=lambda cw: (cw[0] * cw[1] < MIN_ACCUMULATORS,
                                 (cw[0] + cw[1]) / (cw[0] * cw[1]), -cw[0] * cw[1])))


def schedule_one_reduction(func, kind: str):
    """``(schedule, root blocks, index of the reduction block)`` for a kernel of layer kind
    `kind` with exactly one reduction block, else None: where the reduction rules start."""
    from tvm import s_tir

    from ...layers.classify import kernel_kind

    if kernel_kind(func) != kind:
        return None
    sch = s_tir.Schedule(func)
    found = one_reduction(sch)
    return None if found is None else (sch, *found)


def static_conv(func, loop_count: int):
    """The kernel's one convolution block when it has `loop_count` loops, all of static extent,
    and writes one float32 buffer.

    Parameters
    ----------
    func : tvm.tirx.PrimFunc
        The kernel.
    loop_count : int
        The number of loops around the convolution block.

    Returns
    -------
    tuple or None
        ``(schedule, root blocks, index of the convolution block, its loops, its output
        buffer)``, or None for any other kernel.
    """
    found = schedule_one_reduction(func, "conv2d")
    if found is None:
        return None
    sch, blocks, main_index = found
    conv = blocks[main_index]
    writes = sch.get(conv).writes
    out = writes[0].source if len(writes) == 1 else None
    loops = sch.get_loops(conv)
    if out is None or str(out.dtype) != "float32" or len(loops) != loop_count \
            or any(loop_extent(sch, lp) is None for lp in loops):
        return None
    return sch, blocks, main_index, loops, out


def schedule_inlined(func):
    """A schedule of `func` with its blocks normalized and what dlight's ``try_inline`` can
    inline inlined.

    Parameters
    ----------
    func : tvm.tirx.PrimFunc
        The kernel.

    Returns
    -------
    tuple or None
        ``(schedule, block infos left)``, or None where ``normalize_prim_func`` cannot describe
        the kernel.
    """
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base.common_schedules import try_inline

    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if infos is None:
        return None
    return sch, try_inline(sch, infos)


def blocked_conv_start(func, target, loop_count: int, block_name: str | None = None):
    """The start the blocked-layout (NCHW[x]c) convolution rules share: the kernel's one
    convolution block (named `block_name` where given) with `loop_count` static loops, a
    float32 5-D output whose innermost axis is one vector of the `target`; identity padding
    inlined, the accumulator cached in ``local`` and the epilogue inlined but its last block.
    Returns ``(schedule, convolution block, prologue left, tail)`` or None."""
    found = static_conv(func, loop_count)
    if found is None:
        return None
    lanes, _ = vector_lanes(target)
    sch, blocks, main_index, loops, out = found
    conv = blocks[main_index]
    block = sch.get(conv)
    if (block_name is not None and block.name_hint != block_name) \
            or len(block.iter_vars) != loop_count or len(out.shape) != 5 \
            or loop_extent(sch, loops[4]) != lanes:
        return None
    prologue = inline_identity_copies(sch, blocks[:main_index])
    tail = [sch.cache_write(conv, 0, "local")] + list(blocks[main_index + 1:])
    for block_rv in tail[:-1]:
        sch.compute_inline(block_rv)
    return sch, conv, prologue, tail


def accumulate_in_registers(sch, block, unrolled, lanes, parallel, first_reduction) -> None:
    """The register tile's last steps: its loops unrolled, its lanes vectorized, the tiles
    parallel, and the accumulators' initialization split out (vectorized) ahead of
    `first_reduction`."""
    for loop in unrolled:
        sch.unroll(loop)
    sch.vectorize(lanes)
    sch.parallel(parallel)
    init = sch.decompose_reduction(block, first_reduction)
    sch.vectorize(sch.get_loops(init)[-1])


def inline_identity_copies(sch, prologue) -> list:
    """Inline the prologue blocks that only copy (an identity "padding" reads like the input
    itself); the others (real padding) are returned."""
    from tvm import ir, s_tir

    left = []
    for block_rv in prologue:
        if not isinstance(sch.get(block_rv).body.value, ir.expr.Call):
            try:
                sch.compute_inline(block_rv)
                continue
            except s_tir.ScheduleError:
                pass
        left.append(block_rv)
    return left


def epilogue_at(sch, last, tile_loop) -> list:
    """Compute the kernel's last block per register tile (under `tile_loop`); its loops inside
    the tile."""
    sch.reverse_compute_at(last, tile_loop)
    return loops_under(sch, last, tile_loop)


def prologue_per_task(sch, block_rv, parallel_loop, target) -> bool:
    """Compute a prologue block (real padding) inside the kernel's parallel loop: each task
    pads the input rows its own tile reads, in its own cache, in the same parallel region as
    the convolution. Computed first, in a parallel loop of its own, the padded input was
    written by one core and read by the other after a second thread-pool launch: the zoo
    models' padded convolutions ran 2-20 % slower (the zoo ResNet's stride-2 16 -> 32 3x3:
    16.9 against 13.6 us) and up to 1.9x slower in this machine's slow spells. Redundant
    work: the window's rows are padded once per task reading them (3 per row for a 3x3
    window), a copy. False (and nothing moved) when the block cannot move there or a task's
    padded input (all channels) would outgrow the `target`'s L1 data cache (ResNet-50's
    padded layers, 45-55 KB per task, ran 3 % slower padded per task with 32 KiB)."""
    from tvm import s_tir

    trial = sch.copy()
    try:
        trial.compute_at(block_rv, parallel_loop)
    except s_tir.ScheduleError:
        return False
    dtype_bytes = sch.get(block_rv).writes[0].source.dtype.bits // 8
    fits = iterations(trial, loops_under(trial, block_rv, parallel_loop)) * dtype_bytes \
        <= cpu_traits(target).l1_bytes
    if not choose("pad-per-task", [fits, not fits]):
        return False
    sch.compute_at(block_rv, parallel_loop)
    return True


# The most copies of one block the rules' unrolled loops may make (the product of the extents
# of every unrolled loop around it, `max_unrolled_copies`): a bound on the code LLVM compiles
# per kernel. The rules' register tiles, transforms and windows make at most 100
# (depthwise-nchwc's 5x5 window times its 4-accumulator tile; winograd's transforms and
# depthwise-rows 36, the register tiles 16) over the zoo, light and suite models. Unrolling
# an epilogue's loops that do not index the accumulators made 196-4096 copies: a
# squeeze-and-excite block's excite convolution with the gate's multiply broadcast over the
# pixels (packed-weights, blocked-nchwc) took 3-5 s of LLVM code generation at 14x14 in the
# suite's MobileNetV3 and EfficientNet blocks (0.1 s as loops), 28 s with 16 channels at
# 32x32, over 5 minutes with 64.
MAX_UNROLLED_COPIES = 128


def unroll_register_loops(sch, loops) -> list:
    """Unroll those of `loops` (an epilogue's loops inside a register tile) that index the
    tile's accumulators (:func:`indexes_registers`), while the copies of the loops' blocks stay
    within `MAX_UNROLLED_COPIES`, innermost first; the others stay loops. Returns the loops
    unrolled."""
    unrolled, copies = [], 1
    for loop in reversed(list(loops)):
        extent = loop_extent(sch, loop) or 1
        if extent == 1 or (indexes_registers(sch, loop)
                           and copies * extent <= MAX_UNROLLED_COPIES):
            sch.unroll(loop)
            unrolled.append(loop)
            copies *= extent
    return unrolled


def finish_register_tile(sch, conv, *, epilogue_loops, epilogue_lane, task_loops, tile, lane,
                         first_reduction, prologue, prologue_depth: int, target) -> None:
    """The last steps of a convolution's channel-vector register tile (``packed-weights``,
    ``blocked-nchwc``, ``depthwise-nchwc``): the epilogue's lane loop vectorized and its
    other tile loops unrolled where they index the accumulators (constant indices: the
    accumulators stay in registers; :func:`unroll_register_loops`), `task_loops` fused into
    the parallel tasks, the tile's accumulation (:func:`accumulate_in_registers` of the
    `tile` loops and `lane`), and each `prologue` block (real padding) computed per task,
    else first, its `prologue_depth` outer loops fused and parallel."""
    sch.vectorize(epilogue_lane)
    unroll_register_loops(sch, epilogue_loops)
    tasks = sch.fuse(*task_loops)
    accumulate_in_registers(sch, conv, tile, lane, tasks, first_reduction)
    for block_rv in prologue:
        if not prologue_per_task(sch, block_rv, tasks, target):
            prologue_loops = sch.get_loops(block_rv)
            if len(prologue_loops) >= prologue_depth:
                sch.parallel(sch.fuse(*prologue_loops[:prologue_depth]))
