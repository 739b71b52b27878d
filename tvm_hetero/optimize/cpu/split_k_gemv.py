"""The ``split-k-gemv`` CPU rule: matrix-vector products with a ``[reduction, output]`` weight of at
least 2^20 elements (batch-1 dense layers after constant folding): parallel slices of the reduction,
each streaming whole weight rows into a partial output; the partials added last.

What: the reduction is cut into 8 slices (``rfactor``); each parallel task streams whole rows of its
slice into a partial output, the innermost loop over the outputs vectorized by LLVM; a last short
loop adds the 8 partials. 2 to 16 slices ran the same on 2 threads.

Why: tiles along the output walk such a weight in strips, a short piece of every row, which streams
badly once the weight is out of cache (AlexNet's 9216 x 4096 is 151 MB). Against ``tiled``:
AlexNet's dense layers 15.4 -> 5.4, 6.9 -> 2.4 and 0.97 -> 0.22 ms; ResNet-50's classifier 0.21 ->
0.10 ms.

Rejected for smaller weights, which stay in cache and where the partials cost more than they give:
2048 x 10 2.2 us ``tiled``, 7.0 us split (2048 x 128 the same either way, 2048 x 1000 twice as fast
split).
"""

from __future__ import annotations

from ...layers.classify import kernel_kind
from ..choices import choose
from ..rule import Rule
from .analysis import largest_divisor, loop_extent, walks_contiguously

# Slices of the reduction a matrix-vector product is cut into (split_k_gemv): each a parallel
# task streaming its rows of the weight. 2 to 16 ran the same on 2 threads.
GEMV_SLICES = 8
# Weights (elements) below which split_k_gemv leaves a product to the tiled rule: small ones
# stay in cache and the partials cost more than they give (2048 x 10: 2.2 us tiled, 7.0 us
# split; 2048 x 128 the same either way; 2048 x 1000 twice as fast split).
GEMV_MIN_WEIGHTS = 1 << 20


class SplitKGemv(Rule):
    """The ``split-k-gemv`` rule: matrix-vector products with a [reduction, output] weight:
    parallel slices of the reduction, each streaming whole weight rows into a partial output;
    the partials added last."""

    name = "split-k-gemv"
    description = ("matrix-vector products with a [reduction, output] weight: parallel slices "
                   "of the reduction, each streaming whole weight rows into a partial output; "
                   "the partials added last")
    kinds = ("matmul",)
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a matrix-vector product whose weight is laid out ``[reduction, output]``
        (``y[n] = sum_k x[k] * W[k, n]``) as slices of the reduction.

        Tiles along the output (what ``tiled`` does) walk the weight in narrow strips, one short
        piece per row, which the memory system streams badly once the weight is out of cache.
        Here the reduction is cut into `GEMV_SLICES` slices (``rfactor``); each parallel task
        streams whole rows of its slice, accumulating a partial output vector (the innermost loop
        over the outputs, which LLVM vectorizes), and a last short loop adds the partials up
        before the epilogue. Against ``tiled`` (2 threads, a tune running beside): AlexNet's dense
        layers 9216 -> 4096 15.4 -> 5.4 ms, 4096 -> 4096 6.9 -> 2.4 ms, 4096 -> 1000 0.97 -> 0.22
        ms; ResNet-50's 2048 -> 1000 0.21 -> 0.10 ms. Returns None for other kernels and for
        weights under `GEMV_MIN_WEIGHTS` elements.
        """
        from tvm import s_tir
        from tvm.s_tir.dlight.analysis import normalize_prim_func

        del target
        if kernel_kind(func) != "matmul":
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        reductions = [info for info in infos if any(it.kind == "R" for it in info.iters)]
        if len(reductions) != 1 or [it.kind for it in reductions[0].iters] != ["S", "R"]:
            return None
        main = reductions[0]
        block = sch.get(main.block_rv)
        output, reduced = sch.get_loops(main.block_rv)
        if loop_extent(sch, output) is None or loop_extent(sch, reduced) is None \
                or not walks_contiguously(block, block.iter_vars[0].var):
            return None  # an [output, reduction] weight: dlight's GEMV rule fits that one
        slices = choose("gemv-slices", list(dict.fromkeys(
            largest_divisor(loop_extent(sch, reduced), count)
            for count in (GEMV_SLICES, 2 * GEMV_SLICES, GEMV_SLICES // 2, 4 * GEMV_SLICES))))
        if slices < 2 or loop_extent(sch, output) * loop_extent(sch, reduced) < GEMV_MIN_WEIGHTS:
            return None
        slice_loop, _ = sch.split(reduced, [slices, None])
        partial = sch.rfactor(slice_loop, 0)
        outputs, slice_loop, rows = sch.get_loops(partial)
        sch.reorder(slice_loop, rows, outputs)
        sch.parallel(slice_loop)
        sch.decompose_reduction(partial, rows)
        return sch.mod["main"]
