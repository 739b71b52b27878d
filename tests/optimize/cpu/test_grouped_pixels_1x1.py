"""Grouped 1x1 convolutions (ShuffleNet's pointwise layers): preparation's per-group form over
the pixels padded to whole vectors (``tvm_hetero.ops.grouped_conv1x1``) scheduled by the
``grouped-pixels-1x1`` rule (``tvm_hetero/optimize/cpu/grouped_pixels_1x1.py``), checked against
TVM's own grouped convolution; then the rule's schedule at two shapes, the kernel before and the
schedule expected written out in TVMScript and compared with ``tvm.ir.assert_structural_equal``,
and a kernel it declines.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

import json

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero.ops import grouped_conv1x1
from tvm_hetero.optimize.cpu.grouped_pixels_1x1 import GroupedPixels1x1
from tvm_hetero.prepare import PrepareConfig
from tvm_hetero.relax_ir import OP_KINDS_ATTR

from tests.helpers.kernels import scheduled_and_checked
from tests.helpers.schedules import check, conv1x1_residual, declines

ZNVER4 = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
AVX2 = {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}


def _shuffle_unit(channels: int, size: int, groups: int):
    """ShuffleNet's stride-1 unit's pointwise part: a grouped 1x1 convolution with batch norm
    folded to a bias and ReLU, a second one, the residual added."""
    rng = np.random.default_rng(0)

    def weight():
        return relax.const(rng.standard_normal(
            (channels, channels // groups, 1, 1)).astype("float32") * 0.2)

    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels, size, size), "float32"))
    bias = relax.const(rng.standard_normal((1, channels, 1, 1)).astype("float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            y = builder.emit(relax.op.nn.relu(relax.op.add(
                relax.op.nn.conv2d(x, weight(), groups=groups), bias)))
            y = builder.emit(relax.op.add(relax.op.nn.conv2d(y, weight(), groups=groups), x))
            out = builder.emit_output(relax.op.nn.relu(y))
        builder.emit_func_output(out)
    return builder.get()


@pytest.mark.parametrize("target", [ZNVER4, AVX2], ids=["znver4", "haswell"])
@pytest.mark.parametrize("channels, size", [
    (136, 28),  # 784 pixels: whole vectors, the input read in place
    (136, 14),  # 196: padded to 208 (16 lanes) or 200 (8)
    (272, 7),  # 49: padded to 64 or 56
])
def test_grouped_1x1_convolutions_run_per_group_and_match_tvms_grouped_convolution(
        target, channels, size):
    model = th.load_model(_shuffle_unit(channels, size, 4), name="shuffle")
    devices = th.DeviceSet.parse([f"d0={json.dumps(target)}"])
    compiled = th.build(model, "all:d0", devices)
    layers = th.extract_layers(model, PrepareConfig.for_devices(devices))
    convs = [layer for layer in layers if layer.kind == "conv2d"]
    assert len(convs) == 2
    assert {compiled.stats.rules[layer.func_name] for layer in convs} == {"grouped-pixels-1x1"}
    reference = th.build(model, "all:d0", devices, optimize=False)
    inputs = model.random_inputs(seed=0)
    want = reference.run(inputs)[0]
    np.testing.assert_allclose(compiled.run(inputs)[0], want, rtol=1e-4,
                               atol=1e-4 * np.abs(want).max())


def test_grouped_pixels_off_leaves_tvms_grouped_convolution(prepare_for_devices):
    prepare_for_devices(grouped_pixels=False)
    model = th.load_model(_shuffle_unit(136, 14, 4), name="shuffle")
    devices = th.DeviceSet.parse([f"d0={json.dumps(ZNVER4)}"])
    compiled = th.build(model, "all:d0", devices)
    rules = set(compiled.stats.rules.values())
    assert "grouped-pixels-1x1" not in rules and "tiled" in rules


def _kernel(channels: int, size: int, groups: int, lanes: int, batch: int = 1):
    """The per-group compute with a bias and ReLU fused, as FuseOps makes it."""
    from tvm import te, topi

    x = te.placeholder((batch, channels, size, size), "float32", name="x")
    w = te.placeholder((channels, channels // groups, 1, 1), "float32", name="w")
    b = te.placeholder((1, channels, 1, 1), "float32", name="b")
    y = topi.nn.relu(topi.add(grouped_conv1x1.grouped_conv2d_1x1(x, w, groups, lanes), b))
    return te.create_prim_func([x, w, b, y]).with_attr(OP_KINDS_ATTR, ["conv2d", "add", "relu"])


@pytest.mark.parametrize("groups, batch, cores", [
    (4, 1, 2),
    (2, 1, 8),  # fewer (image, group) tasks than cores: output channels split among them
    (3, 2, 2),
])
def test_grouped_pixels_1x1_schedules_the_per_group_compute_right(groups, batch, cores):
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": cores})
    func = _kernel(24 * groups, 10, groups, 16, batch)
    assert scheduled_and_checked(func, target) == "grouped-pixels-1x1"


def test_grouped_pixels_1x1_declines_a_compute_padded_for_narrower_vectors():
    target = tvm.target.Target(ZNVER4)
    # 14 x 14 pixels padded to 200 (8 lanes): no whole 16-lane vectors
    assert GroupedPixels1x1().apply(_kernel(32, 14, 4, 8), target) is None
    assert GroupedPixels1x1().apply(_kernel(32, 14, 4, 16), target) is not None


def _grouped_windowed(in_channels, out_channels, size, window, groups):
    """AlexNet's grouped windowed convolution with bias and ReLU, its weights constants."""
    rng = np.random.default_rng(1)
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, in_channels, size, size), "float32"))
    weight = relax.const(rng.standard_normal(
        (out_channels, in_channels // groups, window, window)).astype("float32") * 0.1)
    bias = relax.const(rng.standard_normal((1, out_channels, 1, 1)).astype("float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            out = builder.emit_output(relax.op.nn.relu(relax.op.add(relax.op.nn.conv2d(
                x, weight, padding=window // 2, groups=groups), bias)))
        builder.emit_func_output(out)
    return builder.get()


@pytest.mark.parametrize("target", [ZNVER4, AVX2], ids=["znver4", "haswell"])
def test_grouped_windowed_convolutions_with_whole_channel_vectors_take_packed_weights(target):
    # 2 groups of 64 -> 32 channels, 5x5 over a 27-wide image (tiled got 3 or 9 lanes)
    model = th.load_model(_grouped_windowed(128, 64, 27, 5, 2), name="grouped")
    devices = th.DeviceSet.parse([f"d0={json.dumps(target)}"])
    compiled = th.build(model, "all:d0", devices)
    (conv,) = [layer for layer in th.extract_layers(model, PrepareConfig.for_devices(devices))
               if layer.kind == "conv2d"]
    assert compiled.stats.rules[conv.func_name] == "packed-weights"
    reference = th.build(model, "all:d0", devices, optimize=False)
    inputs = model.random_inputs(seed=0)
    want = reference.run(inputs)[0]
    np.testing.assert_allclose(compiled.run(inputs)[0], want, rtol=1e-4,
                               atol=1e-4 * np.abs(want).max())


def test_groups_of_fewer_output_channels_than_lanes_stay_with_tiled():
    from tvm import s_tir

    from tvm_hetero.optimize.cpu.analysis import direct_conv

    model = _grouped_windowed(64, 64, 14, 3, 16)  # 4 output channels per group
    devices = th.DeviceSet.parse([f"d0={json.dumps(ZNVER4)}"])
    compiled = th.build(th.load_model(model, name="narrow"), "all:d0", devices)
    assert "tiled" in compiled.stats.rules.values()
    assert "packed-weights" not in compiled.stats.rules.values()
    func = _kernel(64, 14, 4, 16)  # not a direct convolution: the per-group 1x1 form
    assert direct_conv(func, s_tir.Schedule(func), group_lanes=16) is None


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_4x3x3_groups_2():
    # a task per group: its 9 pixels copied padded to one vector of 16, a 2-channel x
    # 1-vector tile over the group's 2 input channels, then the crop as 9-lane vectors
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 4, 3, 3), "float32"),
        w: T.Buffer((4, 2, 1, 1), "float32"),
        grouped_conv2d_crop: T.Buffer((1, 4, 3, 3), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        grouped_pixels = T.sblock_alloc_buffer((1, 2, 2, 16))
        grouped_conv2d_pixels = T.sblock_alloc_buffer((1, 2, 2, 16))
        for n, g, c, p in T.grid(1, 2, 2, 16):
            with T.sblock("grouped_pixels"):
                v_n, v_g, v_c, v_p = T.axis.remap("SSSS", [n, g, c, p])
                T.reads(x[v_n, v_g * 2 + v_c, v_p // 3, v_p % 3])
                T.writes(grouped_pixels[v_n, v_g, v_c, v_p])
                grouped_pixels[v_n, v_g, v_c, v_p] = T.if_then_else(
                    v_p < 9, x[v_n, v_g * 2 + v_c, v_p // 3, v_p % 3], T.float32(0.0)
                )
        for n, g, o, p, rc in T.grid(1, 2, 2, 16, 2):
            with T.sblock("grouped_conv2d_pixels"):
                v_n, v_g, v_o, v_p, v_rc = T.axis.remap("SSSSR", [n, g, o, p, rc])
                T.reads(grouped_pixels[v_n, v_g, v_rc, v_p], w[v_g * 2 + v_o, v_rc, 0, 0])
                T.writes(grouped_conv2d_pixels[v_n, v_g, v_o, v_p])
                with T.init():
                    grouped_conv2d_pixels[v_n, v_g, v_o, v_p] = T.float32(0.0)
                grouped_conv2d_pixels[v_n, v_g, v_o, v_p] = (
                    grouped_conv2d_pixels[v_n, v_g, v_o, v_p]
                    + grouped_pixels[v_n, v_g, v_rc, v_p] * w[v_g * 2 + v_o, v_rc, 0, 0]
                )
        for n, f, y, x_1 in T.grid(1, 4, 3, 3):
            with T.sblock("grouped_conv2d_crop"):
                v_n, v_f, v_y, v_x = T.axis.remap("SSSS", [n, f, y, x_1])
                T.reads(grouped_conv2d_pixels[v_n, v_f // 2, v_f % 2, v_y * 3 + v_x])
                T.writes(grouped_conv2d_crop[v_n, v_f, v_y, v_x])
                grouped_conv2d_crop[v_n, v_f, v_y, v_x] = grouped_conv2d_pixels[
                    v_n, v_f // 2, v_f % 2, v_y * 3 + v_x
                ]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 4, 3, 3), "float32"),
        w: T.Buffer((4, 2, 1, 1), "float32"),
        grouped_conv2d_crop: T.Buffer((1, 4, 3, 3), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        grouped_pixels = T.sblock_alloc_buffer((1, 2, 2, 16))
        grouped_conv2d_pixels = T.sblock_alloc_buffer((1, 2, 2, 16))
        grouped_conv2d_pixels_local = T.sblock_alloc_buffer((1, 2, 2, 16), scope="local")
        for n_g_o_0_0_fused in T.parallel(2):
            for ax0 in range(2):
                for ax1 in T.vectorized(16):
                    with T.sblock("grouped_pixels"):
                        v_n = T.axis.spatial(1, 0)
                        v_g, v_c, v_p = T.axis.remap("SSS", [n_g_o_0_0_fused, ax0, ax1])
                        T.reads(x[v_n, v_g * 2 + v_c, v_p // 3, v_p % 3])
                        T.writes(grouped_pixels[v_n, v_g, v_c, v_p])
                        grouped_pixels[v_n, v_g, v_c, v_p] = T.if_then_else(
                            v_p < 9, x[v_n, v_g * 2 + v_c, v_p // 3, v_p % 3], T.float32(0.0)
                        )
            for o_0_1 in range(1):
                for p_0 in range(1):
                    for o_1_init in T.unroll(2):
                        for p_1_init in T.unroll(1):
                            for p_2_init in T.vectorized(16):
                                with T.sblock("grouped_conv2d_pixels_init"):
                                    v_n = T.axis.spatial(1, 0)
                                    v_g = T.axis.spatial(2, n_g_o_0_0_fused)
                                    v_o = T.axis.spatial(2, o_0_1 * 2 + o_1_init)
                                    v_p = T.axis.spatial(16, p_0 * 16 + p_1_init * 16 + p_2_init)
                                    T.reads()
                                    T.writes(grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p])
                                    grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p] = T.float32(0.0)
                    for rc in range(2):
                        for o_1 in T.unroll(2):
                            for p_1 in T.unroll(1):
                                for p_2 in T.vectorized(16):
                                    with T.sblock("grouped_conv2d_pixels_update"):
                                        v_n = T.axis.spatial(1, 0)
                                        v_g = T.axis.spatial(2, n_g_o_0_0_fused)
                                        v_o = T.axis.spatial(2, o_0_1 * 2 + o_1)
                                        v_p = T.axis.spatial(16, p_0 * 16 + p_1 * 16 + p_2)
                                        v_rc = T.axis.reduce(2, rc)
                                        T.reads(
                                            grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p],
                                            grouped_pixels[v_n, v_g, v_rc, v_p],
                                            w[v_g * 2 + v_o, v_rc, 0, 0],
                                        )
                                        T.writes(grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p])
                                        grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p] = (
                                            grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p]
                                            + grouped_pixels[v_n, v_g, v_rc, v_p]
                                            * w[v_g * 2 + v_o, v_rc, 0, 0]
                                        )
                    for ax0 in range(2):
                        for ax1 in T.vectorized(16):
                            with T.sblock("grouped_conv2d_pixels_local"):
                                v0 = T.axis.spatial(1, 0)
                                v1, v2, v3 = T.axis.remap("SSS", [n_g_o_0_0_fused, ax0, ax1])
                                T.reads(grouped_conv2d_pixels_local[v0, v1, v2, v3])
                                T.writes(grouped_conv2d_pixels[v0, v1, v2, v3])
                                grouped_conv2d_pixels[v0, v1, v2, v3] = grouped_conv2d_pixels_local[
                                    v0, v1, v2, v3
                                ]
                for ax0 in range(2):
                    for ax1 in T.vectorized(9):
                        with T.sblock("grouped_conv2d_crop"):
                            v0 = T.axis.spatial(1, 0)
                            v1 = T.axis.spatial(4, n_g_o_0_0_fused * 2 + ax0)
                            v2 = T.axis.spatial(9, ax1)
                            T.reads(grouped_conv2d_pixels[v0, v1 // 2, v1 % 2, v2])
                            T.writes(grouped_conv2d_crop[v0, v1, v2 // 3, v2 % 3])
                            grouped_conv2d_crop[v0, v1, v2 // 3, v2 % 3] = grouped_conv2d_pixels[
                                v0, v1 // 2, v1 % 2, v2
                            ]

    check(GroupedPixels1x1(), before, expected)


def test_schedule_8x5x5_groups_4():
    # a task per group (4): its 25 pixels copied padded to 2 vectors of 16, a 2-channel x
    # 2-vector tile over the group's 2 input channels, then the crop as 25-lane vectors
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 8, 5, 5), "float32"),
        w: T.Buffer((8, 2, 1, 1), "float32"),
        grouped_conv2d_crop: T.Buffer((1, 8, 5, 5), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        grouped_pixels = T.sblock_alloc_buffer((1, 4, 2, 32))
        grouped_conv2d_pixels = T.sblock_alloc_buffer((1, 4, 2, 32))
        for n, g, c, p in T.grid(1, 4, 2, 32):
            with T.sblock("grouped_pixels"):
                v_n, v_g, v_c, v_p = T.axis.remap("SSSS", [n, g, c, p])
                T.reads(x[v_n, v_g * 2 + v_c, v_p // 5, v_p % 5])
                T.writes(grouped_pixels[v_n, v_g, v_c, v_p])
                grouped_pixels[v_n, v_g, v_c, v_p] = T.if_then_else(
                    v_p < 25, x[v_n, v_g * 2 + v_c, v_p // 5, v_p % 5], T.float32(0.0)
                )
        for n, g, o, p, rc in T.grid(1, 4, 2, 32, 2):
            with T.sblock("grouped_conv2d_pixels"):
                v_n, v_g, v_o, v_p, v_rc = T.axis.remap("SSSSR", [n, g, o, p, rc])
                T.reads(grouped_pixels[v_n, v_g, v_rc, v_p], w[v_g * 2 + v_o, v_rc, 0, 0])
                T.writes(grouped_conv2d_pixels[v_n, v_g, v_o, v_p])
                with T.init():
                    grouped_conv2d_pixels[v_n, v_g, v_o, v_p] = T.float32(0.0)
                grouped_conv2d_pixels[v_n, v_g, v_o, v_p] = (
                    grouped_conv2d_pixels[v_n, v_g, v_o, v_p]
                    + grouped_pixels[v_n, v_g, v_rc, v_p] * w[v_g * 2 + v_o, v_rc, 0, 0]
                )
        for n, f, y, x_1 in T.grid(1, 8, 5, 5):
            with T.sblock("grouped_conv2d_crop"):
                v_n, v_f, v_y, v_x = T.axis.remap("SSSS", [n, f, y, x_1])
                T.reads(grouped_conv2d_pixels[v_n, v_f // 2, v_f % 2, v_y * 5 + v_x])
                T.writes(grouped_conv2d_crop[v_n, v_f, v_y, v_x])
                grouped_conv2d_crop[v_n, v_f, v_y, v_x] = grouped_conv2d_pixels[
                    v_n, v_f // 2, v_f % 2, v_y * 5 + v_x
                ]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 8, 5, 5), "float32"),
        w: T.Buffer((8, 2, 1, 1), "float32"),
        grouped_conv2d_crop: T.Buffer((1, 8, 5, 5), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["conv2d"]})
        # with T.sblock("root"):
        grouped_pixels = T.sblock_alloc_buffer((1, 4, 2, 32))
        grouped_conv2d_pixels = T.sblock_alloc_buffer((1, 4, 2, 32))
        grouped_conv2d_pixels_local = T.sblock_alloc_buffer((1, 4, 2, 32), scope="local")
        for n_g_o_0_0_fused in T.parallel(4):
            for ax0, ax1_0 in T.grid(2, 2):
                for ax1_1 in T.vectorized(16):
                    with T.sblock("grouped_pixels"):
                        v_n = T.axis.spatial(1, 0)
                        v_g, v_c = T.axis.remap("SS", [n_g_o_0_0_fused, ax0])
                        v_p = T.axis.spatial(32, ax1_0 * 16 + ax1_1)
                        T.reads(x[v_n, v_g * 2 + v_c, v_p // 5, v_p % 5])
                        T.writes(grouped_pixels[v_n, v_g, v_c, v_p])
                        grouped_pixels[v_n, v_g, v_c, v_p] = T.if_then_else(
                            v_p < 25, x[v_n, v_g * 2 + v_c, v_p // 5, v_p % 5], T.float32(0.0)
                        )
            for o_0_1 in range(1):
                for p_0 in range(1):
                    for o_1_init in T.unroll(2):
                        for p_1_init in T.unroll(2):
                            for p_2_init in T.vectorized(16):
                                with T.sblock("grouped_conv2d_pixels_init"):
                                    v_n = T.axis.spatial(1, 0)
                                    v_g = T.axis.spatial(4, n_g_o_0_0_fused)
                                    v_o = T.axis.spatial(2, o_0_1 * 2 + o_1_init)
                                    v_p = T.axis.spatial(32, p_0 * 32 + p_1_init * 16 + p_2_init)
                                    T.reads()
                                    T.writes(grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p])
                                    grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p] = T.float32(0.0)
                    for rc in range(2):
                        for o_1 in T.unroll(2):
                            for p_1 in T.unroll(2):
                                for p_2 in T.vectorized(16):
                                    with T.sblock("grouped_conv2d_pixels_update"):
                                        v_n = T.axis.spatial(1, 0)
                                        v_g = T.axis.spatial(4, n_g_o_0_0_fused)
                                        v_o = T.axis.spatial(2, o_0_1 * 2 + o_1)
                                        v_p = T.axis.spatial(32, p_0 * 32 + p_1 * 16 + p_2)
                                        v_rc = T.axis.reduce(2, rc)
                                        T.reads(
                                            grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p],
                                            grouped_pixels[v_n, v_g, v_rc, v_p],
                                            w[v_g * 2 + v_o, v_rc, 0, 0],
                                        )
                                        T.writes(grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p])
                                        grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p] = (
                                            grouped_conv2d_pixels_local[v_n, v_g, v_o, v_p]
                                            + grouped_pixels[v_n, v_g, v_rc, v_p]
                                            * w[v_g * 2 + v_o, v_rc, 0, 0]
                                        )
                    for ax0, ax1_0 in T.grid(2, 2):
                        for ax1_1 in T.vectorized(16):
                            with T.sblock("grouped_conv2d_pixels_local"):
                                v0 = T.axis.spatial(1, 0)
                                v1, v2 = T.axis.remap("SS", [n_g_o_0_0_fused, ax0])
                                v3 = T.axis.spatial(32, ax1_0 * 16 + ax1_1)
                                T.reads(grouped_conv2d_pixels_local[v0, v1, v2, v3])
                                T.writes(grouped_conv2d_pixels[v0, v1, v2, v3])
                                grouped_conv2d_pixels[v0, v1, v2, v3] = grouped_conv2d_pixels_local[
                                    v0, v1, v2, v3
                                ]
                for ax0 in range(2):
                    for ax1 in T.vectorized(25):
                        with T.sblock("grouped_conv2d_crop"):
                            v0 = T.axis.spatial(1, 0)
                            v1 = T.axis.spatial(8, n_g_o_0_0_fused * 2 + ax0)
                            v2 = T.axis.spatial(25, ax1)
                            T.reads(grouped_conv2d_pixels[v0, v1 // 2, v1 % 2, v2])
                            T.writes(grouped_conv2d_crop[v0, v1, v2 // 5, v2 % 5])
                            grouped_conv2d_crop[v0, v1, v2 // 5, v2 % 5] = grouped_conv2d_pixels[
                                v0, v1 // 2, v1 % 2, v2
                            ]

    check(GroupedPixels1x1(), before, expected)


def test_declines_an_ordinary_convolution():
    # not preparation's grouped form
    assert declines(GroupedPixels1x1(), conv1x1_residual(1))
