"""Convolution classes of the architecture suite: depthwise convolutions (``depthwise-rows``;
``depthwise-nchwc`` in the blocked layout) and vector exp/sigmoid epilogues (``fast_math`` in
every CPU kernel), each checked against TVM's default loops."""

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from tvm_hetero.ops.conv2d_nchwc import depthwise_conv2d_nchwc
from tvm_hetero.optimize.cpu import DepthwiseNCHWc, DepthwiseRows
from tvm_hetero.optimize.pass_ import optimize_function
from tvm_hetero.relax_ir import OP_KINDS_ATTR

from tests.helpers.kernels import run_kernel, scheduled_and_checked
from tests.helpers.schedules import check, declines, depthwise


def _depthwise(channels: int, size: int, window: int, stride: int, epilogue: str):
    """A fused depthwise convolution kernel as the ONNX import makes it (group conv, bias and
    `epilogue`: ``clip`` (ReLU6) or ``silu``), with its op kinds."""
    from tvm import te, topi

    x = te.placeholder((1, channels, size, size), "float32", name="x")
    w = te.placeholder((channels, 1, window, window), "float32", name="w")
    b = te.placeholder((1, channels, 1, 1), "float32", name="b")
    conv = topi.nn.group_conv2d_nchw(x, w, stride, window // 2, 1, channels)
    y = topi.add(conv, b)
    if epilogue == "clip":
        y, ops = topi.minimum(topi.maximum(y, 0.0), 6.0), ["conv2d", "add", "maximum", "minimum"]
    else:
        y, ops = topi.multiply(y, topi.sigmoid(y)), ["conv2d", "add", "tir_sigmoid", "multiply"]
    return te.create_prim_func([x, w, b, y]).with_attr(OP_KINDS_ATTR, ops)


@pytest.mark.parametrize("mcpu", ["znver4", "haswell"])
def test_depthwise_rows_schedules_a_stride_1_depthwise_convolution_right(mcpu):
    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    assert scheduled_and_checked(_depthwise(24, 56, 3, 1, "clip"), target) == "depthwise-rows"


def test_depthwise_rows_takes_a_5x5_window_with_a_silu_epilogue():
    assert scheduled_and_checked(_depthwise(16, 28, 5, 1, "silu")) == "depthwise-rows"


@pytest.mark.parametrize("size, stride", [(56, 2), (14, 1)])
def test_strided_and_narrow_depthwise_convolutions_stay_with_tiled(size, stride):
    # measured slower under depthwise-rows (MIN_ROW and stride 1 in depthwise_rows.py)
    func = _depthwise(16, size, 3, stride, "clip")
    assert DepthwiseRows().apply(func, tvm.target.Target({"kind": "llvm", "mcpu": "znver4"})) \
        is None
    assert scheduled_and_checked(func) == "tiled"


def _blocked_depthwise(channels: int, lanes: int, size: int, window: int, stride: int,
                       epilogue: str):
    """A fused depthwise convolution in the blocked layout NCHW[lanes]c as preparation writes
    it (bias, then `epilogue`: ``clip`` (ReLU6) or ``silu``), with its op kinds."""
    from tvm import te, topi

    blocks = channels // lanes
    x = te.placeholder((1, blocks, size, size, lanes), "float32", name="x")
    w = te.placeholder((blocks, 1, window, window, 1, lanes), "float32", name="w")
    b = te.placeholder((1, blocks, 1, 1, lanes), "float32", name="b")
    pad = window // 2
    y = topi.add(depthwise_conv2d_nchwc(x, w, (stride, stride), (pad,) * 4, (1, 1)), b)
    if epilogue == "clip":
        y, ops = topi.minimum(topi.maximum(y, 0.0), 6.0), ["conv2d", "add", "maximum", "minimum"]
    else:
        y, ops = topi.multiply(y, topi.sigmoid(y)), ["conv2d", "add", "tir_sigmoid", "multiply"]
    return te.create_prim_func([x, w, b, y]).with_attr(OP_KINDS_ATTR, ops)


@pytest.mark.parametrize("mcpu, lanes", [("znver4", 16), ("haswell", 8)])
@pytest.mark.parametrize("size, window, stride, epilogue", [
    (56, 3, 2, "clip"),  # MobileNetV2's stride-2 layers: NCHW rows gave half-empty vectors
    (14, 3, 1, "clip"),  # rows of 14: too narrow for depthwise-rows
    (7, 5, 1, "silu"),  # EfficientNet's 5x5 on 7x7
])
def test_depthwise_nchwc_schedules_blocked_depthwise_convolutions_right(
        mcpu, lanes, size, window, stride, epilogue):
    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    func = _blocked_depthwise(48, lanes, size, window, stride, epilogue)
    assert scheduled_and_checked(func, target) == "depthwise-nchwc"


@pytest.mark.parametrize("height, width, tile", [
    (112, 112, (1, 4)), (28, 28, (1, 4)), (14, 14, (2, 2)),
    (7, 7, (1, 7)),  # 4 accumulators would be 1 x 1 on a prime width: 1 x 7
    (1, 3, (1, 3)),  # a row smaller than the tile: all of it
])
def test_a_depthwise_tile_holds_about_four_accumulators(height, width, tile):
    from tvm_hetero.optimize.cpu.depthwise_nchwc import small_depthwise_tile

    assert small_depthwise_tile(height, width) == tile


def test_depthwise_nchwc_pads_per_task_in_whole_vectors_and_declines_other_blocks():
    from tvm import s_tir, tirx

    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    scheduled = DepthwiseNCHWc().apply(_blocked_depthwise(32, 16, 28, 3, 2, "clip"), target)
    sch = s_tir.Schedule(scheduled)
    pad_loops = [sch.get(loop) for loop in sch.get_loops(sch.get_sblock("pad"))]
    assert pad_loops[0].kind == tirx.ForKind.PARALLEL  # in the tasks
    assert pad_loops[-1].kind == tirx.ForKind.VECTORIZED and int(pad_loops[-1].extent) == 16
    # 8-lane blocks are no vector of an AVX-512 target; NCHW depthwise is depthwise-rows'
    assert DepthwiseNCHWc().apply(_blocked_depthwise(32, 8, 28, 3, 2, "clip"), target) is None
    assert DepthwiseNCHWc().apply(_depthwise(32, 56, 3, 1, "clip"), target) is None


def _calls(func) -> set[str]:
    import tvm_ffi
    from tvm import ir

    names = set()

    def visit(expr):
        if isinstance(expr, ir.expr.Call):
            names.add(str(getattr(expr.op, "name", "")))
        return expr

    tvm_ffi.structural_map(func.body, visit)
    return names


def test_exp_and_sigmoid_become_vector_math_within_float32_accuracy():
    from tvm import te

    x = te.placeholder((4, 1000), "float32", name="x")
    silu = te.compute(x.shape, lambda i, j: x[i, j] * te.sigmoid(x[i, j]), name="silu")
    y = te.compute(x.shape, lambda i, j: te.exp(silu[i, j]), name="exp")
    func = te.create_prim_func([x, y]).with_attr(OP_KINDS_ATTR, ["multiply", "exp"])
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    scheduled, rule = optimize_function(func.with_attr("target", target), target)
    assert rule is not None
    assert not _calls(scheduled) & {"tirx.exp", "tirx.sigmoid"}  # no scalar libm calls left
    data = np.linspace(-30, 4, 4000, dtype="float32").reshape(4, 1000)
    got = run_kernel(scheduled, target, [data, np.zeros_like(data)])
    wide = data.astype("float64")
    np.testing.assert_allclose(got, np.exp(wide / (1 + np.exp(-wide))), rtol=2e-6)


def _blocked_conv(lanes: int, channels: int, size: int, winograd_form: bool):
    """A 3x3 stride-1 convolution with bias and ReLU in NCHW[lanes]c as preparation writes it:
    direct (``ops.conv2d_nchwc``) or Winograd (``ops.winograd``, weights already transformed)."""
    from tvm import te, topi

    from tvm_hetero.ops import conv2d_nchwc, winograd

    blocks = channels // lanes
    x = te.placeholder((1, blocks, size, size, lanes), "float32", name="x")
    if winograd_form:
        alpha = winograd.TILE + 2
        w = te.placeholder((alpha, alpha, channels, channels), "float32", name="w")
        conv = winograd.conv2d_nchwc(x, w)
    else:
        w = te.placeholder((blocks, blocks, 3, 3, lanes, lanes), "float32", name="w")
        conv = conv2d_nchwc.conv2d_nchwc(x, w, (1, 1), (1, 1, 1, 1), (1, 1))
    b = te.placeholder((1, blocks, 1, 1, lanes), "float32", name="b")
    y = topi.nn.relu(topi.add(conv, b))
    return te.create_prim_func([x, w, b, y]).with_attr(OP_KINDS_ATTR, ["conv2d", "add", "relu"])


# (channel vectors, columns) of the register tiles: widths of VGG's and ResNet's layers (7 * 2^k:
# 224 to 7; Winograd: their tile columns, 56 / 4 = 14 and 28 / 4 = 7) and SqueezeNet's 27, 13
@pytest.mark.parametrize("mcpu, direct, products", [
    # AVX2, 16 registers: 8 accumulators where the widths allow no more within the registers
    # (the former 6-accumulator limit: 2 x 2 on every 7 * 2^k width, 4 x 1 on 13, Winograd
    # 2 x 2 and 2 x 1); 2 x 7 would hold 22 (its 7 broadcasts kept for the second vector)
    ("haswell", {224: (2, 4), 56: (2, 4), 14: (4, 2), 7: (1, 7), 27: (4, 3), 13: (1, 13)},
     {14: (4, 2), 7: (1, 7)}),
    # AVX-512, 32 registers: up to 16 accumulators
    ("znver4", {224: (4, 4), 56: (4, 4), 14: (2, 7), 7: (2, 7), 27: (4, 3), 13: (1, 13)},
     {14: (2, 7), 7: (2, 7)}),
])
def test_blocked_register_tiles_follow_the_targets_registers(mcpu, direct, products):
    from tvm_hetero.optimize.cpu.schedule_helpers import (PACKED_ACCUMULATORS, packed_tile,
                                                          tile_registers)
    from tvm_hetero.optimize.cpu.winograd import products_tile
    from tvm_hetero.target import cpu_traits

    registers = cpu_traits(tvm.target.Target({"kind": "llvm", "mcpu": mcpu})).registers
    accumulators = PACKED_ACCUMULATORS[registers]
    tiles = {width: packed_tile(16, width, accumulators, registers) for width in direct}
    assert tiles == direct
    assert {cols: products_tile(16, cols, 1, registers) for cols in products} == products
    # the direct tiles' broadcast columns innermost, the products' weight vectors
    assert all(tile_registers(c, w) <= registers for c, w in direct.values())
    assert all(tile_registers(w, c) <= registers for c, w in products.values())


@pytest.mark.parametrize("mcpu, blocks, width, tile", [
    # 80 and 112 channels (EfficientNet's, MobileNetV3's) at 14 x 14 on AVX2: 1 x 14, not the
    # 2 x 2 whose 4 accumulators load least per multiply-add but leave the FMA pipes idle
    ("haswell", 10, 14, (1, 14)), ("haswell", 14, 14, (1, 14)), ("haswell", 30, 14, (1, 14)),
    ("haswell", 60, 14, (4, 2)),
    ("haswell", 10, 7, (1, 7)),  # below the floor where no tile reaches it
    ("znver4", 3, 14, (1, 14)), ("znver4", 10, 27, (1, 9)), ("znver4", 60, 14, (2, 7)),
])
def test_register_tiles_keep_enough_accumulators_for_the_fma_latency(mcpu, blocks, width, tile):
    from tvm_hetero.optimize.cpu.schedule_helpers import PACKED_ACCUMULATORS, packed_tile
    from tvm_hetero.target import cpu_traits

    registers = cpu_traits(tvm.target.Target({"kind": "llvm", "mcpu": mcpu})).registers
    assert packed_tile(blocks, width, PACKED_ACCUMULATORS[registers], registers) == tile


@pytest.mark.parametrize("mcpu, accumulators", [("haswell", {False: 8, True: 7}),
                                                 ("znver4", {False: 16, True: 14})])
@pytest.mark.parametrize("winograd_form, rule", [(False, "blocked-nchwc"), (True, "winograd")])
def test_blocked_convolutions_compute_right_with_the_targets_tiles(mcpu, accumulators,
                                                                    winograd_form, rule):
    import re

    from tvm_hetero.target import cpu_traits

    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    lanes = cpu_traits(target).lanes
    # 28 wide: AVX2 2 x 4 direct tiles and 1 x 7 Winograd ones, AVX-512 4 x 4 and 2 x 7; AVX2's
    # direct tiles' weights (36 KB) outgrow L1: the tiles inside each input channel block
    func = _blocked_conv(lanes, 8 * lanes, 28, winograd_form)
    assert scheduled_and_checked(func, target, rtol=1e-4) == rule
    scheduled, _ = optimize_function(func.with_attr("target", target), target)
    # the register tile: two unrolled loops over one vector of accumulators
    tile = re.search(r"in T\.unroll\((\d+)\):\s+for \w+ in T\.unroll\((\d+)\):"
                     r"\s+for \w+ in T\.vectorized\((\d+)\)", scheduled.script())
    assert tile is not None and int(tile[3]) == lanes
    assert int(tile[1]) * int(tile[2]) == accumulators[winograd_form]


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_2x4x32():
    # a task per channel's block of 4 rows, padding per task; tile of 4 rows (unrolled) x 32
    # columns (vectorized) in a local buffer, the 3 x 3 window unrolled
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 2, 4, 32), "float32"),
        w: T.Buffer((2, 1, 3, 3), "float32"),
        group_conv2d_nchw: T.Buffer((1, 2, 4, 32), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((1, 2, 6, 34))
        for i0, i1, i2, i3 in T.grid(1, 2, 6, 34):
            with T.sblock("pad_temp"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1])
                T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                pad_temp[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(
                    1 <= v_i2 and v_i2 < 5 and 1 <= v_i3 and v_i3 < 33,
                    x[v_i0, v_i1, v_i2 - 1, v_i3 - 1],
                    T.float32(0.0),
                )
        for nn, ff, yy, xx, rc, ry, rx in T.grid(1, 2, 4, 32, 1, 3, 3):
            with T.sblock("group_conv2d_nchw"):
                v_nn, v_ff, v_yy, v_xx, v_rc, v_ry, v_rx = T.axis.remap(
                    "SSSSRRR", [nn, ff, yy, xx, rc, ry, rx]
                )
                T.reads(
                    pad_temp[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx], w[v_ff, v_rc, v_ry, v_rx]
                )
                T.writes(group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx])
                with T.init():
                    group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
                group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = (
                    group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx]
                    + pad_temp[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx]
                    * w[v_ff, v_rc, v_ry, v_rx]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 2, 4, 32), "float32"),
        w: T.Buffer((2, 1, 3, 3), "float32"),
        group_conv2d_nchw: T.Buffer((1, 2, 4, 32), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((1, 2, 6, 34))
        group_conv2d_nchw_local = T.sblock_alloc_buffer((1, 2, 4, 32), scope="local")
        for nn_ff_yy_0_fused in T.parallel(2):
            for ax0, ax1 in T.grid(6, 34):
                with T.sblock("pad_temp"):
                    v_i0 = T.axis.spatial(1, 0)
                    v_i1, v_i2, v_i3 = T.axis.remap("SSS", [nn_ff_yy_0_fused, ax0, ax1])
                    T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1])
                    T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                    pad_temp[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(
                        1 <= v_i2 and v_i2 < 5 and 1 <= v_i3 and v_i3 < 33,
                        x[v_i0, v_i1, v_i2 - 1, v_i3 - 1],
                        T.float32(0.0),
                    )
            for xx_0 in range(1):
                for yy_1_init in T.unroll(4):
                    for xx_1_init in T.vectorized(32):
                        with T.sblock("group_conv2d_nchw_init"):
                            v_nn = T.axis.spatial(1, 0)
                            v_ff, v_yy = T.axis.remap("SS", [nn_ff_yy_0_fused, yy_1_init])
                            v_xx = T.axis.spatial(32, xx_0 * 32 + xx_1_init)
                            T.reads()
                            T.writes(group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx])
                            group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
                for rc in range(1):
                    for ry in T.unroll(3):
                        for rx in T.unroll(3):
                            for yy_1 in T.unroll(4):
                                for xx_1 in T.vectorized(32):
                                    with T.sblock("group_conv2d_nchw_update"):
                                        v_nn = T.axis.spatial(1, 0)
                                        v_ff, v_yy = T.axis.remap("SS", [nn_ff_yy_0_fused, yy_1])
                                        v_xx = T.axis.spatial(32, xx_0 * 32 + xx_1)
                                        v_rc, v_ry, v_rx = T.axis.remap("RRR", [rc, ry, rx])
                                        T.reads(
                                            group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx],
                                            pad_temp[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx],
                                            w[v_ff, v_rc, v_ry, v_rx],
                                        )
                                        T.writes(group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx])
                                        group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx] = (
                                            group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx]
                                            + pad_temp[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx]
                                            * w[v_ff, v_rc, v_ry, v_rx]
                                        )
                for ax0 in T.unroll(4):
                    for ax1 in T.vectorized(32):
                        with T.sblock("group_conv2d_nchw_local"):
                            v0 = T.axis.spatial(1, 0)
                            v1, v2, v3 = T.axis.remap("SSS", [nn_ff_yy_0_fused, ax0, ax1])
                            T.reads(group_conv2d_nchw_local[v0, v1, v2, v3])
                            T.writes(group_conv2d_nchw[v0, v1, v2, v3])
                            group_conv2d_nchw[v0, v1, v2, v3] = group_conv2d_nchw_local[
                                v0, v1, v2, v3
                            ]

    check(DepthwiseRows(), before, expected)


