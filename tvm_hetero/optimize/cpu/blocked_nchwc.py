"""The ``blocked-nchwc`` CPU rule: convolutions in the blocked layout NCHW16c: register tiles of
channel blocks x output columns, each a contiguous vector; epilogue per tile.

What: a register tile of v channel blocks x w output columns, each one 16-lane vector, accumulated
over the whole reduction: v weight vectors and w broadcasts per v * w multiply-adds, the epilogue
writing the tile out as whole contiguous vectors; parallel over (channel-block tiles, rows). The
padding is computed per task unless a task's padded rows exceed the L1 cache (ResNet-50's blocked
layers pad 45-55 KB per task, and ran 3 % slower that way).

Why: in the blocked layout every multiply-add is one contiguous channel vector, and a chain of
blocked convolutions passes activations on blocked, so a model pays one layout transform in and one
out (preparation's ``BlockedConvLayout``). SqueezeNet's 1000-class convolution, its channels padded
to 1008, runs blocked in 0.79 ms, onnxruntime's the same (NCHW ``packed-weights`` 1.17 in the slow
state).

Reduction blocks: on targets with 16 vector registers (AVX2) a windowed convolution whose tile's
weights outgrow the L1 cache runs the row's tiles inside each input channel block, the accumulators
going to the row's buffer between blocks: haswell 3x3 layers of 256-512 channels 51-72 -> 97-103
GFLOP per CPU second. Rejected on AVX-512 and for 1x1 convolutions, which keep whole-reduction
tiles: AVX-512's 16-accumulator tiles ran the same per kernel alone (107-113) but 1 % slower over
VGG-19's and ResNet-50's 3x3 layers in ``benchmarks/experiments/conv_tile_ab.py``'s alternating
rounds.
"""

from __future__ import annotations

from ...target import cpu_traits, vector_lanes
from ..choices import choose
from ..rule import Rule
from .analysis import iterations, loop_extent
from .schedule_helpers import (PACKED_ACCUMULATORS, blocked_conv_start, epilogue_at,
                               finish_register_tile, packed_tile)

# Reduction blocks (the row's tiles inside each input channel block) on targets with at most
# this many vector registers: AVX2's 8-accumulator tiles over 256-512 channels 51-72 -> 97-103
# GFLOP per CPU second (Zen 4 running haswell code); AVX-512's 16-accumulator tiles the same
# either way per kernel alone (107-113) but 1 % slower over VGG-19's and ResNet-50's 3x3
# layers in conv_tile_ab's alternating rounds.
REDUCTION_BLOCK_REGISTERS = 16


class BlockedNCHWc(Rule):
    """The ``blocked-nchwc`` rule: convolutions in the blocked layout NCHW16c: register tiles of
    channel blocks x output columns, each a contiguous vector; epilogue per tile."""

    name = "blocked-nchwc"
    description = ("convolutions in the blocked layout NCHW16c: register tiles of channel "
                   "blocks x output columns, each a contiguous vector; epilogue per tile")
    kinds = ("conv2d",)
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a convolution in the blocked layout NCHW[lanes]c (see ``tvm_hetero.prepare``).

        ``out[n, f, y, x, lane] += data[n, c, y', x', l] * weight[f, c, ry, rx, l, lane]``: a
        register tile of ``v`` output-channel blocks times ``w`` output columns, each a vector of
        the block's lanes, accumulates over the whole reduction (per step ``v`` contiguous weight
        vectors, ``w`` broadcast inputs, ``v * w`` fused multiply-adds); the epilogue writes the
        tile out as whole contiguous vectors (onnxruntime's NCHWc kernels do the same). On
        AVX2 (`REDUCTION_BLOCK_REGISTERS`) a windowed convolution whose tile's weights (all
        input channels) outgrow the target's L1 data cache runs the row's tiles inside each
        input channel block instead, its accumulators kept in the row's buffer between
        blocks, so a block's weights are read from L1 by every tile of the row (a 1x1
        window's 8 steps per block are too few: 5-15 % slower). Identity
        padding is inlined; real padding is computed per parallel task (`prologue_per_task`), or
        first, in parallel. Returns None for other kernels (other layouts, blocks that are not one
        vector of the target).
        """
        started = blocked_conv_start(func, target, 9)
        if started is None:
            return None
        sch, conv, prologue, tail = started
        lanes, registers = vector_lanes(target)
        n, f, y, x, lane, rc, ry, rx, rl = sch.get_loops(conv)
        vectors, columns = packed_tile(loop_extent(sch, f), loop_extent(sch, x),
                                        PACKED_ACCUMULATORS[registers], registers)
        f_outer, f_vectors = sch.split(f, [None, vectors])
        x_outer, x_inner = sch.split(x, [None, columns])
        window = loop_extent(sch, ry) * loop_extent(sch, rx)
        traits = cpu_traits(target)
        rows_per_block = traits.registers <= REDUCTION_BLOCK_REGISTERS \
            and vectors * lanes * iterations(sch, [rc, ry, rx, rl]) * 4 > traits.l1_bytes
        if window > 1 and choose("rows-per-channel-block", [rows_per_block, not rows_per_block]):
            # the row's tiles inside each input channel block: the block's weights stay in L1
            sch.reorder(n, f_outer, y, rc, x_outer, ry, rx, rl, f_vectors, x_inner, lane)
            *tile, tile_lane = epilogue_at(sch, tail[-1], y)  # blocks, columns; lanes
            tile = tile[:1]  # the row's columns stay a loop
        else:
            sch.reorder(n, f_outer, y, x_outer, rc, ry, rx, rl, f_vectors, x_inner, lane)
            *tile, tile_lane = epilogue_at(sch, tail[-1], x_outer)  # blocks, columns; lanes
        # padding, when not per task, first: parallel over blocks and rows
        finish_register_tile(sch, conv, epilogue_loops=tile, epilogue_lane=tile_lane,
                             task_loops=[n, f_outer, y], tile=[f_vectors, x_inner], lane=lane,
                             first_reduction=rc, prologue=prologue, prologue_depth=3,
                             target=target)
        return sch.mod["main"]
