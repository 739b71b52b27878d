"""Expected: the ``matmul-tiles`` rule's schedule of the kernel of ``test_matmul_tiles``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
    x: T.Buffer((1, 256, 14, 14), "float32"),
    w: T.Buffer((256, 256, 3, 3), "float32"),
    conv2d_nchw: T.Buffer((1, 256, 14, 14), "float32"),
):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
    # with T.sblock("root"):
    conv2d_nchw_reindex_pad_local = T.sblock_alloc_buffer((1, 208, 256), scope="local")
    pad_temp_reindex_pad_shared = T.sblock_alloc_buffer((1, 208, 2304), scope="shared")
    w_reindex_shared = T.sblock_alloc_buffer((1, 256, 2304), scope="shared")
    for ax0_ax2_0_fused in T.thread_binding(16, thread="blockIdx.y"):
        for ax1_0 in T.thread_binding(13, thread="blockIdx.x"):
            for ax2_1 in T.thread_binding(1, thread="vthread.y"):
                for ax1_1 in T.thread_binding(1, thread="vthread.x"):
                    for ax2_2 in T.thread_binding(8, thread="threadIdx.y"):
                        for ax1_2 in T.thread_binding(
                            8,
                            thread="threadIdx.x",
                            annotations={
                                "pragma_auto_unroll_max_step": 256,
                                "pragma_unroll_explicit": 1,
                            },
                        ):
                            for ax1_3_init, ax2_3_0_init in T.grid(2, 1):
                                for ax2_3_1_init in T.vectorized(2):
                                    with T.sblock("conv2d_nchw_init"):
                                        v0 = T.axis.spatial(1, 0)
                                        v1 = T.axis.spatial(
                                            208, ax1_0 * 16 + ax1_1 * 16 + ax1_2 * 2 + ax1_3_init
                                        )
                                        v2 = T.axis.spatial(
                                            256,
                                            ax0_ax2_0_fused * 16
                                            + ax2_1 * 16
                                            + ax2_2 * 2
                                            + ax2_3_0_init * 2
                                            + ax2_3_1_init,
                                        )
                                        T.reads()
                                        T.writes(conv2d_nchw_reindex_pad_local[0, v1, v2])
                                        conv2d_nchw_reindex_pad_local[0, v1, v2] = T.float32(0.0)
                            for ax3_0 in range(144):
                                for ax0_ax1_ax2_fused_0 in T.thread_binding(
                                    8, thread="threadIdx.y"
                                ):
                                    for ax0_ax1_ax2_fused_1 in T.thread_binding(
                                        8, thread="threadIdx.x"
                                    ):
                                        for ax0_ax1_ax2_fused_2 in range(2):
                                            for ax0_ax1_ax2_fused_3 in T.vectorized(2):
                                                with T.sblock("pad_temp_reindex_pad_shared"):
                                                    v0 = T.axis.spatial(1, 0)
                                                    v1 = T.axis.spatial(
                                                        208,
                                                        ax1_0 * 16
                                                        + (
                                                            ax0_ax1_ax2_fused_0 * 32
                                                            + ax0_ax1_ax2_fused_1 * 4
                                                            + ax0_ax1_ax2_fused_2 * 2
                                                            + ax0_ax1_ax2_fused_3
                                                        )
                                                        // 16,
                                                    )
                                                    v2 = T.axis.spatial(
                                                        2304,
                                                        ax3_0 * 16
                                                        + (
                                                            ax0_ax1_ax2_fused_0 * 32
                                                            + ax0_ax1_ax2_fused_1 * 4
                                                            + ax0_ax1_ax2_fused_2 * 2
                                                            + ax0_ax1_ax2_fused_3
                                                        )
                                                        % 16,
                                                    )
                                                    T.reads(
                                                        x[
                                                            0,
                                                            v2 // 9,
                                                            v1 // 14 + v2 // 3 % 3 - 1,
                                                            v1 % 14 + v2 % 3 - 1,
                                                        ]
                                                    )
                                                    T.writes(
                                                        pad_temp_reindex_pad_shared[v0, v1, v2]
                                                    )
                                                    T.sblock_attr(
                                                        {"buffer_dim_align": [[0, 1, 8, 2]]}
                                                    )
                                                    pad_temp_reindex_pad_shared[v0, v1, v2] = (
                                                        T.if_then_else(
                                                            v1 < 196,
                                                            T.if_then_else(
                                                                1 <= v1 // 14 + v2 // 3 % 3
                                                                and v1 // 14 + v2 // 3 % 3 < 15
                                                                and 1 <= v1 % 14 + v2 % 3
                                                                and v1 % 14 + v2 % 3 < 15,
                                                                x[
                                                                    0,
                                                                    v2 // 9,
                                                                    v1 // 14 + v2 // 3 % 3 - 1,
                                                                    v1 % 14 + v2 % 3 - 1,
                                                                ],
                                                                T.float32(0.0),
                                                            ),
                                                            T.float32(0.0),
                                                        )
                                                    )
                                for ax0_ax1_ax2_fused_0 in T.thread_binding(
                                    8, thread="threadIdx.y"
                                ):
                                    for ax0_ax1_ax2_fused_1 in T.thread_binding(
                                        8, thread="threadIdx.x"
                                    ):
                                        for ax0_ax1_ax2_fused_2 in range(2):
                                            for ax0_ax1_ax2_fused_3 in T.vectorized(2):
                                                with T.sblock("w_reindex_shared"):
                                                    v0 = T.axis.spatial(1, 0)
                                                    v1 = T.axis.spatial(
                                                        256,
                                                        ax0_ax2_0_fused * 16
                                                        + (
                                                            ax0_ax1_ax2_fused_0 * 32
                                                            + ax0_ax1_ax2_fused_1 * 4
                                                            + ax0_ax1_ax2_fused_2 * 2
                                                            + ax0_ax1_ax2_fused_3
                                                        )
                                                        // 16,
                                                    )
                                                    v2 = T.axis.spatial(
                                                        2304,
                                                        ax3_0 * 16
                                                        + (
                                                            ax0_ax1_ax2_fused_0 * 32
                                                            + ax0_ax1_ax2_fused_1 * 4
                                                            + ax0_ax1_ax2_fused_2 * 2
                                                            + ax0_ax1_ax2_fused_3
                                                        )
                                                        % 16,
                                                    )
                                                    T.reads(w[v1, v2 // 9, v2 // 3 % 3, v2 % 3])
                                                    T.writes(w_reindex_shared[v0, v1, v2])
                                                    T.sblock_attr(
                                                        {"buffer_dim_align": [[0, 1, 8, 2]]}
                                                    )
                                                    w_reindex_shared[v0, v1, v2] = w[
                                                        v1, v2 // 9, v2 // 3 % 3, v2 % 3
                                                    ]
                                for ax3_1, ax1_3, ax2_3_0 in T.grid(16, 2, 1):
                                    for ax2_3_1 in T.vectorized(2):
                                        with T.sblock("conv2d_nchw_update"):
                                            v0 = T.axis.spatial(1, 0)
                                            v1 = T.axis.spatial(
                                                208, ax1_0 * 16 + ax1_1 * 16 + ax1_2 * 2 + ax1_3
                                            )
                                            v2 = T.axis.spatial(
                                                256,
                                                ax0_ax2_0_fused * 16
                                                + ax2_1 * 16
                                                + ax2_2 * 2
                                                + ax2_3_0 * 2
                                                + ax2_3_1,
                                            )
                                            v3 = T.axis.reduce(2304, ax3_0 * 16 + ax3_1)
                                            T.reads(
                                                conv2d_nchw_reindex_pad_local[0, v1, v2],
                                                pad_temp_reindex_pad_shared[0, v1, v3],
                                                w_reindex_shared[0, v2, v3],
                                            )
                                            T.writes(conv2d_nchw_reindex_pad_local[0, v1, v2])
                                            conv2d_nchw_reindex_pad_local[0, v1, v2] = (
                                                conv2d_nchw_reindex_pad_local[0, v1, v2]
                                                + pad_temp_reindex_pad_shared[0, v1, v3]
                                                * w_reindex_shared[0, v2, v3]
                                            )
                            for ax0, ax1, ax2_0 in T.grid(1, 2, 1):
                                for ax2_1_1 in T.vectorized(2):
                                    with T.sblock("conv2d_nchw_reindex_pad_local"):
                                        v0 = T.axis.spatial(1, ax0)
                                        v1 = T.axis.spatial(208, ax1_0 * 16 + ax1_2 * 2 + ax1)
                                        v2 = T.axis.spatial(
                                            256,
                                            ax0_ax2_0_fused * 16 + ax2_2 * 2 + ax2_0 * 2 + ax2_1_1,
                                        )
                                        T.where(ax1_0 * 16 + ax1_2 * 2 + ax1 < 196)
                                        T.reads(conv2d_nchw_reindex_pad_local[v0, v1, v2])
                                        T.writes(conv2d_nchw[0, v2, v1 // 14, v1 % 14])
                                        conv2d_nchw[0, v2, v1 // 14, v1 % 14] = (
                                            conv2d_nchw_reindex_pad_local[v0, v1, v2]
                                        )
