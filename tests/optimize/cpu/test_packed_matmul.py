"""The matmul rules: ``packed-matmul`` (weight panels, rows padded to the tile, fast GELU math)
applies to its shapes and computes the right numbers; what it declines goes on down the table."""

import math
import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero import optimize
from tvm_hetero.devices import host_cpu_name
from tvm_hetero.optimize.cpu import PACKED_WEIGHTS_ATTR
from tvm_hetero.optimize.cpu.fast_math import fast_math
from tvm_hetero.optimize.cpu.packed_matmul import PackedMatmul
from tvm_hetero.target import vector_lanes

from tests.helpers.models import zoo
from tests.helpers.schedules import check, declines, matmul_bias


def _target(mcpu):
    import tvm

    return tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})


def _gelu_erf(v):
    return v * 0.5 * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2)))


def _gelu_tanh(v):
    return v * 0.5 * (1.0 + np.tanh(0.7978845608 * (v + 0.044715 * v ** 3)))


def _matmul(m, k, n, epilogue, batch=1):
    """``[batch, M, K] x [K, N] + bias`` then `epilogue`, as the ONNX import fuses it."""
    from tvm import te, tirx

    x = te.placeholder((batch, m, k), "float32", name="x")
    w = te.placeholder((k, n), "float32", name="w")
    b = te.placeholder((n,), "float32", name="b")
    r = te.reduce_axis((0, k), name="r")
    mm = te.compute((batch, m, n), lambda o, i, j: te.sum(x[o, i, r] * w[r, j], axis=r),
                    name="matmul")
    y = te.compute(mm.shape, lambda *i: mm(*i) + b[i[-1]], name="bias")
    if epilogue == "gelu_erf":
        y = te.compute(y.shape, lambda *i: y(*i) * 0.5 * (
            1.0 + tirx.erf(y(*i) / math.sqrt(2))), name="gelu")
    elif epilogue == "gelu_tanh":
        y = te.compute(y.shape, lambda *i: y(*i) * 0.5 * (1.0 + tirx.tanh(0.7978845608 * (
            y(*i) + 0.044715 * tirx.power(y(*i), 3.0)))), name="gelu")
    ops = ["matmul", "add"] + ([epilogue] if epilogue != "none" else [])
    return te.create_prim_func([x, w, b, y]).with_attr("tvm_hetero.op_kinds", ops)


def _run(func, target, arrays):
    import tvm

    lib = tvm.tirx.build(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                         target=target)
    out_shape = [int(d) for d in func.params[-1].ty.shape]
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    lib["main"](*[tvm.runtime.tensor(a) for a in arrays], out)
    return out.numpy()


@pytest.mark.parametrize("mcpu", ["haswell", "znver4"])
@pytest.mark.parametrize("epilogue, reference", [("gelu_erf", _gelu_erf),
                                                 ("gelu_tanh", _gelu_tanh)])
