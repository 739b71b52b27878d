"""Expected: the ``pixel-lanes-1x1`` rule's schedule of the kernel of ``test_pixel_lanes_1x1``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
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
