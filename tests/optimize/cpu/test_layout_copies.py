"""The ``layout-copies`` rule (``tvm_hetero/optimize/cpu/layout_copies.py``) on an NCHW -> NCHW16c
layout transform: its schedule at two shapes, the kernel before and the schedule expected written
out in TVMScript and compared with ``tvm.ir.assert_structural_equal`` (as TVM's dlight tests check
theirs), and a kernel outside its preconditions that it declines.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

from tvm.script import tirx as T

from tvm_hetero.optimize.cpu.layout_copies import LayoutCopies

from tests.helpers.schedules import add_multiply, check, declines


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_32x8x16():
    # the read's contiguous axis (16 columns) innermost and vectorized, the others fused in
    # the written order (blocks, rows, lanes) and parallel
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 32, 8, 16), "float32"),
        te_layout_transform: T.Buffer((1, 2, 8, 16, 16), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["te_layout_transform"]})
        # with T.sblock("root"):
        for n, c, h, w, lane in T.grid(1, 2, 8, 16, 16):
            with T.sblock("te_layout_transform"):
                v_n, v_c, v_h, v_w, v_lane = T.axis.remap("SSSSS", [n, c, h, w, lane])
                T.reads(x[v_n, v_c * 16 + v_lane, v_h, v_w])
                T.writes(te_layout_transform[v_n, v_c, v_h, v_w, v_lane])
                te_layout_transform[v_n, v_c, v_h, v_w, v_lane] = x[
                    v_n, v_c * 16 + v_lane, v_h, v_w
                ]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 32, 8, 16), "float32"),
        te_layout_transform: T.Buffer((1, 2, 8, 16, 16), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["te_layout_transform"]})
        # with T.sblock("root"):
        for n_c_h_lane_fused in T.parallel(256):
            for w in T.vectorized(16):
                with T.sblock("te_layout_transform"):
                    v_n = T.axis.spatial(1, 0)
                    v_c = T.axis.spatial(2, n_c_h_lane_fused // 128)
                    v_h = T.axis.spatial(8, n_c_h_lane_fused % 128 // 16)
                    v_w = T.axis.spatial(16, w)
                    v_lane = T.axis.spatial(16, n_c_h_lane_fused % 16)
                    T.reads(x[v_n, v_c * 16 + v_lane, v_h, v_w])
                    T.writes(te_layout_transform[v_n, v_c, v_h, v_w, v_lane])
                    te_layout_transform[v_n, v_c, v_h, v_w, v_lane] = x[
                        v_n, v_c * 16 + v_lane, v_h, v_w
                    ]

    check(LayoutCopies(), before, expected)


def test_schedule_64x14x28():
    # the 28 columns innermost and vectorized; 4 blocks x 14 rows x 16 lanes fused into
    # one parallel loop of 896
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 64, 14, 28), "float32"),
        te_layout_transform: T.Buffer((1, 4, 14, 28, 16), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["te_layout_transform"]})
        # with T.sblock("root"):
        for n, c, h, w, lane in T.grid(1, 4, 14, 28, 16):
            with T.sblock("te_layout_transform"):
                v_n, v_c, v_h, v_w, v_lane = T.axis.remap("SSSSS", [n, c, h, w, lane])
                T.reads(x[v_n, v_c * 16 + v_lane, v_h, v_w])
                T.writes(te_layout_transform[v_n, v_c, v_h, v_w, v_lane])
                te_layout_transform[v_n, v_c, v_h, v_w, v_lane] = x[
                    v_n, v_c * 16 + v_lane, v_h, v_w
                ]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 64, 14, 28), "float32"),
        te_layout_transform: T.Buffer((1, 4, 14, 28, 16), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["te_layout_transform"]})
        # with T.sblock("root"):
        for n_c_h_lane_fused in T.parallel(896):
            for w in T.vectorized(28):
                with T.sblock("te_layout_transform"):
                    v_n = T.axis.spatial(1, 0)
                    v_c = T.axis.spatial(4, n_c_h_lane_fused // 224)
                    v_h = T.axis.spatial(14, n_c_h_lane_fused % 224 // 16)
                    v_w = T.axis.spatial(28, w)
                    v_lane = T.axis.spatial(16, n_c_h_lane_fused % 16)
                    T.reads(x[v_n, v_c * 16 + v_lane, v_h, v_w])
                    T.writes(te_layout_transform[v_n, v_c, v_h, v_w, v_lane])
                    te_layout_transform[v_n, v_c, v_h, v_w, v_lane] = x[
                        v_n, v_c * 16 + v_lane, v_h, v_w
                    ]

    check(LayoutCopies(), before, expected)


def test_declines_no_layout_transform():
    # an elementwise kernel: no layout transform
    assert declines(LayoutCopies(), add_multiply())
