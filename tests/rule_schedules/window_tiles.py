"""Expected: the ``window-tiles`` rule's schedule of the kernel of ``test_window_tiles``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
    x: T.Buffer((1, 32, 112, 112), "float32"),
    w: T.Buffer((32, 1, 3, 3), "float32"),
    group_conv2d_nchw: T.Buffer((1, 32, 112, 112), "float32"),
):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
    # with T.sblock("root"):
    pad_temp_shared = T.sblock_alloc_buffer((1, 32, 114, 114), scope="shared")
    group_conv2d_nchw_local = T.sblock_alloc_buffer((1, 32, 112, 112), scope="local")
    for nn_ff_0_yy_0_xx_0_fused in T.thread_binding(512, thread="blockIdx.x"):
        for ax0_ax1_fused_0 in range(5):
            for ax0_ax1_fused_1 in T.thread_binding(196, thread="threadIdx.x"):
                with T.sblock("pad_temp_shared"):
                    v0 = T.axis.spatial(1, 0)
                    v1 = T.axis.spatial(32, nn_ff_0_yy_0_xx_0_fused // 16)
                    v2 = T.axis.spatial(
                        114,
                        nn_ff_0_yy_0_xx_0_fused % 16 // 4 * 28
                        + (ax0_ax1_fused_0 * 196 + ax0_ax1_fused_1) // 30,
                    )
                    v3 = T.axis.spatial(
                        114,
                        nn_ff_0_yy_0_xx_0_fused % 4 * 28
                        + (ax0_ax1_fused_0 * 196 + ax0_ax1_fused_1) % 30,
                    )
                    T.where(ax0_ax1_fused_0 * 196 + ax0_ax1_fused_1 < 900)
                    T.reads(x[v0, v1, v2 - 1, v3 - 1])
                    T.writes(pad_temp_shared[v0, v1, v2, v3])
                    pad_temp_shared[v0, v1, v2, v3] = T.if_then_else(
                        1 <= v2 and v2 < 113 and 1 <= v3 and v3 < 113,
                        x[v0, v1, v2 - 1, v3 - 1],
                        T.float32(0.0),
                    )
        for ff_1_yy_1_xx_1_fused in T.thread_binding(196, thread="threadIdx.x"):
            for yy_2_init in range(4):
                with T.sblock("group_conv2d_nchw_init"):
                    v_nn = T.axis.spatial(1, 0)
                    v_ff = T.axis.spatial(32, nn_ff_0_yy_0_xx_0_fused // 16)
                    v_yy = T.axis.spatial(
                        112,
                        nn_ff_0_yy_0_xx_0_fused % 16 // 4 * 28
                        + ff_1_yy_1_xx_1_fused // 28 * 4
                        + yy_2_init,
                    )
                    v_xx = T.axis.spatial(
                        112, nn_ff_0_yy_0_xx_0_fused % 4 * 28 + ff_1_yy_1_xx_1_fused % 28
                    )
                    T.reads()
                    T.writes(group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx])
                    group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
            for rc in T.unroll(1):
                for ry in T.unroll(3):
                    for rx in T.unroll(3):
                        for yy_2 in T.unroll(4):
                            with T.sblock("group_conv2d_nchw_update"):
                                v_nn = T.axis.spatial(1, 0)
                                v_ff = T.axis.spatial(32, nn_ff_0_yy_0_xx_0_fused // 16)
                                v_yy = T.axis.spatial(
                                    112,
                                    nn_ff_0_yy_0_xx_0_fused % 16 // 4 * 28
                                    + ff_1_yy_1_xx_1_fused // 28 * 4
                                    + yy_2,
                                )
                                v_xx = T.axis.spatial(
                                    112,
                                    nn_ff_0_yy_0_xx_0_fused % 4 * 28 + ff_1_yy_1_xx_1_fused % 28,
                                )
                                v_rc, v_ry, v_rx = T.axis.remap("RRR", [rc, ry, rx])
                                T.reads(
                                    group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx],
                                    pad_temp_shared[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx],
                                    w[v_ff, v_rc, v_ry, v_rx],
                                )
                                T.writes(group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx])
                                group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx] = (
                                    group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx]
                                    + pad_temp_shared[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx]
                                    * w[v_ff, v_rc, v_ry, v_rx]
                                )
            for ax0 in range(4):
                with T.sblock("group_conv2d_nchw_local"):
                    v0 = T.axis.spatial(1, 0)
                    v1 = T.axis.spatial(32, nn_ff_0_yy_0_xx_0_fused // 16)
                    v2 = T.axis.spatial(
                        112,
                        nn_ff_0_yy_0_xx_0_fused % 16 // 4 * 28
                        + ff_1_yy_1_xx_1_fused // 28 * 4
                        + ax0,
                    )
                    v3 = T.axis.spatial(
                        112, nn_ff_0_yy_0_xx_0_fused % 4 * 28 + ff_1_yy_1_xx_1_fused % 28
                    )
                    T.reads(group_conv2d_nchw_local[v0, v1, v2, v3])
                    T.writes(group_conv2d_nchw[v0, v1, v2, v3])
                    group_conv2d_nchw[v0, v1, v2, v3] = group_conv2d_nchw_local[v0, v1, v2, v3]
