"""Expected: the ``layout-copies`` rule's schedule of the kernel of ``test_layout_copies``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
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
