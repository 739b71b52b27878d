"""The optimization table, declared in one place: (device family, layer kind) -> the rules
tried in order, the first that returns a scheduled kernel wins.

Adding a rule: write its class (one file under ``cpu/``) and name it in :func:`default_table`
where it should be tried. ``register_rule`` adds one at run time (a user's own rule).
"""

from __future__ import annotations

from ..layers import LAYER_KINDS
from .cpu import (BlockedNCHWc, ConcatCopies, LayoutCopies, PackedMatmul, PackedWeights,
                  ParallelLoops, PixelLanes1x1, PoolingRows, ReductionChains, SplitKGemv, Tiled,
                  Winograd)
from .cpu.depthwise_nchwc import DepthwiseNCHWc
from .cpu.depthwise_rows import DepthwiseRows
from .cpu.grouped_pixels_1x1 import GroupedPixels1x1
from .cpu.injective_lanes import InjectiveLanes
from .cpu.packed_weights import tiled_fits_better
from .cpu.row_reductions import RowReductions, not_a_matrix_vector_product, reduces_only
from .gpu import DlightRule, gpu_rules
from .rule import FAMILIES, Rule

# Bumped whenever a default rule changes the code it generates (or how kernels are timed: 4 is
# the first with TVM's runtime on every CPU thread; 6 has pooling-rows,
# 7 sends residual convolutions with whole tiled vectors to tiled, 8 sends every 1x1
# stride-1 convolution to pixel-lanes-1x1, 9 has concat-copies, reduction-chains and
# split-k-gemv, 10 blocked-nchwc and blocked pools, 11 pads small convolutions' input per
# parallel task and compares tuned kernels in alternating rounds, 13 injective-lanes,
# row-reductions and packed-matmul, 14 tiles, registers and caches from the target,
# depthwise-rows and vector exp/sigmoid in every CPU kernel, 15 the channel-vector rules' AVX2
# tiles within the registers and Winograd's products tile from packed_tile, 16
# depthwise-nchwc, 17 grouped-pixels-1x1, 18 register tiles of at least 8 accumulators, 19
# the rules' ranked choices measured by tuning, 20 depthwise tiles of 4 accumulators, 21 an
# epilogue's loops unrolled only where they index the register tile's accumulators, so a
# squeeze-and-excite gate broadcast over the pixels stays a loop, and packed-weights declining
# epilogues broadcast over more images, 22 norm-shaped reductions (an RMS norm: its mean read
# back over the row) to row-reductions before reduction-chains, not dlight's reduction rule,
# 23 reduction-chains' outputs renumbered [task, chain] where its chunks straddle rows (a race
# and wrong answers before), reductions over a single point folded into elementwise blocks
# before any rule (a bias inlined into a matmul of inner dimension 1 was added twice), and
# depthwise-rows and pixel-lanes-1x1 declining the kernels they raised on, 24
# matrix-vector products with [output, reduction] weights to row-reductions, not dlight's
# GEMV rule, whose code LLVM could take minutes to compile), 25 reduction-chains running an
# epilogue over a larger domain (a pad) whole after its tasks and boolean casts under the fast
# approximations as selects (a wrong answer and a failed build on generated graphs):
# tuned-vs-rules comparisons stored in a tuning database under another version are measured
# again.
RULES_VERSION = 25


