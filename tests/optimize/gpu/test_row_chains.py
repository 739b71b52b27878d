"""The ``row-chains`` GPU rule (``tvm_hetero/optimize/gpu/row_chains.py``), checked without a
GPU: softmax, means, squeeze-and-excite products and norms scheduled by it compute no more than
1.3x their layer (``estimate_tir_flops``), a kernel over 10 MFLOP launches a block per SM, and
the schedule, emulated on the CPU (:mod:`tvm_hetero.testing.gpu_emulation`), computes what the
unscheduled kernel computes; the CUDA table giving it and the other reduction rules
(``column-gemv``, dlight's GEMV in its work budget) their kernels; its schedule at two shapes,
the kernel before and the schedule expected written out in TVMScript and compared with
``tvm.ir.assert_structural_equal``.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

import pytest
import tvm
from tvm.script import tirx as T

from tvm_hetero.optimize.gpu import gpu_rules
from tvm_hetero.optimize.gpu.dlight import DlightRule
from tvm_hetero.optimize.gpu.row_chains import RowChains, choose_threads
from tvm_hetero.optimize.pass_ import optimize_function
from tvm_hetero.target import cuda_target
from tvm_hetero.testing.gpu_emulation import check_gpu_schedule
from tvm_hetero.testing.scheduled import estimated_flops

from tests.helpers import reduction_kernels as K
from tests.helpers.schedules import check, declines, gemv

SM_90 = tvm.target.Target(cuda_target("sm_90"))


@pytest.mark.parametrize("heads, length, padded", [(12, 128, 128), (2, 197, 224)])
def test_row_chains_computes_softmax_once_per_element(heads, length, padded):
    func = K.softmax(heads, length)
    work, blocks = K.checked(func, RowChains().apply(func, SM_90))
    # the exp is kept in shared memory, not computed again for the sum and the output: the
    # only extra work is the row's padding to the threads (197 to 7 warps)
    assert work == pytest.approx(padded / length, abs=0.01)
    assert blocks == heads * length  # a block per row
    general = DlightRule("gpu", "GeneralReduction").apply(func, SM_90)
    assert estimated_flops(general) / estimated_flops(func) > 1.3


def test_row_chains_takes_a_softmax_whose_last_step_reads_no_scalar_of_the_row():
    # the last block (where) reads the division's row and isnan's, no max or sum: its rows are
    # its leading loops; GeneralReduction took it at 2.5x its work
    func = K.masked_softmax(12, 128)
    scheduled, chosen = optimize_function(func.with_attr("target", SM_90), SM_90)
    assert chosen == "row-chains"
    work, blocks = K.checked(func, scheduled)
    assert (work, blocks) == (1.0, 12 * 128)
    general = DlightRule("gpu", "GeneralReduction").apply(func, SM_90)
    assert estimated_flops(general) / estimated_flops(func) > 1.3


@pytest.mark.parametrize("channels, size", [(240, 14), (1000, 13), (2048, 7)])
def test_row_chains_schedules_means_without_padding_their_rows(channels, size):
    func = K.mean(channels, size)
    K.checked(func, RowChains().apply(func, SM_90))


@pytest.mark.parametrize("squeezed, channels, gate", [(10, 240, "sigmoid"),
                                                      (60, 240, "hard_sigmoid"),
                                                      (20, 480, "sigmoid")])
def test_row_chains_gates_the_map_once_per_channel(squeezed, channels, gate):
    func = K.excite(squeezed, channels, 14, gate)
    K.checked(func, RowChains().apply(func, SM_90))


def test_row_chains_schedules_layer_norms_right():
    func = K.layer_norm(128, 768)
    K.checked(func, RowChains().apply(func, SM_90))


def test_row_chains_schedules_a_single_row_rms_norm_once():
    # dlight's GeneralReduction computes the scale again for every element (2x)
    func = K.rms_norm(1024)
    work, blocks = K.checked(func, RowChains().apply(func, SM_90))
    assert work == pytest.approx(1.0, abs=0.01) and blocks == 1


@pytest.mark.parametrize("func", [K.dense(512, 256, "KN"), K.elementwise()],
                         ids=["column-reduction", "elementwise"])
def test_row_chains_declines_what_is_not_a_contiguous_row_chain(func):
    # a [K, N] dense read down its columns would have a warp's threads read 32 rows apart
    assert RowChains().apply(func, SM_90) is None
    assert RowChains().apply(K.softmax(2, 128), tvm.target.Target("llvm")) is None


def test_choose_threads_fits_the_rows():
    assert choose_threads([(128, 1), (128, 2), (128, 1), (128, 1)], 1024) == 128
    # 197 (prime): a thread an element; 224 would pad by 14%
    assert choose_threads([(197, 1), (197, 2), (197, 1), (197, 1)], 1024) in (197, 224)
    # a 10-element reduction before a 196-pixel multiply: not 256 threads idle on the first
    threads = choose_threads([(10, 2), (1, 2), (196, 1)], 1024)
    padded = (-(-10 // threads) * threads * 2 + 2 + -(-196 // threads) * threads) / 218
    assert padded <= 1.2
    assert choose_threads([(4096, 1), (1, 1)], 1024) == 256
    assert choose_threads([(4096, 1), (1, 1)], 64) == 64  # the target's limit


@pytest.mark.parametrize("make, rule", [
    (lambda: K.softmax(12, 128), "row-chains"),
    (lambda: K.mean(240, 14), "row-chains"),
    (lambda: K.excite(10, 240, 14, "sigmoid"), "row-chains"),
    (lambda: K.dense(4096, 2048, "KN"), "column-gemv"),
    (lambda: K.dense(4096, 1024, "NK"), "dlight.gpu.GEMV"),
], ids=["softmax", "mean", "excite", "column-dense", "row-dense"])
def test_the_cuda_table_gives_the_reduction_rules_their_kernels(make, rule):
    func = make()
    scheduled, chosen = optimize_function(func.with_attr("target", SM_90), SM_90)
    assert chosen == rule
    K.checked(func, scheduled)


def test_the_reduction_rules_are_in_the_cuda_column_only():
    cuda = [r.name for r in gpu_rules("cuda")]
    assert cuda.index("column-gemv") < cuda.index("dlight.gpu.Reduction")
    assert cuda.index("row-chains") < cuda.index("dlight.gpu.GeneralReduction")
    assert cuda[-1] == "dlight.gpu.Fallback"
    other = [r.name for r in gpu_rules("other")]
    assert "row-chains" not in other and "column-gemv" not in other


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_128x64():
    # softmax of 128 rows of 64: a block per row, 64 threads (the row, unpadded): the max, exp
    # (once per element), the sum and the division in turn, the row's max, exps and sum in
    # shared memory
    @T.prim_func(s_tir=True, private=True)
    def before(x: T.Buffer((128, 64), "float32"), T_softmax_norm: T.Buffer((128, 64), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["softmax"]})
        # with T.sblock("root"):
        T_softmax_maxelem = T.sblock_alloc_buffer((128,))
        T_softmax_exp = T.sblock_alloc_buffer((128, 64))
        T_softmax_expsum = T.sblock_alloc_buffer((128,))
        for i0, k in T.grid(128, 64):
            with T.sblock("T_softmax_maxelem"):
                v_i0, v_k = T.axis.remap("SR", [i0, k])
                T.reads(x[v_i0, v_k])
                T.writes(T_softmax_maxelem[v_i0])
                with T.init():
                    T_softmax_maxelem[v_i0] = T.float32(-340282346638528859811704183484516925440.0)
                T_softmax_maxelem[v_i0] = T.max(T_softmax_maxelem[v_i0], x[v_i0, v_k])
        for i0, i1 in T.grid(128, 64):
            with T.sblock("T_softmax_exp"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                T.reads(x[v_i0, v_i1], T_softmax_maxelem[v_i0])
                T.writes(T_softmax_exp[v_i0, v_i1])
                T_softmax_exp[v_i0, v_i1] = T.exp(x[v_i0, v_i1] - T_softmax_maxelem[v_i0])
        for i0, k in T.grid(128, 64):
            with T.sblock("T_softmax_expsum"):
                v_i0, v_k = T.axis.remap("SR", [i0, k])
                T.reads(T_softmax_exp[v_i0, v_k])
                T.writes(T_softmax_expsum[v_i0])
                with T.init():
                    T_softmax_expsum[v_i0] = T.float32(0.0)
                T_softmax_expsum[v_i0] = T_softmax_expsum[v_i0] + T_softmax_exp[v_i0, v_k]
        for i0, i1 in T.grid(128, 64):
            with T.sblock("T_softmax_norm"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                T.reads(T_softmax_exp[v_i0, v_i1], T_softmax_expsum[v_i0])
                T.writes(T_softmax_norm[v_i0, v_i1])
                T.sblock_attr({"axis": 1})
                T_softmax_norm[v_i0, v_i1] = T_softmax_exp[v_i0, v_i1] / T_softmax_expsum[v_i0]

    @T.prim_func(s_tir=True, private=True)
    def expected(x: T.Buffer((128, 64), "float32"), T_softmax_norm: T.Buffer((128, 64), "float32")):
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
                        T_softmax_maxelem_shared[v0] = T.max(
                            T_softmax_maxelem_shared[v0], x[v0, v1]
                        )
            for ax0_ax1_fused_1 in T.thread_binding(64, thread="threadIdx.x"):
                for ax0_ax1_fused_0 in T.serial(
                    1, annotations={"pragma_auto_unroll_max_step": 256, "pragma_unroll_explicit": 1}
                ):
                    with T.sblock("T_softmax_exp"):
                        v0 = T.axis.spatial(128, ax0_fused)
                        v1 = T.axis.spatial(64, ax0_ax1_fused_0 * 64 + ax0_ax1_fused_1)
                        T.reads(x[v0, v1], T_softmax_maxelem_shared[v0])
                        T.writes(T_softmax_exp_shared[v0, v1])
                        T_softmax_exp_shared[v0, v1] = T.exp(
                            x[v0, v1] - T_softmax_maxelem_shared[v0]
                        )
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

    check(RowChains(), before, expected, SM_90)
    check_gpu_schedule(before, expected)


def test_schedule_16x256():
    # 16 rows of 256: a block per row, 256 threads, the same four steps
    @T.prim_func(s_tir=True, private=True)
    def before(x: T.Buffer((16, 256), "float32"), T_softmax_norm: T.Buffer((16, 256), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["softmax"]})
        # with T.sblock("root"):
        T_softmax_maxelem = T.sblock_alloc_buffer((16,))
        T_softmax_exp = T.sblock_alloc_buffer((16, 256))
        T_softmax_expsum = T.sblock_alloc_buffer((16,))
        for i0, k in T.grid(16, 256):
            with T.sblock("T_softmax_maxelem"):
                v_i0, v_k = T.axis.remap("SR", [i0, k])
                T.reads(x[v_i0, v_k])
                T.writes(T_softmax_maxelem[v_i0])
                with T.init():
                    T_softmax_maxelem[v_i0] = T.float32(-340282346638528859811704183484516925440.0)
                T_softmax_maxelem[v_i0] = T.max(T_softmax_maxelem[v_i0], x[v_i0, v_k])
        for i0, i1 in T.grid(16, 256):
            with T.sblock("T_softmax_exp"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                T.reads(x[v_i0, v_i1], T_softmax_maxelem[v_i0])
                T.writes(T_softmax_exp[v_i0, v_i1])
                T_softmax_exp[v_i0, v_i1] = T.exp(x[v_i0, v_i1] - T_softmax_maxelem[v_i0])
        for i0, k in T.grid(16, 256):
            with T.sblock("T_softmax_expsum"):
                v_i0, v_k = T.axis.remap("SR", [i0, k])
                T.reads(T_softmax_exp[v_i0, v_k])
                T.writes(T_softmax_expsum[v_i0])
                with T.init():
                    T_softmax_expsum[v_i0] = T.float32(0.0)
                T_softmax_expsum[v_i0] = T_softmax_expsum[v_i0] + T_softmax_exp[v_i0, v_k]
        for i0, i1 in T.grid(16, 256):
            with T.sblock("T_softmax_norm"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                T.reads(T_softmax_exp[v_i0, v_i1], T_softmax_expsum[v_i0])
                T.writes(T_softmax_norm[v_i0, v_i1])
                T.sblock_attr({"axis": 1})
                T_softmax_norm[v_i0, v_i1] = T_softmax_exp[v_i0, v_i1] / T_softmax_expsum[v_i0]

    @T.prim_func(s_tir=True, private=True)
    def expected(x: T.Buffer((16, 256), "float32"), T_softmax_norm: T.Buffer((16, 256), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["softmax"]})
        # with T.sblock("root"):
        T_softmax_maxelem_shared = T.sblock_alloc_buffer((16,), scope="shared")
        T_softmax_exp_shared = T.sblock_alloc_buffer((16, 256), scope="shared")
        T_softmax_expsum_shared = T.sblock_alloc_buffer((16,), scope="shared")
        for ax0_fused in T.thread_binding(16, thread="blockIdx.x"):
            for ax0_ax1_fused_1 in T.thread_binding(256, thread="threadIdx.x"):
                for ax0_ax1_fused_0 in T.serial(
                    1, annotations={"pragma_auto_unroll_max_step": 256, "pragma_unroll_explicit": 1}
                ):
                    with T.sblock("T_softmax_maxelem"):
                        v0 = T.axis.spatial(16, ax0_fused)
                        v1 = T.axis.reduce(256, ax0_ax1_fused_0 * 256 + ax0_ax1_fused_1)
                        T.reads(x[v0, v1])
                        T.writes(T_softmax_maxelem_shared[v0])
                        with T.init():
                            T_softmax_maxelem_shared[v0] = T.float32(
                                -340282346638528859811704183484516925440.0
                            )
                        T_softmax_maxelem_shared[v0] = T.max(
                            T_softmax_maxelem_shared[v0], x[v0, v1]
                        )
            for ax0_ax1_fused_1 in T.thread_binding(256, thread="threadIdx.x"):
                for ax0_ax1_fused_0 in T.serial(
                    1, annotations={"pragma_auto_unroll_max_step": 256, "pragma_unroll_explicit": 1}
                ):
                    with T.sblock("T_softmax_exp"):
                        v0 = T.axis.spatial(16, ax0_fused)
                        v1 = T.axis.spatial(256, ax0_ax1_fused_0 * 256 + ax0_ax1_fused_1)
                        T.reads(x[v0, v1], T_softmax_maxelem_shared[v0])
                        T.writes(T_softmax_exp_shared[v0, v1])
                        T_softmax_exp_shared[v0, v1] = T.exp(
                            x[v0, v1] - T_softmax_maxelem_shared[v0]
                        )
            for ax0_ax1_fused_1 in T.thread_binding(256, thread="threadIdx.x"):
                for ax0_ax1_fused_0 in T.serial(
                    1, annotations={"pragma_auto_unroll_max_step": 256, "pragma_unroll_explicit": 1}
                ):
                    with T.sblock("T_softmax_expsum"):
                        v0 = T.axis.spatial(16, ax0_fused)
                        v1 = T.axis.reduce(256, ax0_ax1_fused_0 * 256 + ax0_ax1_fused_1)
                        T.reads(T_softmax_exp_shared[v0, v1])
                        T.writes(T_softmax_expsum_shared[v0])
                        with T.init():
                            T_softmax_expsum_shared[v0] = T.float32(0.0)
                        T_softmax_expsum_shared[v0] = (
                            T_softmax_expsum_shared[v0] + T_softmax_exp_shared[v0, v1]
                        )
            for ax1_fused_1 in T.thread_binding(256, thread="threadIdx.x"):
                for ax1_fused_0 in T.serial(
                    1, annotations={"pragma_auto_unroll_max_step": 256, "pragma_unroll_explicit": 1}
                ):
                    with T.sblock("T_softmax_norm"):
                        v0 = T.axis.spatial(16, ax0_fused)
                        v1 = T.axis.spatial(256, ax1_fused_0 * 256 + ax1_fused_1)
                        T.reads(T_softmax_exp_shared[v0, v1], T_softmax_expsum_shared[v0])
                        T.writes(T_softmax_norm[v0, v1])
                        T.sblock_attr({"axis": 1})
                        T_softmax_norm[v0, v1] = (
                            T_softmax_exp_shared[v0, v1] / T_softmax_expsum_shared[v0]
                        )

    check(RowChains(), before, expected, SM_90)
    check_gpu_schedule(before, expected)


def test_declines_a_column_reduction():
    # the reduction walks the weights' columns
    assert declines(RowChains(), gemv(1024))
