"""The ``column-gemv`` GPU rule (``tvm_hetero/optimize/gpu/column_gemv.py``) on batch-1 dense
layers over [reduction, output] weights: it fills the SMs where dlight's Reduction does not, its
configuration, what it declines; its schedule at two shapes, the kernel before and the schedule
expected written out in TVMScript and compared with ``tvm.ir.assert_structural_equal`` and run
emulated on the CPU against the kernel.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

import pytest
import tvm
from tvm.script import tirx as T

from tvm_hetero.optimize.gpu.column_gemv import ColumnGemv, choose_config
from tvm_hetero.optimize.gpu.dlight import DlightRule
from tvm_hetero.target import cuda_target
from tvm_hetero.testing.gpu_census import launch_shape
from tvm_hetero.testing.gpu_emulation import check_gpu_schedule

from tests.helpers import reduction_kernels as K
from tests.helpers.schedules import check, declines, dense_row

SM_90 = tvm.target.Target(cuda_target("sm_90"))


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_1024(sm_90_from_the_table):
    # [1, 1024] x [1024, 1024]: 128 blocks of 8 neighbouring outputs (a 32-byte sector,
    # threadIdx.x) x 64 reduction lanes (threadIdx.y, rfactor; 512 threads), 16 elements a
    # lane in a local partial sum, the lanes' sums reduced across the block
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
        T_matmul_rf_local = T.sblock_alloc_buffer((64, 1, 1024), scope="local")
        for ax0_fused_0 in T.thread_binding(128, thread="blockIdx.x"):
            for ax0_fused_1 in T.thread_binding(8, thread="threadIdx.x"):
                for ax1_fused_1 in T.thread_binding(64, thread="threadIdx.y"):
                    with T.sblock("T_matmul_rf_init"):
                        vax1_fused_1 = T.axis.spatial(64, ax1_fused_1)
                        v0 = T.axis.spatial(1024, ax0_fused_0 * 8 + ax0_fused_1)
                        T.reads()
                        T.writes(T_matmul_rf_local[vax1_fused_1, 0, v0])
                        T_matmul_rf_local[vax1_fused_1, 0, v0] = T.float32(0.0)
                    for ax1_fused_0, u in T.grid(16, 1):  # noqa: B007
                        with T.sblock("T_matmul_rf_update"):
                            vax1_fused_1 = T.axis.spatial(64, ax1_fused_1)
                            v0 = T.axis.spatial(1024, ax0_fused_0 * 8 + ax0_fused_1)
                            vax1_fused_0 = T.axis.reduce(16, ax1_fused_0)
                            T.reads(
                                T_matmul_rf_local[vax1_fused_1, 0, v0],
                                x[0, vax1_fused_0 * 64 + vax1_fused_1],
                                w[vax1_fused_0 * 64 + vax1_fused_1, v0],
                            )
                            T.writes(T_matmul_rf_local[vax1_fused_1, 0, v0])
                            T_matmul_rf_local[vax1_fused_1, 0, v0] = (
                                T_matmul_rf_local[vax1_fused_1, 0, v0]
                                + x[0, vax1_fused_0 * 64 + vax1_fused_1]
                                * w[vax1_fused_0 * 64 + vax1_fused_1, v0]
                            )
            for ax1_fused in T.thread_binding(8, thread="threadIdx.x"):
                for ax0 in T.thread_binding(64, thread="threadIdx.y"):
                    with T.sblock("T_matmul"):
                        vax1_fused_1 = T.axis.reduce(64, ax0)
                        v0 = T.axis.spatial(1024, ax0_fused_0 * 8 + ax1_fused)
                        T.reads(T_matmul_rf_local[vax1_fused_1, 0, v0])
                        T.writes(T_matmul[0, v0])
                        with T.init():
                            T_matmul[0, v0] = T.float32(0.0)
                        T_matmul[0, v0] = T_matmul[0, v0] + T_matmul_rf_local[vax1_fused_1, 0, v0]

    check(ColumnGemv(), before, expected, SM_90)
    check_gpu_schedule(before, expected)


def test_schedule_2048(sm_90_from_the_table):
    # [1, 2048] x [2048, 2048]: 256 blocks of 8 outputs x 64 reduction lanes, 32 elements a
    # lane in a local partial sum, then across the block
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 2048), "float32"),
        w: T.Buffer((2048, 2048), "float32"),
        T_matmul: T.Buffer((1, 2048), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul"]})
        # with T.sblock("root"):
        for ax0, ax1, k in T.grid(1, 2048, 2048):
            with T.sblock("T_matmul"):
                v_ax0, v_ax1, v_k = T.axis.remap("SSR", [ax0, ax1, k])
                T.reads(x[v_ax0, v_k], w[v_k, v_ax1])
                T.writes(T_matmul[v_ax0, v_ax1])
                with T.init():
                    T_matmul[v_ax0, v_ax1] = T.float32(0.0)
                T_matmul[v_ax0, v_ax1] = T_matmul[v_ax0, v_ax1] + x[v_ax0, v_k] * w[v_k, v_ax1]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 2048), "float32"),
        w: T.Buffer((2048, 2048), "float32"),
        T_matmul: T.Buffer((1, 2048), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul"]})
        # with T.sblock("root"):
        T_matmul_rf_local = T.sblock_alloc_buffer((64, 1, 2048), scope="local")
        for ax0_fused_0 in T.thread_binding(256, thread="blockIdx.x"):
            for ax0_fused_1 in T.thread_binding(8, thread="threadIdx.x"):
                for ax1_fused_1 in T.thread_binding(64, thread="threadIdx.y"):
                    with T.sblock("T_matmul_rf_init"):
                        vax1_fused_1 = T.axis.spatial(64, ax1_fused_1)
                        v0 = T.axis.spatial(2048, ax0_fused_0 * 8 + ax0_fused_1)
                        T.reads()
                        T.writes(T_matmul_rf_local[vax1_fused_1, 0, v0])
                        T_matmul_rf_local[vax1_fused_1, 0, v0] = T.float32(0.0)
                    for ax1_fused_0, u in T.grid(32, 1):  # noqa: B007
                        with T.sblock("T_matmul_rf_update"):
                            vax1_fused_1 = T.axis.spatial(64, ax1_fused_1)
                            v0 = T.axis.spatial(2048, ax0_fused_0 * 8 + ax0_fused_1)
                            vax1_fused_0 = T.axis.reduce(32, ax1_fused_0)
                            T.reads(
                                T_matmul_rf_local[vax1_fused_1, 0, v0],
                                x[0, vax1_fused_0 * 64 + vax1_fused_1],
                                w[vax1_fused_0 * 64 + vax1_fused_1, v0],
                            )
                            T.writes(T_matmul_rf_local[vax1_fused_1, 0, v0])
                            T_matmul_rf_local[vax1_fused_1, 0, v0] = (
                                T_matmul_rf_local[vax1_fused_1, 0, v0]
                                + x[0, vax1_fused_0 * 64 + vax1_fused_1]
                                * w[vax1_fused_0 * 64 + vax1_fused_1, v0]
                            )
            for ax1_fused in T.thread_binding(8, thread="threadIdx.x"):
                for ax0 in T.thread_binding(64, thread="threadIdx.y"):
                    with T.sblock("T_matmul"):
                        vax1_fused_1 = T.axis.reduce(64, ax0)
                        v0 = T.axis.spatial(2048, ax0_fused_0 * 8 + ax1_fused)
                        T.reads(T_matmul_rf_local[vax1_fused_1, 0, v0])
                        T.writes(T_matmul[0, v0])
                        with T.init():
                            T_matmul[0, v0] = T.float32(0.0)
                        T_matmul[0, v0] = T_matmul[0, v0] + T_matmul_rf_local[vax1_fused_1, 0, v0]

    check(ColumnGemv(), before, expected, SM_90)
    check_gpu_schedule(before, expected)


def test_declines_row_reductions():
    # [output, reduction] weights: a row reduction (dlight's GEMV)
    assert declines(ColumnGemv(), dense_row())


def test_column_gemv_fills_the_sms_with_a_batch_1_dense():
    # mlp_b1's 4096 -> 2048 dense: dlight's Reduction launches 128 blocks of 16 x 16
    func = K.dense(4096, 2048, "KN")
    before, _ = launch_shape(DlightRule("gpu", "Reduction").apply(func, SM_90))
    assert before < K.SMS
    scheduled = ColumnGemv().apply(func, SM_90)
    _, blocks = K.checked(func, scheduled)
    assert blocks >= K.SMS


def test_column_gemv_declines_row_reductions_and_other_kernels():
    assert ColumnGemv().apply(K.dense(512, 256, "NK"), SM_90) is None
    assert ColumnGemv().apply(K.elementwise(), SM_90) is None
    assert ColumnGemv().apply(K.softmax(2, 128), SM_90) is None
    # no SM count for the arch: not this rule's (dlight's Reduction takes it)
    unknown = tvm.target.Target({"kind": "cuda", "arch": "sm_52"})
    assert ColumnGemv().apply(K.dense(512, 256, "KN"), unknown) is None


def test_choose_config_keeps_a_sector_per_warp_and_a_block_per_sm():
    config = choose_config(2048, 2048, 4096, 4, 132, 1024)
    assert config.blocks >= 132 and config.outputs * 4 >= 32
    assert config.outputs * config.lanes <= 1024
    # few outputs: the most blocks, still whole sectors
    small = choose_config(64, 64, 4096, 4, 132, 1024)
    assert small.outputs == 8 and small.blocks == 8
    # a short reduction: lanes of 8 elements at least
    assert choose_config(1024, 1024, 128, 4, 132, 1024).lanes <= 16
    with pytest.raises(ValueError):
        choose_config(0, 1, 4096, 4, 132, 1024)
