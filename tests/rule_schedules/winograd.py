"""Expected: the ``winograd`` rule's schedule of the kernel of ``test_winograd``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
    x: T.Buffer((1, 1, 8, 8, 16), "float32"),
    w: T.Buffer((6, 6, 16, 16), "float32"),
    winograd_out: T.Buffer((1, 1, 8, 8, 16), "float32"),
):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
    # with T.sblock("root"):
    winograd_pad = T.sblock_alloc_buffer((10, 10, 16))
    winograd_rows = T.sblock_alloc_buffer((2, 2, 6, 6, 16))
    winograd_data = T.sblock_alloc_buffer((2, 2, 6, 6, 16))
    winograd_gemm = T.sblock_alloc_buffer((2, 2, 6, 6, 16))
    winograd_inverse_rows = T.sblock_alloc_buffer((2, 2, 4, 6, 16))
    winograd_inverse = T.sblock_alloc_buffer((2, 2, 4, 4, 16))
    for b_y_0_fused in T.parallel(2):
        for ax0, ax1, ax2_0 in T.grid(6, 10, 1):
            for ax2_1 in T.vectorized(16):
                with T.sblock("winograd_pad"):
                    v_y = T.axis.spatial(10, b_y_0_fused * 4 + ax0)
                    v_x = T.axis.spatial(10, ax1)
                    v_c = T.axis.spatial(16, ax2_0 * 16 + ax2_1)
                    T.reads(x[0, v_c // 16, v_y - 1, v_x - 1, v_c % 16])
                    T.writes(winograd_pad[v_y, v_x, v_c])
                    winograd_pad[v_y, v_x, v_c] = T.if_then_else(
                        1 <= v_y and v_y <= 8 and 1 <= v_x and v_x <= 8,
                        x[0, v_c // 16, v_y - 1, v_x - 1, v_c % 16],
                        T.float32(0.0),
                    )
        for ax0 in range(2):
            for ax1 in T.unroll(6):
                for ax2 in T.unroll(6):
                    for ax3_0 in range(1):
                        for ax3_1 in T.vectorized(16):
                            with T.sblock("winograd_rows"):
                                v_r, v_t, v_e, v_b = T.axis.remap(
                                    "SSSS", [b_y_0_fused, ax0, ax1, ax2]
                                )
                                v_c = T.axis.spatial(16, ax3_0 * 16 + ax3_1)
                                T.reads(winograd_pad[v_r * 4 : v_r * 4 + 6, v_t * 4 + v_b, v_c])
                                T.writes(winograd_rows[v_r, v_t, v_e, v_b, v_c])
                                winograd_rows[v_r, v_t, v_e, v_b, v_c] = T.Select(
                                    v_e == 0,
                                    winograd_pad[v_r * 4, v_t * 4 + v_b, v_c]
                                    + winograd_pad[v_r * 4 + 1, v_t * 4 + v_b, v_c]
                                    * T.float32(-1.5)
                                    + winograd_pad[v_r * 4 + 2, v_t * 4 + v_b, v_c]
                                    * T.float32(-2.0)
                                    + winograd_pad[v_r * 4 + 3, v_t * 4 + v_b, v_c] * T.float32(1.5)
                                    + winograd_pad[v_r * 4 + 4, v_t * 4 + v_b, v_c],
                                    T.Select(
                                        v_e == 1,
                                        winograd_pad[v_r * 4 + 1, v_t * 4 + v_b, v_c]
                                        + winograd_pad[v_r * 4 + 2, v_t * 4 + v_b, v_c]
                                        * T.float32(-2.5)
                                        + winograd_pad[v_r * 4 + 3, v_t * 4 + v_b, v_c]
                                        * T.float32(0.5)
                                        + winograd_pad[v_r * 4 + 4, v_t * 4 + v_b, v_c],
                                        T.Select(
                                            v_e == 2,
                                            winograd_pad[v_r * 4 + 1, v_t * 4 + v_b, v_c]
                                            * T.float32(-1.0)
                                            + winograd_pad[v_r * 4 + 2, v_t * 4 + v_b, v_c]
                                            * T.float32(0.5)
                                            + winograd_pad[v_r * 4 + 3, v_t * 4 + v_b, v_c]
                                            * T.float32(2.5)
                                            + winograd_pad[v_r * 4 + 4, v_t * 4 + v_b, v_c],
                                            T.Select(
                                                v_e == 3,
                                                winograd_pad[v_r * 4 + 1, v_t * 4 + v_b, v_c]
                                                * T.float32(-2.0)
                                                + winograd_pad[v_r * 4 + 2, v_t * 4 + v_b, v_c]
                                                * T.float32(-1.0)
                                                + winograd_pad[v_r * 4 + 3, v_t * 4 + v_b, v_c]
                                                * T.float32(2.0)
                                                + winograd_pad[v_r * 4 + 4, v_t * 4 + v_b, v_c],
                                                T.Select(
                                                    v_e == 4,
                                                    winograd_pad[v_r * 4 + 1, v_t * 4 + v_b, v_c]
                                                    * T.float32(0.5)
                                                    + winograd_pad[v_r * 4 + 2, v_t * 4 + v_b, v_c]
                                                    * T.float32(-1.0)
                                                    + winograd_pad[v_r * 4 + 3, v_t * 4 + v_b, v_c]
                                                    * T.float32(-0.5)
                                                    + winograd_pad[v_r * 4 + 4, v_t * 4 + v_b, v_c],
                                                    winograd_pad[v_r * 4 + 1, v_t * 4 + v_b, v_c]
                                                    + winograd_pad[v_r * 4 + 2, v_t * 4 + v_b, v_c]
                                                    * T.float32(-1.5)
                                                    + winograd_pad[v_r * 4 + 3, v_t * 4 + v_b, v_c]
                                                    * T.float32(-2.0)
                                                    + winograd_pad[v_r * 4 + 4, v_t * 4 + v_b, v_c]
                                                    * T.float32(1.5)
                                                    + winograd_pad[v_r * 4 + 5, v_t * 4 + v_b, v_c],
                                                ),
                                            ),
                                        ),
                                    ),
                                )
        for ax0 in range(2):
            for ax1 in T.unroll(6):
                for ax2 in T.unroll(6):
                    for ax3_0 in range(1):
                        for ax3_1 in T.vectorized(16):
                            with T.sblock("winograd_data"):
                                v_r, v_t, v_e, v_n = T.axis.remap(
                                    "SSSS", [b_y_0_fused, ax0, ax1, ax2]
                                )
                                v_c = T.axis.spatial(16, ax3_0 * 16 + ax3_1)
                                T.reads(winograd_rows[v_r, v_t, v_e, 0:6, v_c])
                                T.writes(winograd_data[v_r, v_t, v_e, v_n, v_c])
                                winograd_data[v_r, v_t, v_e, v_n, v_c] = T.Select(
                                    v_n == 0,
                                    winograd_rows[v_r, v_t, v_e, 0, v_c]
                                    + winograd_rows[v_r, v_t, v_e, 1, v_c] * T.float32(-1.5)
                                    + winograd_rows[v_r, v_t, v_e, 2, v_c] * T.float32(-2.0)
                                    + winograd_rows[v_r, v_t, v_e, 3, v_c] * T.float32(1.5)
                                    + winograd_rows[v_r, v_t, v_e, 4, v_c],
                                    T.Select(
                                        v_n == 1,
                                        winograd_rows[v_r, v_t, v_e, 1, v_c]
                                        + winograd_rows[v_r, v_t, v_e, 2, v_c] * T.float32(-2.5)
                                        + winograd_rows[v_r, v_t, v_e, 3, v_c] * T.float32(0.5)
                                        + winograd_rows[v_r, v_t, v_e, 4, v_c],
                                        T.Select(
                                            v_n == 2,
                                            winograd_rows[v_r, v_t, v_e, 1, v_c] * T.float32(-1.0)
                                            + winograd_rows[v_r, v_t, v_e, 2, v_c] * T.float32(0.5)
                                            + winograd_rows[v_r, v_t, v_e, 3, v_c] * T.float32(2.5)
                                            + winograd_rows[v_r, v_t, v_e, 4, v_c],
                                            T.Select(
                                                v_n == 3,
                                                winograd_rows[v_r, v_t, v_e, 1, v_c]
                                                * T.float32(-2.0)
                                                + winograd_rows[v_r, v_t, v_e, 2, v_c]
                                                * T.float32(-1.0)
                                                + winograd_rows[v_r, v_t, v_e, 3, v_c]
                                                * T.float32(2.0)
                                                + winograd_rows[v_r, v_t, v_e, 4, v_c],
                                                T.Select(
                                                    v_n == 4,
                                                    winograd_rows[v_r, v_t, v_e, 1, v_c]
                                                    * T.float32(0.5)
                                                    + winograd_rows[v_r, v_t, v_e, 2, v_c]
                                                    * T.float32(-1.0)
                                                    + winograd_rows[v_r, v_t, v_e, 3, v_c]
                                                    * T.float32(-0.5)
                                                    + winograd_rows[v_r, v_t, v_e, 4, v_c],
                                                    winograd_rows[v_r, v_t, v_e, 1, v_c]
                                                    + winograd_rows[v_r, v_t, v_e, 2, v_c]
                                                    * T.float32(-1.5)
                                                    + winograd_rows[v_r, v_t, v_e, 3, v_c]
                                                    * T.float32(-2.0)
                                                    + winograd_rows[v_r, v_t, v_e, 4, v_c]
                                                    * T.float32(1.5)
                                                    + winograd_rows[v_r, v_t, v_e, 5, v_c],
                                                ),
                                            ),
                                        ),
                                    ),
                                )
        for ax1, ax2, ax0_0, ax3_0 in T.grid(6, 6, 1, 1):
            for ax0_1_init in T.unroll(2):
                for ax3_1_init in T.unroll(1):
                    for ax3_2_init in T.vectorized(16):
                        with T.sblock("winograd_gemm_init"):
                            v_r = T.axis.spatial(2, b_y_0_fused)
                            v_t = T.axis.spatial(2, ax0_0 * 2 + ax0_1_init)
                            v_e, v_n = T.axis.remap("SS", [ax1, ax2])
                            v_k = T.axis.spatial(16, ax3_0 * 16 + ax3_1_init * 16 + ax3_2_init)
                            T.reads()
                            T.writes(winograd_gemm[v_r, v_t, v_e, v_n, v_k])
                            winograd_gemm[v_r, v_t, v_e, v_n, v_k] = T.float32(0.0)
            for ax4 in range(16):
                for ax0_1 in T.unroll(2):
                    for ax3_1 in T.unroll(1):
                        for ax3_2 in T.vectorized(16):
                            with T.sblock("winograd_gemm_update"):
                                v_r = T.axis.spatial(2, b_y_0_fused)
                                v_t = T.axis.spatial(2, ax0_0 * 2 + ax0_1)
                                v_e, v_n = T.axis.remap("SS", [ax1, ax2])
                                v_k = T.axis.spatial(16, ax3_0 * 16 + ax3_1 * 16 + ax3_2)
                                v_rc = T.axis.reduce(16, ax4)
                                T.reads(
                                    winograd_gemm[v_r, v_t, v_e, v_n, v_k],
                                    winograd_data[v_r, v_t, v_e, v_n, v_rc],
                                    w[v_e, v_n, v_rc, v_k],
                                )
                                T.writes(winograd_gemm[v_r, v_t, v_e, v_n, v_k])
                                winograd_gemm[v_r, v_t, v_e, v_n, v_k] = (
                                    winograd_gemm[v_r, v_t, v_e, v_n, v_k]
                                    + winograd_data[v_r, v_t, v_e, v_n, v_rc]
                                    * w[v_e, v_n, v_rc, v_k]
                                )
        for ax0 in range(2):
            for ax1 in T.unroll(4):
                for ax2 in T.unroll(6):
                    for ax3_0 in range(1):
                        for ax3_1 in T.vectorized(16):
                            with T.sblock("winograd_inverse_rows"):
                                v_r, v_t, v_i, v_n = T.axis.remap(
                                    "SSSS", [b_y_0_fused, ax0, ax1, ax2]
                                )
                                v_k = T.axis.spatial(16, ax3_0 * 16 + ax3_1)
                                T.reads(winograd_gemm[v_r, v_t, 0:6, v_n, v_k])
                                T.writes(winograd_inverse_rows[v_r, v_t, v_i, v_n, v_k])
                                winograd_inverse_rows[v_r, v_t, v_i, v_n, v_k] = T.Select(
                                    v_i == 0,
                                    winograd_gemm[v_r, v_t, 0, v_n, v_k]
                                    + winograd_gemm[v_r, v_t, 1, v_n, v_k]
                                    + winograd_gemm[v_r, v_t, 2, v_n, v_k]
                                    + winograd_gemm[v_r, v_t, 3, v_n, v_k]
                                    + winograd_gemm[v_r, v_t, 4, v_n, v_k],
                                    T.Select(
                                        v_i == 1,
                                        winograd_gemm[v_r, v_t, 1, v_n, v_k] * T.float32(-1.0)
                                        + winograd_gemm[v_r, v_t, 2, v_n, v_k]
                                        + winograd_gemm[v_r, v_t, 3, v_n, v_k] * T.float32(0.5)
                                        + winograd_gemm[v_r, v_t, 4, v_n, v_k] * T.float32(-2.0),
                                        T.Select(
                                            v_i == 2,
                                            winograd_gemm[v_r, v_t, 1, v_n, v_k]
                                            + winograd_gemm[v_r, v_t, 2, v_n, v_k]
                                            + winograd_gemm[v_r, v_t, 3, v_n, v_k] * T.float32(0.25)
                                            + winograd_gemm[v_r, v_t, 4, v_n, v_k] * T.float32(4.0),
                                            winograd_gemm[v_r, v_t, 1, v_n, v_k] * T.float32(-1.0)
                                            + winograd_gemm[v_r, v_t, 2, v_n, v_k]
                                            + winograd_gemm[v_r, v_t, 3, v_n, v_k]
                                            * T.float32(0.125)
                                            + winograd_gemm[v_r, v_t, 4, v_n, v_k] * T.float32(-8.0)
                                            + winograd_gemm[v_r, v_t, 5, v_n, v_k],
                                        ),
                                    ),
                                )
        for ax0 in range(2):
            for ax1 in T.unroll(4):
                for ax2 in T.unroll(4):
                    for ax3_0 in range(1):
                        for ax3_1 in T.vectorized(16):
                            with T.sblock("winograd_inverse"):
                                v_r, v_t, v_i, v_j = T.axis.remap(
                                    "SSSS", [b_y_0_fused, ax0, ax1, ax2]
                                )
                                v_k = T.axis.spatial(16, ax3_0 * 16 + ax3_1)
                                T.reads(winograd_inverse_rows[v_r, v_t, v_i, 0:6, v_k])
                                T.writes(winograd_inverse[v_r, v_t, v_i, v_j, v_k])
                                winograd_inverse[v_r, v_t, v_i, v_j, v_k] = T.Select(
                                    v_j == 0,
                                    winograd_inverse_rows[v_r, v_t, v_i, 0, v_k]
                                    + winograd_inverse_rows[v_r, v_t, v_i, 1, v_k]
                                    + winograd_inverse_rows[v_r, v_t, v_i, 2, v_k]
                                    + winograd_inverse_rows[v_r, v_t, v_i, 3, v_k]
                                    + winograd_inverse_rows[v_r, v_t, v_i, 4, v_k],
                                    T.Select(
                                        v_j == 1,
                                        winograd_inverse_rows[v_r, v_t, v_i, 1, v_k]
                                        * T.float32(-1.0)
                                        + winograd_inverse_rows[v_r, v_t, v_i, 2, v_k]
                                        + winograd_inverse_rows[v_r, v_t, v_i, 3, v_k]
                                        * T.float32(0.5)
                                        + winograd_inverse_rows[v_r, v_t, v_i, 4, v_k]
                                        * T.float32(-2.0),
                                        T.Select(
                                            v_j == 2,
                                            winograd_inverse_rows[v_r, v_t, v_i, 1, v_k]
                                            + winograd_inverse_rows[v_r, v_t, v_i, 2, v_k]
                                            + winograd_inverse_rows[v_r, v_t, v_i, 3, v_k]
                                            * T.float32(0.25)
                                            + winograd_inverse_rows[v_r, v_t, v_i, 4, v_k]
                                            * T.float32(4.0),
                                            winograd_inverse_rows[v_r, v_t, v_i, 1, v_k]
                                            * T.float32(-1.0)
                                            + winograd_inverse_rows[v_r, v_t, v_i, 2, v_k]
                                            + winograd_inverse_rows[v_r, v_t, v_i, 3, v_k]
                                            * T.float32(0.125)
                                            + winograd_inverse_rows[v_r, v_t, v_i, 4, v_k]
                                            * T.float32(-8.0)
                                            + winograd_inverse_rows[v_r, v_t, v_i, 5, v_k],
                                        ),
                                    ),
                                )
        for f, y_1, x_0, x_1 in T.grid(1, 4, 2, 4):
            for lane in T.vectorized(16):
                with T.sblock("winograd_out"):
                    v_b = T.axis.spatial(1, 0)
                    v_f = T.axis.spatial(1, f)
                    v_y = T.axis.spatial(8, b_y_0_fused * 4 + y_1)
                    v_x = T.axis.spatial(8, x_0 * 4 + x_1)
                    v_lane = T.axis.spatial(16, lane)
                    T.reads(
                        winograd_inverse[v_y // 4, v_x // 4, v_y % 4, v_x % 4, v_f * 16 + v_lane]
                    )
                    T.writes(winograd_out[v_b, v_f, v_y, v_x, v_lane])
                    winograd_out[v_b, v_f, v_y, v_x, v_lane] = winograd_inverse[
                        v_y // 4, v_x // 4, v_y % 4, v_x % 4, v_f * 16 + v_lane
                    ]
