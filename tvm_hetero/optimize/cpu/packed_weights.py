"""The ``packed-weights`` CPU rule: direct NCHW convolutions, and grouped ones whose groups have
whole vectors of output channels: vector lanes along the output channels, the weight repacked
``[F/lanes, C, KH, KW, lanes]`` at build time; register tiles of channel vectors x output columns;
epilogue per tile.

What: the rule changes the kernel's weight parameter and marks it, and the pass repacks the argument
(a constant once, at build time). A register tile is c channel vectors x w output columns
accumulated over the whole reduction in a tile-local buffer: per step c contiguous weight vectors, w
broadcast inputs, c * w fused multiply-adds, whatever the stride and the width (w divides it: 7 for
ResNet-50's 56/28/14/7-wide outputs). The tile is chosen for the fewest loads per multiply-add with
at most 16 accumulators (14 with 16 vector registers, within them). The epilogue (bias, batch norm,
activation, residual add) writes the tile out, vectorized along the channels. A grouped
convolution's vector of output channels reads one input channel, broadcast as for a direct one; its
tiles stay in one group.

Why: stride-2 layers no longer gather, and no width needs ragged lanes (``tiled`` gets 3 lanes on
SqueezeNet 1.1's 111-wide first layer: 0.59 -> 0.15 ms packed). AlexNet's 2-group layers, before
with ``tiled``'s lanes along 27- and 13-wide rows: haswell 7.5 -> 4.0, 8.1 -> 1.6, 5.4 -> 1.1 ms;
znver4 3.8 -> 2.1, 1.2 -> 0.98, 0.81 -> 0.66.

Declined (``tiled`` takes them): depthwise convolutions, groups of fewer output channels than lanes
(ResNeXt's 4), and channel counts that are not a multiple of the lanes. The table gives ``tiled``
short windowed reductions where it gets whole vectors (3x3 over RGB 32 wide: 4.4 against 7.5 us
packed), a residual add these lanes would gather (the zoo ResNet's 16 -> 16 3x3 at 32x32 13.4 us
tiled, 19.2 us packed), and windowed convolutions to exactly 16 channels, whose packed tile is one
channel vector (34.3 -> 27.5 us tiled). Rejected for channels that are not whole vectors: padding
them inside the kernel (``transform_layout`` with a ``pad_value`` stops later primitives;
``pad_einsum`` reads the weight through an ``if_then_else`` TVM scalarizes: 12.7 ms against
``tiled``'s 2.0). Preparation pads such output channels before fusion instead (SqueezeNet's
classifier: 1.63 ms packed against 2.02 ``tiled``).
"""

from __future__ import annotations

from ...layers.classify import kernel_kind
from ...target import vector_lanes
from ..rule import Rule
from .analysis import direct_conv, loop_extent
from .schedule_helpers import (PACKED_ACCUMULATORS, epilogue_at, finish_register_tile,
                               inline_identity_copies, packed_tile)

# Attribute of a PrimFunc whose weight parameter the rule repacked: ``[param index, lanes]``.
# The OptimizeLayers pass repacks the argument the Relax program passes there (a constant is
# repacked at build time).
PACKED_WEIGHTS_ATTR = "tvm_hetero.packed_weights"


# A short reduction over a window (3x3 over an RGB image: 27) ran faster with the tiled rule
# when the output width is a multiple of its lanes (32 wide: 4.4 against 7.5 us); 111 wide
# (SqueezeNet 1.1), where the tiled rule gets 3 lanes, 0.59 against 0.15-0.23 ms packed.
# 1x1 over 16 channels and 7x7 over RGB ran 2x and 1.6x faster packed. A residual add in the
# epilogue, which packed lanes gather, also goes to the tiled rule when it gets whole vectors
# (16 -> 16 channels 3x3 at 32x32 with the residual: 13.4 us tiled, 19.2 us packed). So does a
# windowed convolution to as many channels as lanes: its packed tile is one channel vector
# (17 loads per 16 multiply-adds; the tiled rule reuses each weight over 16 columns): 16 -> 16
# 3x3 at 32x32 without the residual 27.5 us tiled, 34.3 us packed.
MIN_PACKED_WINDOW_REDUCTION = 32


def _reads_a_residual(sch, func, epilogue, out) -> bool:
    """True when an epilogue block reads a parameter shaped like the output `out` (a
    residual add), which lanes along the output channels would gather."""
    shape = [int(d) for d in out.shape]
    sources = [region.source for block_rv in epilogue for region in sch.get(block_rv).reads]
    return any([int(d) for d in p.ty.shape] == shape and any(p.same_as(s) for s in sources)
               for p in func.params if not p.same_as(out))


def tiled_fits_better(func, target) -> bool:
    """Whether the ``tiled`` rule beats this one on a direct NCHW convolution (see
    `MIN_PACKED_WINDOW_REDUCTION`): its lanes are whole vectors along the output width and the
    convolution reads a residual, or has a window and either as many channels as lanes or a
    short reduction. The table tries ``packed-weights`` first except there."""
    from tvm import s_tir

    if kernel_kind(func) != "conv2d":
        return False
    lanes, _ = vector_lanes(target)
    sch = s_tir.Schedule(func)
    found = direct_conv(func, sch)
    if found is None:
        return False
    blocks, main_index, weight_index = found
    conv = blocks[main_index]
    loops = sch.get_loops(conv)
    if len(loops) != len(sch.get(conv).iter_vars) \
            or any(loop_extent(sch, lp) is None for lp in loops):
        return False
    weight = func.params[weight_index].ty
    channels, window = int(weight.shape[0]), int(weight.shape[2]) * int(weight.shape[3])
    whole_vectors = loop_extent(sch, loops[3]) % lanes == 0  # the tiled rule's lanes
    return whole_vectors and (
        window > 1 and (channels == lanes
                        or window * int(weight.shape[1]) < MIN_PACKED_WINDOW_REDUCTION)
        or _reads_a_residual(sch, func, blocks[main_index + 1:],
                             sch.get(blocks[-1]).writes[0].source))


