"""The schedule each optimization rule writes, compared structurally with an expected PrimFunc
(the way TVM's dlight tests check theirs): one small kernel per rule of ``tvm_hetero.optimize.cpu``
(and the ``fast_math`` rewrite), of ``tvm_hetero.optimize.gpu`` and the dlight wrappers there, the
rule applied directly for a fixed target, the result ``tvm.ir.assert_structural_equal`` to the
TVMScript in ``tests/rule_schedules/<rule>.py`` (``func.script()`` as printed, ``ruff format``-ed);
and, per rule, a kernel outside its preconditions that it declines (None). Each expected GPU
schedule of the package's own rules is also run, emulated on the CPU
(:func:`tvm_hetero.testing.gpu_emulation.check_gpu_schedule`), against the unscheduled kernel.

The numeric tests (``test_rule_edges.py``, ``test_optimize_*.py``) check what the scheduled
kernels compute; these fail when a rule's schedule changes (a tile, a parallel loop, a
vectorized lane, a cache stage), on any host: the target names its CPU (``mcpu``) and cores, or
its GPU's architecture and limits (``SM_90``).

A rule whose schedule changes on purpose: its test's failure shows the new schedule; read it
against the rule's docstring, paste it over the function ``main`` of its file and ``ruff
format`` that file.
"""

import importlib.util
import pathlib

import pytest
import tvm
from tvm import te, topi

from tvm_hetero.ops import conv2d_nchwc, grouped_conv1x1, winograd
from tvm_hetero.optimize.cpu.blocked_nchwc import BlockedNCHWc
from tvm_hetero.optimize.cpu.concat_copies import ConcatCopies
from tvm_hetero.optimize.cpu.depthwise_nchwc import DepthwiseNCHWc
from tvm_hetero.optimize.cpu.depthwise_rows import DepthwiseRows
from tvm_hetero.optimize.cpu.fast_math import fast_math
from tvm_hetero.optimize.cpu.grouped_pixels_1x1 import GroupedPixels1x1
from tvm_hetero.optimize.cpu.injective_lanes import InjectiveLanes
from tvm_hetero.optimize.cpu.layout_copies import LayoutCopies
from tvm_hetero.optimize.cpu.packed_matmul import PackedMatmul
from tvm_hetero.optimize.cpu.packed_weights import PackedWeights
from tvm_hetero.optimize.cpu.parallel_loops import ParallelLoops
from tvm_hetero.optimize.cpu.pixel_lanes_1x1 import PixelLanes1x1
from tvm_hetero.optimize.cpu.pooling_rows import PoolingRows
from tvm_hetero.optimize.cpu.reduction_chains import ReductionChains
from tvm_hetero.optimize.cpu.row_reductions import RowReductions
from tvm_hetero.optimize.cpu.split_k_gemv import SplitKGemv
from tvm_hetero.optimize.cpu.tiled import Tiled
from tvm_hetero.optimize.cpu.winograd import Winograd
from tvm_hetero.optimize.gpu import DlightRule
from tvm_hetero.optimize.gpu.column_gemv import ColumnGemv
from tvm_hetero.optimize.gpu.injective_stages import InjectiveStages
from tvm_hetero.optimize.gpu.matmul_tiles import MatmulTiles
from tvm_hetero.target import arch_multiprocessors
from tvm_hetero.optimize.gpu.row_chains import RowChains
from tvm_hetero.optimize.gpu.window_tiles import WindowTiles
from tvm_hetero.optimize.gpu.work_budget import WorkBudget, work_ratio
from tvm_hetero.target import cuda_target
from tvm_hetero.testing.gpu_emulation import check_gpu_schedule

# AVX-512: 16 fp32 lanes, 32 vector registers, 32 KiB L1d (cpu_traits); 2 cores
CPU = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}
CUDA = {"kind": "cuda", "arch": "sm_90", "max_num_threads": 1024, "thread_warp_size": 32}
# the table's target for an H100/H200: 132 SMs (by arch: CUDA_LIMITS), 1024 threads and 48 KiB
# of static shared memory a block, which the package's GPU rules read
SM_90 = cuda_target("sm_90")
EXPECTED = pathlib.Path(__file__).with_name("rule_schedules")


