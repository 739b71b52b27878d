"""Expected: dlight's ``Reduction`` rule within its work budget (``WorkBudget``), its
schedule of the kernel of ``test_work_budget_keeps_a_schedule_within_its_work``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
    x: T.Buffer((1, 1024), "float32"),
    w: T.Buffer((1024, 1024), "float32"),
    T_matmul: T.Buffer((1, 1024), "float32"),
):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul"]})
    # with T.sblock("root"):
    T_matmul_rf_local = T.sblock_alloc_buffer((16, 1, 1024), scope="local")
    for ax0_fused_0 in T.thread_binding(64, thread="blockIdx.x"):
        for ax0_fused_1 in T.thread_binding(16, thread="threadIdx.x"):
            for ax1_fused_1 in T.thread_binding(16, thread="threadIdx.y"):
                with T.sblock("T_matmul_rf_init"):
                    vax1_fused_1 = T.axis.spatial(16, ax1_fused_1)
                    v0 = T.axis.spatial(1024, ax0_fused_0 * 16 + ax0_fused_1)
                    T.reads()
                    T.writes(T_matmul_rf_local[vax1_fused_1, 0, v0])
                    T_matmul_rf_local[vax1_fused_1, 0, v0] = T.float32(0.0)
                for ax1_fused_0, u in T.grid(64, 1):  # noqa: B007
                    with T.sblock("T_matmul_rf_update"):
                        vax1_fused_1 = T.axis.spatial(16, ax1_fused_1)
                        v0 = T.axis.spatial(1024, ax0_fused_0 * 16 + ax0_fused_1)
                        vax1_fused_0 = T.axis.reduce(64, ax1_fused_0)
                        T.reads(
                            T_matmul_rf_local[vax1_fused_1, 0, v0],
                            x[0, vax1_fused_0 * 16 + vax1_fused_1],
                            w[vax1_fused_0 * 16 + vax1_fused_1, v0],
                        )
                        T.writes(T_matmul_rf_local[vax1_fused_1, 0, v0])
                        T_matmul_rf_local[vax1_fused_1, 0, v0] = (
                            T_matmul_rf_local[vax1_fused_1, 0, v0]
                            + x[0, vax1_fused_0 * 16 + vax1_fused_1]
                            * w[vax1_fused_0 * 16 + vax1_fused_1, v0]
                        )
        for ax1_fused in T.thread_binding(16, thread="threadIdx.x"):
            for ax0 in T.thread_binding(16, thread="threadIdx.y"):
                with T.sblock("T_matmul"):
                    vax1_fused_1 = T.axis.reduce(16, ax0)
                    v0 = T.axis.spatial(1024, ax0_fused_0 * 16 + ax1_fused)
                    T.reads(T_matmul_rf_local[vax1_fused_1, 0, v0])
                    T.writes(T_matmul[0, v0])
                    with T.init():
                        T_matmul[0, v0] = T.float32(0.0)
                    T_matmul[0, v0] = T_matmul[0, v0] + T_matmul_rf_local[vax1_fused_1, 0, v0]