def test_schedule_3x6x56():
    # a task per channel's block of 3 rows (3 channels x 2 blocks), its 5 padded rows; tiles
    # of 3 rows x 28 columns (vectorized), 2 along the row, the window unrolled
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 3, 6, 56), "float32"),
        w: T.Buffer((3, 1, 3, 3), "float32"),
        group_conv2d_nchw: T.Buffer((1, 3, 6, 56), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((1, 3, 8, 58))
        for i0, i1, i2, i3 in T.grid(1, 3, 8, 58):
            with T.sblock("pad_temp"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1])
                T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                pad_temp[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(
                    1 <= v_i2 and v_i2 < 7 and 1 <= v_i3 and v_i3 < 57,
                    x[v_i0, v_i1, v_i2 - 1, v_i3 - 1],
                    T.float32(0.0),
                )
        for nn, ff, yy, xx, rc, ry, rx in T.grid(1, 3, 6, 56, 1, 3, 3):
            with T.sblock("group_conv2d_nchw"):
                v_nn, v_ff, v_yy, v_xx, v_rc, v_ry, v_rx = T.axis.remap(
                    "SSSSRRR", [nn, ff, yy, xx, rc, ry, rx]
                )
                T.reads(
                    pad_temp[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx], w[v_ff, v_rc, v_ry, v_rx]
                )
                T.writes(group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx])
                with T.init():
                    group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
                group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = (
                    group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx]
                    + pad_temp[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx]
                    * w[v_ff, v_rc, v_ry, v_rx]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 3, 6, 56), "float32"),
        w: T.Buffer((3, 1, 3, 3), "float32"),
        group_conv2d_nchw: T.Buffer((1, 3, 6, 56), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((1, 3, 8, 58))
        group_conv2d_nchw_local = T.sblock_alloc_buffer((1, 3, 6, 56), scope="local")
        for nn_ff_yy_0_fused in T.parallel(6):
            for ax0, ax1 in T.grid(5, 58):
                with T.sblock("pad_temp"):
                    v_i0 = T.axis.spatial(1, 0)
                    v_i1 = T.axis.spatial(3, nn_ff_yy_0_fused // 2)
                    v_i2 = T.axis.spatial(8, nn_ff_yy_0_fused % 2 * 3 + ax0)
                    v_i3 = T.axis.spatial(58, ax1)
                    T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1])
                    T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                    pad_temp[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(
                        1 <= v_i2 and v_i2 < 7 and 1 <= v_i3 and v_i3 < 57,
                        x[v_i0, v_i1, v_i2 - 1, v_i3 - 1],
                        T.float32(0.0),
                    )
            for xx_0 in range(2):
                for yy_1_init in T.unroll(3):
                    for xx_1_init in T.vectorized(28):
                        with T.sblock("group_conv2d_nchw_init"):
                            v_nn = T.axis.spatial(1, 0)
                            v_ff = T.axis.spatial(3, nn_ff_yy_0_fused // 2)
                            v_yy = T.axis.spatial(6, nn_ff_yy_0_fused % 2 * 3 + yy_1_init)
                            v_xx = T.axis.spatial(56, xx_0 * 28 + xx_1_init)
                            T.reads()
                            T.writes(group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx])
                            group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
                for rc in range(1):
                    for ry in T.unroll(3):
                        for rx in T.unroll(3):
                            for yy_1 in T.unroll(3):
                                for xx_1 in T.vectorized(28):
                                    with T.sblock("group_conv2d_nchw_update"):
                                        v_nn = T.axis.spatial(1, 0)
                                        v_ff = T.axis.spatial(3, nn_ff_yy_0_fused // 2)
                                        v_yy = T.axis.spatial(6, nn_ff_yy_0_fused % 2 * 3 + yy_1)
                                        v_xx = T.axis.spatial(56, xx_0 * 28 + xx_1)
                                        v_rc, v_ry, v_rx = T.axis.remap("RRR", [rc, ry, rx])
                                        T.reads(
                                            group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx],
                                            pad_temp[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx],
                                            w[v_ff, v_rc, v_ry, v_rx],
                                        )
                                        T.writes(group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx])
                                        group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx] = (
                                            group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx]
                                            + pad_temp[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx]
                                            * w[v_ff, v_rc, v_ry, v_rx]
                                        )
                for ax0 in T.unroll(3):
                    for ax1 in T.vectorized(28):
                        with T.sblock("group_conv2d_nchw_local"):
                            v0 = T.axis.spatial(1, 0)
                            v1 = T.axis.spatial(3, nn_ff_yy_0_fused // 2)
                            v2 = T.axis.spatial(6, nn_ff_yy_0_fused % 2 * 3 + ax0)
                            v3 = T.axis.spatial(56, xx_0 * 28 + ax1)
                            T.reads(group_conv2d_nchw_local[v0, v1, v2, v3])
                            T.writes(group_conv2d_nchw[v0, v1, v2, v3])
                            group_conv2d_nchw[v0, v1, v2, v3] = group_conv2d_nchw_local[
                                v0, v1, v2, v3
                            ]

    check(DepthwiseRows(), before, expected)


def test_declines_narrow_rows():
    # rows under 28 wide
    assert declines(DepthwiseRows(), depthwise(14))