def expected(name: str):
    """The PrimFunc ``main`` of ``rule_schedules/<name>.py``."""
    spec = importlib.util.spec_from_file_location(f"rule_schedules.{name}",
                                                  EXPECTED / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def schedule(rule, func, target=CPU):
    """`rule` applied to `func` for `target` (a dict), which it must not decline."""
    scheduled = rule.apply(func, tvm.target.Target(target))
    assert scheduled is not None, f"{rule.name} declined the kernel"
    return scheduled


def check(rule, func, name: str, target=CPU):
    """`rule`'s schedule of `func` against ``rule_schedules/<name>.py``; a mismatch shows the
    schedule the rule writes now."""
    scheduled = schedule(rule, func, target)
    try:
        tvm.ir.assert_structural_equal(scheduled, expected(name))
    except ValueError as err:
        raise AssertionError(f"{rule.name} changed its schedule: {err}\n\nNow:\n"
                             f"{scheduled.script()}") from None


def kernel(kinds, *tensors):
    """A layer's PrimFunc: `tensors` (inputs, then the output) with its fused ops `kinds`."""
    return te.create_prim_func(list(tensors)).with_attr("tvm_hetero.op_kinds", kinds)


def placeholders(*shapes):
    """Float32 inputs named x, w, z, ... in order."""
    return [te.placeholder(shape, name=name) for shape, name in zip(shapes, "xwzuv")]


# ---------------------------------------------------------------------------------------------
# the kernels, small: one each rule accepts


def add_multiply(rows=64, cols=512):
    x, w = placeholders((rows, cols), (rows, cols))
    return kernel(["add", "multiply"], x, w, topi.multiply(topi.add(x, w), x))


def separable_resize(channels=4, size=8, out=32):
    """A bilinear upsampling as preparation legalizes it (``ops.resize.separable_linear``): the
    columns pass, then the rows pass, each reading its indices and weights from tables."""
    from tvm_hetero.ops import resize

    (x,) = placeholders((1, channels, size, size))
    tables = []
    for axis in ("row", "col"):
        tables += [te.placeholder((out,), "int32", name=f"{axis}_first"),
                   te.placeholder((out,), "int32", name=f"{axis}_second"),
                   te.placeholder((out,), "float32", name=f"{axis}_weight")]
    return kernel(["resize2d"], x, *tables, resize.separable_linear(x, *tables))


def concat(channels=(8, 24), size=32):
    x, w = placeholders(*[(2, c, size, size) for c in channels])
    return kernel(["concatenate"], x, w, topi.concatenate([x, w], 1))


def to_nchw16c(channels=32):
    (x,) = placeholders((1, channels, 8, 16))
    out = te.compute((1, channels // 16, 8, 16, 16),
                     lambda n, c, h, w, lane: x[n, c * 16 + lane, h, w],
                     name="te_layout_transform")
    return kernel(["te_layout_transform"], x, out)


def matmul_bias(rows, reduced, cols, transpose_weight=False):
    x, w, z = placeholders((rows, reduced),
                           (cols, reduced) if transpose_weight else (reduced, cols), (cols,))
    return kernel(["matmul", "add"], x, w, z,
                  topi.add(topi.matmul(x, w, transp_b=transpose_weight), z))


def gemv(size):
    x, w = placeholders((1, size), (size, size))
    return kernel(["matmul"], x, w, topi.matmul(x, w))


def softmax(rows=128):
    (x,) = placeholders((rows, 64))
    return kernel(["softmax"], x, topi.nn.softmax(x))


def mean_over_pixels():
    (x,) = placeholders((1, 16, 5, 5))
    return kernel(["mean"], x, topi.divide(topi.sum(x, axis=(2, 3), keepdims=True), 25.0))


def max_pool(channels, size):
    (x,) = placeholders((1, channels, size, size))
    return kernel(["max_pool2d"], x,
                  topi.nn.pool2d(x, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "max"))


def depthwise(width):
    x, w = placeholders((1, 2, 4, width), (2, 1, 3, 3))
    return kernel(["conv2d"], x, w, topi.nn.group_conv2d_nchw(x, w, 1, 1, 1, 2))


def conv3x3(out_channels):
    x, w = placeholders((1, 4, 4, 4), (out_channels, 4, 3, 3))
    return kernel(["conv2d"], x, w, topi.nn.conv2d_nchw(x, w, 1, 1, 1))


def conv1x1_residual(window=1):
    x, w, z = placeholders((1, 4, 4, 4), (32, 4, window, window), (1, 32, 4, 4))
    conv = topi.nn.conv2d_nchw(x, w, 1, window // 2, 1)
    return kernel(["conv2d", "add"], x, w, z, topi.add(conv, z))


def grouped_1x1():
    x, w = placeholders((1, 4, 3, 3), (4, 2, 1, 1))  # 9 pixels: padded to one vector
    return kernel(["conv2d"], x, w, grouped_conv1x1.grouped_conv2d_1x1(x, w, 2, 16))


def blocked_conv(lanes=16, out_blocks=2):
    x, w = placeholders((1, 16 // lanes, 4, 4, lanes),
                        (out_blocks, 16 // lanes, 3, 3, lanes, lanes))
    return kernel(["conv2d"], x, w,
                  conv2d_nchwc.conv2d_nchwc(x, w, (1, 1), (1, 1, 1, 1), (1, 1)))


def blocked_depthwise(lanes=16):
    x, w = placeholders((1, 16 // lanes, 4, 4, lanes), (16 // lanes, 1, 3, 3, 1, lanes))
    return kernel(["conv2d"], x, w,
                  conv2d_nchwc.depthwise_conv2d_nchwc(x, w, (1, 1), (1, 1, 1, 1), (1, 1)))


def winograd_conv(size=8):
    x, w = placeholders((1, 1, size, size, 16), (6, 6, 16, 16))  # tiles of 4 x 4
    return kernel(["conv2d"], x, w, winograd.conv2d_nchwc(x, w))


def centred_rows():
    (x,) = placeholders((8, 4))
    return kernel(["sum", "subtract"], x, topi.subtract(x, topi.sum(x, axis=1, keepdims=True)))


def cube():
    (x,) = placeholders((8,))
    return kernel(["power"], x, topi.power(x, 3.0))


def exponential():
    (x,) = placeholders((4, 64))
    return kernel(["exp"], x, topi.exp(x))


def conv3x3_map(channels=256, size=14):
    x, w = placeholders((1, channels, size, size), (channels, channels, 3, 3))
    return kernel(["conv2d"], x, w, topi.nn.conv2d_nchw(x, w, 1, 1, 1))


def depthwise_map(channels=32, size=112):
    x, w = placeholders((1, channels, size, size), (channels, 1, 3, 3))
    return kernel(["conv2d"], x, w, topi.nn.group_conv2d_nchw(x, w, 1, 1, 1, channels))


def dense_row(reduced=1024, cols=256):
    """A batch-1 dense layer on [output, reduction] weights: a row per output."""
    x, w = placeholders((1, reduced), (cols, reduced))
    return kernel(["matmul"], x, w, topi.nn.dense(x, w))


# ---------------------------------------------------------------------------------------------
# the schedules


def test_parallel_loops():
    # add inlined into the multiply; the 64 rows parallel, each row's 512 columns a plain
    # inner loop (for LLVM to vectorize)
    check(ParallelLoops(), add_multiply(), "parallel_loops")


def test_injective_lanes():
    # add and multiply inlined into one block; 512 columns in 8 vectors of 64 lanes
    # (4 AVX-512 vectors), rows x vectors fused into one parallel loop
    check(InjectiveLanes(), add_multiply(), "injective_lanes")


def test_concat_copies():
    # the channel axis partitioned at 8 (one copy per input), the 32 x 32 pixels fused into
    # one contiguous copy, the 2 images parallel
    check(ConcatCopies(), concat(), "concat_copies")


def test_layout_copies():
    # NCHW -> NCHW16c: the read's contiguous axis (16 columns) innermost and vectorized, the
    # others fused in the written order (blocks, rows, lanes) and parallel
    check(LayoutCopies(), to_nchw16c(), "layout_copies")


def test_packed_matmul():
    # weight read as panels [2, 8, 16] (its repacking in the attribute); 2 parallel tiles of
    # 8 rows x 2 vectors in a local buffer (unrolled, 16 lanes vectorized), bias per tile
    check(PackedMatmul(), matmul_bias(16, 8, 32), "packed_matmul")


def test_split_k_gemv():
    # the 1024 reduction in 8 parallel slices (rfactor), each streaming its 128 weight rows
    # into a partial output row; the 8 partials added after
    check(SplitKGemv(), gemv(1024), "split_k_gemv")


def test_tiled():
    # 16 rows x 16 lanes register tiles: the 2 row tiles parallel, the columns' 2 tiles
    # inside, reduction, rows unrolled, lanes vectorized; the bias computed per tile
    check(Tiled(), matmul_bias(32, 8, 32), "tiled")


def test_row_reductions():
    # one row per parallel task: max and sum as 16-lane partial results (rfactor, vectorized)
    # then across them, exp and the normalization vectorized along the 64-wide row
    check(RowReductions(), softmax(), "row_reductions")


def test_reduction_chains():
    # 16 windows in 2 parallel tasks of 8 chains (unrolled, accumulated in a local buffer),
    # the mean's division per task
    check(ReductionChains(), mean_over_pixels(), "reduction_chains")


def test_pooling_rows():
    # a parallel task per output row (8 channels x 32 rows), initialized, then updated per
    # window offset, its 32 columns as 2 vectors of 16
    check(PoolingRows(), max_pool(8, 64), "pooling_rows")


def test_depthwise_rows():
    # a task per channel's block of 4 rows, padding per task; tile of 4 rows (unrolled) x 32
    # columns (vectorized) in a local buffer, the 3 x 3 window unrolled
    check(DepthwiseRows(), depthwise(32), "depthwise_rows")


def test_packed_weights():
    # weight repacked [2, 4, 3, 3, 16]; a task per output row (padding per task) with a
    # 2-vector x 4-column register tile in a local NCHW16c buffer; epilogue per tile
    check(PackedWeights(), conv3x3(32), "packed_weights")


def test_pixel_lanes_1x1():
    # the 16 pixels one axis: 2 parallel tiles of 16 channels (unrolled) x 1 vector of 16
    # pixels in a local buffer, over the 4 input channels; the residual add per tile
    check(PixelLanes1x1(), conv1x1_residual(), "pixel_lanes_1x1")


def test_grouped_pixels_1x1():
    # a task per group: its 9 pixels copied padded to one vector of 16, a 2-channel x
    # 1-vector tile over the group's 2 input channels, then the crop as 9-lane vectors
    check(GroupedPixels1x1(), grouped_1x1(), "grouped_pixels_1x1")


def test_blocked_nchwc():
    # NCHW16c: a task per output row (padding per task), tile of 2 channel blocks x 4 columns
    # (unrolled), each a 16-lane vector, over the whole reduction; epilogue per tile
    check(BlockedNCHWc(), blocked_conv(), "blocked_nchwc")


def test_depthwise_nchwc():
    # NCHW16c depthwise: a task per output row (padding per task, vectorized); tile of
    # 1 row x 4 columns (unrolled) of 16 lanes, the 3 x 3 window unrolled
    check(DepthwiseNCHWc(), blocked_depthwise(), "depthwise_nchwc")


def test_winograd():
    # a task per row of 4 x 4 tiles: its padded rows, the input transform (unrolled 6 x 6,
    # vectorized), the products in tiles of 2 tile columns x 1 channel vector, the inverse
    # transform and the output rows, all inside the task
    check(Winograd(), winograd_conv(), "winograd")


def test_fast_math_writes_a_small_power_as_products():
    # pow(x, 3) -> let base = x in base * base * base; the loops untouched
    tvm.ir.assert_structural_equal(fast_math(cube()), expected("fast_math"))


def test_dlight_cpu_reduction():
    # dlight's rule (the reduction table's last): rows parallel, the sum computed per row,
    # the subtraction vectorized (rows of 4: under any host's vector width, which the rule
    # reads from the host's LLVM, not the target)
    check(DlightRule("cpu", "Reduction"), centred_rows(), "dlight_cpu_reduction")


def test_dlight_gpu_fallback():
    # the 256 elements fused and bound to one block of 1024 threads, guarded by T.where
    check(DlightRule("gpu", "Fallback"), exponential(), "dlight_gpu_fallback", CUDA)


@pytest.fixture
def sm_90_from_the_table(monkeypatch):
    """The GPU rules count the SMs of a GPU present of the target's arch (an H100 PCIe is an
    sm_90 of 114): none here, so that the table's 132 make the same tile on every host."""
    monkeypatch.setattr("tvm_hetero.target.present_gpu", lambda index: None)
    arch_multiprocessors.cache_clear()
    yield
    arch_multiprocessors.cache_clear()


def test_matmul_tiles(sm_90_from_the_table):
    # 14 x 14 x 256 3x3 convolution as an implicit GEMM [196 pixels, 256 channels, 2304]: a
    # 16 x 16 tile (8 x 8 threads, 2 x 2 each, k 16), the pixels padded to 208 (1.06x), 13 x 16
    # = 208 blocks on 132 SMs (dlight's 32 x 64 tile: 28); im2col and padding in the fetch
    func = conv3x3_map()
    check(MatmulTiles(), func, "matmul_tiles", SM_90)
    check_gpu_schedule(func, expected("matmul_tiles"))


def test_window_tiles(sm_90_from_the_table):
    # MobileNetV2's first depthwise 3x3, 32 x 112 x 112: 512 blocks of one channel's 28 x 28
    # pixels, 196 threads of 4 rows each (unrolled); the block's 30 x 30 padded input fetched
    # into shared memory by them, the window unrolled into local accumulators
    func = depthwise_map()
    check(WindowTiles(), func, "window_tiles", SM_90)
    check_gpu_schedule(func, expected("window_tiles"))


def test_column_gemv(sm_90_from_the_table):
    # [1, 1024] x [1024, 1024]: 128 blocks of 8 neighbouring outputs (a 32-byte sector,
    # threadIdx.x) x 64 reduction lanes (threadIdx.y, rfactor; 512 threads), 16 elements a
    # lane in a local partial sum, the lanes' sums reduced across the block
    func = gemv(1024)
    check(ColumnGemv(), func, "column_gemv", SM_90)
    check_gpu_schedule(func, expected("column_gemv"))


def test_row_chains():
    # softmax of 128 rows of 64: a block per row, 64 threads (the row, unpadded): the max, exp
    # (once per element), the sum and the division in turn, the row's max, exps and sum in
    # shared memory
    func = softmax()
    check(RowChains(), func, "row_chains", SM_90)
    check_gpu_schedule(func, expected("row_chains"))


def test_injective_stages():
    # an 8 x 8 -> 32 x 32 separable resize of 4 channels: the columns pass (4 x 8 x 32, each
    # read by the rows between two input rows) in a launch of its own, 1 block of 1024 threads
    # (guarded), then the rows pass, 4 blocks; dlight's Fallback inlines the columns into each
    # output: 2.9x the work
    func = separable_resize()
    fallback = schedule(DlightRule("gpu", "Fallback"), func, SM_90)
    assert work_ratio(func, fallback) > 1.3
    check(InjectiveStages(), func, "injective_stages", SM_90)
    assert work_ratio(func, expected("injective_stages")) == 1.0
    check_gpu_schedule(func, expected("injective_stages"))


def test_work_budget_keeps_a_schedule_within_its_work():
    # dlight's Reduction on a column GEMV: 64 blocks of 16 outputs x 16 lanes, the lanes'
    # partial sums 1.01x the kernel's work: its schedule, unchanged
    func = gemv(1024)
    rule = WorkBudget(DlightRule("gpu", "Reduction"))
    check(rule, func, "work_budget", SM_90)
    assert work_ratio(func, expected("work_budget")) <= 1.3


def test_work_budget_declines_a_schedule_over_its_work():
    # dlight's Reduction on a mean over 5 x 5 pixels: the 25 padded to 2 x 16 lanes, the 16
    # partial sums added again, 1.9x the kernel's work (estimate_tir_flops)
    func = mean_over_pixels()
    rule = DlightRule("gpu", "Reduction")
    scheduled = schedule(rule, func, SM_90)
    assert work_ratio(func, scheduled) > 1.3
    assert WorkBudget(rule).apply(func, tvm.target.Target(SM_90)) is None


# ---------------------------------------------------------------------------------------------
# what each rule declines


DECLINED = [
    (ParallelLoops(), lambda: add_multiply(4, 4)),  # too small for the thread pool
    (InjectiveLanes(), softmax),  # has reductions
    (ConcatCopies(), add_multiply),  # no concatenation
    (LayoutCopies(), add_multiply),  # no layout transform
    (PackedMatmul(), lambda: matmul_bias(4, 8, 10)),  # 10 columns: under 8 vectors, ragged
    (SplitKGemv(), lambda: gemv(64)),  # a weight under 1M elements
    (Tiled(), lambda: matmul_bias(32, 8, 32, transpose_weight=True)),  # [output, reduction]
    (RowReductions(), add_multiply),  # no reduction
    (ReductionChains(), softmax),  # two reductions
    (PoolingRows(), lambda: max_pool(1, 34)),  # 17 columns: no divisor of 4 to 16 lanes
    (DepthwiseRows(), lambda: depthwise(14)),  # rows under 28 wide
    (PackedWeights(), lambda: conv3x3(10)),  # 10 output channels: no whole vector
    (PixelLanes1x1(), lambda: conv1x1_residual(3)),  # a 3 x 3 window
    (GroupedPixels1x1(), lambda: conv1x1_residual(1)),  # not preparation's grouped form
    (BlockedNCHWc(), lambda: blocked_conv(lanes=8, out_blocks=2)),  # blocks of 8: half a vector
    (DepthwiseNCHWc(), lambda: blocked_depthwise(lanes=8)),  # blocks of 8: half a vector
    (Winograd(), blocked_conv),  # not preparation's Winograd form
    (Winograd(), lambda: winograd_conv(4)),  # one tile: raised in reorder before
    (DlightRule("gpu", "Matmul"), exponential),  # no matmul
    (MatmulTiles(), depthwise_map),  # a depthwise convolution: no GEMM (window-tiles')
    (WindowTiles(), lambda: conv3x3(32)),  # an ordinary convolution (matmul-tiles')
    (ColumnGemv(), dense_row),  # [output, reduction] weights: a row reduction (dlight's GEMV)
    (RowChains(), lambda: gemv(1024)),  # the reduction walks the weights' columns
    (InjectiveStages(), add_multiply),  # dlight's Fallback within its work: Fallback's
    (InjectiveStages(), softmax),  # has reductions
]


@pytest.mark.parametrize("rule, make", DECLINED, ids=[rule.name for rule, _ in DECLINED])
def test_a_rule_declines_a_kernel_outside_its_preconditions(rule, make):
    target = CUDA if rule.families != ("cpu",) else CPU
    assert rule.apply(make(), tvm.target.Target(target)) is None


def test_fast_math_leaves_a_kernel_without_slow_math_as_it_is():
    func = add_multiply()
    assert fast_math(func) is func
