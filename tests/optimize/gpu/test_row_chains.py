"""The GPU reduction rules (``row-chains``, ``column-gemv`` and dlight's GEMV/Reduction kept to
their work budget), checked without a GPU: the table gives them their kernels (softmax, means,
squeeze-and-excite products, a batch-1 dense on [K, N] weights), the scheduled kernel computes
no more than 1.3x its layer (``estimate_tir_flops``), a kernel over 10 MFLOP launches a block
per SM, and the schedule, emulated on the CPU (:mod:`tvm_hetero.testing.gpu_emulation`),
computes what the unscheduled kernel computes."""

import pytest
import tvm
from tvm.script import tirx as T

from tvm_hetero.optimize.gpu import gpu_rules
from tvm_hetero.optimize.gpu.column_gemv import ColumnGemv, choose_config
from tvm_hetero.optimize.gpu.dlight import DlightRule
from tvm_hetero.optimize.gpu.row_chains import RowChains, choose_threads
from tvm_hetero.optimize.gpu.work_budget import WorkBudget, work_ratio
from tvm_hetero.optimize.pass_ import optimize_function
from tvm_hetero.relax_ir import OP_KINDS_ATTR
from tvm_hetero.target import cuda_multiprocessors, cuda_target
from tvm_hetero.testing.gpu_census import GOALS, launch_shape
from tvm_hetero.testing.gpu_emulation import check_gpu_schedule
from tvm_hetero.testing.scheduled import estimated_flops
from tests.helpers.schedules import check, declines, gemv

SM_90 = tvm.target.Target(cuda_target("sm_90"))
SMS = cuda_multiprocessors("sm_90")


def _func(tensors, kinds):
    from tvm import te

    return te.create_prim_func(tensors).with_attr(OP_KINDS_ATTR, kinds)


def _softmax(heads: int, length: int):
    """An attention softmax over rows of `length` (BERT: 128, ViT: 197)."""
    from tvm import te, topi

    x = te.placeholder((1, heads, length, length), "float32", name="x")
    return _func([x, topi.nn.softmax(x, axis=-1)], ["softmax"])


def _masked_softmax(heads: int, length: int):
    """BERT's softmax as torch exports it with an attention mask: the softmax, then
    ``where(isnan(p), 0, p)`` (TorchScript and dynamo alike)."""
    from tvm import te, tirx, topi

    x = te.placeholder((1, heads, length, length), "float32", name="x")
    zero = te.placeholder((1,), "float32", name="zero")
    p = topi.nn.softmax(x, axis=-1)
    nan = te.compute(p.shape, lambda *i: tirx.isnan(p(*i)), name="compute")
    y = te.compute(p.shape, lambda *i: tirx.Select(nan(*i), zero[0], p(*i)), name="T_where")
    return _func([x, zero, y], ["softmax", "tir_isnan", "where"])


def _layer_norm(rows: int, width: int):
    from tvm import te, topi

    x = te.placeholder((1, rows, width), "float32", name="x")
    gamma = te.placeholder((width,), "float32", name="gamma")
    beta = te.placeholder((width,), "float32", name="beta")
    return _func([x, gamma, beta, topi.nn.layer_norm(x, gamma, beta, axis=[-1])],
                 ["layer_norm"])


def _rms_norm(width: int):
    """A decode step's RMS norm (one row) as llama_decode's import fuses it: the mean of the
    squares (squared by another kernel), then x / sqrt(mean + eps) * weight."""
    from tvm import te, topi

    squares = te.placeholder((1, 1, width), "float32", name="squares")
    x = te.placeholder((1, 1, width), "float32", name="x")
    w = te.placeholder((width,), "float32", name="w")
    mean = topi.divide(topi.sum(squares, axis=2, keepdims=True), float(width))
    scale = topi.divide(1.0, topi.sqrt(topi.add(mean, 1e-6)))
    out = topi.multiply(topi.multiply(x, scale), w)
    return _func([squares, x, w, out], ["mean", "add", "tir_sqrt", "divide", "multiply"])


def _mean(channels: int, size: int):
    """A global average pool as the ONNX import writes it (a sum, then a divide)."""
    from tvm import te, topi

    x = te.placeholder((1, channels, size, size), "float32", name="x")
    total = topi.sum(x, axis=(2, 3), keepdims=True)
    return _func([x, topi.divide(total, float(size * size))], ["mean"])


