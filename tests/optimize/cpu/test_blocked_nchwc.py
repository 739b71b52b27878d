"""The ``blocked-nchwc`` rule (``tvm_hetero/optimize/cpu/blocked_nchwc.py``) on a 3 x 3 convolution
in NCHW16c: its schedule at two shapes, the kernel before and the schedule expected written out in
TVMScript and compared with ``tvm.ir.assert_structural_equal`` (as TVM's dlight tests check theirs),
and a kernel outside its preconditions that it declines; then the NCHW convolutions it declines.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero.optimize.cpu.blocked_nchwc import BlockedNCHWc

from tests.helpers.models import conv1x1_residual_onnx
from tests.helpers.schedules import blocked_conv, check, declines


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_16x4x4_to_32():
    # NCHW16c: a task per output row (padding per task), tile of 2 channel blocks x 4 columns
    # (unrolled), each a 16-lane vector, over the whole reduction; epilogue per tile
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 1, 4, 4, 16), "float32"),
        w: T.Buffer((2, 1, 3, 3, 16, 16), "float32"),
        conv2d_NCHWc: T.Buffer((1, 2, 4, 4, 16), "float32"),
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
        for n, f, y, x_1, lane, rc, ry, rx, rl in T.grid(1, 2, 4, 4, 16, 1, 3, 3, 16):
            with T.sblock("conv2d_NCHWc"):
                v_n, v_f, v_y, v_x, v_lane, v_rc, v_ry, v_rx, v_rl = T.axis.remap(
                    "SSSSSRRRR", [n, f, y, x_1, lane, rc, ry, rx, rl]
                )
                T.reads(
                    pad[v_n, v_rc, v_y + v_ry, v_x + v_rx, v_rl],
                    w[v_f, v_rc, v_ry, v_rx, v_rl, v_lane],
                )
                T.writes(conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane])
                with T.init():
                    conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane] = T.float32(0.0)
                conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane] = (
                    conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane]
                    + pad[v_n, v_rc, v_y + v_ry, v_x + v_rx, v_rl]
                    * w[v_f, v_rc, v_ry, v_rx, v_rl, v_lane]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 1, 4, 4, 16), "float32"),
        w: T.Buffer((2, 1, 3, 3, 16, 16), "float32"),
        conv2d_NCHWc: T.Buffer((1, 2, 4, 4, 16), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad = T.sblock_alloc_buffer((1, 1, 6, 6, 16))
        conv2d_NCHWc_local = T.sblock_alloc_buffer((1, 2, 4, 4, 16), scope="local")
        for n_f_0_y_fused in T.parallel(4):
            for ax0, ax1, ax2 in T.grid(3, 6, 16):
                with T.sblock("pad"):
                    v_i0 = T.axis.spatial(1, 0)
                    v_i1 = T.axis.spatial(1, 0)
                    v_i2 = T.axis.spatial(6, n_f_0_y_fused + ax0)
                    v_i3, v_i4 = T.axis.remap("SS", [ax1, ax2])
                    T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4])
                    T.writes(pad[v_i0, v_i1, v_i2, v_i3, v_i4])
                    pad[v_i0, v_i1, v_i2, v_i3, v_i4] = T.if_then_else(
                        1 <= v_i2 and v_i2 < 5 and 1 <= v_i3 and v_i3 < 5,
                        x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4],
                        T.float32(0.0),
                    )
            for x_1_0 in range(1):
                for f_1_init in T.unroll(2):
                    for x_1_1_init in T.unroll(4):
                        for lane_init in T.vectorized(16):
                            with T.sblock("conv2d_NCHWc_init"):
                                v_n = T.axis.spatial(1, 0)
                                v_f, v_y = T.axis.remap("SS", [f_1_init, n_f_0_y_fused])
                                v_x = T.axis.spatial(4, x_1_0 * 4 + x_1_1_init)
                                v_lane = T.axis.spatial(16, lane_init)
                                T.reads()
                                T.writes(conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane])
                                conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane] = T.float32(0.0)
                for rc, ry, rx, rl in T.grid(1, 3, 3, 16):
                    for f_1 in T.unroll(2):
                        for x_1_1 in T.unroll(4):
                            for lane in T.vectorized(16):
                                with T.sblock("conv2d_NCHWc_update"):
                                    v_n = T.axis.spatial(1, 0)
                                    v_f, v_y = T.axis.remap("SS", [f_1, n_f_0_y_fused])
                                    v_x = T.axis.spatial(4, x_1_0 * 4 + x_1_1)
                                    v_lane, v_rc, v_ry, v_rx, v_rl = T.axis.remap(
                                        "SRRRR", [lane, rc, ry, rx, rl]
                                    )
                                    T.reads(
                                        conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane],
                                        pad[v_n, v_rc, v_y + v_ry, v_x + v_rx, v_rl],
                                        w[v_f, v_rc, v_ry, v_rx, v_rl, v_lane],
                                    )
                                    T.writes(conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane])
                                    conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane] = (
                                        conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane]
                                        + pad[v_n, v_rc, v_y + v_ry, v_x + v_rx, v_rl]
                                        * w[v_f, v_rc, v_ry, v_rx, v_rl, v_lane]
                                    )
                for ax0 in T.unroll(2):
                    for ax1 in T.unroll(4):
                        for ax2 in T.vectorized(16):
                            with T.sblock("conv2d_NCHWc_local"):
                                v0 = T.axis.spatial(1, 0)
                                v1, v2, v3, v4 = T.axis.remap(
                                    "SSSS", [ax0, n_f_0_y_fused, ax1, ax2]
                                )
                                T.reads(conv2d_NCHWc_local[v0, v1, v2, v3, v4])
                                T.writes(conv2d_NCHWc[v0, v1, v2, v3, v4])
                                conv2d_NCHWc[v0, v1, v2, v3, v4] = conv2d_NCHWc_local[
                                    v0, v1, v2, v3, v4
                                ]

    check(BlockedNCHWc(), before, expected)


def test_schedule_16x6x6_to_16():
    # one output block: a task per output row (6), tile of 1 block x 6 columns of 16
    # lanes over the whole reduction
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 1, 6, 6, 16), "float32"),
        w: T.Buffer((1, 1, 3, 3, 16, 16), "float32"),
        conv2d_NCHWc: T.Buffer((1, 1, 6, 6, 16), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad = T.sblock_alloc_buffer((1, 1, 8, 8, 16))
        for i0, i1, i2, i3, i4 in T.grid(1, 1, 8, 8, 16):
            with T.sblock("pad"):
                v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
                T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4])
                T.writes(pad[v_i0, v_i1, v_i2, v_i3, v_i4])
                pad[v_i0, v_i1, v_i2, v_i3, v_i4] = T.if_then_else(
                    1 <= v_i2 and v_i2 < 7 and 1 <= v_i3 and v_i3 < 7,
                    x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4],
                    T.float32(0.0),
                )
        for n, f, y, x_1, lane, rc, ry, rx, rl in T.grid(1, 1, 6, 6, 16, 1, 3, 3, 16):
            with T.sblock("conv2d_NCHWc"):
                v_n, v_f, v_y, v_x, v_lane, v_rc, v_ry, v_rx, v_rl = T.axis.remap(
                    "SSSSSRRRR", [n, f, y, x_1, lane, rc, ry, rx, rl]
                )
                T.reads(
                    pad[v_n, v_rc, v_y + v_ry, v_x + v_rx, v_rl],
                    w[v_f, v_rc, v_ry, v_rx, v_rl, v_lane],
                )
                T.writes(conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane])
                with T.init():
                    conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane] = T.float32(0.0)
                conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane] = (
                    conv2d_NCHWc[v_n, v_f, v_y, v_x, v_lane]
                    + pad[v_n, v_rc, v_y + v_ry, v_x + v_rx, v_rl]
                    * w[v_f, v_rc, v_ry, v_rx, v_rl, v_lane]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 1, 6, 6, 16), "float32"),
        w: T.Buffer((1, 1, 3, 3, 16, 16), "float32"),
        conv2d_NCHWc: T.Buffer((1, 1, 6, 6, 16), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad = T.sblock_alloc_buffer((1, 1, 8, 8, 16))
        conv2d_NCHWc_local = T.sblock_alloc_buffer((1, 1, 6, 6, 16), scope="local")
        for n_f_0_y_fused in T.parallel(6):
            for ax0, ax1, ax2 in T.grid(3, 8, 16):
                with T.sblock("pad"):
                    v_i0 = T.axis.spatial(1, 0)
                    v_i1 = T.axis.spatial(1, 0)
                    v_i2 = T.axis.spatial(8, n_f_0_y_fused + ax0)
                    v_i3, v_i4 = T.axis.remap("SS", [ax1, ax2])
                    T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4])
                    T.writes(pad[v_i0, v_i1, v_i2, v_i3, v_i4])
                    pad[v_i0, v_i1, v_i2, v_i3, v_i4] = T.if_then_else(
                        1 <= v_i2 and v_i2 < 7 and 1 <= v_i3 and v_i3 < 7,
                        x[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4],
                        T.float32(0.0),
                    )
            for x_1_0 in range(1):
                for f_1_init in T.unroll(1):
                    for x_1_1_init in T.unroll(6):
                        for lane_init in T.vectorized(16):
                            with T.sblock("conv2d_NCHWc_init"):
                                v_n = T.axis.spatial(1, 0)
                                v_f, v_y = T.axis.remap("SS", [f_1_init, n_f_0_y_fused])
                                v_x = T.axis.spatial(6, x_1_0 * 6 + x_1_1_init)
                                v_lane = T.axis.spatial(16, lane_init)
                                T.reads()
                                T.writes(conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane])
                                conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane] = T.float32(0.0)
                for rc, ry, rx, rl in T.grid(1, 3, 3, 16):
                    for f_1 in T.unroll(1):
                        for x_1_1 in T.unroll(6):
                            for lane in T.vectorized(16):
                                with T.sblock("conv2d_NCHWc_update"):
                                    v_n = T.axis.spatial(1, 0)
                                    v_f, v_y = T.axis.remap("SS", [f_1, n_f_0_y_fused])
                                    v_x = T.axis.spatial(6, x_1_0 * 6 + x_1_1)
                                    v_lane, v_rc, v_ry, v_rx, v_rl = T.axis.remap(
                                        "SRRRR", [lane, rc, ry, rx, rl]
                                    )
                                    T.reads(
                                        conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane],
                                        pad[v_n, v_rc, v_y + v_ry, v_x + v_rx, v_rl],
                                        w[v_f, v_rc, v_ry, v_rx, v_rl, v_lane],
                                    )
                                    T.writes(conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane])
                                    conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane] = (
                                        conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane]
                                        + pad[v_n, v_rc, v_y + v_ry, v_x + v_rx, v_rl]
                                        * w[v_f, v_rc, v_ry, v_rx, v_rl, v_lane]
                                    )
                for ax0 in T.unroll(6):
                    for ax1 in T.vectorized(16):
                        with T.sblock("conv2d_NCHWc_local"):
                            v0 = T.axis.spatial(1, 0)
                            v1 = T.axis.spatial(1, 0)
                            v2, v3, v4 = T.axis.remap("SSS", [n_f_0_y_fused, ax0, ax1])
                            T.reads(conv2d_NCHWc_local[v0, v1, v2, v3, v4])
                            T.writes(conv2d_NCHWc[v0, v1, v2, v3, v4])
                            conv2d_NCHWc[v0, v1, v2, v3, v4] = conv2d_NCHWc_local[
                                v0, v1, v2, v3, v4
                            ]

    check(BlockedNCHWc(), before, expected)


def test_declines_blocks_of_half_a_vector():
    # blocks of 8: half a vector
    assert declines(BlockedNCHWc(), blocked_conv(lanes=8, out_blocks=2))


def test_the_blocked_rule_declines_nchw_convolutions(cpu_devices):
    import tvm

    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize.cpu import BlockedNCHWc

    model = th.load_model(conv1x1_residual_onnx(1), name="conv1x1_residual")
    (func,) = [f for _, f in layered_module(model).functions_items()
               if isinstance(f, tvm.tirx.PrimFunc)]
    assert BlockedNCHWc().apply(func, cpu_devices["cpu"].tvm_target()) is None
