"""The ``depthwise-nchwc`` rule (``tvm_hetero/optimize/cpu/depthwise_nchwc.py``) on a 3 x 3
depthwise convolution in NCHW16c: its schedule at two shapes, the kernel before and the schedule
expected written out in TVMScript and compared with ``tvm.ir.assert_structural_equal`` (as TVM's
dlight tests check theirs), and a kernel outside its preconditions that it declines; then blocked
depthwise convolutions it schedules checked against TVM's default loops, its tile, its padding per
task.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

import pytest
import tvm
from tvm.script import tirx as T

from tvm_hetero.ops.conv2d_nchwc import depthwise_conv2d_nchwc
from tvm_hetero.optimize.cpu.depthwise_nchwc import DepthwiseNCHWc
from tvm_hetero.relax_ir import OP_KINDS_ATTR

from tests.helpers.kernels import depthwise_conv, scheduled_and_checked
from tests.helpers.schedules import blocked_depthwise, check, declines


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_16x4x4():
    # NCHW16c depthwise: a task per output row (padding per task, vectorized); tile of
    # 1 row x 4 columns (unrolled) of 16 lanes, the 3 x 3 window unrolled
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 1, 4, 4, 16), "float32"),
        w: T.Buffer((1, 1, 3, 3, 1, 16), "float32"),
        depthwise_conv2d_NCHWc: T.Buffer((1, 1, 4, 4, 16), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad = T.sblock_alloc_buffer((1, 1, 6, 6, 16))
        for i0, i1, i2, i3, i4 in T.grid(1, 1, 6, 6, 16):
            with T.sblock("pad"):
                v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4])
                T.writes(pad[v_i0, v_i1, v_i2, v_i3, v_i4])
                pad[v_i0, v_i1, v_i2, v_i3, v_i4] = T.if_then_else(
                    1 <= v_i2 and v_i2 < 5 and 1 <= v_i3 and v_i3 < 5,
                    x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4],
                    T.float32(0.0),
                )
        for n, f, y, x_1, lane, ry, rx in T.grid(1, 1, 4, 4, 16, 3, 3):
            with T.sblock("depthwise_conv2d_NCHWc"):
                v_n, v_f, v_y, v_x, v_lane, v_ry, v_rx = T.axis.remap(
                    "SSSSSRR", [n, f, y, x_1, lane, ry, rx]
                )
                T.reads(
                    pad[v_n, v_f, v_y + v_ry, v_x + v_rx, v_lane], w[v_f, 0, v_ry, v_rx, 0, v_lane]
                )
                T.writes(depthwise_conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane])
                with T.init():
                    depthwise_conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane] = T.float32(0.0)
                depthwise_conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane] = (
                    depthwise_conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane]
                    + pad[v_n, v_f, v_y + v_ry, v_x + v_rx, v_lane]
                    * w[v_f, 0, v_ry, v_rx, 0, v_lane]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 1, 4, 4, 16), "float32"),
        w: T.Buffer((1, 1, 3, 3, 1, 16), "float32"),
        depthwise_conv2d_NCHWc: T.Buffer((1, 1, 4, 4, 16), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad = T.sblock_alloc_buffer((1, 1, 6, 6, 16))
        depthwise_conv2d_NCHWc_local = T.sblock_alloc_buffer((1, 1, 4, 4, 16), scope="local")
        for n_f_y_0_fused in T.parallel(4):
            for ax0, ax1 in T.grid(3, 6):
                for ax2 in T.vectorized(16):
                    with T.sblock("pad"):
                        v_i0 = T.axis.spatial(1, 0)
                        v_i1 = T.axis.spatial(1, 0)
                        v_i2 = T.axis.spatial(6, n_f_y_0_fused + ax0)
                        v_i3, v_i4 = T.axis.remap("SS", [ax1, ax2])
                        T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4])
                        T.writes(pad[v_i0, v_i1, v_i2, v_i3, v_i4])
                        pad[v_i0, v_i1, v_i2, v_i3, v_i4] = T.if_then_else(
                            1 <= v_i2 and v_i2 < 5 and 1 <= v_i3 and v_i3 < 5,
                            x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4],
                            T.float32(0.0),
                        )
            for x_1_0 in range(1):
                for y_1_init in T.unroll(1):
                    for x_1_1_init in T.unroll(4):
                        for lane_init in T.vectorized(16):
                            with T.sblock("depthwise_conv2d_NCHWc_init"):
                                v_n = T.axis.spatial(1, 0)
                                v_f = T.axis.spatial(1, 0)
                                v_y = T.axis.spatial(4, n_f_y_0_fused + y_1_init)
                                v_x = T.axis.spatial(4, x_1_0 * 4 + x_1_1_init)
                                v_lane = T.axis.spatial(16, lane_init)
                                T.reads()
                                T.writes(depthwise_conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane])
                                depthwise_conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane] = (
                                    T.float32(0.0)
                                )
                for ry in T.unroll(3):
                    for rx in T.unroll(3):
                        for y_1 in T.unroll(1):
                            for x_1_1 in T.unroll(4):
                                for lane in T.vectorized(16):
                                    with T.sblock("depthwise_conv2d_NCHWc_update"):
                                        v_n = T.axis.spatial(1, 0)
                                        v_f = T.axis.spatial(1, 0)
                                        v_y = T.axis.spatial(4, n_f_y_0_fused + y_1)
                                        v_x = T.axis.spatial(4, x_1_0 * 4 + x_1_1)
                                        v_lane, v_ry, v_rx = T.axis.remap("SRR", [lane, ry, rx])
                                        T.reads(
                                            depthwise_conv2d_NCHWc_local[
                                                v_n, v_f, v_y, v_x, v_lane
                                            ],
                                            pad[v_n, v_f, v_y + v_ry, v_x + v_rx, v_lane],
                                            w[v_f, 0, v_ry, v_rx, 0, v_lane],
                                        )
                                        T.writes(
                                            depthwise_conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane]
                                        )
                                        depthwise_conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane] = (
                                            depthwise_conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane]
                                            + pad[v_n, v_f, v_y + v_ry, v_x + v_rx, v_lane]
                                            * w[v_f, 0, v_ry, v_rx, 0, v_lane]
                                        )
                for ax0 in T.unroll(4):
                    for ax1 in T.vectorized(16):
                        with T.sblock("depthwise_conv2d_NCHWc_local"):
                            v0 = T.axis.spatial(1, 0)
                            v1 = T.axis.spatial(1, 0)
                            v2, v3, v4 = T.axis.remap("SSS", [n_f_y_0_fused, ax0, ax1])
                            T.reads(depthwise_conv2d_NCHWc_local[v0, v1, v2, v3, v4])
                            T.writes(depthwise_conv2d_NCHWc[v0, v1, v2, v3, v4])
                            depthwise_conv2d_NCHWc[v0, v1, v2, v3, v4] = (
                                depthwise_conv2d_NCHWc_local[v0, v1, v2, v3, v4]
                            )

    check(DepthwiseNCHWc(), before, expected)


def test_schedule_32x6x6():
    # 2 channel blocks x 6 rows: 12 parallel tasks; tile of 1 row x 6 columns of 16 lanes,
    # the window unrolled
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 2, 6, 6, 16), "float32"),
        w: T.Buffer((2, 1, 3, 3, 1, 16), "float32"),
        depthwise_conv2d_NCHWc: T.Buffer((1, 2, 6, 6, 16), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad = T.sblock_alloc_buffer((1, 2, 8, 8, 16))
        for i0, i1, i2, i3, i4 in T.grid(1, 2, 8, 8, 16):
            with T.sblock("pad"):
                v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4])
                T.writes(pad[v_i0, v_i1, v_i2, v_i3, v_i4])
                pad[v_i0, v_i1, v_i2, v_i3, v_i4] = T.if_then_else(
                    1 <= v_i2 and v_i2 < 7 and 1 <= v_i3 and v_i3 < 7,
                    x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4],
                    T.float32(0.0),
                )
        for n, f, y, x_1, lane, ry, rx in T.grid(1, 2, 6, 6, 16, 3, 3):
            with T.sblock("depthwise_conv2d_NCHWc"):
                v_n, v_f, v_y, v_x, v_lane, v_ry, v_rx = T.axis.remap(
                    "SSSSSRR", [n, f, y, x_1, lane, ry, rx]
                )
                T.reads(
                    pad[v_n, v_f, v_y + v_ry, v_x + v_rx, v_lane], w[v_f, 0, v_ry, v_rx, 0, v_lane]
                )
                T.writes(depthwise_conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane])
                with T.init():
                    depthwise_conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane] = T.float32(0.0)
                depthwise_conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane] = (
                    depthwise_conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane]
                    + pad[v_n, v_f, v_y + v_ry, v_x + v_rx, v_lane]
                    * w[v_f, 0, v_ry, v_rx, 0, v_lane]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 2, 6, 6, 16), "float32"),
        w: T.Buffer((2, 1, 3, 3, 1, 16), "float32"),
        depthwise_conv2d_NCHWc: T.Buffer((1, 2, 6, 6, 16), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad = T.sblock_alloc_buffer((1, 2, 8, 8, 16))
        depthwise_conv2d_NCHWc_local = T.sblock_alloc_buffer((1, 2, 6, 6, 16), scope="local")
        for n_f_y_0_fused in T.parallel(12):
            for ax0, ax1 in T.grid(3, 8):
                for ax2 in T.vectorized(16):
                    with T.sblock("pad"):
                        v_i0 = T.axis.spatial(1, 0)
                        v_i1 = T.axis.spatial(2, n_f_y_0_fused // 6)
                        v_i2 = T.axis.spatial(8, n_f_y_0_fused % 6 + ax0)
                        v_i3, v_i4 = T.axis.remap("SS", [ax1, ax2])
                        T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4])
                        T.writes(pad[v_i0, v_i1, v_i2, v_i3, v_i4])
                        pad[v_i0, v_i1, v_i2, v_i3, v_i4] = T.if_then_else(
                            1 <= v_i2 and v_i2 < 7 and 1 <= v_i3 and v_i3 < 7,
                            x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4],
                            T.float32(0.0),
                        )
            for x_1_0 in range(1):
                for y_1_init in T.unroll(1):
                    for x_1_1_init in T.unroll(6):
                        for lane_init in T.vectorized(16):
                            with T.sblock("depthwise_conv2d_NCHWc_init"):
                                v_n = T.axis.spatial(1, 0)
                                v_f = T.axis.spatial(2, n_f_y_0_fused // 6)
                                v_y = T.axis.spatial(6, n_f_y_0_fused % 6 + y_1_init)
                                v_x = T.axis.spatial(6, x_1_0 * 6 + x_1_1_init)
                                v_lane = T.axis.spatial(16, lane_init)
                                T.reads()
                                T.writes(depthwise_conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane])
                                depthwise_conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane] = (
                                    T.float32(0.0)
                                )
                for ry in T.unroll(3):
                    for rx in T.unroll(3):
                        for y_1 in T.unroll(1):
                            for x_1_1 in T.unroll(6):
                                for lane in T.vectorized(16):
                                    with T.sblock("depthwise_conv2d_NCHWc_update"):
                                        v_n = T.axis.spatial(1, 0)
                                        v_f = T.axis.spatial(2, n_f_y_0_fused // 6)
                                        v_y = T.axis.spatial(6, n_f_y_0_fused % 6 + y_1)
                                        v_x = T.axis.spatial(6, x_1_0 * 6 + x_1_1)
                                        v_lane, v_ry, v_rx = T.axis.remap("SRR", [lane, ry, rx])
                                        T.reads(
                                            depthwise_conv2d_NCHWc_local[
                                                v_n, v_f, v_y, v_x, v_lane
                                            ],
                                            pad[v_n, v_f, v_y + v_ry, v_x + v_rx, v_lane],
                                            w[v_f, 0, v_ry, v_rx, 0, v_lane],
                                        )
                                        T.writes(
                                            depthwise_conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane]
                                        )
                                        depthwise_conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane] = (
                                            depthwise_conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane]
                                            + pad[v_n, v_f, v_y + v_ry, v_x + v_rx, v_lane]
                                            * w[v_f, 0, v_ry, v_rx, 0, v_lane]
                                        )
                for ax0 in T.unroll(6):
                    for ax1 in T.vectorized(16):
                        with T.sblock("depthwise_conv2d_NCHWc_local"):
                            v0 = T.axis.spatial(1, 0)
                            v1 = T.axis.spatial(2, n_f_y_0_fused // 6)
                            v2 = T.axis.spatial(6, n_f_y_0_fused % 6)
                            v3, v4 = T.axis.remap("SS", [ax0, ax1])
                            T.reads(depthwise_conv2d_NCHWc_local[v0, v1, v2, v3, v4])
                            T.writes(depthwise_conv2d_NCHWc[v0, v1, v2, v3, v4])
                            depthwise_conv2d_NCHWc[v0, v1, v2, v3, v4] = (
                                depthwise_conv2d_NCHWc_local[v0, v1, v2, v3, v4]
                            )

    check(DepthwiseNCHWc(), before, expected)


def test_declines_blocks_of_half_a_vector():
    # blocks of 8: half a vector
    assert declines(DepthwiseNCHWc(), blocked_depthwise(lanes=8))


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
    assert DepthwiseNCHWc().apply(depthwise_conv(32, 56, 3, 1, "clip"), target) is None
