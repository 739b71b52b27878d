"""The ``winograd`` rule (``tvm_hetero/optimize/cpu/winograd.py``) on preparation's Winograd
F(4x4, 3x3) form of a 3 x 3 convolution in NCHW16c: its schedule of an 8 x 8 map written out (the
kernel before and the schedule expected in TVMScript, compared with
``tvm.ir.assert_structural_equal``), its schedule of a 12 x 12 map checked by its key properties
(the schedule is 300 lines at any size: one written out is enough), and the kernels it declines;
then the zoo's ResNet's Winograd kernels each one parallel loop with its epilogue inlined.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

import re

from tvm.script import tirx as T

from tvm_hetero import optimize
from tvm_hetero.optimize.cpu.winograd import Winograd

from tests.helpers.models import zoo
from tests.helpers.schedules import blocked_conv, check, declines, loops, schedule, winograd_conv


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_8x8():
    # a task per row of 4 x 4 tiles: its padded rows, the input transform (unrolled 6 x 6,
    # vectorized), the products in tiles of 2 tile columns x 1 channel vector, the inverse
    # transform and the output rows, all inside the task
    @T.prim_func(s_tir=True, private=True)
    def before(
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
        for y, x_1, c in T.grid(10, 10, 16):
            with T.sblock("winograd_pad"):
                v_y, v_x, v_c = T.axis.remap("SSS", [y, x_1, c])
                T.reads(x[0, v_c // 16, v_y - 1, v_x - 1, v_c % 16])
                T.writes(winograd_pad[v_y, v_x, v_c])
                winograd_pad[v_y, v_x, v_c] = T.if_then_else(
                    1 <= v_y and v_y <= 8 and 1 <= v_x and v_x <= 8,
                    x[0, v_c // 16, v_y - 1, v_x - 1, v_c % 16],
                    T.float32(0.0),
                )
        for r, t, e, b, c in T.grid(2, 2, 6, 6, 16):
            with T.sblock("winograd_rows"):
                v_r, v_t, v_e, v_b, v_c = T.axis.remap("SSSSS", [r, t, e, b, c])
                T.reads(winograd_pad[v_r * 4 : v_r * 4 + 6, v_t * 4 + v_b, v_c])
                T.writes(winograd_rows[v_r, v_t, v_e, v_b, v_c])
                winograd_rows[v_r, v_t, v_e, v_b, v_c] = T.Select(
                    v_e == 0,
                    winograd_pad[v_r * 4, v_t * 4 + v_b, v_c]
                    + winograd_pad[v_r * 4 + 1, v_t * 4 + v_b, v_c] * T.float32(-1.5)
                    + winograd_pad[v_r * 4 + 2, v_t * 4 + v_b, v_c] * T.float32(-2.0)
                    + winograd_pad[v_r * 4 + 3, v_t * 4 + v_b, v_c] * T.float32(1.5)
                    + winograd_pad[v_r * 4 + 4, v_t * 4 + v_b, v_c],
                    T.Select(
                        v_e == 1,
                        winograd_pad[v_r * 4 + 1, v_t * 4 + v_b, v_c]
                        + winograd_pad[v_r * 4 + 2, v_t * 4 + v_b, v_c] * T.float32(-2.5)
                        + winograd_pad[v_r * 4 + 3, v_t * 4 + v_b, v_c] * T.float32(0.5)
                        + winograd_pad[v_r * 4 + 4, v_t * 4 + v_b, v_c],
                        T.Select(
                            v_e == 2,
                            winograd_pad[v_r * 4 + 1, v_t * 4 + v_b, v_c] * T.float32(-1.0)
                            + winograd_pad[v_r * 4 + 2, v_t * 4 + v_b, v_c] * T.float32(0.5)
                            + winograd_pad[v_r * 4 + 3, v_t * 4 + v_b, v_c] * T.float32(2.5)
                            + winograd_pad[v_r * 4 + 4, v_t * 4 + v_b, v_c],
                            T.Select(
                                v_e == 3,
                                winograd_pad[v_r * 4 + 1, v_t * 4 + v_b, v_c] * T.float32(-2.0)
                                + winograd_pad[v_r * 4 + 2, v_t * 4 + v_b, v_c] * T.float32(-1.0)
                                + winograd_pad[v_r * 4 + 3, v_t * 4 + v_b, v_c] * T.float32(2.0)
                                + winograd_pad[v_r * 4 + 4, v_t * 4 + v_b, v_c],
                                T.Select(
                                    v_e == 4,
                                    winograd_pad[v_r * 4 + 1, v_t * 4 + v_b, v_c] * T.float32(0.5)
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
                                    + winograd_pad[v_r * 4 + 4, v_t * 4 + v_b, v_c] * T.float32(1.5)
                                    + winograd_pad[v_r * 4 + 5, v_t * 4 + v_b, v_c],
                                ),
                            ),
                        ),
                    ),
                )
        for r, t, e, n, c in T.grid(2, 2, 6, 6, 16):
            with T.sblock("winograd_data"):
                v_r, v_t, v_e, v_n, v_c = T.axis.remap("SSSSS", [r, t, e, n, c])
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
                                winograd_rows[v_r, v_t, v_e, 1, v_c] * T.float32(-2.0)
                                + winograd_rows[v_r, v_t, v_e, 2, v_c] * T.float32(-1.0)
                                + winograd_rows[v_r, v_t, v_e, 3, v_c] * T.float32(2.0)
                                + winograd_rows[v_r, v_t, v_e, 4, v_c],
                                T.Select(
                                    v_n == 4,
                                    winograd_rows[v_r, v_t, v_e, 1, v_c] * T.float32(0.5)
                                    + winograd_rows[v_r, v_t, v_e, 2, v_c] * T.float32(-1.0)
                                    + winograd_rows[v_r, v_t, v_e, 3, v_c] * T.float32(-0.5)
                                    + winograd_rows[v_r, v_t, v_e, 4, v_c],
                                    winograd_rows[v_r, v_t, v_e, 1, v_c]
                                    + winograd_rows[v_r, v_t, v_e, 2, v_c] * T.float32(-1.5)
                                    + winograd_rows[v_r, v_t, v_e, 3, v_c] * T.float32(-2.0)
                                    + winograd_rows[v_r, v_t, v_e, 4, v_c] * T.float32(1.5)
                                    + winograd_rows[v_r, v_t, v_e, 5, v_c],
                                ),
                            ),
                        ),
                    ),
                )
        for r, t, e, n, k, rc in T.grid(2, 2, 6, 6, 16, 16):
            with T.sblock("winograd_gemm"):
                v_r, v_t, v_e, v_n, v_k, v_rc = T.axis.remap("SSSSSR", [r, t, e, n, k, rc])
                T.reads(winograd_data[v_r, v_t, v_e, v_n, v_rc], w[v_e, v_n, v_rc, v_k])
                T.writes(winograd_gemm[v_r, v_t, v_e, v_n, v_k])
                with T.init():
                    winograd_gemm[v_r, v_t, v_e, v_n, v_k] = T.float32(0.0)
                winograd_gemm[v_r, v_t, v_e, v_n, v_k] = (
                    winograd_gemm[v_r, v_t, v_e, v_n, v_k]
                    + winograd_data[v_r, v_t, v_e, v_n, v_rc] * w[v_e, v_n, v_rc, v_k]
                )
        for r, t, i, n, k in T.grid(2, 2, 4, 6, 16):
            with T.sblock("winograd_inverse_rows"):
                v_r, v_t, v_i, v_n, v_k = T.axis.remap("SSSSS", [r, t, i, n, k])
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
                            + winograd_gemm[v_r, v_t, 3, v_n, v_k] * T.float32(0.125)
                            + winograd_gemm[v_r, v_t, 4, v_n, v_k] * T.float32(-8.0)
                            + winograd_gemm[v_r, v_t, 5, v_n, v_k],
                        ),
                    ),
                )
        for r, t, i, j, k in T.grid(2, 2, 4, 4, 16):
            with T.sblock("winograd_inverse"):
                v_r, v_t, v_i, v_j, v_k = T.axis.remap("SSSSS", [r, t, i, j, k])
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
                        winograd_inverse_rows[v_r, v_t, v_i, 1, v_k] * T.float32(-1.0)
                        + winograd_inverse_rows[v_r, v_t, v_i, 2, v_k]
                        + winograd_inverse_rows[v_r, v_t, v_i, 3, v_k] * T.float32(0.5)
                        + winograd_inverse_rows[v_r, v_t, v_i, 4, v_k] * T.float32(-2.0),
                        T.Select(
                            v_j == 2,
                            winograd_inverse_rows[v_r, v_t, v_i, 1, v_k]
                            + winograd_inverse_rows[v_r, v_t, v_i, 2, v_k]
                            + winograd_inverse_rows[v_r, v_t, v_i, 3, v_k] * T.float32(0.25)
                            + winograd_inverse_rows[v_r, v_t, v_i, 4, v_k] * T.float32(4.0),
                            winograd_inverse_rows[v_r, v_t, v_i, 1, v_k] * T.float32(-1.0)
                            + winograd_inverse_rows[v_r, v_t, v_i, 2, v_k]
                            + winograd_inverse_rows[v_r, v_t, v_i, 3, v_k] * T.float32(0.125)
                            + winograd_inverse_rows[v_r, v_t, v_i, 4, v_k] * T.float32(-8.0)
                            + winograd_inverse_rows[v_r, v_t, v_i, 5, v_k],
                        ),
                    ),
                )
        for b, f, y, x_1, lane in T.grid(1, 1, 8, 8, 16):
            with T.sblock("winograd_out"):
                v_b, v_f, v_y, v_x, v_lane = T.axis.remap("SSSSS", [b, f, y, x_1, lane])
                T.reads(winograd_inverse[v_y // 4, v_x // 4, v_y % 4, v_x % 4, v_f * 16 + v_lane])
                T.writes(winograd_out[v_b, v_f, v_y, v_x, v_lane])
                winograd_out[v_b, v_f, v_y, v_x, v_lane] = winograd_inverse[
                    v_y // 4, v_x // 4, v_y % 4, v_x % 4, v_f * 16 + v_lane
                ]

    @T.prim_func(s_tir=True, private=True)
    def expected(
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
                                        + winograd_pad[v_r * 4 + 3, v_t * 4 + v_b, v_c]
                                        * T.float32(1.5)
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
                                                        winograd_pad[
                                                            v_r * 4 + 1, v_t * 4 + v_b, v_c
                                                        ]
                                                        * T.float32(0.5)
                                                        + winograd_pad[
                                                            v_r * 4 + 2, v_t * 4 + v_b, v_c
                                                        ]
                                                        * T.float32(-1.0)
                                                        + winograd_pad[
                                                            v_r * 4 + 3, v_t * 4 + v_b, v_c
                                                        ]
                                                        * T.float32(-0.5)
                                                        + winograd_pad[
                                                            v_r * 4 + 4, v_t * 4 + v_b, v_c
                                                        ],
                                                        winograd_pad[
                                                            v_r * 4 + 1, v_t * 4 + v_b, v_c
                                                        ]
                                                        + winograd_pad[
                                                            v_r * 4 + 2, v_t * 4 + v_b, v_c
                                                        ]
                                                        * T.float32(-1.5)
                                                        + winograd_pad[
                                                            v_r * 4 + 3, v_t * 4 + v_b, v_c
                                                        ]
                                                        * T.float32(-2.0)
                                                        + winograd_pad[
                                                            v_r * 4 + 4, v_t * 4 + v_b, v_c
                                                        ]
                                                        * T.float32(1.5)
                                                        + winograd_pad[
                                                            v_r * 4 + 5, v_t * 4 + v_b, v_c
                                                        ],
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
                                                winograd_rows[v_r, v_t, v_e, 1, v_c]
                                                * T.float32(-1.0)
                                                + winograd_rows[v_r, v_t, v_e, 2, v_c]
                                                * T.float32(0.5)
                                                + winograd_rows[v_r, v_t, v_e, 3, v_c]
                                                * T.float32(2.5)
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
                                            + winograd_gemm[v_r, v_t, 4, v_n, v_k]
                                            * T.float32(-2.0),
                                            T.Select(
                                                v_i == 2,
                                                winograd_gemm[v_r, v_t, 1, v_n, v_k]
                                                + winograd_gemm[v_r, v_t, 2, v_n, v_k]
                                                + winograd_gemm[v_r, v_t, 3, v_n, v_k]
                                                * T.float32(0.25)
                                                + winograd_gemm[v_r, v_t, 4, v_n, v_k]
                                                * T.float32(4.0),
                                                winograd_gemm[v_r, v_t, 1, v_n, v_k]
                                                * T.float32(-1.0)
                                                + winograd_gemm[v_r, v_t, 2, v_n, v_k]
                                                + winograd_gemm[v_r, v_t, 3, v_n, v_k]
                                                * T.float32(0.125)
                                                + winograd_gemm[v_r, v_t, 4, v_n, v_k]
                                                * T.float32(-8.0)
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
            for f, y_1, x_1_0, x_1_1 in T.grid(1, 4, 2, 4):
                for lane in T.vectorized(16):
                    with T.sblock("winograd_out"):
                        v_b = T.axis.spatial(1, 0)
                        v_f = T.axis.spatial(1, f)
                        v_y = T.axis.spatial(8, b_y_0_fused * 4 + y_1)
                        v_x = T.axis.spatial(8, x_1_0 * 4 + x_1_1)
                        v_lane = T.axis.spatial(16, lane)
                        T.reads(
                            winograd_inverse[
                                v_y // 4, v_x // 4, v_y % 4, v_x % 4, v_f * 16 + v_lane
                            ]
                        )
                        T.writes(winograd_out[v_b, v_f, v_y, v_x, v_lane])
                        winograd_out[v_b, v_f, v_y, v_x, v_lane] = winograd_inverse[
                            v_y // 4, v_x // 4, v_y % 4, v_x % 4, v_f * 16 + v_lane
                        ]

    check(Winograd(), before, expected)


def test_schedule_12x12_by_its_key_properties():
    # 3 x 3 tiles: one parallel loop, outermost, a task per row of 3 tiles; every vector 16
    # lanes; the products (init and update) in tiles of 3 tile columns (unrolled) x 1 vector
    found = loops(schedule(Winograd(), winograd_conv(12)))
    assert found[-1] == ("parallel", 3, "")
    assert [loop for loop in found if loop[0] == "parallel"] == [("parallel", 3, "")]
    assert {extent for kind, extent, _ in found if kind == "vectorized"} == {16}
    assert found.count(("unrolled", 3, "")) == 2


def test_declines_a_direct_convolution():
    # not preparation's Winograd form
    assert declines(Winograd(), blocked_conv())


def test_declines_a_single_tile():
    # one tile: raised in reorder before
    assert declines(Winograd(), winograd_conv(4))


def test_a_winograd_kernel_is_one_parallel_loop_with_its_epilogue_inlined(cpu_devices):
    import tvm

    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize.cpu import Winograd, is_winograd

    target = cpu_devices["cpu"].tvm_target()
    mod = layered_module(zoo("resnet"))
    kernels = {gv.name_hint: func for gv, func in mod.functions_items()
               if isinstance(func, tvm.tirx.PrimFunc) and is_winograd(func)}
    # the 3x3 stride-1 convolutions, two with a residual add
    assert sorted(kernels) == ["fused_conv2d1_add_add1_relu", "fused_conv2d1_add_relu",
                               "fused_conv2d3_add2_add3_relu1", "fused_conv2d3_add2_relu1"]
    for func in kernels.values():
        scheduled, rule = optimize.optimize_function(func.with_attr("target", target), target)
        assert rule == "winograd"
        text = scheduled.script()
        assert text.count("T.parallel(") == 1  # one task per row of output tiles
        # the bias, residual and relu written with the output, not blocks of their own
        assert not re.search(r'T\.sblock\("T_(add|relu)', text)
        assert re.search(r"T\.vectorized\((T\.int64\()?16", text)
    # a direct convolution is not the rule's
    direct = mod["fused_conv2d2_add2_relu1"]
    assert not is_winograd(direct) and Winograd().apply(direct, target) is None
