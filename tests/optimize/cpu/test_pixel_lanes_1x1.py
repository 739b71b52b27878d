"""The ``pixel-lanes-1x1`` rule (``tvm_hetero/optimize/cpu/pixel_lanes_1x1.py``) on a 1 x 1
convolution with a residual add: its schedule at two shapes, the kernel before and the schedule
expected written out in TVMScript and compared with ``tvm.ir.assert_structural_equal`` (as TVM's
dlight tests check theirs), and a kernel outside its preconditions that it declines; then ONNX 1 x 1
convolutions with a residual add built against onnxruntime (stride 1 here, stride 2 to
``packed-weights``).

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

import pytest
from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero.optimize.cpu.pixel_lanes_1x1 import PixelLanes1x1
from tvm_hetero.testing import max_relative_error

from tests.helpers.models import conv1x1_residual_onnx
from tests.helpers.schedules import check, conv1x1_residual, declines


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_4x4x4_to_32():
    # the 16 pixels one axis: 2 parallel tiles of 16 channels (unrolled) x 1 vector of 16
    # pixels in a local buffer, over the 4 input channels; the residual add per tile
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 4, 4, 4), "float32"),
        w: T.Buffer((32, 4, 1, 1), "float32"),
        z: T.Buffer((1, 32, 4, 4), "float32"),
        T_add: T.Buffer((1, 32, 4, 4), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d", "add"]})
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((1, 4, 4, 4))
        conv2d_nchw = T.sblock_alloc_buffer((1, 32, 4, 4))
        for i0, i1, i2, i3 in T.grid(1, 4, 4, 4):
            with T.sblock("pad_temp"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(x[v_i0, v_i1, v_i2, v_i3])
                T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                pad_temp[v_i0, v_i1, v_i2, v_i3] = x[v_i0, v_i1, v_i2, v_i3]
        for nn, ff, yy, xx, rc, ry, rx in T.grid(1, 32, 4, 4, 4, 1, 1):
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
        for ax0, ax1, ax2, ax3 in T.grid(1, 32, 4, 4):
            with T.sblock("T_add"):
                v_ax0, v_ax1, v_ax2, v_ax3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                T.reads(conv2d_nchw[v_ax0, v_ax1, v_ax2, v_ax3], z[v_ax0, v_ax1, v_ax2, v_ax3])
                T.writes(T_add[v_ax0, v_ax1, v_ax2, v_ax3])
                T_add[v_ax0, v_ax1, v_ax2, v_ax3] = (
                    conv2d_nchw[v_ax0, v_ax1, v_ax2, v_ax3] + z[v_ax0, v_ax1, v_ax2, v_ax3]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 4, 4, 4), "float32"),
        w: T.Buffer((32, 4, 1, 1), "float32"),
        z: T.Buffer((1, 32, 4, 4), "float32"),
        T_add: T.Buffer((1, 32, 4, 4), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d", "add"]})
        # with T.sblock("root"):
        conv2d_nchw_local = T.sblock_alloc_buffer((1, 32, 16), scope="local")
        for ax0_ax2_0_ax1_0_fused in T.parallel(2):
            for ax4_init, ax5_init in T.grid(1, 1):
                for ax1_1_init in T.unroll(16):
                    for ax2_1_init in T.unroll(1):
                        for ax2_2_init in T.vectorized(16):
                            with T.sblock("conv2d_nchw_init"):
                                v0 = T.axis.spatial(1, 0)
                                v1 = T.axis.spatial(32, ax0_ax2_0_ax1_0_fused * 16 + ax1_1_init)
                                v2 = T.axis.spatial(16, ax2_1_init * 16 + ax2_2_init)
                                v4, v5 = T.axis.remap("SS", [ax4_init, ax5_init])
                                T.reads()
                                T.writes(conv2d_nchw_local[v0, v1, v2])
                                conv2d_nchw_local[v0, v1, v2] = T.float32(0.0)
            for ax3, ax4, ax5 in T.grid(4, 1, 1):
                for ax1_1 in T.unroll(16):
                    for ax2_1 in T.unroll(1):
                        for ax2_2 in T.vectorized(16):
                            with T.sblock("conv2d_nchw_update"):
                                v0 = T.axis.spatial(1, 0)
                                v1 = T.axis.spatial(32, ax0_ax2_0_ax1_0_fused * 16 + ax1_1)
                                v2 = T.axis.spatial(16, ax2_1 * 16 + ax2_2)
                                v3, v4, v5 = T.axis.remap("RSS", [ax3, ax4, ax5])
                                T.reads(
                                    conv2d_nchw_local[v0, v1, v2],
                                    x[v0, v3, v2 // 4, v2 % 4],
                                    w[v1, v3, v4, v5],
                                )
                                T.writes(conv2d_nchw_local[v0, v1, v2])
                                conv2d_nchw_local[v0, v1, v2] = (
                                    conv2d_nchw_local[v0, v1, v2]
                                    + x[v0, v3, v2 // 4, v2 % 4] * w[v1, v3, v4, v5]
                                )
            for ax0 in T.unroll(16):
                for ax1_0 in T.unroll(1):
                    for ax1_1 in T.vectorized(16):
                        with T.sblock("T_add"):
                            v0 = T.axis.spatial(1, 0)
                            v1 = T.axis.spatial(32, ax0_ax2_0_ax1_0_fused * 16 + ax0)
                            v2 = T.axis.spatial(16, ax1_0 * 16 + ax1_1)
                            T.reads(conv2d_nchw_local[v0, v1, v2], z[v0, v1, v2 // 4, v2 % 4])
                            T.writes(T_add[v0, v1, v2 // 4, v2 % 4])
                            T_add[v0, v1, v2 // 4, v2 % 4] = (
                                conv2d_nchw_local[v0, v1, v2] + z[v0, v1, v2 // 4, v2 % 4]
                            )

    check(PixelLanes1x1(), before, expected)


def test_schedule_8x8x8_to_16():
    # the 64 pixels one axis: 4 parallel tiles of 4 channels x 4 vectors of 16 pixels over
    # the 8 input channels; the residual add per tile
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 8, 8, 8), "float32"),
        w: T.Buffer((16, 8, 1, 1), "float32"),
        z: T.Buffer((1, 16, 8, 8), "float32"),
        T_add: T.Buffer((1, 16, 8, 8), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d", "add"]})
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((1, 8, 8, 8))
        conv2d_nchw = T.sblock_alloc_buffer((1, 16, 8, 8))
        for i0, i1, i2, i3 in T.grid(1, 8, 8, 8):
            with T.sblock("pad_temp"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(x[v_i0, v_i1, v_i2, v_i3])
                T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                pad_temp[v_i0, v_i1, v_i2, v_i3] = x[v_i0, v_i1, v_i2, v_i3]
        for nn, ff, yy, xx, rc, ry, rx in T.grid(1, 16, 8, 8, 8, 1, 1):
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
        for ax0, ax1, ax2, ax3 in T.grid(1, 16, 8, 8):
            with T.sblock("T_add"):
                v_ax0, v_ax1, v_ax2, v_ax3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                T.reads(conv2d_nchw[v_ax0, v_ax1, v_ax2, v_ax3], z[v_ax0, v_ax1, v_ax2, v_ax3])
                T.writes(T_add[v_ax0, v_ax1, v_ax2, v_ax3])
                T_add[v_ax0, v_ax1, v_ax2, v_ax3] = (
                    conv2d_nchw[v_ax0, v_ax1, v_ax2, v_ax3] + z[v_ax0, v_ax1, v_ax2, v_ax3]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 8, 8, 8), "float32"),
        w: T.Buffer((16, 8, 1, 1), "float32"),
        z: T.Buffer((1, 16, 8, 8), "float32"),
        T_add: T.Buffer((1, 16, 8, 8), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d", "add"]})
        # with T.sblock("root"):
        conv2d_nchw_local = T.sblock_alloc_buffer((1, 16, 64), scope="local")
        for ax0_ax2_0_ax1_0_fused in T.parallel(4):
            for ax4_init, ax5_init in T.grid(1, 1):
                for ax1_1_init in T.unroll(4):
                    for ax2_1_init in T.unroll(4):
                        for ax2_2_init in T.vectorized(16):
                            with T.sblock("conv2d_nchw_init"):
                                v0 = T.axis.spatial(1, 0)
                                v1 = T.axis.spatial(16, ax0_ax2_0_ax1_0_fused * 4 + ax1_1_init)
                                v2 = T.axis.spatial(64, ax2_1_init * 16 + ax2_2_init)
                                v4, v5 = T.axis.remap("SS", [ax4_init, ax5_init])
                                T.reads()
                                T.writes(conv2d_nchw_local[v0, v1, v2])
                                conv2d_nchw_local[v0, v1, v2] = T.float32(0.0)
            for ax3, ax4, ax5 in T.grid(8, 1, 1):
                for ax1_1 in T.unroll(4):
                    for ax2_1 in T.unroll(4):
                        for ax2_2 in T.vectorized(16):
                            with T.sblock("conv2d_nchw_update"):
                                v0 = T.axis.spatial(1, 0)
                                v1 = T.axis.spatial(16, ax0_ax2_0_ax1_0_fused * 4 + ax1_1)
                                v2 = T.axis.spatial(64, ax2_1 * 16 + ax2_2)
                                v3, v4, v5 = T.axis.remap("RSS", [ax3, ax4, ax5])
                                T.reads(
                                    conv2d_nchw_local[v0, v1, v2],
                                    x[v0, v3, v2 // 8, v2 % 8],
                                    w[v1, v3, v4, v5],
                                )
                                T.writes(conv2d_nchw_local[v0, v1, v2])
                                conv2d_nchw_local[v0, v1, v2] = (
                                    conv2d_nchw_local[v0, v1, v2]
                                    + x[v0, v3, v2 // 8, v2 % 8] * w[v1, v3, v4, v5]
                                )
            for ax0 in T.unroll(4):
                for ax1_0 in T.unroll(4):
                    for ax1_1 in T.vectorized(16):
                        with T.sblock("T_add"):
                            v0 = T.axis.spatial(1, 0)
                            v1 = T.axis.spatial(16, ax0_ax2_0_ax1_0_fused * 4 + ax0)
                            v2 = T.axis.spatial(64, ax1_0 * 16 + ax1_1)
                            T.reads(conv2d_nchw_local[v0, v1, v2], z[v0, v1, v2 // 8, v2 % 8])
                            T.writes(T_add[v0, v1, v2 // 8, v2 % 8])
                            T_add[v0, v1, v2 // 8, v2 % 8] = (
                                conv2d_nchw_local[v0, v1, v2] + z[v0, v1, v2 // 8, v2 % 8]
                            )

    check(PixelLanes1x1(), before, expected)


def test_declines_a_3x3_window():
    # a 3 x 3 window
    assert declines(PixelLanes1x1(), conv1x1_residual(3))


@pytest.mark.parametrize("stride, rule", [(1, "pixel-lanes-1x1"), (2, "packed-weights")])
def test_a_1x1_convolution_with_a_residual_add_takes_pixel_lanes(stride, rule, cpu_devices):
    import onnxruntime as ort

    onnx_model = conv1x1_residual_onnx(stride)
    model = th.load_model(onnx_model, name="conv1x1_residual")
    compiled = th.build(model, "all:cpu", cpu_devices)
    assert list(compiled.stats.rules.values()) == [rule]  # strided: the pixels are not a row
    inputs = model.random_inputs(seed=2)
    expected = ort.InferenceSession(onnx_model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, inputs)
    assert max_relative_error(compiled.run(inputs), expected) < 1e-5
