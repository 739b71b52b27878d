"""The ``window-tiles`` GPU rule (depthwise and grouped convolutions, pools, LRN's channel
window), checked without a GPU: the table gives it the kernels, the tile's input fits the
target's shared memory, the kernel computes no more than its layer (``estimate_tir_flops``),
and the schedule, emulated on the CPU (:mod:`tvm_hetero.testing.gpu_emulation`), computes what
the unscheduled kernel computes."""

import pytest
import tvm
import tvm_ffi
from tvm.script import tirx as T

from tvm_hetero import optimize
from tvm_hetero.optimize.gpu.window_tiles import WindowTiles, shared_bytes_per_block
from tvm_hetero.optimize.pass_ import optimize_function
from tvm_hetero.relax_ir import OP_KINDS_ATTR
from tvm_hetero.target import CUDA_LIMITS, cuda_target
from tvm_hetero.testing.gpu_emulation import check_gpu_schedule
from tvm_hetero.testing.scheduled import estimated_flops

from tests.helpers.schedules import check, conv3x3, declines

SM_90 = tvm.target.Target(cuda_target("sm_90"))


def _epilogue(y, epilogue: str, channels: int, extra: list):
    """`y` followed by `epilogue`; the op kinds it adds; its parameters go to `extra`."""
    from tvm import te, topi

    if epilogue == "none":
        return y, []
    if epilogue == "clip":  # ReLU6 after a bias (MobileNetV2)
        b = te.placeholder((1, channels, 1, 1), "float32", name="b")
        extra.append(b)
        return topi.minimum(topi.maximum(topi.add(y, b), 0.0), 6.0), \
            ["add", "maximum", "minimum"]
    if epilogue == "silu":  # EfficientNet
        return topi.multiply(y, topi.sigmoid(y)), ["tir_sigmoid", "multiply"]
    if epilogue == "batch_norm":  # ShuffleNet's folded batch norm, as its import writes it
        params = [te.placeholder((1, channels, 1, 1), "float32", name=f"bn{i}")
                  for i in range(4)]
        extra.extend(params)
        mean, var, gamma, beta = params
        return topi.add(topi.multiply(topi.divide(topi.subtract(y, mean), var), gamma),
                        beta), ["subtract", "divide", "multiply", "add"]
    assert epilogue == "residual"
    r = te.placeholder(tuple(int(d) for d in y.shape), "float32", name="residual")
    extra.append(r)
    return topi.nn.relu(topi.add(y, r)), ["add", "relu"]


