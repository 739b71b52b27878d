"""The ``split-k-gemv`` rule (``tvm_hetero/optimize/cpu/split_k_gemv.py``) on a matrix-vector
product: its schedule at two shapes, the kernel before and the schedule expected written out in
TVMScript and compared with ``tvm.ir.assert_structural_equal`` (as TVM's dlight tests check theirs),
and a kernel outside its preconditions that it declines; then a large product built and run against
NumPy, and the zoo's CNN's small one left to ``tiled``.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

import re

from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero.optimize.cpu.split_k_gemv import SplitKGemv

from tests.helpers.models import zoo
from tests.helpers.schedules import check, declines, gemv


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_1024():
    # the 1024 reduction in 8 parallel slices (rfactor), each streaming its 128 weight rows
    # into a partial output row; the 8 partials added after
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 1024), "float32"),
        w: T.Buffer((1024, 1024), "float32"),
        T_matmul: T.Buffer((1, 1024), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul"]})
        # with T.sblock("root"):
        for ax0, ax1, k in T.grid(1, 1024, 1024):
            with T.sblock("T_matmul"):
                v_ax0, v_ax1, v_k = T.axis.remap("SSR", [ax0, ax1, k])
                T.reads(x[v_ax0, v_k], w[v_k, v_ax1])
                T.writes(T_matmul[v_ax0, v_ax1])
                with T.init():
                    T_matmul[v_ax0, v_ax1] = T.float32(0.0)
                T_matmul[v_ax0, v_ax1] = T_matmul[v_ax0, v_ax1] + x[v_ax0, v_k] * w[v_k, v_ax1]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 1024), "float32"),
        w: T.Buffer((1024, 1024), "float32"),
        T_matmul: T.Buffer((1, 1024), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul"]})
        # with T.sblock("root"):
        T_matmul_rf = T.sblock_alloc_buffer((8, 1, 1024))
        for ax1_0 in T.parallel(8):
            for ax0_init in range(1024):
                with T.sblock("T_matmul_rf_init"):
                    vax1_0, v0 = T.axis.remap("SS", [ax1_0, ax0_init])
                    T.reads()
                    T.writes(T_matmul_rf[vax1_0, 0, v0])
                    T_matmul_rf[vax1_0, 0, v0] = T.float32(0.0)
            for ax1_1, ax0 in T.grid(128, 1024):
                with T.sblock("T_matmul_rf_update"):
                    vax1_0, v0, vax1_1 = T.axis.remap("SSR", [ax1_0, ax0, ax1_1])
                    T.reads(
                        T_matmul_rf[vax1_0, 0, v0],
                        x[0, vax1_0 * 128 + vax1_1],
                        w[vax1_0 * 128 + vax1_1, v0],
                    )
                    T.writes(T_matmul_rf[vax1_0, 0, v0])
                    T_matmul_rf[vax1_0, 0, v0] = (
                        T_matmul_rf[vax1_0, 0, v0]
                        + x[0, vax1_0 * 128 + vax1_1] * w[vax1_0 * 128 + vax1_1, v0]
                    )
        for ax0, ax1_0 in T.grid(1024, 8):
            with T.sblock("T_matmul"):
                vax1_0, v0 = T.axis.remap("RS", [ax1_0, ax0])
                T.reads(T_matmul_rf[vax1_0, 0, v0])
                T.writes(T_matmul[0, v0])
                with T.init():
                    T_matmul[0, v0] = T.float32(0.0)
                T_matmul[0, v0] = T_matmul[0, v0] + T_matmul_rf[vax1_0, 0, v0]

    check(SplitKGemv(), before, expected)


def test_schedule_2048():
    # the 2048 reduction in 8 parallel slices of 256 weight rows, the partials added after
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 2048), "float32"),
        w: T.Buffer((2048, 2048), "float32"),
        T_matmul: T.Buffer((1, 2048), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul"]})
        # with T.sblock("root"):
        for ax0, ax1, k in T.grid(1, 2048, 2048):
            with T.sblock("T_matmul"):
                v_ax0, v_ax1, v_k = T.axis.remap("SSR", [ax0, ax1, k])
                T.reads(x[v_ax0, v_k], w[v_k, v_ax1])
                T.writes(T_matmul[v_ax0, v_ax1])
                with T.init():
                    T_matmul[v_ax0, v_ax1] = T.float32(0.0)
                T_matmul[v_ax0, v_ax1] = T_matmul[v_ax0, v_ax1] + x[v_ax0, v_k] * w[v_k, v_ax1]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 2048), "float32"),
        w: T.Buffer((2048, 2048), "float32"),
        T_matmul: T.Buffer((1, 2048), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul"]})
        # with T.sblock("root"):
        T_matmul_rf = T.sblock_alloc_buffer((8, 1, 2048))
        for ax1_0 in T.parallel(8):
            for ax0_init in range(2048):
                with T.sblock("T_matmul_rf_init"):
                    vax1_0, v0 = T.axis.remap("SS", [ax1_0, ax0_init])
                    T.reads()
                    T.writes(T_matmul_rf[vax1_0, 0, v0])
                    T_matmul_rf[vax1_0, 0, v0] = T.float32(0.0)
            for ax1_1, ax0 in T.grid(256, 2048):
                with T.sblock("T_matmul_rf_update"):
                    vax1_0, v0, vax1_1 = T.axis.remap("SSR", [ax1_0, ax0, ax1_1])
                    T.reads(
                        T_matmul_rf[vax1_0, 0, v0],
                        x[0, vax1_0 * 256 + vax1_1],
                        w[vax1_0 * 256 + vax1_1, v0],
                    )
                    T.writes(T_matmul_rf[vax1_0, 0, v0])
                    T_matmul_rf[vax1_0, 0, v0] = (
                        T_matmul_rf[vax1_0, 0, v0]
                        + x[0, vax1_0 * 256 + vax1_1] * w[vax1_0 * 256 + vax1_1, v0]
                    )
        for ax0, ax1_0 in T.grid(2048, 8):
            with T.sblock("T_matmul"):
                vax1_0, v0 = T.axis.remap("RS", [ax1_0, ax0])
                T.reads(T_matmul_rf[vax1_0, 0, v0])
                T.writes(T_matmul[0, v0])
                with T.init():
                    T_matmul[0, v0] = T.float32(0.0)
                T_matmul[0, v0] = T_matmul[0, v0] + T_matmul_rf[vax1_0, 0, v0]

    check(SplitKGemv(), before, expected)


def test_declines_a_small_weight():
    # a weight under 1M elements
    assert declines(SplitKGemv(), gemv(64))


def _gemv(k: int, n: int):
    @T.prim_func(private=True, s_tir=True)
    def gemv(x: T.Buffer((1, k), "float32"), w: T.Buffer((k, n), "float32"),
             y: T.Buffer((1, n), "float32")):
        T.func_attr({"tvm_hetero.op_kinds": ["matmul"]})
        for i, j, r in T.grid(1, n, k):
            with T.sblock("matmul"):
                vi, vj, vr = T.axis.remap("SSR", [i, j, r])
                with T.init():
                    y[vi, vj] = T.float32(0)
                y[vi, vj] = y[vi, vj] + x[vi, vr] * w[vr, vj]

    return gemv


def test_a_large_matrix_vector_product_is_split_along_its_reduction(cpu_devices):
    import numpy as np
    import tvm

    from tvm_hetero.optimize.cpu import SplitKGemv

    target = cpu_devices["cpu"].tvm_target()
    scheduled = SplitKGemv().apply(_gemv(2048, 1024), target)
    # 8 parallel slices of 256 weight rows, each row walked whole (the outputs innermost)
    assert re.search(r"in T.parallel\(8\):(.|\n)*for \w+, \w+ in T.grid\(256, 1024\):",
                     scheduled.script()), scheduled.script()
    lib = tvm.tirx.build(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}),
                         target=target)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2048)).astype("float32")
    w = rng.standard_normal((2048, 1024)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((1, 1024), "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    np.testing.assert_allclose(out.numpy(), x.astype("float64") @ w, rtol=1e-4, atol=1e-4)
    assert SplitKGemv().apply(_gemv(2048, 10), target) is None  # 80 KB: stays in cache, tiled
    assert th.build(zoo("cnn"), "all:cpu", cpu_devices).stats.rules["fused_matmul_add2"] \
        == "tiled"
