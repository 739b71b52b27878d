"""Expected: the ``concat-copies`` rule's schedule of the kernel of ``test_concat_copies``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
    x: T.Buffer((2, 8, 32, 32), "float32"),
    w: T.Buffer((2, 24, 32, 32), "float32"),
    T_concat: T.Buffer((2, 32, 32, 32), "float32"),
):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["concatenate"]})
    # with T.sblock("root"):
    for ax0 in T.parallel(2):
        with T.sblock("T_concat_ax1_common"):
            T.reads()
            T.writes()
            with T.sblock("T_concat_ax10_partition"):
                T.reads()
                T.writes()
                for ax10, ax2_ax3_fused in T.grid(8, 1024):
                    with T.sblock("T_concat_ax10"):
                        v0, v1 = T.axis.remap("SS", [ax0, ax10])
                        v2 = T.axis.spatial(32, ax2_ax3_fused // 32)
                        v3 = T.axis.spatial(32, ax2_ax3_fused % 32)
                        T.reads(w[v0, v1 + -8, v2, v3], x[0:2, 0:8, 0:32, 0:32])
                        T.writes(T_concat[0:2, 0:8, 0:32, 0:32])
                        T_concat[v0, v1, v2, v3] = T.if_then_else(
                            8 <= v1, w[v0, v1 - 8, v2, v3], x[v0, v1, v2, v3]
                        )
            with T.sblock("T_concat_ax11_partition"):
                T.reads()
                T.writes()
                for ax11 in range(8, 32):
                    for ax2_ax3_fused in range(1024):
                        with T.sblock("T_concat_ax11"):
                            v0, v1 = T.axis.remap("SS", [ax0, ax11])
                            v2 = T.axis.spatial(32, ax2_ax3_fused // 32)
                            v3 = T.axis.spatial(32, ax2_ax3_fused % 32)
                            T.reads(w[v0, v1 + -8, v2, v3], x[0:2, 8:32, 0:32, 0:32])
                            T.writes(T_concat[0:2, 8:32, 0:32, 0:32])
                            T_concat[v0, v1, v2, v3] = T.if_then_else(
                                8 <= v1, w[v0, v1 - 8, v2, v3], x[v0, v1, v2, v3]
                            )