def test_packed_matmul_pads_rows_and_computes_gelu_as_vector_math(mcpu, epilogue, reference):
    target = _target(mcpu)
    if mcpu == "znver4":
        from tvm.target.codegen import llvm_cpu_has_features

        if not llvm_cpu_has_features(["avx512f"], _target(host_cpu_name())):
            pytest.skip("the host has no AVX-512")
    lanes, _ = vector_lanes(target)
    m, k, n = 13, 40, 4 * lanes  # 13 rows: a prime, so only padding gives a tile of rows
    func = _matmul(m, k, n, epilogue)
    scheduled, rule = optimize.optimize_function(func, target)
    assert rule == "packed-matmul"
    assert [int(v) for v in scheduled.attrs[PACKED_WEIGHTS_ATTR]] == [1, lanes, 1, n // lanes]
    assert [int(d) for d in scheduled.params[1].ty.shape] == [n // lanes, k, lanes]
    script = scheduled.script()
    assert "_pad" in script and "T.parallel" in script and "T.vectorized" in script
    assert "T.erf" not in script and "T.tanh" not in script and "T.pow" not in script
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, m, k)).astype("float32")
    w = rng.standard_normal((k, n)).astype("float32") / 4
    b = rng.standard_normal(n).astype("float32")
    got = _run(scheduled, target, [x, optimize.pack_weight(w, lanes, axis=1), b])
    want = reference(x.astype("float64") @ w + b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


def test_fast_math_keeps_erf_and_tanh_within_float32_rounding():
    from tvm import te, tirx

    values = np.linspace(-12, 12, 4801).astype("float32")
    x = te.placeholder(values.shape, "float32", name="x")
    for op, reference in [(tirx.erf, np.vectorize(math.erf)), (tirx.tanh, np.tanh)]:
        func = te.create_prim_func([x, te.compute(x.shape, lambda i: op(x[i]), name="y")])
        fast = fast_math(func)
        assert not fast.same_as(func) and op.__name__ not in fast.script()
        got = _run(fast, "llvm", [values])
        assert np.abs(got - reference(values.astype("float64"))).max() < 5e-7, op.__name__


@pytest.mark.parametrize("shape", [(8, 64, 10, 1), (16, 32, 64, 12)])
def test_packed_matmul_declines_ragged_columns_and_batches(shape):
    from tvm_hetero.optimize.cpu import PackedMatmul

    m, k, n, batch = shape
    assert PackedMatmul().apply(_matmul(m, k, n, "none", batch), _target("haswell")) is None


def test_an_mlps_dense_layers_take_packed_matmul_with_weights_repacked_at_build_time(
        cpu_devices):
    import tvm

    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.relax_ir import main_bindings

    model = zoo("mlp")  # 256 -> 512 -> 256 -> 10 at batch 8
    rules = th.build(model, "all:cpu", cpu_devices).stats.rules
    assert sorted(rules.values()) == ["packed-matmul", "packed-matmul", "tiled"], rules
    target = cpu_devices["cpu"].tvm_target()
    annotated = th.AnnotateDevice(th.Placement.all_on(th.extract_layers(model), "cpu"),
                                  th.DeviceSet([cpu_devices["cpu"]]))(layered_module(model))
    with target:
        scheduled = optimize.OptimizeLayers()(annotated)
    packed = {gv.name_hint for gv, func in scheduled.functions_items()
              if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None
              and PACKED_WEIGHTS_ATTR in func.attrs}
    weights = [binding.value.args[1].fields[1] for binding in main_bindings(scheduled)
               if isinstance(binding.value, tvm.relax.Call) and len(binding.value.args) > 1
               and isinstance(binding.value.args[0], tvm.ir.GlobalVar)
               and binding.value.args[0].name_hint in packed]
    assert len(weights) == 2
    assert all(isinstance(w, tvm.ir.GenericConst) and len(w.ty.shape) == 3 for w in weights)


def test_an_attention_product_with_prime_extents_is_padded_to_whole_tiles():
    from tvm import te

    # [1, 2, 17, 4] x [1, 2, 4, 17] / 8: 17 (a prime over its tile) rows and columns would
    # give tiled one-row, one-lane tiles (ViT's 197): padded to 24 x 24 (AVX2: 8 x 8 tiles)
    q = te.placeholder((1, 2, 17, 4), "float32", name="q")
    kt = te.placeholder((1, 2, 4, 17), "float32", name="kt")
    r = te.reduce_axis((0, 4), name="r")
    scores = te.compute((1, 2, 17, 17), lambda b, h, i, j: te.sum(
        q[b, h, i, r] * kt[b, h, r, j], axis=r), name="matmul")
    scaled = te.compute(scores.shape, lambda *i: scores(*i) / 8.0, name="divide")
    func = te.create_prim_func([q, kt, scaled]).with_attr("tvm_hetero.op_kinds",
                                                          ["matmul", "divide"])
    target = _target("haswell")
    scheduled, rule = optimize.optimize_function(func, target)
    assert rule == "tiled"
    script = scheduled.script()
    assert "q_pad" in script and "kt_pad" in script and "T.vectorized(8)" in script, script
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 2, 17, 4)).astype("float32")
    b = rng.standard_normal((1, 2, 4, 17)).astype("float32")
    np.testing.assert_allclose(_run(scheduled, target, [a, b]), a @ b / 8, rtol=1e-5,
                               atol=1e-6)


