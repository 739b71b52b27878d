"""Reductions whose epilogue spans the row (an RMS norm: mean of squares, square root,
reciprocal, scale), reductions over any axes with a fan-out epilogue, and the suite's decode
step and detector (tvm_hetero.testing.suite) at small sizes against onnxruntime."""

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero.optimize.cpu.row_reductions import RowReductions
from tvm_hetero.testing import max_relative_error, suite

from tests.helpers.schedules import add_multiply, check, declines


def _rms_norm(shape, reciprocal: bool):
    """``x / sqrt(mean(x^2) + eps) * w`` over the last axis (Div, or Reciprocal then Mul)."""
    g = suite.GraphBuilder(seed=1)
    mean = g.op("ReduceMean", [g.op("Pow", ["x", g.scalar(2.0)])], axes=[-1], keepdims=1)
    root = g.op("Sqrt", [g.op("Add", [mean, g.scalar(1e-6)])])
    if reciprocal:
        normed = g.op("Mul", ["x", g.op("Reciprocal", [root])])
    else:
        normed = g.op("Div", ["x", root])
    weight = g.const(np.linspace(0.5, 1.5, shape[-1]).astype(np.float32))
    out = g.op("Mul", [normed, weight])
    return g.model("rms_norm", [suite.float_input("x", shape)], [out]), \
        {"x": suite.normal_array(shape)}


def _reduction_kernel(proto):
    from tvm_hetero.layers.classify import kernel_kind
    from tvm_hetero.layers.layered import layered_module

    mod = layered_module(th.load_model(proto))
    found = [(gv.name_hint, func) for gv, func in mod.functions_items()
             if isinstance(func, tvm.tirx.PrimFunc) and kernel_kind(func) == "reduction"]
    assert len(found) == 1, [name for name, _ in found]
    return found[0]


@pytest.mark.parametrize("mcpu", ["znver4", "haswell"])
@pytest.mark.parametrize("shape, reciprocal", [([1, 1, 1024], False), ([1, 1, 1000], True),
                                               ([1, 1, 4], False), ([1, 8, 1030], True),
                                               ([2, 64, 768], False)])
