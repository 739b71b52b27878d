"""The ``work-budget`` rule (``tvm_hetero/optimize/gpu/work_budget.py``) on : its schedule at two
shapes, the kernel before and the schedule expected written out in TVMScript and compared with
``tvm.ir.assert_structural_equal`` (as TVM's dlight tests check theirs), and a kernel outside its
preconditions that it declines.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

from tvm.script import tirx as T

from tvm_hetero.optimize.gpu import DlightRule
from tvm_hetero.optimize.gpu.work_budget import WorkBudget
from tests.helpers.schedules import SM_90, check


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


@T.prim_func(s_tir=True, private=True)
def before_1024(
    x: T.Buffer((1, 1024), "float32"),
    w: T.Buffer((1024, 1024), "float32"),
    T_matmul: T.Buffer((1, 1024), "float32"),
):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul"]})
    # with T.sblock("root"):
    for ax0, ax1, k in T.grid(1, 1024, 1024):
        with T.sblock("T_matmul"):
            v_ax0, v_ax1, v_k = T.axis.remap("SSR", [ax0, ax1, k])
            T.reads(x[v_ax0, v_k], w[v_k, v_ax1])
            T.writes(T_matmul[v_ax0, v_ax1])
            with T.init():
                T_matmul[v_ax0, v_ax1] = T.float32(0.0)
            T_matmul[v_ax0, v_ax1] = T_matmul[v_ax0, v_ax1] + x[v_ax0, v_k] * w[v_k, v_ax1]


@T.prim_func(s_tir=True, private=True)
def expected_1024(
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


@T.prim_func(s_tir=True, private=True)
def before_512(
    x: T.Buffer((1, 512), "float32"),
    w: T.Buffer((512, 512), "float32"),
    T_matmul: T.Buffer((1, 512), "float32"),
):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul"]})
    # with T.sblock("root"):
    for ax0, ax1, k in T.grid(1, 512, 512):
        with T.sblock("T_matmul"):
            v_ax0, v_ax1, v_k = T.axis.remap("SSR", [ax0, ax1, k])
            T.reads(x[v_ax0, v_k], w[v_k, v_ax1])
            T.writes(T_matmul[v_ax0, v_ax1])
            with T.init():
                T_matmul[v_ax0, v_ax1] = T.float32(0.0)
            T_matmul[v_ax0, v_ax1] = T_matmul[v_ax0, v_ax1] + x[v_ax0, v_k] * w[v_k, v_ax1]


@T.prim_func(s_tir=True, private=True)
def expected_512(
    x: T.Buffer((1, 512), "float32"),
    w: T.Buffer((512, 512), "float32"),
    T_matmul: T.Buffer((1, 512), "float32"),
):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul"]})
    # with T.sblock("root"):
    T_matmul_rf_local = T.sblock_alloc_buffer((16, 1, 512), scope="local")
    for ax0_fused_0 in T.thread_binding(32, thread="blockIdx.x"):
        for ax0_fused_1 in T.thread_binding(16, thread="threadIdx.x"):
            for ax1_fused_1 in T.thread_binding(16, thread="threadIdx.y"):
                with T.sblock("T_matmul_rf_init"):
                    vax1_fused_1 = T.axis.spatial(16, ax1_fused_1)
                    v0 = T.axis.spatial(512, ax0_fused_0 * 16 + ax0_fused_1)
                    T.reads()
                    T.writes(T_matmul_rf_local[vax1_fused_1, 0, v0])
                    T_matmul_rf_local[vax1_fused_1, 0, v0] = T.float32(0.0)
                for ax1_fused_0, u in T.grid(32, 1):  # noqa: B007
                    with T.sblock("T_matmul_rf_update"):
                        vax1_fused_1 = T.axis.spatial(16, ax1_fused_1)
                        v0 = T.axis.spatial(512, ax0_fused_0 * 16 + ax0_fused_1)
                        vax1_fused_0 = T.axis.reduce(32, ax1_fused_0)
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
                    v0 = T.axis.spatial(512, ax0_fused_0 * 16 + ax1_fused)
                    T.reads(T_matmul_rf_local[vax1_fused_1, 0, v0])
                    T.writes(T_matmul[0, v0])
                    with T.init():
                        T_matmul[0, v0] = T.float32(0.0)
                    T_matmul[0, v0] = T_matmul[0, v0] + T_matmul_rf_local[vax1_fused_1, 0, v0]


def test_schedule_1024():
    # dlight's Reduction on a column GEMV: 64 blocks of 16 outputs x 16 lanes, the lanes'
    # partial sums 1.01x the kernel's work: its schedule, unchanged
    check(WorkBudget(DlightRule("gpu", "Reduction")), before_1024, expected_1024, SM_90)


def test_schedule_512():
    # 512 x 512: 32 blocks of 16 outputs x 16 lanes, unchanged
    check(WorkBudget(DlightRule("gpu", "Reduction")), before_512, expected_512, SM_90)
