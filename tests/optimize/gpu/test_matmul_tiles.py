"""The GPU matmul/convolution rule (``matmul-tiles``): tiles chosen from the kernel's extents and
the GPU fill every SM without padding the work, and compute the right values (checked on the
CPU by ``gpu_emulation``, no GPU needed). Its schedule of a 3 x 3 convolution is written out at
the end (the kernel before and the schedule expected in TVMScript, compared with
``tvm.ir.assert_structural_equal``); a second shape, a matmul with a bias, is checked by the
schedule's key properties (each schedule is about 200 lines)."""

import pytest
import tvm
from tvm.script import tirx as T

from tvm_hetero import optimize
from tvm_hetero.optimize.gpu.matmul_tiles import (MAX_WASTE, MIN_SPLIT_K, MatmulTiles,
                                                  choose_tile, matmul_extents)
from tvm_hetero.relax_ir import OP_KINDS_ATTR
from tvm_hetero.target import CUDA_LIMITS, cuda_target
from tvm_hetero.testing.gpu_emulation import check_gpu_schedule, thread_extents
from tvm_hetero.testing.scheduled import estimated_flops

from tests.helpers.schedules import (SM_90, check, declines, depthwise_map, loops, matmul_bias,
                                     schedule)

SM90 = CUDA_LIMITS["sm_90"].multiprocessors  # 132: an H100/H200's SMs


def _target(arch="sm_90", **attrs):
    return tvm.target.Target({**cuda_target(arch), **attrs})