class PackedWeights(Rule):
    """The ``packed-weights`` rule: vector lanes along output channels, the weight repacked
    [F/lanes, C, KH, KW, lanes] at build time; register tiles of channel vectors x output
    columns; epilogue per tile."""

    name = "packed-weights"
    description = ("vector lanes along output channels, the weight repacked [F/lanes, C, KH, "
                   "KW, lanes] at build time; register tiles of channel vectors x output "
                   "columns; epilogue per tile")
    kinds = ("conv2d",)
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a direct NCHW convolution with vector lanes along the output channels.

        The weight ``[F, C, KH, KW]`` is read as ``[F / lanes, C, KH, KW, lanes]`` (the function's
        parameter changes; its PrimFunc carries ``PACKED_WEIGHTS_ATTR`` and the OptimizeLayers
        pass repacks the argument, at build time for a constant). A register tile of
        ``c x lanes`` output channels times ``w`` output columns accumulates over the whole
        reduction: per step ``c`` contiguous weight vectors, ``w`` broadcast inputs and ``c * w``
        fused multiply-adds, whatever the stride or the width (``w`` divides it); the
        accumulators live in a tile-local buffer and the epilogue (bias, batch norm, activation,
        residual add) writes the tile out. Identity padding is inlined; real padding is computed
        per parallel task (`prologue_per_task`), or first, in parallel. Returns None for other
        kernels (depthwise convolutions, channel counts that are not a multiple of the lanes,
        non-float32). A grouped convolution whose groups' output channels are whole vectors
        (AlexNet's 5x5 and 3x3 layers) is scheduled the same way, its tiles within a group.
        The table declines for it where `tiled_fits_better`.
        """
        from tvm import s_tir

        if kernel_kind(func) != "conv2d":
            return None
        lanes, registers = vector_lanes(target)
        sch = s_tir.Schedule(func)
        found = direct_conv(func, sch, group_lanes=lanes)
        if found is None:
            return None
        blocks, main_index, weight_index = found
        conv = blocks[main_index]
        block = sch.get(conv)
        loops = sch.get_loops(conv)
        if len(loops) != len(block.iter_vars) or any(loop_extent(sch, lp) is None for lp in loops):
            return None
        weight = func.params[weight_index].ty
        channels = int(weight.shape[0])
        if channels % lanes or str(weight.dtype) != "float32":
            return None
        if int(sch.get(blocks[-1]).writes[0].source.shape[0]) \
                != int(block.writes[0].source.shape[0]):
            # an epilogue broadcasting the tile over more images (``conv(x) + r``, r of a
            # larger batch): its loops inside the tile would start with the images, not the
            # channels the lanes split (the lanes then ran along the images, predicated and
            # gathered: 160 unrolled copies, 19 s of LLVM for a 16 -> 32 3x3 at 10x10)
            return None

        sch.transform_layout(conv, ("read", [r.source.same_as(func.params[weight_index])
                                              for r in block.reads].index(True)),
                             lambda f, c, h, w: (f // lanes, c, h, w, f % lanes))
        prologue = inline_identity_copies(sch, blocks[:main_index])
        epilogue = list(blocks[main_index + 1:])
        accumulate = sch.cache_write(conv, 0, "local")
        sch.transform_layout(conv, ("write", 0),
                             lambda n, f, y, x: (n, f // lanes, y, x, f % lanes))
        # the epilogue reads the accumulators through one block writing the kernel's output
        tail = [accumulate] + epilogue
        for block_rv in tail[:-1]:
            sch.compute_inline(block_rv)
        last = tail[-1]
        n, f, y, x, rc, ry, rx = sch.get_loops(conv)
        # a grouped convolution's tile stays in one group: one input broadcast to its vectors
        data = [r.source for r in block.reads
                if not r.source.same_as(func.params[weight_index])][0]
        groups = int(data.shape[1]) // int(weight.shape[1])
        vectors, columns = packed_tile(channels // lanes // groups, loop_extent(sch, x),
                                        PACKED_ACCUMULATORS[registers], registers)
        f_outer, f_vectors, f_lanes = sch.split(f, [None, vectors, lanes])
        x_outer, x_inner = sch.split(x, [None, columns])
        sch.reorder(n, f_outer, y, x_outer, rc, ry, rx, f_vectors, x_inner, f_lanes)
        tile_f, *tile_x = epilogue_at(sch, last, x_outer)  # the tile's channels, then columns
        f_blocks, f_lane = sch.split(tile_f, [None, lanes])
        sch.reorder(*tile_x, f_blocks, f_lane)
        # padding, when not per task, first: parallel over channels
        finish_register_tile(sch, conv, epilogue_loops=tile_x, epilogue_lane=f_lane,
                             task_loops=[n, f_outer, y], tile=[f_vectors, x_inner], lane=f_lanes,
                             first_reduction=rc, prologue=prologue, prologue_depth=2,
                             target=target)
        return sch.mod["main"].with_attr(PACKED_WEIGHTS_ATTR, [weight_index, lanes])
