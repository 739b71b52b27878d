"""The ``injective-lanes`` rule (``tvm_hetero/optimize/cpu/injective_lanes.py``) on an elementwise
kernel: its schedule at two shapes, the kernel before and the schedule expected written out in
TVMScript and compared with ``tvm.ir.assert_structural_equal`` (as TVM's dlight tests check theirs),
and a kernel outside its preconditions that it declines.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

from tvm.script import tirx as T

from tvm_hetero.optimize.cpu.injective_lanes import InjectiveLanes

from tests.helpers.schedules import check, declines, softmax


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_64x512():
    # add and multiply inlined into one block; 512 columns in 8 vectors of 64 lanes
    # (4 AVX-512 vectors), rows x vectors fused into one parallel loop
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((64, 512), "float32"),
        w: T.Buffer((64, 512), "float32"),
        T_multiply: T.Buffer((64, 512), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["add", "multiply"]})
        # with T.sblock("root"):
        T_add = T.sblock_alloc_buffer((64, 512))
        for ax0, ax1 in T.grid(64, 512):
            with T.sblock("T_add"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(x[v_ax0, v_ax1], w[v_ax0, v_ax1])
                T.writes(T_add[v_ax0, v_ax1])
                T_add[v_ax0, v_ax1] = x[v_ax0, v_ax1] + w[v_ax0, v_ax1]
        for ax0, ax1 in T.grid(64, 512):
            with T.sblock("T_multiply"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(T_add[v_ax0, v_ax1], x[v_ax0, v_ax1])
                T.writes(T_multiply[v_ax0, v_ax1])
                T_multiply[v_ax0, v_ax1] = T_add[v_ax0, v_ax1] * x[v_ax0, v_ax1]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((64, 512), "float32"),
        w: T.Buffer((64, 512), "float32"),
        T_multiply: T.Buffer((64, 512), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["add", "multiply"]})
        # with T.sblock("root"):
        for ax0_ax1_0_fused in T.parallel(512):
            for ax1_1 in T.vectorized(64):
                with T.sblock("T_multiply"):
                    v0 = T.axis.spatial(64, ax0_ax1_0_fused // 8)
                    v1 = T.axis.spatial(512, ax0_ax1_0_fused % 8 * 64 + ax1_1)
                    T.reads(x[v0, v1], w[v0, v1])
                    T.writes(T_multiply[v0, v1])
                    T_multiply[v0, v1] = (x[v0, v1] + w[v0, v1]) * x[v0, v1]

    check(InjectiveLanes(), before, expected)


def test_schedule_128x96():
    # 96 columns in 2 vectors of 48 lanes (3 AVX-512 vectors); 12288 elements, under
    # MIN_PARALLEL_WORK: rows x vectors fused into one loop on one core
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((128, 96), "float32"),
        w: T.Buffer((128, 96), "float32"),
        T_multiply: T.Buffer((128, 96), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["add", "multiply"]})
        # with T.sblock("root"):
        T_add = T.sblock_alloc_buffer((128, 96))
        for ax0, ax1 in T.grid(128, 96):
            with T.sblock("T_add"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(x[v_ax0, v_ax1], w[v_ax0, v_ax1])
                T.writes(T_add[v_ax0, v_ax1])
                T_add[v_ax0, v_ax1] = x[v_ax0, v_ax1] + w[v_ax0, v_ax1]
        for ax0, ax1 in T.grid(128, 96):
            with T.sblock("T_multiply"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(T_add[v_ax0, v_ax1], x[v_ax0, v_ax1])
                T.writes(T_multiply[v_ax0, v_ax1])
                T_multiply[v_ax0, v_ax1] = T_add[v_ax0, v_ax1] * x[v_ax0, v_ax1]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((128, 96), "float32"),
        w: T.Buffer((128, 96), "float32"),
        T_multiply: T.Buffer((128, 96), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["add", "multiply"]})
        # with T.sblock("root"):
        for ax0_ax1_0_fused in range(256):
            for ax1_1 in T.vectorized(48):
                with T.sblock("T_multiply"):
                    v0 = T.axis.spatial(128, ax0_ax1_0_fused // 2)
                    v1 = T.axis.spatial(96, ax0_ax1_0_fused % 2 * 48 + ax1_1)
                    T.reads(x[v0, v1], w[v0, v1])
                    T.writes(T_multiply[v0, v1])
                    T_multiply[v0, v1] = (x[v0, v1] + w[v0, v1]) * x[v0, v1]

    check(InjectiveLanes(), before, expected)


def test_declines_reductions():
    # a softmax: has reductions
    assert declines(InjectiveLanes(), softmax())