def test_an_rms_norm_takes_row_reductions_and_computes_each_rows_mean_once(
        mcpu, shape, reciprocal):
    # a decode step's RMS norm (one row) fell through reduction-chains and parallel-loops to
    # dlight's reduction rule, which computed the mean again for every output of the row:
    # 1 x 4096 in 15 ms instead of 5 us
    from tvm.s_tir.analysis import estimate_tir_flops

    from tvm_hetero.optimize.pass_ import optimize_function

    proto, _ = _rms_norm(shape, reciprocal)
    name, func = _reduction_kernel(proto)
    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    func = func.with_attr("target", target)
    scheduled, rule = optimize_function(func, target, name)
    assert rule == "row-reductions"
    # the row's scalar steps (sqrt, reciprocal) may be computed per element (vector code),
    # not the mean: dlight's schedule counted ~1000x
    flops = estimate_tir_flops(tvm.IRModule({"main": func}))
    assert estimate_tir_flops(tvm.IRModule({"main": scheduled})) <= 4 * flops
    rng = np.random.default_rng(0)
    # positive arguments: the first is the squares' buffer (a mean of random normals may be
    # negative, its root NaN)
    args = [rng.uniform(0.5, 2.0, [int(d) for d in p.ty.shape]).astype("float32")
            for p in func.params]

    def run(f):
        lib = tvm.tirx.build(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}),
                             target=target)
        tensors = [tvm.runtime.tensor(a.copy()) for a in args]
        lib["main"](*tensors)
        return tensors[-1].numpy()

    if mcpu == "haswell" or "avx512f" in open("/proc/cpuinfo").read():
        want = run(func)
        np.testing.assert_allclose(run(scheduled), want, rtol=1e-5,
                                   atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("shape, axes, op", [
    ([1, 10, 12, 12], [1], "ReduceMean"), ([1, 10, 12, 12], [1, 2, 3], "ReduceMax"),
    ([1, 10, 12, 12], [3], "ReduceSum"), ([2, 3, 5], [0], "ReduceMean"),
    ([2, 3, 5], [1], "ReduceMax"), ([7, 33], [0, 1], "ReduceSum"), ([3, 1, 17], [2], "ReduceMean"),
    ([1, 16, 1, 128], [3], "ReduceMax"), ([64, 40], [1], "ReduceMean"), ([1, 1], [1], "ReduceSum"),
])
def test_reductions_over_any_axes_with_a_fan_out_epilogue_match_the_default_loops(
        shape, axes, op):
    # the reduction's input read again by its epilogue: x * x / (reduce(x) + 3); run three
    # times (a race shows as results that change between runs)
    g = suite.GraphBuilder(seed=2)
    if op == "ReduceSum":
        reduced = g.op(op, ["x", g.ints(axes)], keepdims=1)
    else:
        reduced = g.op(op, ["x"], axes=axes, keepdims=1)
    out = g.op("Mul", [g.op("Div", ["x", g.op("Add", [reduced, g.scalar(3.0)])]), "x"])
    model = th.load_model(g.model("reduce", [suite.float_input("x", shape)], [out]))
    inputs = {"x": suite.normal_array(shape)}
    want = th.build(model, "all:cpu", ["cpu"], optimize=False).run(inputs)
    compiled = th.build(model, "all:cpu", ["cpu"])
    for _ in range(3):
        assert max_relative_error(compiled.run(inputs), want) < 1e-5


def _against_onnxruntime(proto, feed):
    model = th.load_model(proto)
    inputs = {spec.name: feed[spec.source_name or spec.name] for spec in model.inputs}
    want = suite.ort_cpu_session(proto, 2).run(None, feed)
    compiled = th.build(model, "all:cpu", ["cpu"])
    assert max_relative_error(compiled.run(inputs), want) < 1e-4
    return compiled


def test_the_suites_decode_step_matches_onnxruntime_with_its_norms_as_rows():
    proto, feed = suite.llama_decode(d=128, heads=4, ffn=352, layers=2, past=7)
    rules = _against_onnxruntime(proto, feed).stats.rules
    norms = [rule for name, rule in rules.items() if name.startswith("fused_mean")]
    assert norms and set(norms) == {"row-reductions"}, rules
    assert "dlight.cpu.Reduction" not in rules.values()


def test_the_suites_detector_matches_onnxruntime():
    # SiLU convolutions (fan-out of the convolution), Resize and Add in the neck, three
    # Reshape / Transpose / Sigmoid heads joined by Concat
    proto, feed = suite.yolo_detector(size=64, classes=3)
    _against_onnxruntime(proto, feed)


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_128x64():
    # one row per parallel task: max and sum as 16-lane partial results (rfactor, vectorized)
    # then across them, exp and the normalization vectorized along the 64-wide row
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
        T_softmax_maxelem = T.sblock_alloc_buffer((128,))
        T_softmax_exp = T.sblock_alloc_buffer((128, 64))
        T_softmax_expsum = T.sblock_alloc_buffer((128,))
        T_softmax_maxelem_rf = T.sblock_alloc_buffer((16, 128))
        T_softmax_expsum_rf = T.sblock_alloc_buffer((16, 128))
        for ax0 in T.parallel(128):
            for ax1 in range(1):
                for ax0_init in T.vectorized(16):
                    with T.sblock("T_softmax_maxelem_rf_init"):
                        vax1_1 = T.axis.spatial(16, ax0_init)
                        v0 = T.axis.spatial(128, ax0 + ax1)
                        T.reads()
                        T.writes(T_softmax_maxelem_rf[vax1_1, v0])
                        T_softmax_maxelem_rf[vax1_1, v0] = T.float32(
                            -340282346638528859811704183484516925440.0
                        )
                for ax2 in range(4):
                    for ax0_1 in T.vectorized(16):
                        with T.sblock("T_softmax_maxelem_rf_update"):
                            vax1_1 = T.axis.spatial(16, ax0_1)
                            v0 = T.axis.spatial(128, ax0 + ax1)
                            vax1_0 = T.axis.reduce(4, ax2)
                            T.reads(T_softmax_maxelem_rf[vax1_1, v0], x[v0, vax1_0 * 16 + vax1_1])
                            T.writes(T_softmax_maxelem_rf[vax1_1, v0])
                            T_softmax_maxelem_rf[vax1_1, v0] = T.max(
                                T_softmax_maxelem_rf[vax1_1, v0], x[v0, vax1_0 * 16 + vax1_1]
                            )
            for ax0_1, ax1 in T.grid(16, 1):
                with T.sblock("T_softmax_maxelem"):
                    vax1_1 = T.axis.reduce(16, ax0_1)
                    v0 = T.axis.spatial(128, ax0 + ax1)
                    T.reads(T_softmax_maxelem_rf[vax1_1, v0])
                    T.writes(T_softmax_maxelem[v0])
                    with T.init():
                        T_softmax_maxelem[v0] = T.float32(
                            -340282346638528859811704183484516925440.0
                        )
                    T_softmax_maxelem[v0] = T.max(
                        T_softmax_maxelem[v0], T_softmax_maxelem_rf[vax1_1, v0]
                    )
            for ax0_ax1_fused in T.vectorized(64):
                with T.sblock("T_softmax_exp"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax0_ax1_fused])
                    T.reads(x[v0, v1], T_softmax_maxelem[v0])
                    T.writes(T_softmax_exp[v0, v1])
                    T_softmax_exp[v0, v1] = T.exp(x[v0, v1] - T_softmax_maxelem[v0])
            for ax1 in range(1):
                for ax0_init in T.vectorized(16):
                    with T.sblock("T_softmax_expsum_rf_init"):
                        vax1_1 = T.axis.spatial(16, ax0_init)
                        v0 = T.axis.spatial(128, ax0 + ax1)
                        T.reads()
                        T.writes(T_softmax_expsum_rf[vax1_1, v0])
                        T_softmax_expsum_rf[vax1_1, v0] = T.float32(0.0)
                for ax2 in range(4):
                    for ax0_1 in T.vectorized(16):
                        with T.sblock("T_softmax_expsum_rf_update"):
                            vax1_1 = T.axis.spatial(16, ax0_1)
                            v0 = T.axis.spatial(128, ax0 + ax1)
                            vax1_0 = T.axis.reduce(4, ax2)
                            T.reads(
                                T_softmax_expsum_rf[vax1_1, v0],
                                T_softmax_exp[v0, vax1_0 * 16 + vax1_1],
                            )
                            T.writes(T_softmax_expsum_rf[vax1_1, v0])
                            T_softmax_expsum_rf[vax1_1, v0] = (
                                T_softmax_expsum_rf[vax1_1, v0]
                                + T_softmax_exp[v0, vax1_0 * 16 + vax1_1]
                            )
            for ax0_1, ax1 in T.grid(16, 1):
                with T.sblock("T_softmax_expsum"):
                    vax1_1 = T.axis.reduce(16, ax0_1)
                    v0 = T.axis.spatial(128, ax0 + ax1)
                    T.reads(T_softmax_expsum_rf[vax1_1, v0])
                    T.writes(T_softmax_expsum[v0])
                    with T.init():
                        T_softmax_expsum[v0] = T.float32(0.0)
                    T_softmax_expsum[v0] = T_softmax_expsum[v0] + T_softmax_expsum_rf[vax1_1, v0]
            for ax1 in T.vectorized(64):
                with T.sblock("T_softmax_norm"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax1])
                    T.reads(T_softmax_exp[v0, v1], T_softmax_expsum[v0])
                    T.writes(T_softmax_norm[v0, v1])
                    T.sblock_attr({"axis": 1})
                    T_softmax_norm[v0, v1] = T_softmax_exp[v0, v1] / T_softmax_expsum[v0]

    check(RowReductions(), before, expected)


