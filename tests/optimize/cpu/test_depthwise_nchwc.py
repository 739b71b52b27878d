"""The ``depthwise-nchwc`` rule (``tvm_hetero/optimize/cpu/depthwise_nchwc.py``) on a 3 x 3
depthwise convolution in NCHW16c: its schedule at two shapes, the kernel before and the schedule
expected written out in TVMScript and compared with ``tvm.ir.assert_structural_equal`` (as TVM's
dlight tests check theirs), and a kernel outside its preconditions that it declines.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

from tvm.script import tirx as T

from tvm_hetero.optimize.cpu.depthwise_nchwc import DepthwiseNCHWc
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
