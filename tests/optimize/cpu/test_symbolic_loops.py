"""The ``symbolic-loops`` rule: attention over a symbolic sequence (scores against every key,
a softmax along the sequence, the weighted sum over it) gets parallel outer loops and a
contiguous inner loop, and is right at every size; static kernels are left to their rules."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm
import tvm_hetero as th
from tvm_hetero.layers.layered import layered_module
from tvm_hetero.optimize.cpu.symbolic_loops import SymbolicLoops

HEADS, WIDTH = 4, 32
TARGET = {"kind": "llvm", "mcpu": "skylake-avx512"}


def attention(seq="seq"):
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, HEADS, seq, WIDTH])
              for n in "qkv"]
    graph = helper.make_graph(
        nodes, "attention", inputs,
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, [1, HEADS, seq, WIDTH])],
        [numpy_helper.from_array(np.array(WIDTH ** -0.5, "float32"), "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def reference(q, k, v):
    scores = q @ k.transpose(0, 1, 3, 2) * WIDTH ** -0.5
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v


def _kernels(model):
    mod = layered_module(model, th.PrepareConfig.for_devices(th.DeviceSet.parse(["cpu"])))
    return {gv.name_hint: f for gv, f in mod.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc)}


def test_attention_kernels_get_parallel_rows_and_vector_lanes():
    kernels = _kernels(th.load_model(attention(), shape_ranges={"seq": "1:64:16"}))
    rule, target = SymbolicLoops(), tvm.target.Target(TARGET)
    scheduled = {name: rule.apply(func, target) for name, func in kernels.items()}
    assert all(func is not None for func in scheduled.values()), scheduled
    for name, func in scheduled.items():
        assert "T.parallel(" in func.script(), name  # heads x rows (or rows) over the cores
    # the weighted sum over the sequence: the head width (32) in whole 16-lane vectors, under
    # the reduction over the sequence
    weighted = next(f for name, f in scheduled.items() if name.startswith("matmul")
                    and "transpose" not in name and "multiply" not in name)
    script = weighted.script()
    assert "T.vectorized(T.int64(16))" in script and "T.parallel(" in script
    assert "_init" in script  # the accumulator's initialization taken out of the reduction


def test_static_kernels_are_declined():
    kernels = _kernels(th.load_model(attention(seq=16)))
    rule, target = SymbolicLoops(), tvm.target.Target(TARGET)
    assert all(rule.apply(func, target) is None for func in kernels.values())


@pytest.mark.parametrize("devices", [["cpu"], ["cpu-generic"]])
def test_attention_is_right_at_every_size(devices):
    model = th.load_model(attention(), shape_ranges={"seq": "1:64:16"})
    layers = th.extract_layers(model)
    compiled = th.build(model, th.Placement.all_on(layers, devices[0]), devices)
    assert "symbolic-loops" in compiled.stats.rules.values(), compiled.stats.rules
    assert None not in compiled.stats.rules.values(), compiled.stats.rules
    rng = np.random.default_rng(0)
    for seq in (1, 3, 16, 17, 64):
        q, k, v = (rng.standard_normal((1, HEADS, seq, WIDTH)).astype("float32")
                   for _ in range(3))
        (out,) = compiled.run({"q": q, "k": k, "v": v})
        np.testing.assert_allclose(out, reference(q, k, v), rtol=1e-4, atol=1e-5)


def test_schedule_weighted_sum_over_a_symbolic_sequence():
    # the weighted sum p @ v over [1, 4, seq, seq] x [1, 4, seq, 32]: heads x rows fused and
    # parallel; the 32 outputs of a row (2 vectors of 16 lanes) innermost under the reduction
    # over the sequence, their initialization taken out of it
    from tvm.script import tirx as T

    from tests.helpers.schedules import check

    @T.prim_func(private=True, s_tir=True)
    def before(p_in: T.handle, v_in: T.handle, out_in: T.handle):
        T.func_attr({"op_pattern": 4, "tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul"]})
        seq = T.int64()
        hx3 = T.match_buffer(p_in, (T.int64(1), T.int64(4), seq, seq))
        v = T.match_buffer(v_in, (T.int64(1), T.int64(4), seq, T.int64(32)))
        matmul = T.match_buffer(out_in, (T.int64(1), T.int64(4), seq, T.int64(32)))
        for i0, i1, i2, i3, k in T.grid(T.int64(1), T.int64(4), seq, T.int64(32), seq):
            with T.sblock("matmul"):
                v_i0, v_i1, v_i2, v_i3, v_k = T.axis.remap("SSSSR", [i0, i1, i2, i3, k])
                T.reads(hx3[v_i0, v_i1, v_i2, v_k], v[v_i0, v_i1, v_k, v_i3])
                T.writes(matmul[v_i0, v_i1, v_i2, v_i3])
                with T.init():
                    matmul[v_i0, v_i1, v_i2, v_i3] = T.float32(0.0)
                matmul[v_i0, v_i1, v_i2, v_i3] = (matmul[v_i0, v_i1, v_i2, v_i3]
                                                  + hx3[v_i0, v_i1, v_i2, v_k]
                                                  * v[v_i0, v_i1, v_k, v_i3])

    @T.prim_func(private=True, s_tir=True)
    def expected(p_in: T.handle, v_in: T.handle, out_in: T.handle):
        T.func_attr({"op_pattern": 4, "tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul"]})
        seq = T.int64()
        hx3 = T.match_buffer(p_in, (T.int64(1), T.int64(4), seq, seq))
        v = T.match_buffer(v_in, (T.int64(1), T.int64(4), seq, T.int64(32)))
        matmul = T.match_buffer(out_in, (T.int64(1), T.int64(4), seq, T.int64(32)))
        for ax0_ax1_fused in T.parallel(seq * T.int64(4)):
            for ax2_0_init in range(T.int64(2)):
                for ax2_1_init in T.vectorized(T.int64(16)):
                    with T.sblock("matmul_init"):
                        v0 = T.axis.spatial(T.int64(4), ax0_ax1_fused // seq)
                        v1 = T.axis.spatial(seq, ax0_ax1_fused % seq)
                        v2 = T.axis.spatial(T.int64(32), ax2_0_init * T.int64(16) + ax2_1_init)
                        T.reads()
                        T.writes(matmul[T.int64(0), v0, v1, v2])
                        matmul[T.int64(0), v0, v1, v2] = T.float32(0.0)
            for ax3, ax2_0 in T.grid(seq, T.int64(2)):
                for ax2_1 in T.vectorized(T.int64(16)):
                    with T.sblock("matmul_update"):
                        v0 = T.axis.spatial(T.int64(4), ax0_ax1_fused // seq)
                        v1 = T.axis.spatial(seq, ax0_ax1_fused % seq)
                        v2 = T.axis.spatial(T.int64(32), ax2_0 * T.int64(16) + ax2_1)
                        v3 = T.axis.reduce(seq, ax3)
                        T.reads(matmul[T.int64(0), v0, v1, v2], hx3[T.int64(0), v0, v1, v3],
                                v[T.int64(0), v0, v3, v2])
                        T.writes(matmul[T.int64(0), v0, v1, v2])
                        matmul[T.int64(0), v0, v1, v2] = (matmul[T.int64(0), v0, v1, v2]
                                                          + hx3[T.int64(0), v0, v1, v3]
                                                          * v[T.int64(0), v0, v3, v2])

    check(SymbolicLoops(), before, expected)
