"""The ``injective-stages`` rule (``tvm_hetero/optimize/gpu/injective_stages.py``) on a bilinear
resize in two passes: its schedule at two shapes (the kernel before and the schedule expected
written out in TVMScript, compared with ``tvm.ir.assert_structural_equal``, and run emulated on
the CPU against the kernel), dlight's Fallback's extra work beside it, and the kernels it
declines.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

from tvm.script import tirx as T

from tvm_hetero.optimize.gpu import DlightRule
from tvm_hetero.optimize.gpu.injective_stages import InjectiveStages
from tvm_hetero.optimize.gpu.work_budget import work_ratio
from tvm_hetero.testing.gpu_emulation import check_gpu_schedule

from tests.helpers.schedules import SM_90, add_multiply, check, declines, schedule, softmax


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_4x8x8_to_32():
    # an 8 x 8 -> 32 x 32 separable resize of 4 channels: the columns pass (4 x 8 x 32, each
    # read by the rows between two input rows) in a launch of its own, 1 block of 1024 threads
    # (guarded), then the rows pass, 4 blocks; dlight's Fallback inlines the columns into each
    # output: 2.9x the work
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 4, 8, 8), "float32"),
        row_first: T.Buffer((32,), "int32"),
        row_second: T.Buffer((32,), "int32"),
        row_weight: T.Buffer((32,), "float32"),
        col_first: T.Buffer((32,), "int32"),
        col_second: T.Buffer((32,), "int32"),
        col_weight: T.Buffer((32,), "float32"),
        resize_rows: T.Buffer((1, 4, 32, 32), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["resize2d"]})
        # with T.sblock("root"):
        resize_columns = T.sblock_alloc_buffer((1, 4, 8, 32))
        for n, c, y, x_1 in T.grid(1, 4, 8, 32):
            with T.sblock("resize_columns"):
                v_n, v_c, v_y, v_x = T.axis.remap("SSSS", [n, c, y, x_1])
                T.reads(
                    x[
                        v_n,
                        v_c,
                        v_y,
                        T.max(T.min(T.min(col_first[v_x], col_second[v_x]), 7), 0) : T.max(
                            T.min(T.min(col_first[v_x], col_second[v_x]), 7), 0
                        )
                        + (
                            T.max(T.min(T.max(col_first[v_x], col_second[v_x]), 7), 0)
                            + 1
                            - T.max(T.min(T.min(col_first[v_x], col_second[v_x]), 7), 0)
                        ),
                    ],
                    col_first[v_x],
                    col_weight[v_x],
                    col_second[v_x],
                )
                T.writes(resize_columns[v_n, v_c, v_y, v_x])
                resize_columns[v_n, v_c, v_y, v_x] = (
                    x[v_n, v_c, v_y, T.max(T.min(col_first[v_x], 7), 0)]
                    * (T.float32(1.0) - col_weight[v_x])
                    + x[v_n, v_c, v_y, T.max(T.min(col_second[v_x], 7), 0)] * col_weight[v_x]
                )
        for n, c, y, x_1 in T.grid(1, 4, 32, 32):
            with T.sblock("resize_rows"):
                v_n, v_c, v_y, v_x = T.axis.remap("SSSS", [n, c, y, x_1])
                T.reads(
                    resize_columns[
                        v_n,
                        v_c,
                        T.max(T.min(T.min(row_first[v_y], row_second[v_y]), 7), 0) : T.max(
                            T.min(T.min(row_first[v_y], row_second[v_y]), 7), 0
                        )
                        + (
                            T.max(T.min(T.max(row_first[v_y], row_second[v_y]), 7), 0)
                            + 1
                            - T.max(T.min(T.min(row_first[v_y], row_second[v_y]), 7), 0)
                        ),
                        v_x,
                    ],
                    row_first[v_y],
                    row_weight[v_y],
                    row_second[v_y],
                )
                T.writes(resize_rows[v_n, v_c, v_y, v_x])
                resize_rows[v_n, v_c, v_y, v_x] = (
                    resize_columns[v_n, v_c, T.max(T.min(row_first[v_y], 7), 0), v_x]
                    * (T.float32(1.0) - row_weight[v_y])
                    + resize_columns[v_n, v_c, T.max(T.min(row_second[v_y], 7), 0), v_x]
                    * row_weight[v_y]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 4, 8, 8), "float32"),
        row_first: T.Buffer((32,), "int32"),
        row_second: T.Buffer((32,), "int32"),
        row_weight: T.Buffer((32,), "float32"),
        col_first: T.Buffer((32,), "int32"),
        col_second: T.Buffer((32,), "int32"),
        col_weight: T.Buffer((32,), "float32"),
        resize_rows: T.Buffer((1, 4, 32, 32), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["resize2d"]})
        # with T.sblock("root"):
        resize_columns = T.sblock_alloc_buffer((1, 4, 8, 32))
        for ax0_ax1_ax2_fused_0 in T.thread_binding(1, thread="blockIdx.x"):
            for ax0_ax1_ax2_fused_1 in T.thread_binding(1024, thread="threadIdx.x"):
                with T.sblock("resize_columns"):
                    v0 = T.axis.spatial(
                        4, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) // 256
                    )
                    v1 = T.axis.spatial(
                        8, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) % 256 // 32
                    )
                    v2 = T.axis.spatial(32, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) % 32)
                    T.reads(
                        x[
                            0,
                            v0,
                            v1,
                            T.max(T.min(T.min(col_first[v2], col_second[v2]), 7), 0) : T.max(
                                T.min(T.min(col_first[v2], col_second[v2]), 7), 0
                            )
                            + (
                                T.max(T.min(T.max(col_first[v2], col_second[v2]), 7), 0)
                                + 1
                                - T.max(T.min(T.min(col_first[v2], col_second[v2]), 7), 0)
                            ),
                        ],
                        col_first[v2],
                        col_weight[v2],
                        col_second[v2],
                    )
                    T.writes(resize_columns[0, v0, v1, v2])
                    resize_columns[0, v0, v1, v2] = (
                        x[0, v0, v1, T.max(T.min(col_first[v2], 7), 0)]
                        * (T.float32(1.0) - col_weight[v2])
                        + x[0, v0, v1, T.max(T.min(col_second[v2], 7), 0)] * col_weight[v2]
                    )
        for ax0_ax1_ax2_fused_0 in T.thread_binding(4, thread="blockIdx.x"):
            for ax0_ax1_ax2_fused_1 in T.thread_binding(1024, thread="threadIdx.x"):
                with T.sblock("resize_rows"):
                    v0 = T.axis.spatial(
                        4, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) // 1024
                    )
                    v1 = T.axis.spatial(
                        32, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) % 1024 // 32
                    )
                    v2 = T.axis.spatial(32, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) % 32)
                    T.reads(
                        resize_columns[
                            0,
                            v0,
                            T.max(T.min(T.min(row_first[v1], row_second[v1]), 7), 0) : T.max(
                                T.min(T.min(row_first[v1], row_second[v1]), 7), 0
                            )
                            + (
                                T.max(T.min(T.max(row_first[v1], row_second[v1]), 7), 0)
                                + 1
                                - T.max(T.min(T.min(row_first[v1], row_second[v1]), 7), 0)
                            ),
                            v2,
                        ],
                        row_first[v1],
                        row_weight[v1],
                        row_second[v1],
                    )
                    T.writes(resize_rows[0, v0, v1, v2])
                    resize_rows[0, v0, v1, v2] = (
                        resize_columns[0, v0, T.max(T.min(row_first[v1], 7), 0), v2]
                        * (T.float32(1.0) - row_weight[v1])
                        + resize_columns[0, v0, T.max(T.min(row_second[v1], 7), 0), v2]
                        * row_weight[v1]
                    )

    fallback = schedule(DlightRule("gpu", "Fallback"), before, SM_90)
    assert work_ratio(before, fallback) > 1.3
    check(InjectiveStages(), before, expected, SM_90)
    assert work_ratio(before, expected) == 1.0
    check_gpu_schedule(before, expected)


def test_schedule_8x16x16_to_64():
    # 16 x 16 -> 64 x 64 of 8 channels: the columns pass (8 x 16 x 64) in 8 blocks of 1024
    # threads, then the rows pass in 32
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 8, 16, 16), "float32"),
        row_first: T.Buffer((64,), "int32"),
        row_second: T.Buffer((64,), "int32"),
        row_weight: T.Buffer((64,), "float32"),
        col_first: T.Buffer((64,), "int32"),
        col_second: T.Buffer((64,), "int32"),
        col_weight: T.Buffer((64,), "float32"),
        resize_rows: T.Buffer((1, 8, 64, 64), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["resize2d"]})
        # with T.sblock("root"):
        resize_columns = T.sblock_alloc_buffer((1, 8, 16, 64))
        for n, c, y, x_1 in T.grid(1, 8, 16, 64):
            with T.sblock("resize_columns"):
                v_n, v_c, v_y, v_x = T.axis.remap("SSSS", [n, c, y, x_1])
                T.reads(
                    x[
                        v_n,
                        v_c,
                        v_y,
                        T.max(T.min(T.min(col_first[v_x], col_second[v_x]), 15), 0) : T.max(
                            T.min(T.min(col_first[v_x], col_second[v_x]), 15), 0
                        )
                        + (
                            T.max(T.min(T.max(col_first[v_x], col_second[v_x]), 15), 0)
                            + 1
                            - T.max(T.min(T.min(col_first[v_x], col_second[v_x]), 15), 0)
                        ),
                    ],
                    col_first[v_x],
                    col_weight[v_x],
                    col_second[v_x],
                )
                T.writes(resize_columns[v_n, v_c, v_y, v_x])
                resize_columns[v_n, v_c, v_y, v_x] = (
                    x[v_n, v_c, v_y, T.max(T.min(col_first[v_x], 15), 0)]
                    * (T.float32(1.0) - col_weight[v_x])
                    + x[v_n, v_c, v_y, T.max(T.min(col_second[v_x], 15), 0)] * col_weight[v_x]
                )
        for n, c, y, x_1 in T.grid(1, 8, 64, 64):
            with T.sblock("resize_rows"):
                v_n, v_c, v_y, v_x = T.axis.remap("SSSS", [n, c, y, x_1])
                T.reads(
                    resize_columns[
                        v_n,
                        v_c,
                        T.max(T.min(T.min(row_first[v_y], row_second[v_y]), 15), 0) : T.max(
                            T.min(T.min(row_first[v_y], row_second[v_y]), 15), 0
                        )
                        + (
                            T.max(T.min(T.max(row_first[v_y], row_second[v_y]), 15), 0)
                            + 1
                            - T.max(T.min(T.min(row_first[v_y], row_second[v_y]), 15), 0)
                        ),
                        v_x,
                    ],
                    row_first[v_y],
                    row_weight[v_y],
                    row_second[v_y],
                )
                T.writes(resize_rows[v_n, v_c, v_y, v_x])
                resize_rows[v_n, v_c, v_y, v_x] = (
                    resize_columns[v_n, v_c, T.max(T.min(row_first[v_y], 15), 0), v_x]
                    * (T.float32(1.0) - row_weight[v_y])
                    + resize_columns[v_n, v_c, T.max(T.min(row_second[v_y], 15), 0), v_x]
                    * row_weight[v_y]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 8, 16, 16), "float32"),
        row_first: T.Buffer((64,), "int32"),
        row_second: T.Buffer((64,), "int32"),
        row_weight: T.Buffer((64,), "float32"),
        col_first: T.Buffer((64,), "int32"),
        col_second: T.Buffer((64,), "int32"),
        col_weight: T.Buffer((64,), "float32"),
        resize_rows: T.Buffer((1, 8, 64, 64), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["resize2d"]})
        # with T.sblock("root"):
        resize_columns = T.sblock_alloc_buffer((1, 8, 16, 64))
        for ax0_ax1_ax2_fused_0 in T.thread_binding(8, thread="blockIdx.x"):
            for ax0_ax1_ax2_fused_1 in T.thread_binding(1024, thread="threadIdx.x"):
                with T.sblock("resize_columns"):
                    v0 = T.axis.spatial(
                        8, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) // 1024
                    )
                    v1 = T.axis.spatial(
                        16, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) % 1024 // 64
                    )
                    v2 = T.axis.spatial(64, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) % 64)
                    T.reads(
                        x[
                            0,
                            v0,
                            v1,
                            T.max(T.min(T.min(col_first[v2], col_second[v2]), 15), 0) : T.max(
                                T.min(T.min(col_first[v2], col_second[v2]), 15), 0
                            )
                            + (
                                T.max(T.min(T.max(col_first[v2], col_second[v2]), 15), 0)
                                + 1
                                - T.max(T.min(T.min(col_first[v2], col_second[v2]), 15), 0)
                            ),
                        ],
                        col_first[v2],
                        col_weight[v2],
                        col_second[v2],
                    )
                    T.writes(resize_columns[0, v0, v1, v2])
                    resize_columns[0, v0, v1, v2] = (
                        x[0, v0, v1, T.max(T.min(col_first[v2], 15), 0)]
                        * (T.float32(1.0) - col_weight[v2])
                        + x[0, v0, v1, T.max(T.min(col_second[v2], 15), 0)] * col_weight[v2]
                    )
        for ax0_ax1_ax2_fused_0 in T.thread_binding(32, thread="blockIdx.x"):
            for ax0_ax1_ax2_fused_1 in T.thread_binding(1024, thread="threadIdx.x"):
                with T.sblock("resize_rows"):
                    v0 = T.axis.spatial(
                        8, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) // 4096
                    )
                    v1 = T.axis.spatial(
                        64, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) % 4096 // 64
                    )
                    v2 = T.axis.spatial(64, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) % 64)
                    T.reads(
                        resize_columns[
                            0,
                            v0,
                            T.max(T.min(T.min(row_first[v1], row_second[v1]), 15), 0) : T.max(
                                T.min(T.min(row_first[v1], row_second[v1]), 15), 0
                            )
                            + (
                                T.max(T.min(T.max(row_first[v1], row_second[v1]), 15), 0)
                                + 1
                                - T.max(T.min(T.min(row_first[v1], row_second[v1]), 15), 0)
                            ),
                            v2,
                        ],
                        row_first[v1],
                        row_weight[v1],
                        row_second[v1],
                    )
                    T.writes(resize_rows[0, v0, v1, v2])
                    resize_rows[0, v0, v1, v2] = (
                        resize_columns[0, v0, T.max(T.min(row_first[v1], 15), 0), v2]
                        * (T.float32(1.0) - row_weight[v1])
                        + resize_columns[0, v0, T.max(T.min(row_second[v1], 15), 0), v2]
                        * row_weight[v1]
                    )

    check(InjectiveStages(), before, expected, SM_90)
    check_gpu_schedule(before, expected)


def test_declines_what_fallback_does_within_its_work():
    # an elementwise kernel: dlight's Fallback within its work
    assert declines(InjectiveStages(), add_multiply())


def test_declines_reductions():
    # a softmax: has reductions
    assert declines(InjectiveStages(), softmax())