def _conv(channels_in, channels_out, size, window=3, stride=1):
    """A fused convolution + bias + ReLU kernel as the ONNX import makes it (NCHW)."""
    from tvm import te, topi

    x = te.placeholder((1, channels_in, size, size), "float32", name="x")
    w = te.placeholder((channels_out, channels_in, window, window), "float32", name="w")
    b = te.placeholder((1, channels_out, 1, 1), "float32", name="b")
    y = topi.nn.relu(topi.add(topi.nn.conv2d_nchw(x, w, stride, window // 2, 1), b))
    return te.create_prim_func([x, w, b, y]).with_attr(OP_KINDS_ATTR,
                                                       ["conv2d", "add", "relu"])


def _dense(rows, inputs, outputs):
    """``relu(x @ w + b)`` with a [inputs, outputs] weight (the ONNX Gemm/MatMul form)."""
    from tvm import te, topi

    x = te.placeholder((rows, inputs), "float32", name="x")
    w = te.placeholder((inputs, outputs), "float32", name="w")
    b = te.placeholder((outputs,), "float32", name="b")
    y = topi.nn.relu(topi.add(topi.matmul(x, w), b))
    return te.create_prim_func([x, w, b, y]).with_attr(OP_KINDS_ATTR,
                                                       ["matmul", "add", "relu"])


def _launches(func) -> list[int]:
    """Thread blocks of each kernel launch of a scheduled kernel: the product of its
    blockIdx extents (a split reduction launches twice)."""
    out = []
    for launch in thread_extents(func):
        count = 1
        for tag, extents in launch.items():
            if tag.startswith("blockIdx"):
                count *= max(extents)
        out.append(count)
    return out


def _blocks(func) -> int:
    """Thread blocks of a scheduled kernel's largest launch."""
    return max(_launches(func))


def _dlight_matmul(func, target):
    from tvm.s_tir import dlight as dl

    with target:
        return dl.gpu.Matmul().apply(func, target, False).mod["main"]


def test_a_14x14x256_3x3_convolution_fills_every_sm():
    # dlight's one tile (32 x 64 outputs) gives it 7 x 4 = 28 blocks on 132 SMs
    func, target = _conv(256, 256, 14), _target()
    assert matmul_extents(func) == (1, 196, 256, 2304)
    assert _blocks(_dlight_matmul(func, target)) == 28
    scheduled = MatmulTiles().apply(func, target)
    assert scheduled is not None
    assert _blocks(scheduled) >= SM90
    assert estimated_flops(scheduled) <= 1.3 * estimated_flops(func)


@pytest.mark.parametrize("func", [
    pytest.param(_dense(8, 512, 1024), id="dense-8-rows"),  # dlight: 4.0x (8 rows padded to 32)
    pytest.param(_conv(3, 16, 40), id="conv-3-to-16-channels"),  # dlight: 4.8x (16 to 64)
    pytest.param(_conv(32, 75, 10, window=1), id="conv-75-outputs"),  # dlight: 2.2x
])
def test_padding_to_the_tile_stays_within_the_goal_where_dlight_pads_far_more(func):
    target = _target()
    layer = estimated_flops(func)
    assert estimated_flops(_dlight_matmul(func, target)) > 1.3 * layer
    scheduled = MatmulTiles().apply(func, target)
    assert estimated_flops(scheduled) <= MAX_WASTE * 1.02 * layer


@pytest.mark.parametrize("func", [
    pytest.param(_conv(64, 64, 14), id="conv-3x3"),
    pytest.param(_conv(16, 40, 9, stride=2), id="conv-3x3-stride-2-ragged"),
    pytest.param(_conv(3, 16, 24), id="conv-3-channels"),
    pytest.param(_dense(8, 256, 200), id="dense-8-rows"),
    pytest.param(_dense(37, 96, 50), id="dense-ragged"),
])
def test_the_scheduled_kernels_compute_the_unscheduled_kernels_values(func):
    scheduled = MatmulTiles().apply(func, _target())
    assert scheduled is not None
    assert check_gpu_schedule(func, scheduled) <= 1e-4


def test_the_tile_follows_the_gpu_of_the_target():
    # fewer SMs (an sm_80 A100: 108) and a lower thread limit give other tiles
    extents = (1, 196, 256, 2304)
    assert choose_tile(*extents, multiprocessors=132, max_threads=1024).blocks >= 132
    small = choose_tile(*extents, multiprocessors=16, max_threads=1024)
    assert small.blocks >= 16 and small.rows * small.cols > 32 * 32
    assert choose_tile(*extents, multiprocessors=132, max_threads=32).threads <= 32
    scheduled = MatmulTiles().apply(_conv(64, 64, 14), _target(max_num_threads=64))
    threads = [int(n.extent) for n in _thread_loops(scheduled, "threadIdx")]
    assert threads and all(extent <= 64 for extent in threads)


def _thread_loops(func, prefix):
    import tvm_ffi
    from tvm import tirx

    found = []

    def visit(node):
        binding = getattr(node, "thread_binding", None)
        if isinstance(node, tirx.For) and binding is not None \
                and str(binding.thread_tag).startswith(prefix):
            found.append(node)
        return node

    tvm_ffi.structural_map(func.body, visit)
    return found


def _matmul(rows, inputs, outputs):
    """``x @ w`` alone (no epilogue), [inputs, outputs] weights."""
    from tvm import te, topi

    x = te.placeholder((rows, inputs), "float32", name="x")
    w = te.placeholder((inputs, outputs), "float32", name="w")
    return te.create_prim_func([x, w, topi.matmul(x, w)]).with_attr(OP_KINDS_ATTR, ["matmul"])


def test_few_outputs_over_a_long_reduction_split_it_to_fill_every_sm():
    # wide_and_deep's 8 x 2048 -> 512 dense: 4096 outputs, at most 128 blocks of a warp
    # unsplit; the reduction in 16 parts of 128, 16 tiles of 8 x 32 each: 256 blocks
    extents = (1, 8, 512, 2048)
    assert choose_tile(*extents, multiprocessors=SM90, max_threads=1024).blocks == 128
    tile = choose_tile(*extents, multiprocessors=SM90, max_threads=1024, split_extent=2048)
    assert (tile.splits, tile.rows, tile.cols, tile.blocks) == (16, 8, 32, 256)
    assert 2048 // tile.splits >= MIN_SPLIT_K and tile.waste <= MAX_WASTE


@pytest.mark.parametrize("func", [
    pytest.param(_dense(8, 2048, 512), id="dense-bias-relu"),
    # 256 outputs a row, as many as a block of the sums has threads
    pytest.param(_dense(8, 576, 256), id="dense-rows-of-a-block"),
    pytest.param(_matmul(8, 1024, 256), id="matmul-no-epilogue"),
    pytest.param(_conv(480, 16, 13, window=1), id="conv-1x1-16-channels"),
    pytest.param(_conv(128, 32, 7), id="conv-3x3-7x7-map"),
])
def test_a_split_reduction_fills_every_sm_with_the_right_values(func):
    # two launches: the parts' partial sums (a block per SM at least), then their sum and
    # the epilogue; within the GPU's limits (the lowering the table checks them on), the
    # work of the layer's, the values the unscheduled kernel's
    from tvm_hetero.optimize.gpu.limits import within_gpu_limits

    scheduled = MatmulTiles().apply(func, _target())
    assert scheduled is not None
    launches = _launches(scheduled)
    assert len(launches) == 2 and launches[0] >= SM90
    assert within_gpu_limits(scheduled, _target())
    assert estimated_flops(scheduled) <= 1.3 * estimated_flops(func)
    assert check_gpu_schedule(func, scheduled) <= 1e-4


def test_kernels_that_fill_the_sms_or_have_a_short_reduction_are_not_split():
    assert choose_tile(1, 196, 256, 2304, multiprocessors=SM90, max_threads=1024,
                       split_extent=256).splits == 1
    # 8 x 200 x 256: 50 blocks unsplit, but parts of 128 leave 2 x 50 < 132: not split
    assert choose_tile(1, 8, 200, 256, multiprocessors=SM90, max_threads=1024,
                       split_extent=256).splits == 1
    assert len(_launches(MatmulTiles().apply(_dense(8, 256, 200), _target()))) == 1


def test_targets_it_has_no_figures_for_go_to_dlight():
    func = _conv(16, 16, 8)
    assert MatmulTiles().apply(func, tvm.target.Target({"kind": "cuda", "arch": "sm_52"})) \
        is None
    assert MatmulTiles().apply(func, tvm.target.Target({"kind": "llvm"})) is None
    # not a matmul-like kernel
    from tvm import te, topi

    x = te.placeholder((4, 32), "float32", name="x")
    relu = te.create_prim_func([x, topi.nn.relu(x)]).with_attr(OP_KINDS_ATTR, ["relu"])
    assert MatmulTiles().apply(relu, _target()) is None


def test_bad_extents_are_one_line_errors():
    with pytest.raises(ValueError, match="no matmul tile"):
        choose_tile(1, 0, 16, 16, multiprocessors=132, max_threads=1024)
    with pytest.raises(ValueError, match="no matmul tile"):
        choose_tile(1, 16, 16, 16, multiprocessors=132, max_threads=16)


def test_it_is_tried_before_dlight_matmul_on_cuda_only():
    table = optimize.default_table()
    cuda = [rule.name for rule in table.rules_for("cuda", "conv2d")]
    assert cuda.index("matmul-tiles") < cuda.index("dlight.gpu.Matmul")
    assert "matmul-tiles" not in [rule.name for rule in table.rules_for("other", "conv2d")]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp_b8", "wide_and_deep"])
def test_suite_models_meet_the_census_goals_on_their_conv_and_matmul_kernels(name):
    # the census goals, built all on cuda@sm_90 without a GPU: no conv/matmul kernel on
    # Fallback/GeneralReduction, at most 1.3x the layer's work, a block per SM over 10 MFLOP
    # (wide_and_deep's 8 x 2048 -> 512 dense through a split reduction), each scheduled
    # kernel's values right under emulation
    import tvm_hetero as th
    from tvm_hetero.layers.classify import classify_bindings, kernel_kind
    from tvm_hetero.layers.layered import placed_module
    from tvm_hetero.testing.scheduled import keep_scheduled
    from tvm_hetero.testing.suite import SUITE

    proto, _ = SUITE[name]()
    model = th.load_model(proto, name=name)
    devices = th.DeviceSet.parse(["cuda@sm_90"])
    placement = th.Placement.all_on(th.extract_layers(
        model, th.PrepareConfig.for_devices(devices)), "cuda")
    scheduled = {}
    compiled = th.build(model, placement, devices, extra_passes=[keep_scheduled(scheduled)])
    mod = placed_module(model, devices, placement)
    checked = 0
    for binding, info in classify_bindings(mod):
        if info is None:
            continue
        gv = binding.value.args[0]
        func = mod[gv]
        if kernel_kind(func, gv.name_hint) not in ("conv2d", "matmul") \
                or gv.name_hint not in scheduled or matmul_extents(func) is None:
            continue
        assert compiled.stats.rules[gv.name_hint] == "matmul-tiles", gv.name_hint
        out = scheduled[gv.name_hint]
        layer = estimated_flops(func)
        assert estimated_flops(out) <= 1.3 * layer, gv.name_hint
        if layer > 10e6:
            assert _blocks(out) >= SM90, gv.name_hint
        assert check_gpu_schedule(func, out) <= 1e-4
        checked += 1
    assert checked >= 3


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_256x14x14(sm_90_from_the_table):
    # 14 x 14 x 256 3x3 convolution as an implicit GEMM [196 pixels, 256 channels, 2304]: a
    # 16 x 16 tile (8 x 8 threads, 2 x 2 each, k 16), the pixels padded to 208 (1.06x), 13 x 16
    # = 208 blocks on 132 SMs (dlight's 32 x 64 tile: 28); im2col and padding in the fetch
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 256, 14, 14), "float32"),
        w: T.Buffer((256, 256, 3, 3), "float32"),
        conv2d_nchw: T.Buffer((1, 256, 14, 14), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((1, 256, 16, 16))
        for i0, i1, i2, i3 in T.grid(1, 256, 16, 16):
            with T.sblock("pad_temp"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1])
                T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                pad_temp[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(
                    1 <= v_i2 and v_i2 < 15 and 1 <= v_i3 and v_i3 < 15,
                    x[v_i0, v_i1, v_i2 - 1, v_i3 - 1],
                    T.float32(0.0),
                )
        for nn, ff, yy, xx, rc, ry, rx in T.grid(1, 256, 14, 14, 256, 3, 3):
            with T.sblock("conv2d_nchw"):
                v_nn, v_ff, v_yy, v_xx, v_rc, v_ry, v_rx = T.axis.remap(
                    "SSSSRRR", [nn, ff, yy, xx, rc, ry, rx]
                )
                T.reads(pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx], w[v_ff, v_rc, v_ry, v_rx])
                T.writes(conv2d_nchw[v_nn, v_ff, v_yy, v_xx])
                with T.init():
                    conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
                conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = (
                    conv2d_nchw[v_nn, v_ff, v_yy, v_xx]
                    + pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx] * w[v_ff, v_rc, v_ry, v_rx]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
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
                                                208,
                                                ax1_0 * 16 + ax1_1 * 16 + ax1_2 * 2 + ax1_3_init,
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
                                            conv2d_nchw_reindex_pad_local[0, v1, v2] = T.float32(
                                                0.0
                                            )
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
                                                ax0_ax2_0_fused * 16
                                                + ax2_2 * 2
                                                + ax2_0 * 2
                                                + ax2_1_1,
                                            )
                                            T.where(ax1_0 * 16 + ax1_2 * 2 + ax1 < 196)
                                            T.reads(conv2d_nchw_reindex_pad_local[v0, v1, v2])
                                            T.writes(conv2d_nchw[0, v2, v1 // 14, v1 % 14])
                                            conv2d_nchw[0, v2, v1 // 14, v1 % 14] = (
                                                conv2d_nchw_reindex_pad_local[v0, v1, v2]
                                            )

    check(MatmulTiles(), before, expected, SM_90)
    check_gpu_schedule(before, expected)


def test_schedule_512x256x384_by_its_key_properties(sm_90_from_the_table):
    # a matmul [512, 256] x [256, 384] with a bias: 32 x 32 tiles (8 x 8 threads, 4 x 4 each,
    # 2-lane vectors), 16 x 12 = 192 blocks on 132 SMs, k in 16 steps of 16, no padding
    func = matmul_bias(512, 256, 384)
    scheduled = schedule(MatmulTiles(), func, SM_90)
    bound = {(extent, tag) for kind, extent, tag in loops(scheduled) if kind == "thread_binding"}
    assert bound == {(16, "blockIdx.x"), (12, "blockIdx.y"), (8, "threadIdx.x"),
                     (8, "threadIdx.y"), (1, "vthread.x"), (1, "vthread.y")}
    assert ("serial", 16, "") in loops(scheduled)
    assert {extent for kind, extent, _ in loops(scheduled) if kind == "vectorized"} == {2}
    assert estimated_flops(scheduled) == estimated_flops(func)
    check_gpu_schedule(func, scheduled)


def test_declines_a_depthwise_convolution():
    # a depthwise convolution: no GEMM (window-tiles')
    assert declines(MatmulTiles(), depthwise_map())