def _excite(squeezed: int, channels: int, size: int, gate: str):
    """A squeeze-and-excite 1x1 convolution on a 1x1 map, its bias and gate, times the
    feature map (EfficientNet: sigmoid; MobileNetV3: hard sigmoid), fused as one kernel."""
    from tvm import te, topi

    s = te.placeholder((1, squeezed, 1, 1), "float32", name="s")
    w = te.placeholder((channels, squeezed, 1, 1), "float32", name="w")
    b = te.placeholder((1, channels, 1, 1), "float32", name="b")
    feature = te.placeholder((1, channels, size, size), "float32", name="feature")
    y = topi.add(topi.nn.conv2d_nchw(s, w, 1, 0, 1), b)
    if gate == "sigmoid":
        y, ops = topi.sigmoid(y), ["tir_sigmoid"]
    else:
        y, ops = topi.clip(topi.add(topi.multiply(y, 1.0 / 6), 0.5), 0.0, 1.0), \
            ["multiply", "add", "tir_clip"]
    out = te.compute(feature.shape, lambda n, c, h, x: feature[n, c, h, x] * y[n, c, 0, 0],
                     name="excite")
    return _func([s, w, b, feature, out], ["conv2d", "add", *ops, "multiply"])


def _dense(inputs: int, outputs: int, weight_layout: str = "KN", batch: int = 1):
    """A dense layer + bias + ReLU on `weight_layout` weights ([K, N]: a column reduction,
    as an ONNX MatMul writes it; [N, K]: a row reduction, as Gemm with transB writes it)."""
    from tvm import te, topi

    x = te.placeholder((batch, inputs), "float32", name="x")
    shape = (inputs, outputs) if weight_layout == "KN" else (outputs, inputs)
    w = te.placeholder(shape, "float32", name="w")
    b = te.placeholder((outputs,), "float32", name="b")
    k = te.reduce_axis((0, inputs), name="k")
    if weight_layout == "KN":
        y = te.compute((batch, outputs), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k))
    else:
        y = te.compute((batch, outputs), lambda i, j: te.sum(x[i, k] * w[j, k], axis=k))
    return _func([x, w, b, topi.nn.relu(topi.add(y, b))], ["matmul", "add", "relu"])


def _elementwise():
    from tvm import te, topi

    x = te.placeholder((1, 64, 28, 28), "float32", name="x")
    return _func([x, topi.nn.relu(x)], ["relu"])


def _checked(func, scheduled):
    """Emulated answers right; the work ratio and blocks of `scheduled`."""
    assert scheduled is not None
    check_gpu_schedule(func, scheduled)
    work = estimated_flops(scheduled) / estimated_flops(func)
    assert work <= GOALS.max_work, f"{work:.2f}x the layer's work"
    blocks, _ = launch_shape(scheduled)
    if estimated_flops(func) / 1e6 >= GOALS.min_mflop_for_sms:
        assert blocks >= SMS, f"{blocks} blocks < {SMS} SMs"
    return work, blocks


@pytest.mark.parametrize("heads, length, padded", [(12, 128, 128), (2, 197, 224)])
def test_row_chains_computes_softmax_once_per_element(heads, length, padded):
    func = _softmax(heads, length)
    work, blocks = _checked(func, RowChains().apply(func, SM_90))
    # the exp is kept in shared memory, not computed again for the sum and the output: the
    # only extra work is the row's padding to the threads (197 to 7 warps)
    assert work == pytest.approx(padded / length, abs=0.01)
    assert blocks == heads * length  # a block per row
    general = DlightRule("gpu", "GeneralReduction").apply(func, SM_90)
    assert estimated_flops(general) / estimated_flops(func) > 1.3


def test_row_chains_takes_a_softmax_whose_last_step_reads_no_scalar_of_the_row():
    # the last block (where) reads the division's row and isnan's, no max or sum: its rows are
    # its leading loops; GeneralReduction took it at 2.5x its work
    func = _masked_softmax(12, 128)
    scheduled, chosen = optimize_function(func.with_attr("target", SM_90), SM_90)
    assert chosen == "row-chains"
    work, blocks = _checked(func, scheduled)
    assert (work, blocks) == (1.0, 12 * 128)
    general = DlightRule("gpu", "GeneralReduction").apply(func, SM_90)
    assert estimated_flops(general) / estimated_flops(func) > 1.3