def test_schedule_64x200():
    # one row per parallel task; 200 has no multiple of 16 lanes: max and sum as 8-lane
    # partial results over 25 steps, then across them; exp and normalization in 25 x 8 lanes
    @T.prim_func(s_tir=True, private=True)
    def before(x: T.Buffer((64, 200), "float32"), T_softmax_norm: T.Buffer((64, 200), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["softmax"]})
        # with T.sblock("root"):
        T_softmax_maxelem = T.sblock_alloc_buffer((64,))
        T_softmax_exp = T.sblock_alloc_buffer((64, 200))
        T_softmax_expsum = T.sblock_alloc_buffer((64,))
        for i0, k in T.grid(64, 200):
            with T.sblock("T_softmax_maxelem"):
                v_i0, v_k = T.axis.remap("SR", [i0, k])
                T.reads(x[v_i0, v_k])
                T.writes(T_softmax_maxelem[v_i0])
                with T.init():
                    T_softmax_maxelem[v_i0] = T.float32(-340282346638528859811704183484516925440.0)
                T_softmax_maxelem[v_i0] = T.max(T_softmax_maxelem[v_i0], x[v_i0, v_k])
        for i0, i1 in T.grid(64, 200):
            with T.sblock("T_softmax_exp"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                T.reads(x[v_i0, v_i1], T_softmax_maxelem[v_i0])
                T.writes(T_softmax_exp[v_i0, v_i1])
                T_softmax_exp[v_i0, v_i1] = T.exp(x[v_i0, v_i1] - T_softmax_maxelem[v_i0])
        for i0, k in T.grid(64, 200):
            with T.sblock("T_softmax_expsum"):
                v_i0, v_k = T.axis.remap("SR", [i0, k])
                T.reads(T_softmax_exp[v_i0, v_k])
                T.writes(T_softmax_expsum[v_i0])
                with T.init():
                    T_softmax_expsum[v_i0] = T.float32(0.0)
                T_softmax_expsum[v_i0] = T_softmax_expsum[v_i0] + T_softmax_exp[v_i0, v_k]
        for i0, i1 in T.grid(64, 200):
            with T.sblock("T_softmax_norm"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                T.reads(T_softmax_exp[v_i0, v_i1], T_softmax_expsum[v_i0])
                T.writes(T_softmax_norm[v_i0, v_i1])
                T.sblock_attr({"axis": 1})
                T_softmax_norm[v_i0, v_i1] = T_softmax_exp[v_i0, v_i1] / T_softmax_expsum[v_i0]

    @T.prim_func(s_tir=True, private=True)
    def expected(x: T.Buffer((64, 200), "float32"), T_softmax_norm: T.Buffer((64, 200), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["softmax"]})
        # with T.sblock("root"):
        T_softmax_maxelem = T.sblock_alloc_buffer((64,))
        T_softmax_exp = T.sblock_alloc_buffer((64, 200))
        T_softmax_expsum = T.sblock_alloc_buffer((64,))
        T_softmax_maxelem_rf = T.sblock_alloc_buffer((8, 64))
        T_softmax_expsum_rf = T.sblock_alloc_buffer((8, 64))
        for ax0 in T.parallel(64):
            for ax1 in range(1):
                for ax0_init in T.vectorized(8):
                    with T.sblock("T_softmax_maxelem_rf_init"):
                        vax1_1 = T.axis.spatial(8, ax0_init)
                        v0 = T.axis.spatial(64, ax0 + ax1)
                        T.reads()
                        T.writes(T_softmax_maxelem_rf[vax1_1, v0])
                        T_softmax_maxelem_rf[vax1_1, v0] = T.float32(
                            -340282346638528859811704183484516925440.0
                        )
                for ax2 in range(25):
                    for ax0_1 in T.vectorized(8):
                        with T.sblock("T_softmax_maxelem_rf_update"):
                            vax1_1 = T.axis.spatial(8, ax0_1)
                            v0 = T.axis.spatial(64, ax0 + ax1)
                            vax1_0 = T.axis.reduce(25, ax2)
                            T.reads(T_softmax_maxelem_rf[vax1_1, v0], x[v0, vax1_0 * 8 + vax1_1])
                            T.writes(T_softmax_maxelem_rf[vax1_1, v0])
                            T_softmax_maxelem_rf[vax1_1, v0] = T.max(
                                T_softmax_maxelem_rf[vax1_1, v0], x[v0, vax1_0 * 8 + vax1_1]
                            )
            for ax0_1, ax1 in T.grid(8, 1):
                with T.sblock("T_softmax_maxelem"):
                    vax1_1 = T.axis.reduce(8, ax0_1)
                    v0 = T.axis.spatial(64, ax0 + ax1)
                    T.reads(T_softmax_maxelem_rf[vax1_1, v0])
                    T.writes(T_softmax_maxelem[v0])
                    with T.init():
                        T_softmax_maxelem[v0] = T.float32(
                            -340282346638528859811704183484516925440.0
                        )
                    T_softmax_maxelem[v0] = T.max(
                        T_softmax_maxelem[v0], T_softmax_maxelem_rf[vax1_1, v0]
                    )
            for ax0_ax1_fused_0 in range(25):
                for ax0_ax1_fused_1 in T.vectorized(8):
                    with T.sblock("T_softmax_exp"):
                        v0 = T.axis.spatial(64, ax0)
                        v1 = T.axis.spatial(200, ax0_ax1_fused_0 * 8 + ax0_ax1_fused_1)
                        T.reads(x[v0, v1], T_softmax_maxelem[v0])
                        T.writes(T_softmax_exp[v0, v1])
                        T_softmax_exp[v0, v1] = T.exp(x[v0, v1] - T_softmax_maxelem[v0])
            for ax1 in range(1):
                for ax0_init in T.vectorized(8):
                    with T.sblock("T_softmax_expsum_rf_init"):
                        vax1_1 = T.axis.spatial(8, ax0_init)
                        v0 = T.axis.spatial(64, ax0 + ax1)
                        T.reads()
                        T.writes(T_softmax_expsum_rf[vax1_1, v0])
                        T_softmax_expsum_rf[vax1_1, v0] = T.float32(0.0)
                for ax2 in range(25):
                    for ax0_1 in T.vectorized(8):
                        with T.sblock("T_softmax_expsum_rf_update"):
                            vax1_1 = T.axis.spatial(8, ax0_1)
                            v0 = T.axis.spatial(64, ax0 + ax1)
                            vax1_0 = T.axis.reduce(25, ax2)
                            T.reads(
                                T_softmax_expsum_rf[vax1_1, v0],
                                T_softmax_exp[v0, vax1_0 * 8 + vax1_1],
                            )
                            T.writes(T_softmax_expsum_rf[vax1_1, v0])
                            T_softmax_expsum_rf[vax1_1, v0] = (
                                T_softmax_expsum_rf[vax1_1, v0]
                                + T_softmax_exp[v0, vax1_0 * 8 + vax1_1]
                            )
            for ax0_1, ax1 in T.grid(8, 1):
                with T.sblock("T_softmax_expsum"):
                    vax1_1 = T.axis.reduce(8, ax0_1)
                    v0 = T.axis.spatial(64, ax0 + ax1)
                    T.reads(T_softmax_expsum_rf[vax1_1, v0])
                    T.writes(T_softmax_expsum[v0])
                    with T.init():
                        T_softmax_expsum[v0] = T.float32(0.0)
                    T_softmax_expsum[v0] = T_softmax_expsum[v0] + T_softmax_expsum_rf[vax1_1, v0]
            for ax1_0 in range(25):
                for ax1_1 in T.vectorized(8):
                    with T.sblock("T_softmax_norm"):
                        v0 = T.axis.spatial(64, ax0)
                        v1 = T.axis.spatial(200, ax1_0 * 8 + ax1_1)
                        T.reads(T_softmax_exp[v0, v1], T_softmax_expsum[v0])
                        T.writes(T_softmax_norm[v0, v1])
                        T.sblock_attr({"axis": 1})
                        T_softmax_norm[v0, v1] = T_softmax_exp[v0, v1] / T_softmax_expsum[v0]

    check(RowReductions(), before, expected)


def test_declines_no_reduction():
    # an elementwise kernel: no reduction
    assert declines(RowReductions(), add_multiply())
