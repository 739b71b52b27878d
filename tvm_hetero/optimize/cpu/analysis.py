"""What the CPU rules read off a kernel before they schedule it: loop extents and iteration
counts, which iterators and blocks reduce, whether a block walks its buffers contiguously, the
shape of a direct convolution, which loops index a register tile's accumulators, and how many
copies of a block a scheduled kernel's unrolled loops make. Nothing here changes a schedule."""

from __future__ import annotations


def loop_extent(sch, loop) -> int | None:
    from tvm import tirx

    extent = sch.get(loop).extent
    return int(extent) if isinstance(extent, tirx.IntImm) else None


def is_reduction_iter(iter_var) -> bool:
    from tvm import tirx

    return iter_var.iter_type == tirx.IterVar.CommReduce


def iterations(sch, loops) -> int:
    """Iterations of a nest of `loops` (a loop of unknown extent counts once)."""
    count = 1
    for loop in loops:
        count *= loop_extent(sch, loop) or 1
    return count


def largest_divisor(extent: int, at_most: int) -> int:
    return max(d for d in range(1, min(extent, at_most) + 1) if extent % d == 0)


def walks_contiguously(block, lane_var) -> bool:
    """True when every buffer `block` reads or writes is indexed by `lane_var` only in its
    last (contiguous) dimension, or not at all: vector loads, never gathers."""
    from tvm.tirx.analysis import undefined_vars

    for region in list(block.reads) + list(block.writes):
        for index_range in region.region[:-1]:
            if any(v.same_as(lane_var) for v in undefined_vars(index_range.min)):
                return False
    return True


def direct_conv_weight(func, block, group_lanes: int | None = None) -> int | None:
    """Index of the weight parameter of a direct NCHW convolution block
    (``out[n, f, y, x] += data[n, c, ., .] * weight[f, c, ry, rx]``), else None. With
    `group_lanes`, a grouped convolution too (``data[n, f // O * C + c, ., .]``, O output
    channels per group, C input channels) whose groups' output channels are a multiple of
    `group_lanes`: a vector of that many output channels reads one input channel."""
    from tvm.sym.analyzer import Analyzer
    from tvm.tirx.analysis import undefined_vars

    iters = [iv.var for iv in block.iter_vars]
    if len(iters) != 7 or len(block.writes) != 1 or len(block.reads) != 2:
        return None
    n, f, y, x, rc, ry, rx = iters

    def exactly(ranges, variables) -> bool:
        return len(ranges) == len(variables) and all(
            r.min.same_as(v) and int(r.extent) == 1 for r, v in zip(ranges, variables))

    if not exactly(list(block.writes[0].region), [n, f, y, x]):
        return None
    weights = [r for r in block.reads if exactly(list(r.region), [f, rc, ry, rx])]
    if len(weights) != 1:
        return None
    data = [r for r in block.reads if r is not weights[0]][0]
    if len(data.region) != 4 or any(any(v.same_as(f) for v in undefined_vars(r.min))
                                    for r in (data.region[0], *data.region[2:])):
        return None
    channel = data.region[1].min
    if not channel.same_as(rc):  # grouped and depthwise convolutions read channels through f
        if group_lanes is None:
            return None
        per_group = int(weights[0].source.shape[1])
        groups = int(data.source.shape[1]) // per_group
        out_channels = int(block.writes[0].source.shape[1])
        if groups < 2 or per_group < 2 or out_channels % groups \
                or (out_channels // groups) % group_lanes:
            return None
        out_per_group = out_channels // groups
        if not Analyzer().can_prove_equal(channel, f // out_per_group * per_group + rc):
            return None
    index = [i for i, p in enumerate(func.params) if p.same_as(weights[0].source)]
    return index[0] if index else None


def is_reduction_block(sch, block_rv) -> bool:
    return any(is_reduction_iter(iv) for iv in sch.get(block_rv).iter_vars)


def one_reduction(sch) -> tuple[list, int] | None:
    """``(root blocks, index of the reduction block)`` of a kernel with exactly one reduction
    block, else None."""
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    reductions = [i for i, block_rv in enumerate(blocks) if is_reduction_block(sch, block_rv)]
    return (blocks, reductions[0]) if len(reductions) == 1 else None


def direct_conv(func, sch, group_lanes: int | None = None):
    """``(root blocks, index of the convolution block, weight parameter index)`` of a kernel
    whose one reduction is a direct NCHW convolution (grouped too with `group_lanes`: see
    `direct_conv_weight`), else None. The blocks as written (normalize_prim_func would drop
    the unit loops of a 1x1 kernel)."""
    found = one_reduction(sch)
    if found is None:
        return None
    blocks, main_index = found
    weight_index = direct_conv_weight(func, sch.get(blocks[main_index]), group_lanes)
    return None if weight_index is None else (blocks, main_index, weight_index)


def loops_under(sch, block_rv, loop) -> list:
    """The loops of `block_rv` nested inside `loop` (one of its loops)."""
    loops = sch.get_loops(block_rv)
    return loops[[sch.get(lp).same_as(sch.get(loop)) for lp in loops].index(True) + 1:]


def _all_blocks(sch, block_rv=None) -> list:
    """Every block of the schedule's function (nested ones too), root first."""
    block_rv = sch.get_sblock("root") if block_rv is None else block_rv
    found = [block_rv]
    for child in sch.get_child_blocks(block_rv):
        found += _all_blocks(sch, child)
    return found


def max_unrolled_copies(func) -> int:
    """The most copies of one block the unrolled loops of a scheduled PrimFunc make: the largest
    product, over its blocks, of the extents of the unrolled loops around the block (an
    unrolled loop of unknown extent counts once). What `MAX_UNROLLED_COPIES` bounds."""
    from tvm import s_tir, tirx

    sch = s_tir.Schedule(func)
    most = 1
    for block_rv in _all_blocks(sch)[1:]:
        copies = 1
        for loop in sch.get_loops(block_rv):
            if sch.get(loop).kind == tirx.ForKind.UNROLLED:
                copies *= loop_extent(sch, loop) or 1
        most = max(most, copies)
    return most


def indexes_registers(sch, loop) -> bool:
    """Whether a loop changes which element of a ``local`` buffer (the accumulators of a
    register tile) the blocks under it read or write: unrolled, such a loop gives the
    accumulators constant indices, so that they stay in registers. A loop that does not (an
    epilogue broadcasting the tile's outputs over more pixels or images than the tile has:
    a squeeze-and-excite block's ``x * conv(pool(x))``) gains nothing from being unrolled."""
    import tvm_ffi
    from tvm.tirx.analysis import undefined_vars

    get_realize = tvm_ffi.get_global_func("s_tir.schedule.GetSBlockRealize")
    loop_var = sch.get(loop).loop_var
    for block_rv in sch.get_child_blocks(loop):
        realize = get_realize(sch, block_rv)
        block = realize.block
        bound = {iv.var: value for iv, value in zip(block.iter_vars, realize.iter_values)}
        for region in list(block.reads) + list(block.writes):
            if region.source.scope() != "local":
                continue
            for index_range in region.region:
                for var in undefined_vars(index_range.min):
                    value = next((v for k, v in bound.items() if k.same_as(var)), var)
                    if any(u.same_as(loop_var) for u in undefined_vars(value)):
                        return True
    return False
