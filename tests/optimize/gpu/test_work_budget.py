"""The ``work-budget`` wrapper (``tvm_hetero/optimize/gpu/work_budget.py``) around dlight's GPU
rules: a schedule within 1.3x the kernel's work kept unchanged (dlight's Reduction at two shapes,
the kernel before and the schedule expected written out in TVMScript, compared with
``tvm.ir.assert_structural_equal``), a schedule over it declined (padded lanes).

A schedule that changes on purpose (a TVM upgrade): the test's failure prints the new one; paste
it over the expected function (``ruff format``).
"""

import tvm
from tvm.script import tirx as T

from tvm_hetero.optimize.gpu import DlightRule
from tvm_hetero.optimize.gpu.work_budget import WorkBudget, work_ratio
from tvm_hetero.target import cuda_target

from tests.helpers import reduction_kernels as K
from tests.helpers.schedules import check, declines, mean_over_pixels, schedule

SM_90 = tvm.target.Target(cuda_target("sm_90"))


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_1024():
    # dlight's Reduction on a column GEMV: 64 blocks of 16 outputs x 16 lanes, the lanes'
    # partial sums 1.01x the kernel's work: its schedule, unchanged
    @T.prim_func(s_tir=True, private=True)
    def before(
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
    def expected(
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

    check(WorkBudget(DlightRule("gpu", "Reduction")), before, expected, SM_90)
    assert work_ratio(before, expected) <= 1.3


def test_schedule_512():
    # 512 x 512: 32 blocks of 16 outputs x 16 lanes, unchanged
    @T.prim_func(s_tir=True, private=True)
    def before(
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
    def expected(
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

    check(WorkBudget(DlightRule("gpu", "Reduction")), before, expected, SM_90)
    assert work_ratio(before, expected) <= 1.3


def test_declines_a_schedule_over_its_work():
    # dlight's Reduction on a mean over 5 x 5 pixels: the 25 padded to 2 x 16 lanes, the 16
    # partial sums added again, 1.9x the kernel's work (estimate_tir_flops)
    func = mean_over_pixels()
    rule = DlightRule("gpu", "Reduction")
    assert work_ratio(func, schedule(rule, func, SM_90)) > 1.3
    assert declines(WorkBudget(rule), func, SM_90)


def test_work_budget_declines_dlights_padded_schedules_only():
    gemv = DlightRule("gpu", "GEMV")
    excite = K.excite(10, 240, 14, "sigmoid")
    assert work_ratio(excite, gemv.apply(excite, SM_90)) > 1.3  # lanes of 32 for 10 channels
    assert WorkBudget(gemv).apply(excite, SM_90) is None
    large = K.dense(4096, 1024, "NK")  # a row GEMV dlight does right
    scheduled = WorkBudget(gemv).apply(large, SM_90)
    assert scheduled is not None and work_ratio(large, scheduled) <= 1.3
    assert WorkBudget(gemv).fingerprint() != gemv.fingerprint()
    assert WorkBudget(gemv).name == gemv.name
