"""``reduction-chains`` with an epilogue block that reads no output of the reduction: the onnx
package's LayerNormalization written out over the last axis (E[x^2] - E[x]^2, the mean of x
from another kernel), right against the case's own outputs."""

import warnings

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero.optimize.cpu.reduction_chains import ReductionChains

from tests.helpers.schedules import check, declines, softmax


def _node_case(name):
    from onnx.backend.test.case import node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [c for c in node_cases.collect_testcases() if c.name == name]
    assert cases, name
    return cases[0]


@pytest.mark.parametrize("name", ["test_layer_normalization_4d_axis3_expanded",
                                  "test_layer_normalization_default_axis_expanded"])
@pytest.mark.parametrize("device", ["cpu", "cpu-generic"])
def test_an_epilogue_reading_another_input_stays_right(name, device):
    case = _node_case(name)
    inputs, outputs = case.data_sets[0]
    feed = {value.name: array for value, array in zip(case.model.graph.input, inputs)}
    model = th.load_model(case.model, input_shapes={k: v.shape for k, v in feed.items()})
    compiled = th.build(model, th.Placement.all_on(th.extract_layers(model), device), [device])
    assert "reduction-chains" in compiled.stats.rules.values()
    got = compiled.run({s.name: feed[s.source_name or s.name] for s in model.inputs})
    assert not np.isnan(got[0]).any()
    np.testing.assert_allclose(got[0], outputs[0], rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_16x5x5():
    # 16 windows in 2 parallel tasks of 8 chains (unrolled, accumulated in a local buffer),
    # the mean's division per task
    @T.prim_func(s_tir=True, private=True)
    def before(x: T.Buffer((1, 16, 5, 5), "float32"), T_divide: T.Buffer((1, 16, 1, 1), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["mean"]})
        # with T.sblock("root"):
        x_red = T.sblock_alloc_buffer((1, 16, 1, 1))
        for ax0, ax1, ax2, ax3, k2, k3 in T.grid(1, 16, 1, 1, 5, 5):
            with T.sblock("x_red"):
                v_ax0, v_ax1, v_ax2, v_ax3, v_k2, v_k3 = T.axis.remap(
                    "SSSSRR", [ax0, ax1, ax2, ax3, k2, k3]
                )
                T.reads(x[v_ax0, v_ax1, v_k2, v_k3])
                T.writes(x_red[v_ax0, v_ax1, v_ax2, v_ax3])
                with T.init():
                    x_red[v_ax0, v_ax1, v_ax2, v_ax3] = T.float32(0.0)
                x_red[v_ax0, v_ax1, v_ax2, v_ax3] = (
                    x_red[v_ax0, v_ax1, v_ax2, v_ax3] + x[v_ax0, v_ax1, v_k2, v_k3]
                )
        for ax0, ax1, ax2, ax3 in T.grid(1, 16, 1, 1):
            with T.sblock("T_divide"):
                v_ax0, v_ax1, v_ax2, v_ax3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                T.reads(x_red[v_ax0, v_ax1, v_ax2, v_ax3])
                T.writes(T_divide[v_ax0, v_ax1, v_ax2, v_ax3])
                T_divide[v_ax0, v_ax1, v_ax2, v_ax3] = x_red[
                    v_ax0, v_ax1, v_ax2, v_ax3
                ] / T.float32(25.0)

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 16, 5, 5), "float32"), T_divide: T.Buffer((1, 16, 1, 1), "float32")
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["mean"]})
        # with T.sblock("root"):
        x_red = T.sblock_alloc_buffer((1, 16, 1, 1))
        x_red_local = T.sblock_alloc_buffer((1, 16, 1, 1), scope="local")
        for ax0_ax1_ax2_ax3_fused_0 in T.parallel(2):
            for ax0_ax1_ax2_ax3_fused_1_init in T.unroll(8):
                with T.sblock("x_red_init"):
                    v_ax0 = T.axis.spatial(1, 0)
                    v_ax1 = T.axis.spatial(
                        16, ax0_ax1_ax2_ax3_fused_0 * 8 + ax0_ax1_ax2_ax3_fused_1_init
                    )
                    v_ax2 = T.axis.spatial(1, 0)
                    v_ax3 = T.axis.spatial(1, 0)
                    T.reads()
                    T.writes(x_red_local[v_ax0, v_ax1, v_ax2, v_ax3])
                    x_red_local[v_ax0, v_ax1, v_ax2, v_ax3] = T.float32(0.0)
            for k2, k3 in T.grid(5, 5):
                for ax0_ax1_ax2_ax3_fused_1 in T.unroll(8):
                    with T.sblock("x_red_update"):
                        v_ax0 = T.axis.spatial(1, 0)
                        v_ax1 = T.axis.spatial(
                            16, ax0_ax1_ax2_ax3_fused_0 * 8 + ax0_ax1_ax2_ax3_fused_1
                        )
                        v_ax2 = T.axis.spatial(1, 0)
                        v_ax3 = T.axis.spatial(1, 0)
                        v_k2, v_k3 = T.axis.remap("RR", [k2, k3])
                        T.reads(
                            x_red_local[v_ax0, v_ax1, v_ax2, v_ax3], x[v_ax0, v_ax1, v_k2, v_k3]
                        )
                        T.writes(x_red_local[v_ax0, v_ax1, v_ax2, v_ax3])
                        x_red_local[v_ax0, v_ax1, v_ax2, v_ax3] = (
                            x_red_local[v_ax0, v_ax1, v_ax2, v_ax3] + x[v_ax0, v_ax1, v_k2, v_k3]
                        )
            for ax0 in range(8):
                with T.sblock("x_red_local"):
                    v0 = T.axis.spatial(1, 0)
                    v1 = T.axis.spatial(16, ax0_ax1_ax2_ax3_fused_0 * 8 + ax0)
                    v2 = T.axis.spatial(1, 0)
                    v3 = T.axis.spatial(1, 0)
                    T.reads(x_red_local[v0, v1, v2, v3])
                    T.writes(x_red[v0, v1, v2, v3])
                    x_red[v0, v1, v2, v3] = x_red_local[v0, v1, v2, v3]
            for ax0 in range(8):
                with T.sblock("T_divide"):
                    v_ax0 = T.axis.spatial(1, 0)
                    v_ax1 = T.axis.spatial(16, ax0_ax1_ax2_ax3_fused_0 * 8 + ax0)
                    v_ax2 = T.axis.spatial(1, 0)
                    v_ax3 = T.axis.spatial(1, 0)
                    T.reads(x_red[v_ax0, v_ax1, v_ax2, v_ax3])
                    T.writes(T_divide[v_ax0, v_ax1, v_ax2, v_ax3])
                    T_divide[v_ax0, v_ax1, v_ax2, v_ax3] = x_red[
                        v_ax0, v_ax1, v_ax2, v_ax3
                    ] / T.float32(25.0)

    check(ReductionChains(), before, expected)