def test_ragged_columns_are_padded_to_whole_vectors_in_the_packed_weight():
    target = _target("haswell")
    lanes, _ = vector_lanes(target)
    m, k, n = 5, 24, 8 * lanes + 3  # 8.4 vectors of columns
    scheduled, rule = optimize.optimize_function(_matmul(m, k, n, "none"), target)
    assert rule == "packed-matmul"
    blocks = int(scheduled.attrs[PACKED_WEIGHTS_ATTR][3])  # 9 vectors, or up to whole tiles
    assert blocks >= 9 and [int(d) for d in scheduled.params[1].ty.shape] == [blocks, k, lanes]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, m, k)).astype("float32")
    w = rng.standard_normal((k, n)).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    packed = optimize.pack_weight(w, lanes, 1, blocks)
    assert packed.shape == (blocks, k, lanes) and not packed[8, :, 3:].any()
    np.testing.assert_allclose(_run(scheduled, target, [x, packed, b]),
                               x.astype("float64") @ w + b, rtol=1e-5, atol=1e-5)


def _runs_here(target):
    from tvm.target.codegen import llvm_cpu_has_features

    features = ["avx512f"] if vector_lanes(target)[0] == 16 else ["avx2"]
    if not llvm_cpu_has_features(features, _target(host_cpu_name())):
        pytest.skip(f"the host has no {features[0]}")