def default_table() -> dict[tuple[str, str], list[Rule]]:
    """The default rules of every (family, kind) pair, in the order they are tried."""
    parallel = ParallelLoops()  # every CPU kind: the catch-all, TVM's loops made parallel
    table = {}
    for kind in LAYER_KINDS:
        table[("cpu", kind)] = [parallel]
        table[("cuda", kind)] = gpu_rules()  # a GPU kernel must be scheduled: Fallback last
        table[("other", kind)] = gpu_rules()
    table[("cpu", "conv2d")] = [
        Winograd(),  # only the kernels preparation wrote as Winograd: nothing else fits them
        BlockedNCHWc(),  # only convolutions preparation put in the blocked layout
        DepthwiseNCHWc(),  # only depthwise convolutions preparation put in the blocked layout
        GroupedPixels1x1(),  # only grouped 1x1 convolutions preparation wrote per group
        PixelLanes1x1(),  # NCHW 1x1 stride-1: lanes along the pixels beat lanes along channels
        # packed (lanes along the output channels) before tiled, except where tiled gets whole
        # vectors and packed would gather a residual or re-load a short reduction's weights
        PackedWeights().unless(tiled_fits_better, "tiled's lanes are whole vectors there"),
        DepthwiseRows(),  # depthwise, stride 1, rows of 28 or more: rows of one channel
        Tiled(),  # grouped and other depthwise convolutions, ragged channel counts
        RowReductions(),  # 1x1 maps (squeeze-and-excite): a dot product per output channel
        parallel,
    ]
    table[("cpu", "matmul")] = [
        PackedMatmul(),  # a [K, N] weight parameter, N whole vectors, no batch: panels
        SplitKGemv(),  # large [reduction, output] matrix-vector products only
        Tiled(),
        # [output, reduction] weights, which tiled declines: a dot product per row
        RowReductions().unless(not_a_matrix_vector_product, "not a matrix-vector product"),
        parallel,
    ]
    # windowed pools row by row; global pools (a window of its own per output) as chains
    table[("cpu", "pooling")] = [PoolingRows(), ReductionChains(), parallel]
    # norms (a reduction whose epilogue spans the row: an RMS norm's x * rsqrt(mean of
    # squares)) one row per task, as layer norms; plain reductions several outputs per task
    # (independent add chains); dlight's reduction rule only gets what parallel-loops declines
    # (kernels too small for the thread pool). Norms fell to dlight's rule before, which
    # computes the mean again for every output of the row: a decode step's 1 x 4096 RMS norm
    # 14 ms, 4.5 us as a row; 2 x 64 x 768 under reduction-chains 89 us, as rows 58 us
    table[("cpu", "reduction")] = [
        RowReductions().unless(reduces_only, "a plain reduction: independent chains"),
        ReductionChains(), parallel,
        DlightRule("cpu", "Reduction", "TVM dlight CPU rule for reductions",
                   kinds=("reduction",)),
    ]
    # concatenations and layout transforms are elementwise; each rule declines the other's
    # then every other kernel without a reduction, small ones too (parallel-loops declines those)
    table[("cpu", "elementwise")] = [ConcatCopies(), LayoutCopies(), InjectiveLanes(), parallel]
    table[("cpu", "other")] = [InjectiveLanes(), parallel]  # gathers (take)
    # softmax, layer norm: one row per task, vector partial sums
    table[("cpu", "normalization")] = [RowReductions(), parallel]
    return table


_TABLE: dict[tuple[str, str], list[Rule]] = default_table()


def register_rule(family: str, kind: str, rule: Rule, first: bool = True) -> None:
    """Add `rule` for layers of `kind` on devices of `family` (tried first by default)."""
    if family not in FAMILIES or kind not in LAYER_KINDS:
        raise ValueError(f"unknown (family, kind) ({family!r}, {kind!r}): families "
                         f"{FAMILIES}, kinds {LAYER_KINDS}")
    if not rule.serves(family, kind):
        raise ValueError(f"rule {rule.name!r} serves kinds {rule.kinds} on families "
                         f"{rule.families}, not ({family!r}, {kind!r})")
    rules = _TABLE.setdefault((family, kind), [])
    rules.insert(0, rule) if first else rules.append(rule)


def reset_table() -> None:
    """Back to the default rules."""
    _TABLE.clear()
    _TABLE.update(default_table())


def rules_for(family: str, kind: str) -> list[Rule]:
    return list(_TABLE.get((family, kind), []))


def table_rows() -> list[tuple[str, str, list[str]]]:
    """``(family, layer kind, rule names)`` for every entry of the table."""
    return [(family, kind, [r.name for r in _TABLE[(family, kind)]])
            for family in FAMILIES for kind in LAYER_KINDS]


__all__ = ["RULES_VERSION", "default_table", "register_rule", "reset_table", "rules_for",
           "table_rows"]