def test_schedule_40x7x7():
    # 40 windows in 5 parallel tasks of 8 chains over the 7 x 7 pixels, the division per task
    @T.prim_func(s_tir=True, private=True)
    def before(x: T.Buffer((1, 40, 7, 7), "float32"), T_divide: T.Buffer((1, 40, 1, 1), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["mean"]})
        # with T.sblock("root"):
        x_red = T.sblock_alloc_buffer((1, 40, 1, 1))
        for ax0, ax1, ax2, ax3, k2, k3 in T.grid(1, 40, 1, 1, 7, 7):
            with T.sblock("x_red"):
                v_ax0, v_ax1, v_ax2, v_ax3, v_k2, v_k3 = T.axis.remap(
                    "SSSSRR", [ax0, ax1, ax2, ax3, k2, k3]
                )
                T.reads(x[v_ax0, v_ax1, v_k2, v_k3])
                T.writes(x_red[v_ax0, v_ax1, v_ax2, v_ax3])
                with T.init():
                    x_red[v_ax0, v_ax1, v_ax2, v_ax3] = T.float32(0.0)
                x_red[v_ax0, v_ax1, v_ax2, v_ax3] = (
                    x_red[v_ax0, v_ax1, v_ax2, v_ax3] + x[v_ax0, v_ax1, v_k2, v_k3]
                )
        for ax0, ax1, ax2, ax3 in T.grid(1, 40, 1, 1):
            with T.sblock("T_divide"):
                v_ax0, v_ax1, v_ax2, v_ax3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                T.reads(x_red[v_ax0, v_ax1, v_ax2, v_ax3])
                T.writes(T_divide[v_ax0, v_ax1, v_ax2, v_ax3])
                T_divide[v_ax0, v_ax1, v_ax2, v_ax3] = x_red[
                    v_ax0, v_ax1, v_ax2, v_ax3
                ] / T.float32(49.0)

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 40, 7, 7), "float32"), T_divide: T.Buffer((1, 40, 1, 1), "float32")
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["mean"]})
        # with T.sblock("root"):
        x_red = T.sblock_alloc_buffer((1, 40, 1, 1))
        x_red_local = T.sblock_alloc_buffer((1, 40, 1, 1), scope="local")
        for ax0_ax1_ax2_ax3_fused_0 in T.parallel(5):
            for ax0_ax1_ax2_ax3_fused_1_init in T.unroll(8):
                with T.sblock("x_red_init"):
                    v_ax0 = T.axis.spatial(1, 0)
                    v_ax1 = T.axis.spatial(
                        40, ax0_ax1_ax2_ax3_fused_0 * 8 + ax0_ax1_ax2_ax3_fused_1_init
                    )
                    v_ax2 = T.axis.spatial(1, 0)
                    v_ax3 = T.axis.spatial(1, 0)
                    T.reads()
                    T.writes(x_red_local[v_ax0, v_ax1, v_ax2, v_ax3])
                    x_red_local[v_ax0, v_ax1, v_ax2, v_ax3] = T.float32(0.0)
            for k2, k3 in T.grid(7, 7):
                for ax0_ax1_ax2_ax3_fused_1 in T.unroll(8):
                    with T.sblock("x_red_update"):
                        v_ax0 = T.axis.spatial(1, 0)
                        v_ax1 = T.axis.spatial(
                            40, ax0_ax1_ax2_ax3_fused_0 * 8 + ax0_ax1_ax2_ax3_fused_1
                        )
                        v_ax2 = T.axis.spatial(1, 0)
                        v_ax3 = T.axis.spatial(1, 0)
                        v_k2, v_k3 = T.axis.remap("RR", [k2, k3])
                        T.reads(
                            x_red_local[v_ax0, v_ax1, v_ax2, v_ax3], x[v_ax0, v_ax1, v_k2, v_k3]
                        )
                        T.writes(x_red_local[v_ax0, v_ax1, v_ax2, v_ax3])
                        x_red_local[v_ax0, v_ax1, v_ax2, v_ax3] = (
                            x_red_local[v_ax0, v_ax1, v_ax2, v_ax3] + x[v_ax0, v_ax1, v_k2, v_k3]
                        )
            for ax0 in range(8):
                with T.sblock("x_red_local"):
                    v0 = T.axis.spatial(1, 0)
                    v1 = T.axis.spatial(40, ax0_ax1_ax2_ax3_fused_0 * 8 + ax0)
                    v2 = T.axis.spatial(1, 0)
                    v3 = T.axis.spatial(1, 0)
                    T.reads(x_red_local[v0, v1, v2, v3])
                    T.writes(x_red[v0, v1, v2, v3])
                    x_red[v0, v1, v2, v3] = x_red_local[v0, v1, v2, v3]
            for ax0 in range(8):
                with T.sblock("T_divide"):
                    v_ax0 = T.axis.spatial(1, 0)
                    v_ax1 = T.axis.spatial(40, ax0_ax1_ax2_ax3_fused_0 * 8 + ax0)
                    v_ax2 = T.axis.spatial(1, 0)
                    v_ax3 = T.axis.spatial(1, 0)
                    T.reads(x_red[v_ax0, v_ax1, v_ax2, v_ax3])
                    T.writes(T_divide[v_ax0, v_ax1, v_ax2, v_ax3])
                    T_divide[v_ax0, v_ax1, v_ax2, v_ax3] = x_red[
                        v_ax0, v_ax1, v_ax2, v_ax3
                    ] / T.float32(49.0)

    check(ReductionChains(), before, expected)


def test_declines_two_reductions():
    # a softmax: two reductions
    assert declines(ReductionChains(), softmax())