@pytest.mark.parametrize("channels, size", [(240, 14), (1000, 13), (2048, 7)])
def test_row_chains_schedules_means_without_padding_their_rows(channels, size):
    func = _mean(channels, size)
    _checked(func, RowChains().apply(func, SM_90))


@pytest.mark.parametrize("squeezed, channels, gate", [(10, 240, "sigmoid"),
                                                      (60, 240, "hard_sigmoid"),
                                                      (20, 480, "sigmoid")])
def test_row_chains_gates_the_map_once_per_channel(squeezed, channels, gate):
    func = _excite(squeezed, channels, 14, gate)
    _checked(func, RowChains().apply(func, SM_90))


def test_row_chains_schedules_layer_norms_right():
    func = _layer_norm(128, 768)
    _checked(func, RowChains().apply(func, SM_90))


def test_row_chains_schedules_a_single_row_rms_norm_once():
    # dlight's GeneralReduction computes the scale again for every element (2x)
    func = _rms_norm(1024)
    work, blocks = _checked(func, RowChains().apply(func, SM_90))
    assert work == pytest.approx(1.0, abs=0.01) and blocks == 1


@pytest.mark.parametrize("func", [_dense(512, 256, "KN"), _elementwise()],
                         ids=["column-reduction", "elementwise"])
def test_row_chains_declines_what_is_not_a_contiguous_row_chain(func):
    # a [K, N] dense read down its columns would have a warp's threads read 32 rows apart
    assert RowChains().apply(func, SM_90) is None
    assert RowChains().apply(_softmax(2, 128), tvm.target.Target("llvm")) is None


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


def test_column_gemv_fills_the_sms_with_a_batch_1_dense():
    # mlp_b1's 4096 -> 2048 dense: dlight's Reduction launches 128 blocks of 16 x 16
    func = _dense(4096, 2048, "KN")
    before, _ = launch_shape(DlightRule("gpu", "Reduction").apply(func, SM_90))
    assert before < SMS
    scheduled = ColumnGemv().apply(func, SM_90)
    _, blocks = _checked(func, scheduled)
    assert blocks >= SMS


def test_column_gemv_declines_row_reductions_and_other_kernels():
    assert ColumnGemv().apply(_dense(512, 256, "NK"), SM_90) is None
    assert ColumnGemv().apply(_elementwise(), SM_90) is None
    assert ColumnGemv().apply(_softmax(2, 128), SM_90) is None
    # no SM count for the arch: not this rule's (dlight's Reduction takes it)
    unknown = tvm.target.Target({"kind": "cuda", "arch": "sm_52"})
    assert ColumnGemv().apply(_dense(512, 256, "KN"), unknown) is None


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


def test_work_budget_declines_dlights_padded_schedules_only():
    gemv = DlightRule("gpu", "GEMV")
    excite = _excite(10, 240, 14, "sigmoid")
    assert work_ratio(excite, gemv.apply(excite, SM_90)) > 1.3  # lanes of 32 for 10 channels
    assert WorkBudget(gemv).apply(excite, SM_90) is None
    large = _dense(4096, 1024, "NK")  # a row GEMV dlight does right
    scheduled = WorkBudget(gemv).apply(large, SM_90)
    assert scheduled is not None and work_ratio(large, scheduled) <= 1.3
    assert WorkBudget(gemv).fingerprint() != gemv.fingerprint()
    assert WorkBudget(gemv).name == gemv.name


@pytest.mark.parametrize("make, rule", [
    (lambda: _softmax(12, 128), "row-chains"),
    (lambda: _mean(240, 14), "row-chains"),
    (lambda: _excite(10, 240, 14, "sigmoid"), "row-chains"),
    (lambda: _dense(4096, 2048, "KN"), "column-gemv"),
    (lambda: _dense(4096, 1024, "NK"), "dlight.gpu.GEMV"),
], ids=["softmax", "mean", "excite", "column-dense", "row-dense"])
def test_the_cuda_table_gives_the_reduction_rules_their_kernels(make, rule):
    func = make()
    scheduled, chosen = optimize_function(func.with_attr("target", SM_90), SM_90)
    assert chosen == rule
    _checked(func, scheduled)


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
