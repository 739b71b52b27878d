"""Expected: the ``grouped-pixels-1x1`` rule's schedule of the kernel of ``test_grouped_pixels_1x1``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
    x: T.Buffer((1, 4, 3, 3), "float32"),
    w: T.Buffer((4, 2, 1, 1), "float32"),
    grouped_conv2d_crop: T.Buffer((1, 4, 3, 3), "float32"),
):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
    # with T.sblock("root"):
    grouped_pixels = T.sblock_alloc_buffer((1, 2, 2, 16))
    grouped_conv2d_pixels = T.sblock_alloc_buffer((1, 2, 2, 16))
    grouped_conv2d_pixels_local = T.sblock_alloc_buffer((1, 2, 2, 16), scope="local")
    for n_g_o_0_0_fused in T.parallel(2):
        for ax0 in range(2):
            for ax1 in T.vectorized(16):
                with T.sblock("grouped_pixels"):
                    v_n = T.axis.spatial(1, 0)
                    v_g, v_c, v_p = T.axis.remap("SSS", [n_g_o_0_0_fused, ax0, ax1])
                    T.reads(x[v_n, v_g * 2 + v_c, v_p // 3, v_p % 3])
                    T.writes(grouped_pixels[v_n, v_g, v_c, v_p])
                    grouped_pixels[v_n, v_g, v_c, v_p] = T.if_then_else(
                        v_p < 9, x[v_n, v_g * 2 + v_c, v_p // 3, v_p % 3], T.float32(0.0)
                    )
        for o_0_1 in range(1):
            for p_0 in range(1):
                for o_1_init in T.unroll(2):
                    for p_1_init in T.unroll(1):
                        for p_2_init in T.vectorized(16):
                            with T.sblock("grouped_conv2d_pixels_init"):
                                v_n = T.axis.spatial(1, 0)
                                v_g = T.axis.spatial(2, n_g_o_0_0_fused)
                                v_o = T.axis.spatial(2, o_0_1 * 2 + o_1_init)
                                v_p = T.axis.spatial(16, p_0 * 16 + p_1_init * 16 + p_2_init)
                                T.reads()
                                T.writes(grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p])
                                grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p] = T.float32(0.0)
                for rc in range(2):
                    for o_1 in T.unroll(2):
                        for p_1 in T.unroll(1):
                            for p_2 in T.vectorized(16):
                                with T.sblock("grouped_conv2d_pixels_update"):
                                    v_n = T.axis.spatial(1, 0)
                                    v_g = T.axis.spatial(2, n_g_o_0_0_fused)
                                    v_o = T.axis.spatial(2, o_0_1 * 2 + o_1)
                                    v_p = T.axis.spatial(16, p_0 * 16 + p_1 * 16 + p_2)
                                    v_rc = T.axis.reduce(2, rc)
                                    T.reads(
                                        grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p],
                                        grouped_pixels[v_n, v_g, v_rc, v_p],
                                        w[v_g * 2 + v_o, v_rc, 0, 0],
                                    )
                                    T.writes(grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p])
                                    grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p] = (
                                        grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p]
                                        + grouped_pixels[v_n, v_g, v_rc, v_p]
                                        * w[v_g * 2 + v_o, v_rc, 0, 0]
                                    )
                for ax0 in range(2):
                    for ax1 in T.vectorized(16):
                        with T.sblock("grouped_conv2d_pixels_local"):
                            v0 = T.axis.spatial(1, 0)
                            v1, v2, v3 = T.axis.remap("SSS", [n_g_o_0_0_fused, ax0, ax1])
                            T.reads(grouped_conv2d_pixels_local[v0, v1, v2, v3])
                            T.writes(grouped_conv2d_pixels[v0, v1, v2, v3])
                            grouped_conv2d_pixels[v0, v1, v2, v3] = grouped_conv2d_pixels_local[
                                v0, v1, v2, v3
                            ]
            for ax0 in range(2):
                for ax1 in T.vectorized(9):
                    with T.sblock("grouped_conv2d_crop"):
                        v0 = T.axis.spatial(1, 0)
                        v1 = T.axis.spatial(4, n_g_o_0_0_fused * 2 + ax0)
                        v2 = T.axis.spatial(9, ax1)
                        T.reads(grouped_conv2d_pixels[v0, v1 // 2, v1 % 2, v2])
                        T.writes(grouped_conv2d_crop[v0, v1, v2 // 3, v2 % 3])
                        grouped_conv2d_crop[v0, v1, v2 // 3, v2 % 3] = grouped_conv2d_pixels[
                            v0, v1 // 2, v1 % 2, v2
                        ]
