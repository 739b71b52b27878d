"""The ``window-tiles`` GPU rule (depthwise and grouped convolutions, pools, LRN's channel
window), checked without a GPU: the table gives it the kernels, the tile's input fits the
target's shared memory, the kernel computes no more than its layer (``estimate_tir_flops``),
and the schedule, emulated on the CPU (:mod:`tvm_hetero.testing.gpu_emulation`), computes what
the unscheduled kernel computes."""

import pytest
import tvm
import tvm_ffi

from tvm_hetero import optimize
from tvm_hetero.optimize.gpu.window_tiles import WindowTiles, shared_bytes_per_block
from tvm_hetero.optimize.pass_ import optimize_function
from tvm_hetero.relax_ir import OP_KINDS_ATTR
from tvm_hetero.target import CUDA_LIMITS, cuda_target
from tvm_hetero.testing.gpu_emulation import check_gpu_schedule
from tvm_hetero.testing.scheduled import estimated_flops

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
