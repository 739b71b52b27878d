"""The ``injective-lanes`` CPU rule: any kernel without a reduction (elementwise chains, reshapes,
transposes, slices, gathers): inlined into its output, the contiguous inner axis in vector lanes,
the outer axes fused and parallel when the kernel is large enough.

What: trailing loops are fused until they hold one vector (a 7x7 map's 49 elements), split into
whole vectors of the target's lanes (up to 4 vectors; else half a vector; else left to LLVM) and
vectorized by TVM, where the innermost axis walks every buffer contiguously. Outer loops are fused
and parallel from 2^15 iterations; smaller kernels (DenseNet's 7x7 batch norms, a classifier's
reshape) run on one core.

Why: against ``parallel-loops`` (alternating, shared machine) MobileNetV2's standalone Clip kernels
0.13-0.55x the time (the 96x112x112 one 1.09x), ShuffleNet's channel shuffles 0.15-0.35x, BERT's and
ViT's head transposes 0.3-1.1x. The small kernels ``parallel-loops`` declined kept TVM's default
loops.

Rejected: TVM lanes where the inner axis strides through an input (a transpose): TVM's vector
gathers ran 10x slower than LLVM's scalar loop (ViT's key transpose 8.0 against 0.81 ms). A block
calling ``cosh`` or ``sinh`` keeps its inner loop scalar: TVM 0.27 lowers them for LLVM as libm
calls on scalars only, and a vector of them failed code generation.
"""

from __future__ import annotations

from ...layers.classify import LAYER_KINDS
from ...target import vector_lanes
from ..rule import Rule
from .analysis import iterations, loop_extent, walks_contiguously
from .schedule_helpers import MIN_PARALLEL_EXTENT, MIN_PARALLEL_WORK

# at most this many vectors in one TVM-vectorized inner loop (a 7x7 feature map: 49 lanes)
MAX_VECTORS = 4
# math TVM 0.27 lowers for LLVM on scalars only (a libm call): a vector of them fails code
# generation ("unknown intrinsic tirx.cosh"; the onnx node tests test_cosh, test_sinh)
SCALAR_ONLY_MATH = ("tirx.cosh", "tirx.sinh")


def calls_scalar_only_math(block) -> bool:
    """Whether a block's body calls one of ``SCALAR_ONLY_MATH``."""
    import tvm_ffi
    from tvm import ir

    found = []

    def visit(expr):
        if isinstance(expr, ir.expr.Call) and getattr(expr.op, "name", "") in SCALAR_ONLY_MATH:
            found.append(expr)
        return expr

    tvm_ffi.structural_map(block.body, visit)
    return bool(found)


def inner_lanes(extent: int, lanes: int) -> int | None:
    """Lanes for an inner loop of `extent`: a multiple of the target's `lanes` dividing it
    (up to ``MAX_VECTORS`` vectors; else half a vector), the whole loop when it is that short,
    else None (no such split: the loop stays serial for LLVM's own vectorizer)."""
    if extent <= MAX_VECTORS * lanes:
        return extent
    widths = [m * lanes for m in range(MAX_VECTORS, 0, -1)] + [lanes // 2]
    return next((w for w in widths if w > 1 and extent % w == 0), None)


def lanes_and_tasks(sch, block_rv, lanes: int) -> bool:
    """Schedule one spatial block: trailing loops fused until they hold a vector, split into
    whole vectors and vectorized where the innermost axis walks every buffer contiguously;
    the loops outside fused and parallel when the block does ``MIN_PARALLEL_WORK``
    iterations. False when a loop has an unknown extent."""
    loops = sch.get_loops(block_rv)
    if not loops:
        return True  # one element: nothing to schedule
    if any(loop_extent(sch, loop) is None for loop in loops):
        return False
    work = iterations(sch, loops)
    block = sch.get(block_rv)
    # a transpose's inner axis strides through its input: TVM's vector gathers ran 10x slower
    # than LLVM's scalar loop there (ViT's key transpose), so only contiguous walks get lanes
    contiguous = len(block.iter_vars) == len(loops) and walks_contiguously(
        block, block.iter_vars[-1].var) and not calls_scalar_only_math(block)
    count = 1  # trailing loops fused until they hold a vector (a 7x7 map's rows: 49)
    while count < len(loops) and iterations(sch, loops[-count:]) < lanes:
        count += 1
    inner = sch.fuse(*loops[-count:]) if count > 1 else loops[-1]
    outer = list(loops[:-count])
    width = inner_lanes(loop_extent(sch, inner), lanes) if contiguous else None
    if width is not None and width < loop_extent(sch, inner):
        inner_outer, inner = sch.split(inner, [None, width])
        outer.append(inner_outer)
    if width is not None and width > 1:
        sch.vectorize(inner)
    if outer:
        fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        if loop_extent(sch, fused) >= MIN_PARALLEL_EXTENT and work >= MIN_PARALLEL_WORK:
            sch.parallel(fused)
    return True


class InjectiveLanes(Rule):
    """The ``injective-lanes`` rule: a kernel without reductions inlined into its output(s);
    the contiguous inner axis in whole vectors, outer axes fused and parallel when large."""

    name = "injective-lanes"
    description = ("kernels without reductions: inlined, the inner axis in whole vectors, "
                   "outer axes fused and parallel when large")
    kinds = LAYER_KINDS
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a kernel whose blocks are all spatial (elementwise chains, reshapes,
        transposes, slices, gathers such as ``take``): every block inlined that can be, then
        each remaining block's trailing loops fused until they hold one vector of the target
        (`vector_lanes`), split into whole vectors (up to ``MAX_VECTORS``) and vectorized by
        TVM, so math intrinsics are vector calls; the outer loops fused and parallel when the
        block does ``MIN_PARALLEL_WORK`` iterations (smaller kernels run on one core: the
        thread pool costs more). Returns None for kernels with a reduction."""
        from tvm import s_tir
        from tvm.s_tir.dlight.analysis import normalize_prim_func
        from tvm.s_tir.dlight.base.common_schedules import try_inline

        lanes, _ = vector_lanes(target)
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if not infos or any(it.kind != "S" for info in infos for it in info.iters):
            return None
        infos = try_inline(sch, infos)
        for info in infos:
            if not lanes_and_tasks(sch, info.block_rv, lanes):
                return None
        return sch.mod["main"]