def _conv(channels: int, size: int, window: int, stride: int, epilogue: str,
          groups: int | None = None, out_channels: int | None = None):
    """A fused depthwise (or grouped, with `groups`) convolution kernel as the ONNX import
    makes it: topi's group_conv2d_nchw, padding window // 2, then `epilogue`."""
    from tvm import te, topi

    groups = groups or channels
    out_channels = out_channels or channels
    x = te.placeholder((1, channels, size, size), "float32", name="x")
    w = te.placeholder((out_channels, channels // groups, window, window), "float32", name="w")
    extra = []
    y, ops = _epilogue(topi.nn.group_conv2d_nchw(x, w, stride, window // 2, 1, groups),
                       epilogue, out_channels, extra)
    return te.create_prim_func([x, w, *extra, y]).with_attr(OP_KINDS_ATTR, ["conv2d", *ops])


def _pool(kind: str, channels: int, size: int, window: int, stride: int, pad: int,
          epilogue: str = "none"):
    from tvm import te, topi

    x = te.placeholder((1, channels, size, size), "float32", name="x")
    extra = []
    y, ops = _epilogue(topi.nn.pool2d(x, (window, window), (stride, stride), (1, 1),
                                      (pad,) * 4, kind, count_include_pad=False),
                       epilogue, channels, extra)
    return te.create_prim_func([x, *extra, y]).with_attr(OP_KINDS_ATTR,
                                                           [f"{kind}_pool2d", *ops])


def _lrn_window(channels: int, size: int):
    """Local response normalization's sum over 5 neighbouring channels, as the ONNX import
    writes it (AlexNet, GoogLeNet): an average pool over (channels, rows, columns) of a
    (1, 1, C, H, W) tensor, window (5, 1, 1), channel padding 2."""
    from tvm import te, topi

    x = te.placeholder((1, 1, channels, size, size), "float32", name="x")
    y = topi.nn.pool3d(x, (5, 1, 1), (1, 1, 1), (1, 1, 1), (2, 0, 0, 2, 0, 0), "avg",
                       count_include_pad=False, layout="NCDHW")
    return te.create_prim_func([x, y]).with_attr(OP_KINDS_ATTR, ["avg_pool3d"])


def _launch(func) -> dict[str, int]:
    """``{thread tag: extent}`` of a scheduled kernel's thread-bound loops."""
    from tvm import tirx

    found = {}

    def visit(node):
        if isinstance(node, tirx.For) and getattr(node, "thread_binding", None) is not None:
            tag = str(node.thread_binding.thread_tag)
            found[tag] = max(found.get(tag, 1), int(node.extent))
        return node

    tvm_ffi.structural_map(func.body, visit)
    return found


def _scheduled_and_checked(func, target=SM_90) -> tuple:
    """`func` scheduled by the default table for `target`: asserts window-tiles took it, the
    work and the shared memory, and the emulated answers; returns the scheduled kernel."""
    scheduled, rule = optimize_function(func.with_attr("target", target), target)
    assert rule == "window-tiles"
    # the work ratio is exact: every split is by a divisor, no thread computes a padded output
    assert estimated_flops(scheduled) <= 1.3 * estimated_flops(func)
    # the shared buffers as TVM's GPU lowering places and compacts them (the census compiles
    # the suite's with nvcc, which rejects a block over the limit)
    assert 0 < shared_bytes_per_block(scheduled) <= int(target.attrs["max_shared_memory_per_block"])
    launch = _launch(scheduled)
    assert launch["threadIdx.x"] <= int(target.attrs["max_num_threads"])
    check_gpu_schedule(func, scheduled)
    return scheduled


@pytest.mark.parametrize("channels, size, window, stride, epilogue", [
    (32, 112, 3, 1, "clip"),  # MobileNetV2's first depthwise layer
    (96, 112, 3, 2, "clip"),  # stride 2
    (40, 28, 5, 1, "silu"),  # a 5x5 window (EfficientNet, MobileNetV3)
    (58, 28, 3, 2, "batch_norm"),  # ShuffleNet: a folded batch norm, no activation
    (48, 14, 3, 1, "residual"),  # an input of the output's shape in the epilogue
    (960, 7, 3, 1, "none"),  # 7x7 maps, many channels, no epilogue
])
def test_window_tiles_schedules_depthwise_convolutions_right(channels, size, window, stride,
                                                             epilogue):
    _scheduled_and_checked(_conv(channels, size, window, stride, epilogue))


@pytest.mark.parametrize("kind, channels, size, window, stride, pad, epilogue", [
    ("max", 64, 112, 3, 2, 1, "none"),  # ResNet's stem pool
    ("max", 64, 55, 3, 2, 0, "none"),  # no padding: the input fetched as it is (GoogLeNet)
    ("max", 128, 56, 2, 2, 0, "relu_free"),  # VGG's 2x2 pools
    ("avg", 24, 56, 3, 2, 1, "none"),  # ShuffleNet's shortcut: the divisor in the epilogue
    ("avg", 192, 28, 3, 1, 1, "none"),  # Inception's pool branch, stride 1
])
def test_window_tiles_schedules_pools_right(kind, channels, size, window, stride, pad,
                                            epilogue):
    _scheduled_and_checked(_pool(kind, channels, size, window, stride, pad,
                                 "none" if epilogue == "relu_free" else epilogue))


def test_window_tiles_schedules_global_pools_of_small_windows_right():
    # ResNet-50's last pool: 2048 windows of 7 x 7, a warp's in shared memory (dlight's
    # reduction rule: 1.7x the work, 32 threads for 49 elements)
    _scheduled_and_checked(_pool("avg", 2048, 7, 7, 1, 0))


def test_window_tiles_schedules_lrn_channel_windows_right():
    _scheduled_and_checked(_lrn_window(64, 27))


@pytest.mark.parametrize("channels, out_channels, groups, window, size", [
    (24, 112, 4, 1, 28),  # ShuffleNet's grouped 1x1 convolution (6 inputs, 28 outputs a group)
    (16, 32, 2, 3, 14),  # a grouped 3x3 convolution (8 inputs, 16 outputs a group)
    # 68 inputs and outputs a group, 2 outputs a block: each block's fetch within its group
    # (fused with the other block indices, TVM allocated 6 groups' channels: 80 KB)
    (272, 272, 4, 1, 7),
])
def test_window_tiles_schedules_grouped_convolutions_right(channels, out_channels, groups,
                                                           window, size):
    _scheduled_and_checked(_conv(channels, size, window, 1, "batch_norm", groups=groups,
                                 out_channels=out_channels))


def _blocked_depthwise(blocks: int, size: int, window: int, lanes: int, stride: int):
    """A depthwise convolution and its bias in the CPU forms' blocked layout NCHW[lanes]c
    (``ops.conv2d_nchwc``), as a GPU gets it where every layer of a model runs the CPU forms
    (ConvNeXt-T's, before its forms matched: GeneralReduction, 7.8x the work)."""
    from tvm import te, topi

    from tvm_hetero.ops.conv2d_nchwc import depthwise_conv2d_nchwc

    x = te.placeholder((1, blocks, size, size, lanes), "float32", name="x")
    w = te.placeholder((blocks, 1, window, window, 1, lanes), "float32", name="w")
    b = te.placeholder((1, blocks, 1, 1, lanes), "float32", name="b")
    y = topi.add(depthwise_conv2d_nchwc(x, w, (stride, stride), (window // 2,) * 4, (1, 1)), b)
    return te.create_prim_func([x, w, b, y]).with_attr(OP_KINDS_ATTR, ["conv2d", "add"])


@pytest.mark.parametrize("blocks, size, window, lanes, stride", [
    (12, 28, 7, 16, 1),  # ConvNeXt-T's second stage: 192 channels, 7x7
    (6, 56, 3, 16, 2),  # a stride-2 3x3 of 96 channels
    (4, 16, 3, 8, 1),  # blocks of 8 lanes (AVX2)
])
def test_window_tiles_schedules_blocked_depthwise_convolutions_right(blocks, size, window,
                                                                    lanes, stride):
    from tvm_hetero.testing.scheduled import is_depthwise

    func = _blocked_depthwise(blocks, size, window, lanes, stride)
    assert is_depthwise(func)
    scheduled = _scheduled_and_checked(func)
    assert estimated_flops(scheduled) == estimated_flops(func)
    # every lane of a block in every tile: the threads a multiple of the lanes
    assert _launch(scheduled)["threadIdx.x"] % lanes == 0
    if blocks * size * size * lanes >= 64 * 256:
        assert _launch(scheduled)["blockIdx.x"] >= CUDA_LIMITS["sm_90"].multiprocessors


def test_window_tiles_launches_a_block_per_sm_where_the_layer_has_the_outputs():
    # 32 channels of 112 x 112: 401408 outputs, at most 256 threads of 4 rows a block
    scheduled = _scheduled_and_checked(_conv(32, 112, 3, 1, "clip"))
    assert _launch(scheduled)["blockIdx.x"] >= CUDA_LIMITS["sm_90"].multiprocessors


def test_window_tiles_takes_its_limits_from_the_target():
    func = _conv(32, 56, 3, 1, "clip")
    small = tvm.target.Target({**cuda_target("sm_90"), "max_num_threads": 64,
                               "max_shared_memory_per_block": 2048})
    scheduled = _scheduled_and_checked(func, small)
    assert _launch(scheduled)["threadIdx.x"] <= 64
    assert _launch(_scheduled_and_checked(func))["threadIdx.x"] > 64


def test_window_tiles_declines_what_is_not_a_window_of_its_own_per_output():
    from tvm import te, topi

    rule = WindowTiles()
    # an ordinary convolution: every output channel reads every input (dlight's Matmul's)
    x = te.placeholder((1, 16, 28, 28), "float32", name="x")
    w = te.placeholder((32, 16, 3, 3), "float32", name="w")
    conv = te.create_prim_func([x, w, topi.nn.conv2d_nchw(x, w, 1, 1, 1)]) \
        .with_attr(OP_KINDS_ATTR, ["conv2d"])
    assert rule.apply(conv, SM_90) is None
    # a global pool whose 56 x 56 windows do not fit a warp's in shared memory: dlight's
    # reduction rule splits each window over threads
    assert rule.apply(_pool("avg", 64, 56, 56, 1, 0), SM_90) is None
    # a matmul
    a = te.placeholder((64, 64), "float32", name="a")
    b = te.placeholder((64, 64), "float32", name="b")
    matmul = te.create_prim_func([a, b, topi.matmul(a, b)]).with_attr(OP_KINDS_ATTR,
                                                                        ["matmul"])
    assert rule.apply(matmul, SM_90) is None
    # one window's input over the target's shared memory: nothing fits
    tiny = tvm.target.Target({**cuda_target("sm_90"), "max_shared_memory_per_block": 16})
    assert rule.apply(_conv(32, 56, 3, 1, "clip"), tiny) is None


def test_window_tiles_is_in_the_gpu_columns_only():
    table = optimize.default_table()
    for family in ("cuda", "other"):
        for kind in ("conv2d", "pooling"):
            assert table.rules_for(family, kind)[0].name == "window-tiles"
    assert all(rule.name != "window-tiles" for kind in ("conv2d", "pooling")
               for rule in table.rules_for("cpu", kind))


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_32x112x112(sm_90_from_the_table):
    # MobileNetV2's first depthwise 3x3, 32 x 112 x 112: 512 blocks of one channel's 28 x 28
    # pixels, 196 threads of 4 rows each (unrolled); the block's 30 x 30 padded input fetched
    # into shared memory by them, the window unrolled into local accumulators
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 32, 112, 112), "float32"),
        w: T.Buffer((32, 1, 3, 3), "float32"),
        group_conv2d_nchw: T.Buffer((1, 32, 112, 112), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((1, 32, 114, 114))
        for i0, i1, i2, i3 in T.grid(1, 32, 114, 114):
            with T.sblock("pad_temp"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1])
                T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                pad_temp[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(
                    1 <= v_i2 and v_i2 < 113 and 1 <= v_i3 and v_i3 < 113,
                    x[v_i0, v_i1, v_i2 - 1, v_i3 - 1],
                    T.float32(0.0),
                )
        for nn, ff, yy, xx, rc, ry, rx in T.grid(1, 32, 112, 112, 1, 3, 3):
            with T.sblock("group_conv2d_nchw"):
                v_nn, v_ff, v_yy, v_xx, v_rc, v_ry, v_rx = T.axis.remap(
                    "SSSSRRR", [nn, ff, yy, xx, rc, ry, rx]
                )
                T.reads(
                    pad_temp[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx], w[v_ff, v_rc, v_ry, v_rx]
                )
                T.writes(group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx])
                with T.init():
                    group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
                group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = (
                    group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx]
                    + pad_temp[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx]
                    * w[v_ff, v_rc, v_ry, v_rx]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 32, 112, 112), "float32"),
        w: T.Buffer((32, 1, 3, 3), "float32"),
        group_conv2d_nchw: T.Buffer((1, 32, 112, 112), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad_temp_shared = T.sblock_alloc_buffer((1, 32, 114, 114), scope="shared")
        group_conv2d_nchw_local = T.sblock_alloc_buffer((1, 32, 112, 112), scope="local")
        for nn_ff_0_yy_0_xx_0_fused in T.thread_binding(512, thread="blockIdx.x"):
            for ax0_ax1_fused_0 in range(5):
                for ax0_ax1_fused_1 in T.thread_binding(196, thread="threadIdx.x"):
                    with T.sblock("pad_temp_shared"):
                        v0 = T.axis.spatial(1, 0)
                        v1 = T.axis.spatial(32, nn_ff_0_yy_0_xx_0_fused // 16)
                        v2 = T.axis.spatial(
                            114,
                            nn_ff_0_yy_0_xx_0_fused % 16 // 4 * 28
                            + (ax0_ax1_fused_0 * 196 + ax0_ax1_fused_1) // 30,
                        )
                        v3 = T.axis.spatial(
                            114,
                            nn_ff_0_yy_0_xx_0_fused % 4 * 28
                            + (ax0_ax1_fused_0 * 196 + ax0_ax1_fused_1) % 30,
                        )
                        T.where(ax0_ax1_fused_0 * 196 + ax0_ax1_fused_1 < 900)
                        T.reads(x[v0, v1, v2 - 1, v3 - 1])
                        T.writes(pad_temp_shared[v0, v1, v2, v3])
                        pad_temp_shared[v0, v1, v2, v3] = T.if_then_else(
                            1 <= v2 and v2 < 113 and 1 <= v3 and v3 < 113,
                            x[v0, v1, v2 - 1, v3 - 1],
                            T.float32(0.0),
                        )
            for ff_1_yy_1_xx_1_fused in T.thread_binding(196, thread="threadIdx.x"):
                for yy_2_init in range(4):
                    with T.sblock("group_conv2d_nchw_init"):
                        v_nn = T.axis.spatial(1, 0)
                        v_ff = T.axis.spatial(32, nn_ff_0_yy_0_xx_0_fused // 16)
                        v_yy = T.axis.spatial(
                            112,
                            nn_ff_0_yy_0_xx_0_fused % 16 // 4 * 28
                            + ff_1_yy_1_xx_1_fused // 28 * 4
                            + yy_2_init,
                        )
                        v_xx = T.axis.spatial(
                            112, nn_ff_0_yy_0_xx_0_fused % 4 * 28 + ff_1_yy_1_xx_1_fused % 28
                        )
                        T.reads()
                        T.writes(group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx])
                        group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
                for rc in T.unroll(1):
                    for ry in T.unroll(3):
                        for rx in T.unroll(3):
                            for yy_2 in T.unroll(4):
                                with T.sblock("group_conv2d_nchw_update"):
                                    v_nn = T.axis.spatial(1, 0)
                                    v_ff = T.axis.spatial(32, nn_ff_0_yy_0_xx_0_fused // 16)
                                    v_yy = T.axis.spatial(
                                        112,
                                        nn_ff_0_yy_0_xx_0_fused % 16 // 4 * 28
                                        + ff_1_yy_1_xx_1_fused // 28 * 4
                                        + yy_2,
                                    )
                                    v_xx = T.axis.spatial(
                                        112,
                                        nn_ff_0_yy_0_xx_0_fused % 4 * 28
                                        + ff_1_yy_1_xx_1_fused % 28,
                                    )
                                    v_rc, v_ry, v_rx = T.axis.remap("RRR", [rc, ry, rx])
                                    T.reads(
                                        group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx],
                                        pad_temp_shared[
                                            v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx
                                        ],
                                        w[v_ff, v_rc, v_ry, v_rx],
                                    )
                                    T.writes(group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx])
                                    group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx] = (
                                        group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx]
                                        + pad_temp_shared[
                                            v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx
                                        ]
                                        * w[v_ff, v_rc, v_ry, v_rx]
                                    )
                for ax0 in range(4):
                    with T.sblock("group_conv2d_nchw_local"):
                        v0 = T.axis.spatial(1, 0)
                        v1 = T.axis.spatial(32, nn_ff_0_yy_0_xx_0_fused // 16)
                        v2 = T.axis.spatial(
                            112,
                            nn_ff_0_yy_0_xx_0_fused % 16 // 4 * 28
                            + ff_1_yy_1_xx_1_fused // 28 * 4
                            + ax0,
                        )
                        v3 = T.axis.spatial(
                            112, nn_ff_0_yy_0_xx_0_fused % 4 * 28 + ff_1_yy_1_xx_1_fused % 28
                        )
                        T.reads(group_conv2d_nchw_local[v0, v1, v2, v3])
                        T.writes(group_conv2d_nchw[v0, v1, v2, v3])
                        group_conv2d_nchw[v0, v1, v2, v3] = group_conv2d_nchw_local[v0, v1, v2, v3]

    check(WindowTiles(), before, expected, SM_90)
    check_gpu_schedule(before, expected)


def test_schedule_16x28x28(sm_90_from_the_table):
    # 16 x 28 x 28: 196 blocks of 64 outputs, a thread each; the block's padded input in
    # shared memory (3 fetches a thread), the window unrolled into a local accumulator
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 16, 28, 28), "float32"),
        w: T.Buffer((16, 1, 3, 3), "float32"),
        group_conv2d_nchw: T.Buffer((1, 16, 28, 28), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((1, 16, 30, 30))
        for i0, i1, i2, i3 in T.grid(1, 16, 30, 30):
            with T.sblock("pad_temp"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(x[v_i0, v_i1, v_i2 - 1, v_i3 - 1])
                T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                pad_temp[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(
                    1 <= v_i2 and v_i2 < 29 and 1 <= v_i3 and v_i3 < 29,
                    x[v_i0, v_i1, v_i2 - 1, v_i3 - 1],
                    T.float32(0.0),
                )
        for nn, ff, yy, xx, rc, ry, rx in T.grid(1, 16, 28, 28, 1, 3, 3):
            with T.sblock("group_conv2d_nchw"):
                v_nn, v_ff, v_yy, v_xx, v_rc, v_ry, v_rx = T.axis.remap(
                    "SSSSRRR", [nn, ff, yy, xx, rc, ry, rx]
                )
                T.reads(
                    pad_temp[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx], w[v_ff, v_rc, v_ry, v_rx]
                )
                T.writes(group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx])
                with T.init():
                    group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
                group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx] = (
                    group_conv2d_nchw[v_nn, v_ff, v_yy, v_xx]
                    + pad_temp[v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx]
                    * w[v_ff, v_rc, v_ry, v_rx]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 16, 28, 28), "float32"),
        w: T.Buffer((16, 1, 3, 3), "float32"),
        group_conv2d_nchw: T.Buffer((1, 16, 28, 28), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        pad_temp_shared = T.sblock_alloc_buffer((1, 16, 30, 30), scope="shared")
        group_conv2d_nchw_local = T.sblock_alloc_buffer((1, 16, 28, 28), scope="local")
        for nn_ff_0_yy_0_xx_0_fused in T.thread_binding(196, thread="blockIdx.x"):
            for ax0_ax1_ax2_fused_0 in range(3):
                for ax0_ax1_ax2_fused_1 in T.thread_binding(64, thread="threadIdx.x"):
                    with T.sblock("pad_temp_shared"):
                        v0 = T.axis.spatial(1, 0)
                        v1 = T.axis.spatial(
                            16,
                            nn_ff_0_yy_0_xx_0_fused // 49 * 4
                            + (ax0_ax1_ax2_fused_0 * 64 + ax0_ax1_ax2_fused_1) // 36,
                        )
                        v2 = T.axis.spatial(
                            30,
                            nn_ff_0_yy_0_xx_0_fused % 49 // 7 * 4
                            + (ax0_ax1_ax2_fused_0 * 64 + ax0_ax1_ax2_fused_1) % 36 // 6,
                        )
                        v3 = T.axis.spatial(
                            30,
                            nn_ff_0_yy_0_xx_0_fused % 7 * 4
                            + (ax0_ax1_ax2_fused_0 * 64 + ax0_ax1_ax2_fused_1) % 6,
                        )
                        T.where(ax0_ax1_ax2_fused_0 * 64 + ax0_ax1_ax2_fused_1 < 144)
                        T.reads(x[v0, v1, v2 - 1, v3 - 1])
                        T.writes(pad_temp_shared[v0, v1, v2, v3])
                        pad_temp_shared[v0, v1, v2, v3] = T.if_then_else(
                            1 <= v2 and v2 < 29 and 1 <= v3 and v3 < 29,
                            x[v0, v1, v2 - 1, v3 - 1],
                            T.float32(0.0),
                        )
            for ff_1_yy_1_xx_1_fused in T.thread_binding(64, thread="threadIdx.x"):
                for yy_2_init in range(1):
                    with T.sblock("group_conv2d_nchw_init"):
                        v_nn = T.axis.spatial(1, 0)
                        v_ff = T.axis.spatial(
                            16, nn_ff_0_yy_0_xx_0_fused // 49 * 4 + ff_1_yy_1_xx_1_fused // 16
                        )
                        v_yy = T.axis.spatial(
                            28,
                            nn_ff_0_yy_0_xx_0_fused % 49 // 7 * 4
                            + ff_1_yy_1_xx_1_fused % 16 // 4
                            + yy_2_init,
                        )
                        v_xx = T.axis.spatial(
                            28, nn_ff_0_yy_0_xx_0_fused % 7 * 4 + ff_1_yy_1_xx_1_fused % 4
                        )
                        T.reads()
                        T.writes(group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx])
                        group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
                for rc in T.unroll(1):
                    for ry in T.unroll(3):
                        for rx in T.unroll(3):
                            for yy_2 in T.unroll(1):
                                with T.sblock("group_conv2d_nchw_update"):
                                    v_nn = T.axis.spatial(1, 0)
                                    v_ff = T.axis.spatial(
                                        16,
                                        nn_ff_0_yy_0_xx_0_fused // 49 * 4
                                        + ff_1_yy_1_xx_1_fused // 16,
                                    )
                                    v_yy = T.axis.spatial(
                                        28,
                                        nn_ff_0_yy_0_xx_0_fused % 49 // 7 * 4
                                        + ff_1_yy_1_xx_1_fused % 16 // 4
                                        + yy_2,
                                    )
                                    v_xx = T.axis.spatial(
                                        28,
                                        nn_ff_0_yy_0_xx_0_fused % 7 * 4 + ff_1_yy_1_xx_1_fused % 4,
                                    )
                                    v_rc, v_ry, v_rx = T.axis.remap("RRR", [rc, ry, rx])
                                    T.reads(
                                        group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx],
                                        pad_temp_shared[
                                            v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx
                                        ],
                                        w[v_ff, v_rc, v_ry, v_rx],
                                    )
                                    T.writes(group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx])
                                    group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx] = (
                                        group_conv2d_nchw_local[v_nn, v_ff, v_yy, v_xx]
                                        + pad_temp_shared[
                                            v_nn, v_ff + v_rc, v_yy + v_ry, v_xx + v_rx
                                        ]
                                        * w[v_ff, v_rc, v_ry, v_rx]
                                    )
                with T.sblock("group_conv2d_nchw_local"):
                    v0 = T.axis.spatial(1, 0)
                    v1 = T.axis.spatial(
                        16, nn_ff_0_yy_0_xx_0_fused // 49 * 4 + ff_1_yy_1_xx_1_fused // 16
                    )
                    v2 = T.axis.spatial(
                        28, nn_ff_0_yy_0_xx_0_fused % 49 // 7 * 4 + ff_1_yy_1_xx_1_fused % 16 // 4
                    )
                    v3 = T.axis.spatial(
                        28, nn_ff_0_yy_0_xx_0_fused % 7 * 4 + ff_1_yy_1_xx_1_fused % 4
                    )
                    T.reads(group_conv2d_nchw_local[v0, v1, v2, v3])
                    T.writes(group_conv2d_nchw[v0, v1, v2, v3])
                    group_conv2d_nchw[v0, v1, v2, v3] = group_conv2d_nchw_local[v0, v1, v2, v3]

    check(WindowTiles(), before, expected, SM_90)
    check_gpu_schedule(before, expected)


def test_declines_an_ordinary_convolution():
    # an ordinary convolution (matmul-tiles')
    assert declines(WindowTiles(), conv3x3(32))
