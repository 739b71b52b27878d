"""The ``tiled`` rule (``tvm_hetero/optimize/cpu/tiled.py``) on a matmul with a bias: its schedule
at two shapes, the kernel before and the schedule expected written out in TVMScript and compared
with ``tvm.ir.assert_structural_equal`` (as TVM's dlight tests check theirs), and a kernel outside
its preconditions that it declines; then a weight it would gather declined, and a residual add it
takes where it gets whole vectors.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero.optimize.cpu.tiled import Tiled

from tests.helpers.models import zoo_direct
from tests.helpers.schedules import check, declines, matmul_bias


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_32x8x32():
    # 16 rows x 16 lanes register tiles: the 2 row tiles parallel, the columns' 2 tiles
    # inside, reduction, rows unrolled, lanes vectorized; the bias computed per tile
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((32, 8), "float32"),
        w: T.Buffer((8, 32), "float32"),
        z: T.Buffer((32,), "float32"),
        T_add: T.Buffer((32, 32), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul", "add"]})
        # with T.sblock("root"):
        T_matmul = T.sblock_alloc_buffer((32, 32))
        for ax0, ax1, k in T.grid(32, 32, 8):
            with T.sblock("T_matmul"):
                v_ax0, v_ax1, v_k = T.axis.remap("SSR", [ax0, ax1, k])
                T.reads(x[v_ax0, v_k], w[v_k, v_ax1])
                T.writes(T_matmul[v_ax0, v_ax1])
                with T.init():
                    T_matmul[v_ax0, v_ax1] = T.float32(0.0)
                T_matmul[v_ax0, v_ax1] = T_matmul[v_ax0, v_ax1] + x[v_ax0, v_k] * w[v_k, v_ax1]
        for ax0, ax1 in T.grid(32, 32):
            with T.sblock("T_add"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(T_matmul[v_ax0, v_ax1], z[v_ax1])
                T.writes(T_add[v_ax0, v_ax1])
                T_add[v_ax0, v_ax1] = T_matmul[v_ax0, v_ax1] + z[v_ax1]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((32, 8), "float32"),
        w: T.Buffer((8, 32), "float32"),
        z: T.Buffer((32,), "float32"),
        T_add: T.Buffer((32, 32), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul", "add"]})
        # with T.sblock("root"):
        T_matmul = T.sblock_alloc_buffer((32, 32))
        for ax0_0 in T.parallel(2):
            for ax1_0 in range(2):
                for ax0_1_init in T.unroll(16):
                    for ax1_1_init in T.vectorized(16):
                        with T.sblock("T_matmul_init"):
                            v0 = T.axis.spatial(32, ax0_0 * 16 + ax0_1_init)
                            v1 = T.axis.spatial(32, ax1_0 * 16 + ax1_1_init)
                            T.reads()
                            T.writes(T_matmul[v0, v1])
                            T_matmul[v0, v1] = T.float32(0.0)
                for ax2 in range(8):
                    for ax0_1 in T.unroll(16):
                        for ax1_1 in T.vectorized(16):
                            with T.sblock("T_matmul_update"):
                                v0 = T.axis.spatial(32, ax0_0 * 16 + ax0_1)
                                v1 = T.axis.spatial(32, ax1_0 * 16 + ax1_1)
                                v2 = T.axis.reduce(8, ax2)
                                T.reads(T_matmul[v0, v1], x[v0, v2], w[v2, v1])
                                T.writes(T_matmul[v0, v1])
                                T_matmul[v0, v1] = T_matmul[v0, v1] + x[v0, v2] * w[v2, v1]
                for ax0 in range(16):
                    for ax1 in T.vectorized(16):
                        with T.sblock("T_add"):
                            v0 = T.axis.spatial(32, ax0_0 * 16 + ax0)
                            v1 = T.axis.spatial(32, ax1_0 * 16 + ax1)
                            T.reads(T_matmul[v0, v1], z[v1])
                            T.writes(T_add[v0, v1])
                            T_add[v0, v1] = T_matmul[v0, v1] + z[v1]

    check(Tiled(), before, expected)


def test_schedule_48x16x64():
    # 16 x 16 register tiles: the 3 row tiles parallel, the columns' 4 tiles inside, over
    # the 16-long reduction; the bias per tile
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((48, 16), "float32"),
        w: T.Buffer((16, 64), "float32"),
        z: T.Buffer((64,), "float32"),
        T_add: T.Buffer((48, 64), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul", "add"]})
        # with T.sblock("root"):
        T_matmul = T.sblock_alloc_buffer((48, 64))
        for ax0, ax1, k in T.grid(48, 64, 16):
            with T.sblock("T_matmul"):
                v_ax0, v_ax1, v_k = T.axis.remap("SSR", [ax0, ax1, k])
                T.reads(x[v_ax0, v_k], w[v_k, v_ax1])
                T.writes(T_matmul[v_ax0, v_ax1])
                with T.init():
                    T_matmul[v_ax0, v_ax1] = T.float32(0.0)
                T_matmul[v_ax0, v_ax1] = T_matmul[v_ax0, v_ax1] + x[v_ax0, v_k] * w[v_k, v_ax1]
        for ax0, ax1 in T.grid(48, 64):
            with T.sblock("T_add"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(T_matmul[v_ax0, v_ax1], z[v_ax1])
                T.writes(T_add[v_ax0, v_ax1])
                T_add[v_ax0, v_ax1] = T_matmul[v_ax0, v_ax1] + z[v_ax1]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((48, 16), "float32"),
        w: T.Buffer((16, 64), "float32"),
        z: T.Buffer((64,), "float32"),
        T_add: T.Buffer((48, 64), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul", "add"]})
        # with T.sblock("root"):
        T_matmul = T.sblock_alloc_buffer((48, 64))
        for ax0_0 in T.parallel(3):
            for ax1_0 in range(4):
                for ax0_1_init in T.unroll(16):
                    for ax1_1_init in T.vectorized(16):
                        with T.sblock("T_matmul_init"):
                            v0 = T.axis.spatial(48, ax0_0 * 16 + ax0_1_init)
                            v1 = T.axis.spatial(64, ax1_0 * 16 + ax1_1_init)
                            T.reads()
                            T.writes(T_matmul[v0, v1])
                            T_matmul[v0, v1] = T.float32(0.0)
                for ax2 in range(16):
                    for ax0_1 in T.unroll(16):
                        for ax1_1 in T.vectorized(16):
                            with T.sblock("T_matmul_update"):
                                v0 = T.axis.spatial(48, ax0_0 * 16 + ax0_1)
                                v1 = T.axis.spatial(64, ax1_0 * 16 + ax1_1)
                                v2 = T.axis.reduce(16, ax2)
                                T.reads(T_matmul[v0, v1], x[v0, v2], w[v2, v1])
                                T.writes(T_matmul[v0, v1])
                                T_matmul[v0, v1] = T_matmul[v0, v1] + x[v0, v2] * w[v2, v1]
                for ax0 in range(16):
                    for ax1 in T.vectorized(16):
                        with T.sblock("T_add"):
                            v0 = T.axis.spatial(48, ax0_0 * 16 + ax0)
                            v1 = T.axis.spatial(64, ax1_0 * 16 + ax1)
                            T.reads(T_matmul[v0, v1], z[v1])
                            T.writes(T_add[v0, v1])
                            T_add[v0, v1] = T_matmul[v0, v1] + z[v1]

    check(Tiled(), before, expected)


def test_declines_a_transposed_weight():
    # [output, reduction] weights
    assert declines(Tiled(), matmul_bias(32, 8, 32, transpose_weight=True))


def test_tiled_declines_a_weight_it_would_gather():
    import tvm
    from tvm.script import tirx as T

    from tvm_hetero.optimize.cpu import Tiled

    def dense(weight_transposed: bool):
        w_shape = (32, 64) if weight_transposed else (64, 32)

        @T.prim_func(private=True, s_tir=True)
        def func(x: T.Buffer((8, 64), "float32"), w: T.Buffer(w_shape, "float32"),
                 y: T.Buffer((8, 32), "float32")):
            for i, j, k in T.grid(8, 32, 64):
                with T.sblock("dense"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    with T.init():
                        y[vi, vj] = T.float32(0)
                    if weight_transposed:  # a Python bool: TVMScript keeps one branch
                        y[vi, vj] = y[vi, vj] + x[vi, vk] * w[vj, vk]
                    else:
                        y[vi, vj] = y[vi, vj] + x[vi, vk] * w[vk, vj]

        return func

    target = tvm.target.Target({"kind": "llvm"})
    assert Tiled().apply(dense(True), target) is None  # lanes along j would stride through w
    assert "T.vectorized" in Tiled().apply(dense(False), target).script()


def test_a_residual_add_goes_to_the_tiled_rule_where_it_gets_whole_vectors(cpu_devices):
    rules = th.build(zoo_direct("resnet"), "all:cpu", cpu_devices).stats.rules
    # the same 3x3 convolutions (32 and 16 columns), with and without the residual add
    assert rules["fused_conv2d1_add_add1_relu"] == rules["fused_conv2d3_add2_add3_relu1"] \
        == "tiled"
    # without it: 32 channels are packed; 16 channels, one vector, go to tiled (a packed
    # tile of one channel vector loads 17 vectors per 16 multiply-adds)
    assert rules["fused_conv2d3_add2_relu1"] == "packed-weights"
    assert rules["fused_conv2d1_add_relu"] == "tiled"
