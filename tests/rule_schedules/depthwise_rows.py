"""Expected: the ``depthwise-rows`` rule's schedule of the kernel of ``test_depthwise_rows``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
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
                        group_conv2d_nchw[v0, v1, v2, v3] = group_conv2d_nchw_local[v0, v1, v2, v3]
