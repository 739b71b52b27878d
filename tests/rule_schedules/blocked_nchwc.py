"""Expected: the ``blocked-nchwc`` rule's schedule of the kernel of ``test_blocked_nchwc``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
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
        for x_0 in range(1):
            for f_1_init in T.unroll(2):
                for x_1_init in T.unroll(4):
                    for lane_init in T.vectorized(16):
                        with T.sblock("conv2d_NCHWc_init"):
                            v_n = T.axis.spatial(1, 0)
                            v_f, v_y = T.axis.remap("SS", [f_1_init, n_f_0_y_fused])
                            v_x = T.axis.spatial(4, x_0 * 4 + x_1_init)
                            v_lane = T.axis.spatial(16, lane_init)
                            T.reads()
                            T.writes(conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane])
                            conv2d_NCHWc_local[v_n, v_f, v_y, v_x, v_lane] = T.float32(0.0)
            for rc, ry, rx, rl in T.grid(1, 3, 3, 16):
                for f_1 in T.unroll(2):
                    for x_1 in T.unroll(4):
                        for lane in T.vectorized(16):
                            with T.sblock("conv2d_NCHWc_update"):
                                v_n = T.axis.spatial(1, 0)
                                v_f, v_y = T.axis.remap("SS", [f_1, n_f_0_y_fused])
                                v_x = T.axis.spatial(4, x_0 * 4 + x_1)
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
                            v1, v2, v3, v4 = T.axis.remap("SSSS", [ax0, n_f_0_y_fused, ax1, ax2])
                            T.reads(conv2d_NCHWc_local[v0, v1, v2, v3, v4])
                            T.writes(conv2d_NCHWc[v0, v1, v2, v3, v4])
                            conv2d_NCHWc[v0, v1, v2, v3, v4] = conv2d_NCHWc_local[
                                v0, v1, v2, v3, v4
                            ]
