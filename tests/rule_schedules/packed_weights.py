"""Expected: the ``packed-weights`` rule's schedule of the kernel of ``test_packed_weights``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
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
                            conv2d_nchw_local[v_nn, v_ff // 16, v_yy, v_xx, v_ff % 16] = T.float32(
                                0.0
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
                                T.writes(conv2d_nchw_local[v_nn, v_ff // 16, v_yy, v_xx, v_ff % 16])
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
