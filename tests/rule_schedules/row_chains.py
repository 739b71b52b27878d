"""Expected: the ``row-chains`` rule's schedule of the kernel of ``test_row_chains``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(x: T.Buffer((128, 64), "float32"), T_softmax_norm: T.Buffer((128, 64), "float32")):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["softmax"]})
    # with T.sblock("root"):
    T_softmax_maxelem_shared = T.sblock_alloc_buffer((128,), scope="shared")
    T_softmax_exp_shared = T.sblock_alloc_buffer((128, 64), scope="shared")
    T_softmax_expsum_shared = T.sblock_alloc_buffer((128,), scope="shared")
    for ax0_fused in T.thread_binding(128, thread="blockIdx.x"):
        for ax0_ax1_fused_1 in T.thread_binding(64, thread="threadIdx.x"):
            for ax0_ax1_fused_0 in T.serial(
                1, annotations={"pragma_auto_unroll_max_step": 256, "pragma_unroll_explicit": 1}
            ):
                with T.sblock("T_softmax_maxelem"):
                    v0 = T.axis.spatial(128, ax0_fused)
                    v1 = T.axis.reduce(64, ax0_ax1_fused_0 * 64 + ax0_ax1_fused_1)
                    T.reads(x[v0, v1])
                    T.writes(T_softmax_maxelem_shared[v0])
                    with T.init():
                        T_softmax_maxelem_shared[v0] = T.float32(
                            -340282346638528859811704183484516925440.0
                        )
                    T_softmax_maxelem_shared[v0] = T.max(T_softmax_maxelem_shared[v0], x[v0, v1])
        for ax0_ax1_fused_1 in T.thread_binding(64, thread="threadIdx.x"):
            for ax0_ax1_fused_0 in T.serial(
                1, annotations={"pragma_auto_unroll_max_step": 256, "pragma_unroll_explicit": 1}
            ):
                with T.sblock("T_softmax_exp"):
                    v0 = T.axis.spatial(128, ax0_fused)
                    v1 = T.axis.spatial(64, ax0_ax1_fused_0 * 64 + ax0_ax1_fused_1)
                    T.reads(x[v0, v1], T_softmax_maxelem_shared[v0])
                    T.writes(T_softmax_exp_shared[v0, v1])
                    T_softmax_exp_shared[v0, v1] = T.exp(x[v0, v1] - T_softmax_maxelem_shared[v0])
        for ax0_ax1_fused_1 in T.thread_binding(64, thread="threadIdx.x"):
            for ax0_ax1_fused_0 in T.serial(
                1, annotations={"pragma_auto_unroll_max_step": 256, "pragma_unroll_explicit": 1}
            ):
                with T.sblock("T_softmax_expsum"):
                    v0 = T.axis.spatial(128, ax0_fused)
                    v1 = T.axis.reduce(64, ax0_ax1_fused_0 * 64 + ax0_ax1_fused_1)
                    T.reads(T_softmax_exp_shared[v0, v1])
                    T.writes(T_softmax_expsum_shared[v0])
                    with T.init():
                        T_softmax_expsum_shared[v0] = T.float32(0.0)
                    T_softmax_expsum_shared[v0] = (
                        T_softmax_expsum_shared[v0] + T_softmax_exp_shared[v0, v1]
                    )
        for ax1_fused_1 in T.thread_binding(64, thread="threadIdx.x"):
            for ax1_fused_0 in T.serial(
                1, annotations={"pragma_auto_unroll_max_step": 256, "pragma_unroll_explicit": 1}
            ):
                with T.sblock("T_softmax_norm"):
                    v0 = T.axis.spatial(128, ax0_fused)
                    v1 = T.axis.spatial(64, ax1_fused_0 * 64 + ax1_fused_1)
                    T.reads(T_softmax_exp_shared[v0, v1], T_softmax_expsum_shared[v0])
                    T.writes(T_softmax_norm[v0, v1])
                    T.sblock_attr({"axis": 1})
                    T_softmax_norm[v0, v1] = (
                        T_softmax_exp_shared[v0, v1] / T_softmax_expsum_shared[v0]
                    )