@pytest.mark.parametrize("mcpu", ["haswell", "znver4"])
def test_a_memory_bound_product_runs_every_row_tile_over_each_block_of_the_weight(mcpu):
    import re

    from tvm_hetero.optimize.cpu.packed_matmul import matmul_tile, reduction_block
    from tvm_hetero.target import cpu_traits

    target = _target(mcpu)
    _runs_here(target)
    traits = cpu_traits(target)
    m, k, n = 16, 2048, 8 * traits.lanes  # 16 rows: several row tiles on both ISAs
    rows, vectors = matmul_tile(m, 8, traits.registers)
    block = reduction_block(m, k, rows, vectors, traits.lanes, traits.l2_bytes)
    assert block is not None and k % block == 0 and block < k
    assert block * vectors * traits.lanes * 4 <= traits.l2_bytes // 4
    scheduled, rule = optimize.optimize_function(_matmul(m, k, n, "none"), target)
    assert rule == "packed-matmul"
    script = scheduled.script()
    # a task per panel (not per tile), then: blocks of the reduction, row tiles, block steps
    assert f"T.parallel({8 // vectors})" in script, script
    assert re.search(rf"T\.grid\({k // block}, {m // rows}, {block}\)", script), script
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, m, k)).astype("float32")
    w = rng.standard_normal((k, n)).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    got = _run(scheduled, target, [x, optimize.pack_weight(w, traits.lanes, axis=1), b])
    np.testing.assert_allclose(got, x.astype("float64") @ w + b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("mcpu", ["haswell", "znver4"])
def test_a_matrix_vector_product_under_tiled_streams_eight_vectors_of_each_weight_row(mcpu):
    from tvm import s_tir, tirx

    from tvm_hetero.optimize.cpu import Tiled

    target = _target(mcpu)
    lanes = vector_lanes(target)[0]
    func = _matmul(1, 512, 1024, "none")  # a GRU step's product (packed-matmul takes this
    scheduled = Tiled().apply(func, target)  # one alone; its fused slices send it to tiled)
    sch = s_tir.Schedule(scheduled)
    loops = [sch.get(loop) for loop in sch.get_loops(sch.get_sblock("matmul_update"))]
    assert loops[-1].kind == tirx.ForKind.VECTORIZED and int(loops[-1].extent) == 8 * lanes
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((1, 1, 512)).astype("float32"),
              rng.standard_normal((512, 1024)).astype("float32"),
              rng.standard_normal(1024).astype("float32")]
    np.testing.assert_allclose(_run(scheduled, target, arrays),
                               arrays[0] @ arrays[1] + arrays[2], rtol=1e-4, atol=1e-3)


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_16x8x32():
    # weight read as panels [2, 8, 16] (its repacking in the attribute); 2 parallel tiles of
    # 8 rows x 2 vectors in a local buffer (unrolled, 16 lanes vectorized), bias per tile
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((16, 8), "float32"),
        w: T.Buffer((8, 32), "float32"),
        z: T.Buffer((32,), "float32"),
        T_add: T.Buffer((16, 32), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul", "add"]})
        # with T.sblock("root"):
        T_matmul = T.sblock_alloc_buffer((16, 32))
        for ax0, ax1, k in T.grid(16, 32, 8):
            with T.sblock("T_matmul"):
                v_ax0, v_ax1, v_k = T.axis.remap("SSR", [ax0, ax1, k])
                T.reads(x[v_ax0, v_k], w[v_k, v_ax1])
                T.writes(T_matmul[v_ax0, v_ax1])
                with T.init():
                    T_matmul[v_ax0, v_ax1] = T.float32(0.0)
                T_matmul[v_ax0, v_ax1] = T_matmul[v_ax0, v_ax1] + x[v_ax0, v_k] * w[v_k, v_ax1]
        for ax0, ax1 in T.grid(16, 32):
            with T.sblock("T_add"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(T_matmul[v_ax0, v_ax1], z[v_ax1])
                T.writes(T_add[v_ax0, v_ax1])
                T_add[v_ax0, v_ax1] = T_matmul[v_ax0, v_ax1] + z[v_ax1]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((16, 8), "float32"),
        w: T.Buffer((2, 8, 16), "float32"),
        z: T.Buffer((32,), "float32"),
        T_add: T.Buffer((16, 32), "float32"),
    ):
        T.func_attr(
            {
                "tirx.noalias": True,
                "tvm_hetero.op_kinds": ["matmul", "add"],
                "tvm_hetero.packed_weights": [1, 16, 1, 2],
            }
        )
        # with T.sblock("root"):
        T_matmul_local = T.sblock_alloc_buffer((16, 32), scope="local")
        for ax1_0_ax0_0_fused in T.parallel(2):
            for ax0_1_init in T.unroll(8):
                for ax1_1_init in T.unroll(2):
                    for ax1_2_init in T.vectorized(16):
                        with T.sblock("T_matmul_init"):
                            v_ax0 = T.axis.spatial(16, ax1_0_ax0_0_fused * 8 + ax0_1_init)
                            v_ax1 = T.axis.spatial(32, ax1_1_init * 16 + ax1_2_init)
                            T.reads()
                            T.writes(T_matmul_local[v_ax0, v_ax1])
                            T_matmul_local[v_ax0, v_ax1] = T.float32(0.0)
            for k in range(8):
                for ax0_1 in T.unroll(8):
                    for ax1_1 in T.unroll(2):
                        for ax1_2 in T.vectorized(16):
                            with T.sblock("T_matmul_update"):
                                v_ax0 = T.axis.spatial(16, ax1_0_ax0_0_fused * 8 + ax0_1)
                                v_ax1 = T.axis.spatial(32, ax1_1 * 16 + ax1_2)
                                v_k = T.axis.reduce(8, k)
                                T.reads(
                                    T_matmul_local[v_ax0, v_ax1],
                                    x[v_ax0, v_k],
                                    w[v_ax1 // 16, v_k, v_ax1 % 16],
                                )
                                T.writes(T_matmul_local[v_ax0, v_ax1])
                                T_matmul_local[v_ax0, v_ax1] = (
                                    T_matmul_local[v_ax0, v_ax1]
                                    + x[v_ax0, v_k] * w[v_ax1 // 16, v_k, v_ax1 % 16]
                                )
            for ax0 in T.unroll(8):
                for ax1_0 in T.unroll(2):
                    for ax1_1 in T.vectorized(16):
                        with T.sblock("T_add"):
                            v_ax0 = T.axis.spatial(16, ax1_0_ax0_0_fused * 8 + ax0)
                            v_ax1 = T.axis.spatial(32, ax1_0 * 16 + ax1_1)
                            T.reads(T_matmul_local[v_ax0, v_ax1], z[v_ax1])
                            T.writes(T_add[v_ax0, v_ax1])
                            T_add[v_ax0, v_ax1] = T_matmul_local[v_ax0, v_ax1] + z[v_ax1]

    check(PackedMatmul(), before, expected)


def test_schedule_40x16x64():
    # weight as panels [4, 16, 16]; 8 parallel tiles of 5 rows x 4 vectors in a local
    # buffer over the 16-long reduction, bias per tile
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((40, 16), "float32"),
        w: T.Buffer((16, 64), "float32"),
        z: T.Buffer((64,), "float32"),
        T_add: T.Buffer((40, 64), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul", "add"]})
        # with T.sblock("root"):
        T_matmul = T.sblock_alloc_buffer((40, 64))
        for ax0, ax1, k in T.grid(40, 64, 16):
            with T.sblock("T_matmul"):
                v_ax0, v_ax1, v_k = T.axis.remap("SSR", [ax0, ax1, k])
                T.reads(x[v_ax0, v_k], w[v_k, v_ax1])
                T.writes(T_matmul[v_ax0, v_ax1])
                with T.init():
                    T_matmul[v_ax0, v_ax1] = T.float32(0.0)
                T_matmul[v_ax0, v_ax1] = T_matmul[v_ax0, v_ax1] + x[v_ax0, v_k] * w[v_k, v_ax1]
        for ax0, ax1 in T.grid(40, 64):
            with T.sblock("T_add"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(T_matmul[v_ax0, v_ax1], z[v_ax1])
                T.writes(T_add[v_ax0, v_ax1])
                T_add[v_ax0, v_ax1] = T_matmul[v_ax0, v_ax1] + z[v_ax1]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((40, 16), "float32"),
        w: T.Buffer((4, 16, 16), "float32"),
        z: T.Buffer((64,), "float32"),
        T_add: T.Buffer((40, 64), "float32"),
    ):
        T.func_attr(
            {
                "tirx.noalias": True,
                "tvm_hetero.op_kinds": ["matmul", "add"],
                "tvm_hetero.packed_weights": [1, 16, 1, 4],
            }
        )
        # with T.sblock("root"):
        T_matmul_local = T.sblock_alloc_buffer((40, 64), scope="local")
        for ax1_0_ax0_0_fused in T.parallel(8):
            for ax0_1_init in T.unroll(5):
                for ax1_1_init in T.unroll(4):
                    for ax1_2_init in T.vectorized(16):
                        with T.sblock("T_matmul_init"):
                            v_ax0 = T.axis.spatial(40, ax1_0_ax0_0_fused * 5 + ax0_1_init)
                            v_ax1 = T.axis.spatial(64, ax1_1_init * 16 + ax1_2_init)
                            T.reads()
                            T.writes(T_matmul_local[v_ax0, v_ax1])
                            T_matmul_local[v_ax0, v_ax1] = T.float32(0.0)
            for k in range(16):
                for ax0_1 in T.unroll(5):
                    for ax1_1 in T.unroll(4):
                        for ax1_2 in T.vectorized(16):
                            with T.sblock("T_matmul_update"):
                                v_ax0 = T.axis.spatial(40, ax1_0_ax0_0_fused * 5 + ax0_1)
                                v_ax1 = T.axis.spatial(64, ax1_1 * 16 + ax1_2)
                                v_k = T.axis.reduce(16, k)
                                T.reads(
                                    T_matmul_local[v_ax0, v_ax1],
                                    x[v_ax0, v_k],
                                    w[v_ax1 // 16, v_k, v_ax1 % 16],
                                )
                                T.writes(T_matmul_local[v_ax0, v_ax1])
                                T_matmul_local[v_ax0, v_ax1] = (
                                    T_matmul_local[v_ax0, v_ax1]
                                    + x[v_ax0, v_k] * w[v_ax1 // 16, v_k, v_ax1 % 16]
                                )
            for ax0 in T.unroll(5):
                for ax1_0 in T.unroll(4):
                    for ax1_1 in T.vectorized(16):
                        with T.sblock("T_add"):
                            v_ax0 = T.axis.spatial(40, ax1_0_ax0_0_fused * 5 + ax0)
                            v_ax1 = T.axis.spatial(64, ax1_0 * 16 + ax1_1)
                            T.reads(T_matmul_local[v_ax0, v_ax1], z[v_ax1])
                            T.writes(T_add[v_ax0, v_ax1])
                            T_add[v_ax0, v_ax1] = T_matmul_local[v_ax0, v_ax1] + z[v_ax1]

    check(PackedMatmul(), before, expected)


def test_declines_ragged_columns():
    # 10 columns: under 8 vectors, ragged
    assert declines(PackedMatmul(), matmul_bias(4, 8, 10))
