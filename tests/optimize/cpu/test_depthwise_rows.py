"""The ``depthwise-rows`` rule (``tvm_hetero/optimize/cpu/depthwise_rows.py``): the suite's
depthwise convolutions it takes, checked against TVM's default loops, and the ones it leaves to
``tiled``; then its schedule at two shapes, the kernel before and the schedule expected written out
in TVMScript and compared with ``tvm.ir.assert_structural_equal``, and a kernel it declines.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

import pytest
import tvm
from tvm.script import tirx as T

from tvm_hetero.optimize.cpu import DepthwiseRows

from tests.helpers.kernels import depthwise_conv, scheduled_and_checked
from tests.helpers.schedules import check, declines, depthwise


@pytest.mark.parametrize("mcpu", ["znver4", "haswell"])
def test_depthwise_rows_schedules_a_stride_1_depthwise_convolution_right(mcpu):
    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    assert scheduled_and_checked(depthwise_conv(24, 56, 3, 1, "clip"), target) == "depthwise-rows"


def test_depthwise_rows_takes_a_5x5_window_with_a_silu_epilogue():
    assert scheduled_and_checked(depthwise_conv(16, 28, 5, 1, "silu")) == "depthwise-rows"


@pytest.mark.parametrize("size, stride", [(28, 2), (14, 1)])
def test_narrow_depthwise_convolutions_stay_with_tiled(size, stride):
    # measured slower under depthwise-rows (MIN_ROW in depthwise_rows.py); stride 2 onto rows
    # of 14: under strided-depthwise-rows' MIN_OUTPUT_ROW
    func = depthwise_conv(16, size, 3, stride, "clip")
    assert DepthwiseRows().apply(func, tvm.target.Target({"kind": "llvm", "mcpu": "znver4"})) \
        is None
    assert scheduled_and_checked(func) == "tiled"


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
