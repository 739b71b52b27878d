"""The ``packed-weights`` rule (``tvm_hetero/optimize/cpu/packed_weights.py``) on a 3 x 3
convolution: its schedule at two shapes, the kernel before and the schedule expected written out in
TVMScript and compared with ``tvm.ir.assert_structural_equal`` (as TVM's dlight tests check theirs),
and a kernel outside its preconditions that it declines; then a short-window reduction packed only
where ``tiled``'s lanes would be ragged.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

import numpy as np
from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero.optimize.cpu.packed_weights import PackedWeights

from tests.helpers.schedules import check, conv3x3, declines


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_4x4x4_to_32():
    # weight repacked [2, 4, 3, 3, 16]; a task per output row (padding per task) with a
    # 2-vector x 4-column register tile in a local NCHW16c buffer; epilogue per tile
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 4, 4, 4), "float32"),
        w: T.Buffer((32, 4, 3, 3), "float32"),
        conv2d_nchw: T.Buffer((1, 32, 4, 4), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((1, 4, 6, 6))
        for i0, i1, i2, i3 in T.grid(1, 4, 6, 6):
            with T.sblock("pad_temp"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1])
                T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                pad_temp[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(
                    1 <= v_i2 and v_i2 < 5 and 1 <= v_i3 and v_i3 < 5,
                    x[v_i0, v_i1, v_i2 - 1, v_i3 - 1],
                    T.float32(0.0),
                )
        for nn, ff, yy, xx, rc, ry, rx in T.grid(1, 32, 4, 4, 4, 3, 3):
            with T.sblock("conv2d_nchw"):
                v_nn, v_ff, v_yy, v_xx, v_rc, v_ry, v_rx = T.axis.remap(
                    "SSSSRRR", [nn, ff, yy, xx, rc, ry, rx]
                )
                T.reads(pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx], w[v_ff, v_rc, v_ry, v_rx])
                T.writes(conv2d_nchw[v_nn, v_ff, v_yy, v_xx])
                with T.init():
                    conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
                conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = (
                    conv2d_nchw[v_nn, v_ff, v_yy, v_xx]
                    + pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx] * w[v_ff, v_rc, v_ry, v_rx]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 4, 4, 4), "float32"),
        w: T.Buffer((2, 4, 3, 3, 16), "float32"),
        conv2d_nchw: T.Buffer((1, 32, 4, 4), "float32"),
    ):
        T.func_attr(
            {
                "tirx.noalias": True,
                "tvm_hetero.op_kinds": ["conv2d"],
                "tvm_hetero.packed_weights": [1, 16],
            }
        )
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((1, 4, 6, 6))
        conv2d_nchw_local = T.sblock_alloc_buffer((1, 2, 4, 4, 16), scope="local")
        for nn_ff_0_yy_fused in T.parallel(4):
            for ax0, ax1, ax2 in T.grid(4, 3, 6):
                with T.sblock("pad_temp"):
                    v_i0 = T.axis.spatial(1, 0)
                    v_i1 = T.axis.spatial(4, ax0)
                    v_i2 = T.axis.spatial(6, nn_ff_0_yy_fused + ax1)
                    v_i3 = T.axis.spatial(6, ax2)
                    T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1])
                    T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                    pad_temp[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(
                        1 <= v_i2 and v_i2 < 5 and 1 <= v_i3 and v_i3 < 5,
                        x[v_i0, v_i1, v_i2 - 1, v_i3 - 1],
                        T.float32(0.0),
                    )
            for xx_0 in range(1):
                for ff_1_init in T.unroll(2):
                    for xx_1_init in T.unroll(4):
                        for ff_2_init in T.vectorized(16):
                            with T.sblock("conv2d_nchw_init"):
                                v_nn = T.axis.spatial(1, 0)
                                v_ff = T.axis.spatial(32, ff_1_init * 16 + ff_2_init)
                                v_yy = T.axis.spatial(4, nn_ff_0_yy_fused)
                                v_xx = T.axis.spatial(4, xx_0 * 4 + xx_1_init)
                                T.reads()
                                T.writes(conv2d_nchw_local[v_nn, v_ff // 16, v_yy, v_xx, v_ff % 16])
                                conv2d_nchw_local[v_nn, v_ff // 16, v_yy, v_xx, v_ff % 16] = (
                                    T.float32(0.0)
                                )
                for rc, ry, rx in T.grid(4, 3, 3):
                    for ff_1 in T.unroll(2):
                        for xx_1 in T.unroll(4):
                            for ff_2 in T.vectorized(16):
                                with T.sblock("conv2d_nchw_update"):
                                    v_nn = T.axis.spatial(1, 0)
                                    v_ff = T.axis.spatial(32, ff_1 * 16 + ff_2)
                                    v_yy = T.axis.spatial(4, nn_ff_0_yy_fused)
                                    v_xx = T.axis.spatial(4, xx_0 * 4 + xx_1)
                                    v_rc, v_ry, v_rx = T.axis.remap("RRR", [rc, ry, rx])
                                    T.reads(
                                        conv2d_nchw_local[v_nn, v_ff // 16, v_yy, v_xx, v_ff % 16],
                                        pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx],
                                        w[v_ff // 16, v_rc, v_ry, v_rx, v_ff % 16],
                                    )
                                    T.writes(
                                        conv2d_nchw_local[v_nn, v_ff // 16, v_yy, v_xx, v_ff % 16]
                                    )
                                    conv2d_nchw_local[v_nn, v_ff // 16, v_yy, v_xx, v_ff % 16] = (
                                        conv2d_nchw_local[v_nn, v_ff // 16, v_yy, v_xx, v_ff % 16]
                                        + pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx]
                                        * w[v_ff // 16, v_rc, v_ry, v_rx, v_ff % 16]
                                    )
                for ax1 in T.unroll(4):
                    for ax0_0 in range(2):
                        for ax0_1 in T.vectorized(16):
                            with T.sblock("conv2d_nchw_local"):
                                v0 = T.axis.spatial(1, 0)
                                v1 = T.axis.spatial(32, ax0_0 * 16 + ax0_1)
                                v2, v3 = T.axis.remap("SS", [nn_ff_0_yy_fused, ax1])
                                T.reads(conv2d_nchw_local[v0, v1 // 16, v2, v3, v1 % 16])
                                T.writes(conv2d_nchw[v0, v1, v2, v3])
                                conv2d_nchw[v0, v1, v2, v3] = conv2d_nchw_local[
                                    v0, v1 // 16, v2, v3, v1 % 16
                                ]

    check(PackedWeights(), before, expected)


def test_schedule_3x6x6_to_16():
    # weight repacked [1, 3, 3, 3, 16]; a task per output row (6), its 3 padded rows; a
    # 1-vector x 6-column register tile
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 3, 6, 6), "float32"),
        w: T.Buffer((16, 3, 3, 3), "float32"),
        conv2d_nchw: T.Buffer((1, 16, 6, 6), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((1, 3, 8, 8))
        for i0, i1, i2, i3 in T.grid(1, 3, 8, 8):
            with T.sblock("pad_temp"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1])
                T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                pad_temp[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(
                    1 <= v_i2 and v_i2 < 7 and 1 <= v_i3 and v_i3 < 7,
                    x[v_i0, v_i1, v_i2 - 1, v_i3 - 1],
                    T.float32(0.0),
                )
        for nn, ff, yy, xx, rc, ry, rx in T.grid(1, 16, 6, 6, 3, 3, 3):
            with T.sblock("conv2d_nchw"):
                v_nn, v_ff, v_yy, v_xx, v_rc, v_ry, v_rx = T.axis.remap(
                    "SSSSRRR", [nn, ff, yy, xx, rc, ry, rx]
                )
                T.reads(pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx], w[v_ff, v_rc, v_ry, v_rx])
                T.writes(conv2d_nchw[v_nn, v_ff, v_yy, v_xx])
                with T.init():
                    conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
                conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = (
                    conv2d_nchw[v_nn, v_ff, v_yy, v_xx]
                    + pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx] * w[v_ff, v_rc, v_ry, v_rx]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 3, 6, 6), "float32"),
        w: T.Buffer((1, 3, 3, 3, 16), "float32"),
        conv2d_nchw: T.Buffer((1, 16, 6, 6), "float32"),
    ):
        T.func_attr(
            {
                "tirx.noalias": True,
                "tvm_hetero.op_kinds": ["conv2d"],
                "tvm_hetero.packed_weights": [1, 16],
            }
        )
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((1, 3, 8, 8))
        conv2d_nchw_local = T.sblock_alloc_buffer((1, 1, 6, 6, 16), scope="local")
        for nn_ff_0_yy_fused in T.parallel(6):
            for ax0, ax1, ax2 in T.grid(3, 3, 8):
                with T.sblock("pad_temp"):
                    v_i0 = T.axis.spatial(1, 0)
                    v_i1 = T.axis.spatial(3, ax0)
                    v_i2 = T.axis.spatial(8, nn_ff_0_yy_fused + ax1)
                    v_i3 = T.axis.spatial(8, ax2)
                    T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1])
                    T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                    pad_temp[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(
                        1 <= v_i2 and v_i2 < 7 and 1 <= v_i3 and v_i3 < 7,
                        x[v_i0, v_i1, v_i2 - 1, v_i3 - 1],
                        T.float32(0.0),
                    )
            for xx_0 in range(1):
                for ff_1_init in T.unroll(1):
                    for xx_1_init in T.unroll(6):
                        for ff_2_init in T.vectorized(16):
                            with T.sblock("conv2d_nchw_init"):
                                v_nn = T.axis.spatial(1, 0)
                                v_ff = T.axis.spatial(16, ff_1_init * 16 + ff_2_init)
                                v_yy = T.axis.spatial(6, nn_ff_0_yy_fused)
                                v_xx = T.axis.spatial(6, xx_0 * 6 + xx_1_init)
                                T.reads()
                                T.writes(conv2d_nchw_local[v_nn, 0, v_yy, v_xx, v_ff])
                                conv2d_nchw_local[v_nn, 0, v_yy, v_xx, v_ff] = T.float32(0.0)
                for rc, ry, rx in T.grid(3, 3, 3):
                    for ff_1 in T.unroll(1):
                        for xx_1 in T.unroll(6):
                            for ff_2 in T.vectorized(16):
                                with T.sblock("conv2d_nchw_update"):
                                    v_nn = T.axis.spatial(1, 0)
                                    v_ff = T.axis.spatial(16, ff_1 * 16 + ff_2)
                                    v_yy = T.axis.spatial(6, nn_ff_0_yy_fused)
                                    v_xx = T.axis.spatial(6, xx_0 * 6 + xx_1)
                                    v_rc, v_ry, v_rx = T.axis.remap("RRR", [rc, ry, rx])
                                    T.reads(
                                        conv2d_nchw_local[v_nn, 0, v_yy, v_xx, v_ff],
                                        pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx],
                                        w[0, v_rc, v_ry, v_rx, v_ff],
                                    )
                                    T.writes(conv2d_nchw_local[v_nn, 0, v_yy, v_xx, v_ff])
                                    conv2d_nchw_local[v_nn, 0, v_yy, v_xx, v_ff] = (
                                        conv2d_nchw_local[v_nn, 0, v_yy, v_xx, v_ff]
                                        + pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx]
                                        * w[0, v_rc, v_ry, v_rx, v_ff]
                                    )
                for ax1 in T.unroll(6):
                    for ax0_0 in range(1):
                        for ax0_1 in T.vectorized(16):
                            with T.sblock("conv2d_nchw_local"):
                                v0 = T.axis.spatial(1, 0)
                                v1 = T.axis.spatial(16, ax0_0 * 16 + ax0_1)
                                v2, v3 = T.axis.remap("SS", [nn_ff_0_yy_fused, ax1])
                                T.reads(conv2d_nchw_local[v0, 0, v2, v3, v1])
                                T.writes(conv2d_nchw[v0, v1, v2, v3])
                                conv2d_nchw[v0, v1, v2, v3] = conv2d_nchw_local[v0, 0, v2, v3, v1]

    check(PackedWeights(), before, expected)


def test_declines_no_whole_vector():
    # 10 output channels: no whole vector
    assert declines(PackedWeights(), conv3x3(10))


def _rgb_conv(size: int):
    """SqueezeNet's first convolution: 3 -> 64 channels, 3x3, stride 2, on size x size."""
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((64, 3, 3, 3)).astype("float32")
    out = (size - 3) // 2 + 1
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2])], "rgb_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, out, out])],
        [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return th.load_model(model, name=f"rgb_conv{size}")


def test_a_short_window_reduction_is_packed_only_where_tiled_lanes_would_be_ragged(
        cpu_devices, prepare_for_devices):
    # NCHW (the blocked layout off): 3x3 over RGB, 27 multiply-adds per output
    prepare_for_devices(blocked_layout=False)
    rules = th.build(_rgb_conv(224), "all:cpu", cpu_devices).stats.rules
    assert list(rules.values()) == ["packed-weights"]  # 111 columns: tiled would get 3 lanes
    rules = th.build(_rgb_conv(65), "all:cpu", cpu_devices).stats.rules
    assert list(rules.values()) == ["tiled"]  # 32 columns: whole vectors
