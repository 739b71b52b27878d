"""Expected: the ``injective-stages`` rule's schedule of the kernel of ``test_injective_stages``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
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
                v0 = T.axis.spatial(4, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) // 256)
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
                v0 = T.axis.spatial(4, (ax0_ax1_ax2_fused_0 * 1024 + ax0_ax1_ax2_fused_1) // 1024)
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
                    + resize_columns[0, v0, T.max(T.min(row_second[v1], 7), 0), v2] * row_weight[v1]
                )
